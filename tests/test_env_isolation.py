"""Tests leave the environment as they found it: `read_run_args` sets WANDB_* from open-r1's `wandb_*` keys, and the
tests that check it must not hand those values to every later test in the session (issue 22, item 9)."""

import os
import subprocess
import sys

from factories import ROOT

PLUGIN = '''
import os
BEFORE = set(os.environ)

def pytest_sessionfinish(session, exitstatus):
    print("\\nENV LEFT BEHIND:", sorted(name for name in set(os.environ) - BEFORE if name.startswith("WANDB_")))
'''


def test_the_wandb_tests_leave_no_wandb_variable_behind(tmp_path):
    (tmp_path / "env_probe.py").write_text(PLUGIN)
    env = {name: value for name, value in os.environ.items() if not name.startswith("WANDB_")}
    env.update(PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]), HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "env_probe",
         "tests/test_openr1_config.py::test_it_parses_with_every_key_taking_effect",
         "tests/test_frontdoor.py::test_wandb_keys_of_the_yaml_set_the_environment_unless_it_is_set"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert "2 passed" in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]
    assert "ENV LEFT BEHIND: []" in result.stdout, result.stdout[-1000:]
