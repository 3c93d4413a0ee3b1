"""Problems that were still reported one run at a time (issue 22 review) are part of the all-at-once list: skip's
one-epoch refusal (on the plan), use_vllm on a 4-bit base, bf16 on a machine without it, next to the config's other
problems (a range, a misspelt reward). A config with three problems shows three lines in one go, exit 2, from
`plan`, the recipe, `trl-grpo-ext train` and the check `trl-grpo-ext train --accelerate_config` runs before it
starts accelerate."""

from pathlib import Path

import pytest
import yaml

from trl_grpo_ext.cli.plan import main as plan_main
from trl_grpo_ext.cli.train import check_before_launch, run_recipe
from trl_grpo_ext.config.recipe_parse import parse_recipe_args

ROOT = Path(__file__).resolve().parents[1]
# 16 prompts / 2 per step = 8 steps = 1 epoch (total_epochs 1): skip would skip nothing
THREE = {"model_name_or_path": "embedded:tiny-qwen2", "dataset_name": "embedded:count-char",
         "embedded_num_prompts": 16, "rewards": ["acurracy"], "prompts_per_step": 2, "num_generations": 4,
         "total_epochs": 1, "zero_variance_filter": "skip", "temperature": 0, "use_cpu": True, "bf16": False,
         "report_to": "none"}
STARTS = ["temperature=0 must be a number > 0.", "Unknown reward 'acurracy'. Did you mean 'accuracy'?",
          "zero_variance_filter='skip' would act as mask: this run covers 1 epoch(s) of 16 prompts"]


