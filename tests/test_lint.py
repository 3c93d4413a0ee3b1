"""`make lint` (ruff, a dev dependency: `make install` installs it) passes on the tree, so that the README's lint
command works on a fresh clone; a fresh user found it failing after a change the suite passed."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is not installed: pip install -e '.[dev]' (make install does)"
    result = subprocess.run([ruff, "check", "trl_grpo_ext", "recipes", "tests", "benchmarks"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
