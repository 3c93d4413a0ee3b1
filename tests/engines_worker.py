"""Worker of tests/test_engines_multiproc.py: 3 optimizer steps of LoRA GRPO on the tiny model, under whichever engine
the launcher set up (torchrun for DDP; `accelerate launch --config_file recipes/accelerate_configs/zero{2,3}_cpu.yaml`
for DeepSpeed; `fsdp2_cpu.yaml` for FSDP2, with the test-only patch of tests/fsdp_cpu.py), with
``zero_variance_filter`` = MODE; each rank writes what it saw to JSON.

    worker OUT_DIR MODE [STEPS [BASE]]  (STEPS: optimizer steps, default 3; BASE: float32 (default) or nf4, a 4-bit
                                         NF4 base computing in float32 with float32 adapters)

Rewards: every completion gets 1.0 at optimizer step 2 (an all-uniform step), prompts asking for "b" always get 1.0
(zero-variance groups), the others the sum of the completion's character codes mod 5 (so the rewards follow what the
model generated, and vary within a group).
Writes OUT_DIR/rank{RANK}.json: the engine, the world size, per generation batch the gathered rewards, this rank's
advantages and the global kept-row count; per optimizer step the learning rate, and a copy of the trainable values the
optimizer holds (its parameters and state, flattened) after the step; the plan's total steps and stop reason and the
final global step; how many model parameters are FSDP2 DTensors. Rank 0 saves the adapter in OUT_DIR/adapter
(gathered from the ZeRO-3 or FSDP2 shards by the engine).
"""

import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from factories import count_char_mix, lora, nf4, tiny_trainer  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

G = 4


def reward(completions, target, trainer_state, **kwargs):
    if trainer_state.global_step == 1:
        return [1.0] * len(completions)
    return [1.0 if t == "b" else float(sum(map(ord, str(c))) % 5) for c, t in zip(completions, target)]


def optimizer_values(trainer) -> list[float]:
    """The values the optimizer holds, flattened in a fixed order: each parameter it updates and its state.

    Under DeepSpeed these are the float32 partitions of this process (ZeRO-3 puts them into the torch optimizer's
    param_groups only during its step), under FSDP2 this process's shards of the parameters, under DDP the parameters
    themselves.
    """
    optimizer, zero = trainer.torch_optimizer, getattr(trainer.optimizer, "optimizer", None)
    params = getattr(zero, "fp32_partitioned_groups_flat", None) or getattr(zero, "single_partition_of_fp32_groups", None)
    if params is None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
    parts = []
    for p in params:
        parts.append(local(p))
        for _key, value in sorted(optimizer.state.get(p, {}).items()):
            parts.append(local(torch.as_tensor(value)))
    return torch.cat(parts).tolist()


def local(tensor) -> torch.Tensor:
    """A tensor's values held by this process, flattened: FSDP2's DTensor parameters and states give their shard."""
    tensor = tensor.detach()
    return (tensor.to_local() if hasattr(tensor, "to_local") else tensor).float().flatten()


class Recorder(TrainerCallback):
    def __init__(self, trainer, steps):
        self.trainer, self.steps = trainer, steps

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append({"step": state.global_step, "lr": self.trainer.lr_scheduler.get_last_lr()[0],
                           "optimizer": optimizer_values(self.trainer)})


def build_trainer(run_dir: str, mode: str, total_steps: int, **fields):
    """The run's trainer (the launch environment chooses the engine); `fields` are further config fields."""
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        import fsdp_cpu

        fsdp_cpu.enable()  # accelerate runs FSDP only on GPUs: tests/fsdp_cpu.py lets it take that path on a CPU
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        fields.update(use_cpu=False, ddp_backend="gloo")  # accelerate drops DeepSpeed under use_cpu=True
    return tiny_trainer(
        # skip acts from the second epoch on (a run of one epoch is refused): 8 prompts, 2 steps an epoch
        run_dir, reward, count_char_mix(8 if mode == "skip" else 32), peft_config=lora(), prompts_per_step=4,
        num_generations=G, micro_batch_size=4,  # 16 completions per step over 2 processes: 2 micro-batches each
        total_training_steps=total_steps, max_completion_length=8, learning_rate=1e-2, zero_variance_filter=mode,
        **({"max_resample_rounds": 1} if mode == "resample" else {}), seed=0, **fields,
    )


def main(out_dir: str, mode: str, total_steps: int = 3, base: str = "float32") -> None:
    rank = int(os.environ["RANK"])
    fsdp = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    # FSDP shards the packed 4-bit weights beside the float32 parameters: stored as float32 (docs/scaling.md)
    quantized = {"quantization_config": nf4(quant_storage=torch.float32 if fsdp else None)} if base == "nf4" else {}
    trainer = build_trainer(os.path.join(out_dir, "run"), mode, total_steps, **quantized)
    create_optimizer = trainer.create_optimizer

    def keep_torch_optimizer(*args, **kwargs):  # the torch optimizer whose step the filter guards
        trainer.torch_optimizer = create_optimizer(*args, **kwargs)
        return trainer.torch_optimizer

    trainer.create_optimizer = keep_torch_optimizer
    batches, steps = [], []
    select, generate = trainer.zero_variance.select, trainer._generate_and_score_completions

    def recording_select(*args, **kwargs):
        output, rewards, zero_variance = select(*args, **kwargs)
        kept = trainer.zero_variance.kept_rows(zero_variance)
        batches.append({"rewards": rewards.tolist(), "kept": int(kept.sum())})
        return output, rewards, zero_variance

    def recording_generate(inputs):
        output = generate(inputs)
        if trainer.model.training:
            batches[-1]["advantages"] = output["advantages"].tolist()
        return output

    trainer.zero_variance.select = recording_select
    trainer._generate_and_score_completions = recording_generate
    trainer.add_callback(Recorder(trainer, steps))
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    trainer.save_model(os.path.join(out_dir, "adapter"))
    import resource

    result = {
        "rank": rank, "engine": str(trainer.accelerator.distributed_type), "world_size": trainer.accelerator.num_processes,
        "batches": batches, "steps": steps, "global_step": trainer.state.global_step,
        "plan": {"total_steps": trainer.plan.total_steps, "stop_reason": trainer.plan.stop_reason},
        "plan_json": json.loads(trainer.plan.to_json()), "node_rank": int(os.environ.get("GROUP_RANK", 0)),
        "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]),
        "skipped_updates": trainer.zero_variance.skipped_updates, "train_seconds": seconds,
        "sharded_params": sum(hasattr(p, "to_local") for p in trainer.model.parameters()),  # FSDP2's DTensors
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    os.makedirs(out_dir, exist_ok=True)  # a second machine has no directory of rank 0
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    trainer.end()  # destroy the process group: a gloo group left alive can abort the process at exit


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:4]), *sys.argv[4:5])
