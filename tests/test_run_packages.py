"""The packages an open-r1-style config needs (flash-attn for attn_implementation: flash_attention_2, vLLM for
use_vllm, liger-kernel for use_liger_kernel, wandb for report_to: wandb) are checked before any model loads, every
missing one in one go, each with its pip command (issue 22 review: they failed only after the model had loaded)."""

import importlib.util
import json
from pathlib import Path

import pytest

from trl_grpo_ext.cli.plan import main as plan_main
from trl_grpo_ext.config.recipe_parse import parse_recipe_args
from trl_grpo_ext.validation import packages

ROOT = Path(__file__).resolve().parents[1]
OPENR1 = ROOT / "tests" / "data" / "openr1_grpo_config.yaml"
SETTINGS = ["--attn_implementation", "flash_attention_2", "--use_vllm", "true", "--use_liger_kernel", "true",
            "--report_to", "wandb", "--allow_vllm_4bit_merge", "true"]  # tiny_cpu is 4-bit: the opt-in
LINES = [
    "attn_implementation='flash_attention_2' needs the flash-attn package, which is not installed (transformers would "
    "fail when it loads the model). Fix: pip install flash-attn --no-build-isolation (a CUDA GPU), or set "
    "attn_implementation: sdpa.",
    "use_vllm=True needs the vllm package, which is not installed (TRL would fail after loading the model). Fix: pip "
    "install vllm (a CUDA GPU), or set use_vllm: false.",
    "use_liger_kernel=True needs the liger-kernel package, which is not installed (the trainer would fail after "
    "loading the model). Fix: pip install liger-kernel, or set use_liger_kernel: false.",
    "report_to='wandb' needs the wandb package, which is not installed (the trainer would fail when it starts). Fix: "
    "pip install wandb, or set report_to: none.",
]


@pytest.fixture
def none_installed(monkeypatch):
    """As on a machine without flash-attn, vLLM, liger-kernel and wandb (this one has none of them either, but a
    developer's may)."""
    missing = {"flash_attn", "vllm", "liger_kernel", "wandb"}
    monkeypatch.setattr(packages, "installed", lambda module: module not in missing and
                        importlib.util.find_spec(module) is not None)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def test_plan_lists_every_missing_package_at_once(none_installed, capsys):
    assert plan_main(["--config", "tiny_cpu", *SETTINGS]) == 2
    errors = [line.removeprefix("trl-grpo-ext plan: error: ") for line in capsys.readouterr().err.splitlines()
              if "error:" in line]
    assert errors == LINES


def test_the_recipe_and_train_refuse_them_before_any_model(none_installed, capsys, monkeypatch):
    from trl_grpo_ext.cli import train

    with pytest.raises(SystemExit) as refused:
        parse_recipe_args(["--config", "tiny_cpu", *SETTINGS])
    assert refused.value.code == 2
    assert [line.removeprefix("error: ") for line in capsys.readouterr().err.splitlines()
            if line.startswith("error:")] == LINES
    # trl-grpo-ext train runs the recipe in this process: the same lines, exit 2, before any model (none is built)
    from trl_grpo_ext.models.embedded import tiny

    monkeypatch.setattr(tiny, "ensure_tiny_model", lambda *a, **k: pytest.fail("the model was built"))
    assert train.run_recipe(["--config", "tiny_cpu", *SETTINGS]) == 2
    assert LINES[0] in capsys.readouterr().err


def test_the_open_r1_config_names_its_three_packages(none_installed, tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    # 64 rows: plan reads the dataset, and fewer than one step's prompts would be a problem of their own
    (data / "train.jsonl").write_text((json.dumps({"problem": "1+1?", "solution": "$2$"}) + "\n") * 64)
    config = tmp_path / "openr1.yaml"
    config.write_text(OPENR1.read_text().replace("open-r1/OpenR1-Math-220k", str(data))
                      .replace("Qwen/Qwen2.5-1.5B-Instruct", "embedded:tiny-qwen2"))
    assert plan_main(["--config", str(config), "--dataset-size", "64"]) == 2
    err = capsys.readouterr().err
    assert [line.split("=")[0].removeprefix("trl-grpo-ext plan: error: ") for line in err.splitlines()
            if "error:" in line] == ["push_to_hub", "attn_implementation", "use_vllm", "report_to"]
    # its full-model push (open-r1 sets no use_peft; the recipe pushes adapters), listed with the three packages (its
    # hub_strategy has no effect, the recipe pushes once: a warning, listed once the errors are fixed)
    assert "report_to=['wandb'] needs the wandb package" in err and "hub_strategy" not in err


def test_an_installed_package_is_not_refused(monkeypatch):
    """What find_spec finds is accepted: a tracker among others names only the missing one, and the fix keeps the
    others."""
    monkeypatch.setattr(packages, "installed", lambda module: module != "wandb")
    values = {"attn_implementation": "flash_attention_2", "use_vllm": True, "report_to": ["tensorboard", "wandb"]}
    assert packages.package_problems(values) == [
        ("report_to", "report_to=['tensorboard', 'wandb'] needs the wandb package, which is not installed (the trainer "
                      "would fail when it starts). Fix: pip install wandb, or set report_to: ['tensorboard'].")]


def test_installed_asks_the_import_system():
    assert packages.installed("json") is True
    assert packages.installed("no_such_package_trl_grpo_ext") is False
