"""The installed package runs its recipes: build the wheel, install it (not editable) into a fresh virtualenv, and from
another directory plan and train the shipped `tiny_cpu` config by name."""

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

# about a minute of subprocess runs: `make test-slow` (kept out of `make test` to hold it near 10 minutes)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _run(command, cwd, timeout=900, **env):
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WORLD_SIZE")}
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                            env={**clean, "HF_HUB_OFFLINE": "1", **env})
    assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A virtualenv with the built wheel installed; the dependencies are this interpreter's site-packages, made
    visible by a plain path in a .pth file (which does not activate an editable install of this package there)."""
    tmp = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "dist"),
          str(ROOT)], cwd=tmp)
    (wheel,) = (tmp / "dist").glob("trl_grpo_ext-*.whl")
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=tmp).stdout.strip())
    (site / "_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)], cwd=tmp)
    located = _run([str(python), "-c", "import trl_grpo_ext; print(trl_grpo_ext.__file__)"], cwd=tmp).stdout.strip()
    assert Path(located).is_relative_to(env_dir), located  # the wheel, not a checkout
    return env_dir, tmp


def test_the_wheel_carries_the_recipe_and_its_configs(installed):
    env_dir, tmp = installed
    code = ("from trl_grpo_ext.config.frontdoor import shipped_configs, recipes_dir;"
            "print(recipes_dir()); print(sorted(shipped_configs())); print(sorted(shipped_configs('accelerate_configs')))")
    out = _run([str(env_dir / "bin" / "python"), "-c", code], cwd=tmp).stdout.splitlines()
    assert Path(out[0]).is_relative_to(env_dir) and (Path(out[0]) / "grpo_qlora.py").is_file()
    assert "tiny_cpu" in out[1] and "cpu" in out[2] and "single_gpu" in out[2]


def test_installed_plan_by_name(installed):
    env_dir, tmp = installed
    result = _run([str(env_dir / "bin" / "trl-grpo-ext"), "plan", "--config", "tiny_cpu"], cwd=tmp)
    assert "= min(200, 120) stopped by the epoch limit" in result.stdout  # floor(240 / 2) = 120 steps, 1 epoch


def test_installed_train_two_steps_and_the_card_snippet_generates(installed):
    """`train` under `accelerate launch -m trl_grpo_ext.cli.train` with the shipped accelerate config `cpu`."""
    env_dir, tmp = installed
    out = tmp / "run"
    result = _run([str(env_dir / "bin" / "trl-grpo-ext"), "train", "--config", "tiny_cpu", "--accelerate_config", "cpu",
                   "--output_dir", str(out), "--total_training_steps", "2", "--save_strategy", "no"], cwd=tmp)
    assert "step 2/2  reward" in result.stdout
    assert (out / "adapter_model.safetensors").is_file() and (out / "README.md").is_file()
    card = (out / "README.md").read_text()
    snippet = card.split("## How to load")[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert f'model_id = "{out.resolve()}"' in snippet
    generated = _run([str(env_dir / "bin" / "python"), "-c", snippet], cwd=tmp / "dist", timeout=300)
    assert generated.stdout.strip()