@pytest.fixture
def three(tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    path = tmp_path / "three.yaml"
    path.write_text(yaml.safe_dump({**THREE, "output_dir": str(tmp_path / "out")}))
    return path


def _errors(err: str, prefix: str) -> list[str]:
    return [line.removeprefix(prefix) for line in err.splitlines() if line.startswith(prefix)]


def _assert_three(lines):
    assert len(lines) == 3, lines
    assert [line[:len(start)] for line, start in zip(lines, STARTS)] == STARTS


def test_plan_shows_the_three_at_once(three, capsys):
    assert plan_main(["--config", str(three)]) == 2
    _assert_three(_errors(capsys.readouterr().err, "trl-grpo-ext plan: error: "))


def test_the_recipe_and_train_show_the_three_at_once(three, capsys, monkeypatch):
    with pytest.raises(SystemExit) as refused:
        parse_recipe_args(["--config", str(three)])
    assert refused.value.code == 2
    _assert_three(_errors(capsys.readouterr().err, "error: "))
    from trl_grpo_ext.models.embedded import tiny

    monkeypatch.setattr(tiny, "ensure_tiny_model", lambda *a, **k: pytest.fail("the model was built"))
    assert run_recipe(["--config", str(three)]) == 2
    _assert_three(_errors(capsys.readouterr().err, "error: "))


def test_the_check_before_accelerate_shows_the_three(three):
    _assert_three(check_before_launch(["--config", str(three)], ROOT / "recipes/accelerate_configs/cpu.yaml"))


def test_the_skip_refusal_alone_is_still_one_line_and_more_epochs_pass(three, capsys):
    three.write_text(yaml.safe_dump({**THREE, "rewards": ["char_fraction"], "temperature": 1.0}))
    assert plan_main(["--config", str(three)]) == 2
    lines = _errors(capsys.readouterr().err, "trl-grpo-ext plan: error: ")
    assert len(lines) == 1 and lines[0].startswith(STARTS[2])
    # 3 epochs: 24 steps, skip acts from the second
    assert plan_main(["--config", str(three), "--total_epochs", "3"]) == 0


def test_plan_counts_skip_epochs_on_the_given_dataset_size(three, capsys):
    """--dataset-size 4: 4 / 2 = 2 steps an epoch; total_training_steps 6 covers 3 epochs, so skip passes; with
    --dataset-size 64 the same 6 steps cover 6 / 32 epochs and skip is refused."""
    config = {**THREE, "rewards": ["char_fraction"], "temperature": 1.0, "total_training_steps": 6,
              "dataset_name": "some/hub-dataset"}
    del config["total_epochs"], config["embedded_num_prompts"]
    three.write_text(yaml.safe_dump(config))
    assert plan_main(["--config", str(three), "--dataset-size", "4"]) == 0
    capsys.readouterr()
    assert plan_main(["--config", str(three), "--dataset-size", "64"]) == 2
    (line,) = _errors(capsys.readouterr().err, "trl-grpo-ext plan: error: ")
    assert "this run covers 0.188 epoch(s) of 64 prompts" in line


def test_vllm_on_a_4bit_base_joins_the_list_and_bf16_is_transformers_refusal(three, capsys, monkeypatch):
    from trl_grpo_ext.models import settings as models
    from trl_grpo_ext.validation import packages

    monkeypatch.setattr(models, "bf16_available", lambda: False)  # a machine without bf16 (this one has none)
    monkeypatch.setattr(packages, "installed", lambda module: True)  # vllm "installed": only the 4-bit rule
    three.write_text(yaml.safe_dump({**THREE, "rewards": ["char_fraction"], "zero_variance_filter": "mask",
                                     "use_vllm": True, "load_in_4bit": True, "use_peft": True, "bf16": True,
                                     "use_cpu": False}))  # 4-bit needs an adapter (quantized_needs_adapter)
    assert plan_main(["--config", str(three)]) == 2
    plan_lines = _errors(capsys.readouterr().err, "trl-grpo-ext plan: error: ")
    assert [line[:28] for line in plan_lines] == ["temperature=0 must be a numb", "use_vllm=True with a 4-bit b"]
    with pytest.raises(SystemExit):
        parse_recipe_args(["--config", str(three)])
    lines = _errors(capsys.readouterr().err, "error: ")
    assert [line[:28] for line in lines] == ["temperature=0 must be a numb", "use_vllm=True with a 4-bit b"]
    import torch

    if not torch.cuda.is_available():  # bf16 on this machine: transformers' TrainingArguments refuses it, before loading
        three.write_text(yaml.safe_dump({**THREE, "rewards": ["char_fraction"], "zero_variance_filter": "mask",
                                         "temperature": 1.0, "bf16": True, "use_cpu": False}))
        with pytest.raises(SystemExit):
            parse_recipe_args(["--config", str(three)])
        assert "Your setup doesn't support bf16/gpu" in capsys.readouterr().err


def test_fp16_off_the_cpu_on_a_machine_without_a_gpu_is_refused(three, capsys, monkeypatch):
    """accelerate runs fp16 autocast on a GPU only (`Accelerator.native_amp` is False on a CPU device): fp16 with
    use_cpu: false on a machine without one trained in float32 and said nothing."""
    from trl_grpo_ext.config.ext_config import GRPOExtConfig
    from trl_grpo_ext.models import settings as models

    monkeypatch.setattr(models, "gpu_available", lambda: False)
    three.write_text(yaml.safe_dump({**THREE, "rewards": ["char_fraction"], "zero_variance_filter": "mask",
                                     "fp16": True, "use_cpu": False, "output_dir": str(three.parent / "out")}))
    with pytest.raises(SystemExit):
        parse_recipe_args(["--config", str(three)])
    lines = _errors(capsys.readouterr().err, "error: ")
    assert [line[:44] for line in lines] == ["temperature=0 must be a number > 0. Fix: GRP",
                                             "fp16=True, but this machine has no GPU: acce"]
    with pytest.raises(ValueError, match="fp16=True, but this machine has no GPU"):
        GRPOExtConfig(output_dir=str(three.parent / "out"), fp16=True, bf16=False, use_cpu=False)
    monkeypatch.setattr(models, "gpu_available", lambda: True)  # with a GPU the check lets it through
    models.check_fp16_machine(True, False)


def test_the_check_before_accelerate_judges_the_accelerate_configs_engine():
    """A breaker's finding: `train --accelerate_config fsdp2_cpu` passed this check (the engine rules ran without the
    accelerate config), and both ranks then refused, ending in a launcher traceback with status 1."""
    import torch

    argv = ["--config", "tiny_cpu", "--use_cpu", "false", "--micro_batch_size", "8"]
    lines = check_before_launch(argv, ROOT / "recipes/accelerate_configs/multi_gpu.yaml")
    assert len(lines) == 1 and lines[0].startswith("bf16 and fp16 are both false, but accelerate's mixed_precision='bf16'")
    assert check_before_launch([*argv, "--bf16", "true"], ROOT / "recipes/accelerate_configs/multi_gpu.yaml") == []
    if not torch.cuda.is_available():
        lines = check_before_launch([*argv, "--bnb_4bit_quant_storage", "float32"],
                                    ROOT / "recipes/accelerate_configs/fsdp2_cpu.yaml")
        assert len(lines) == 1 and "on a machine without a GPU" in lines[0]
