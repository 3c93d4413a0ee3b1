"""Several processes: the recipe with every feature on under `torchrun --nproc_per_node 2` on CPU, and the accelerate
configs users launch on several GPUs (they parse; the plan counts their processes).

`accelerate launch --cpu --num_processes 2` silently starts one process (docs/recipes.md), hence torchrun here, with
`--standalone` (a free rendezvous port: other runs on the machine may hold torchrun's default port 29500).
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from factories import TORCHRUN_2, tiny_cpu_yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "recipes/accelerate_configs"
STEPS = 6
REWARDS = [
    {"name": "char_fraction", "weight": 1.0},
    {"name": "length", "weight": 0.2, "kwargs": {"min_length": 2, "max_length": 6}},
    {"name": "repetition_penalty", "weight": 0.1, "kwargs": {"ngram_size": 2}},
]


def every_feature_config(tmp_path: Path, zero_variance_filter: str) -> str:
    """tiny_cpu.yaml with quantities, the zero-variance filter, an advantage preset and three weighted rewards.

    4 prompts x 4 completions = 16 completions per step; micro-batches of 4 on 2 processes -> accumulation 2.
    """
    return tiny_cpu_yaml(
        tmp_path, name="every_feature.yaml", prompts_per_step=4, num_generations=4, micro_batch_size=4,
        total_training_steps=STEPS, total_epochs=1, max_completion_length=8, embedded_num_prompts=64,
        zero_variance_filter=zero_variance_filter, advantage_preset="rloo", rewards=REWARDS, save_strategy="steps",
        save_steps=STEPS // 2, save_total_limit=None, plot=False,
    )


@pytest.mark.multiproc
@pytest.mark.parametrize("zero_variance_filter", ["mask", "resample"])
def test_two_cpu_processes_run_to_the_planned_step_and_save_once(tmp_path, zero_variance_filter):
    config = every_feature_config(tmp_path, zero_variance_filter)
    out = tmp_path / "out"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    command = [*TORCHRUN_2, "recipes/grpo_qlora.py", "--config", str(config), "--use_cpu", "true"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=150)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    # the main process alone prints (and writes) the plan, the step logs and the final save
    shown = result.stdout[-4000:]
    assert result.stdout.count(f"Adapter and tokenizer: {out}") == 1, shown
    assert result.stdout.count("Uniform groups (σ = 0): ") == 1, shown  # the closing line, main process only
    assert result.stdout.count("gradient accumulation     2 micro-batches") == 1, shown  # 16 / (4 x 2 processes)
    assert [line.split("  ")[0] for line in result.stdout.splitlines() if line.startswith("step ") and "  reward " in line] == [
        f"step {i}/{STEPS}" for i in range(1, STEPS + 1)], shown  # one compact line per logged step

    plan = json.loads((out / "run_plan.json").read_text())
    assert (plan["world_size"], plan["gradient_accumulation_steps"], plan["total_steps"]) == (2, 2, STEPS)
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == STEPS
    steps = [entry for entry in state["log_history"] if "loss" in entry]
    assert [entry["step"] for entry in steps] == list(range(1, STEPS + 1))
    for name in ("char_fraction", "length", "repetition_penalty"):
        assert all(f"rewards/{name}/mean" in entry for entry in steps), name
    assert sum(entry["zero_variance/frac_uniform_before"] for entry in steps) > 0  # the filter had groups to act on
    if zero_variance_filter == "mask":
        assert sum(entry["zero_variance/completions_masked"] for entry in steps) > 0
    else:  # extra generation rounds, decided on gathered rewards, ran on both processes without a hang
        assert sum(entry["zero_variance/resample_rounds"] for entry in steps) > 0
    training_args = json.loads((out / "run_config.json").read_text())["training_args"]
    assert training_args["loss_type"] == "dr_grpo"  # set by the rloo preset

    # one checkpoint per save step, each with one adapter and one RNG state per process
    assert sorted(p.name for p in out.glob("checkpoint-*")) == [f"checkpoint-{STEPS // 2}", f"checkpoint-{STEPS}"]
    for checkpoint in out.glob("checkpoint-*"):
        assert {"rng_state_0.pth", "rng_state_1.pth", "adapter_model.safetensors", "optimizer.pt"} <= {
            p.name for p in checkpoint.iterdir()}
        assert not (checkpoint / "rng_state.pth").exists()
    from safetensors.torch import load_file

    final = load_file(str(out / "adapter_model.safetensors"))
    last = load_file(str(out / f"checkpoint-{STEPS}" / "adapter_model.safetensors"))
    assert final.keys() == last.keys() and all(torch.equal(final[k], last[k]) for k in final)


@pytest.mark.parametrize(("name", "distributed_type"), [("multi_gpu", "MULTI_GPU"), ("zero2", "DEEPSPEED")])
def test_multi_device_accelerate_configs_parse(name, distributed_type):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(CONFIGS / f"{name}.yaml"))
    assert (config.distributed_type.value, config.num_processes, config.num_machines) == (distributed_type, 2, 1)
    assert config.use_cpu is False and config.mixed_precision == "bf16"
    if name == "zero2":
        assert config.deepspeed_config["zero_stage"] == 2
        assert config.deepspeed_config["offload_optimizer_device"] == "none"


@pytest.mark.parametrize("name", ["multi_gpu", "zero2"])
def test_plan_counts_the_processes_of_the_accelerate_config(name, capsys):
    """The GSM8K recipe (8 prompts x G 8 = 64 completions/step, micro-batch 16) on the config's processes."""
    from accelerate.commands.config.config_args import load_config_from_file

    from trl_grpo_ext.cli import plan as plan_cli

    num_processes = load_config_from_file(str(CONFIGS / f"{name}.yaml")).num_processes
    recipe = str(ROOT / "recipes/configs/qwen2.5-0.5b-instruct_gsm8k.yaml")
    assert plan_cli.main(["--config", recipe, "--dataset-size", "7473", "--num-processes", str(num_processes),
                          "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    # 64 completions per step / (16 per micro-batch x 2 processes) = 2 accumulation steps; the prompts per step, the
    # steps per epoch (floor(7473 / 8) = 934) and the stop (500 steps) do not depend on the number of processes.
    assert (plan["world_size"], plan["gradient_accumulation_steps"]) == (2, 2)
    assert (plan["prompts_per_step"], plan["completions_per_step"]) == (8, 64)
    assert (plan["steps_per_epoch"], plan["total_steps"], plan["stop_reason"]) == (934, 500, "step_limit")


def test_world_size_changes_accumulation_not_the_step_count():
    from trl_grpo_ext.plan import resolve_plan, resolve_trl_fields

    plans = {}
    for world_size in (1, 2, 4):
        fields = resolve_trl_fields({"prompts_per_step": 8, "num_generations": 8, "micro_batch_size": 16,
                                     "total_training_steps": 500}, world_size)
        plans[world_size] = resolve_plan(fields, dataset_size=7473, world_size=world_size, max_completion_length=384)
    # 64 completions per step / (16 x world_size)
    assert [plans[w].gradient_accumulation_steps for w in (1, 2, 4)] == [4, 2, 1]
    assert {plans[w].total_steps for w in plans} == {500}
    assert {plans[w].steps_per_epoch for w in plans} == {934}
