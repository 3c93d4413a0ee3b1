"""Worker of tests/test_memory_probe.py: a run whose longest prompt comes late, under an address-space limit.

Run by `python tests/memory_probe_worker.py OUT_DIR PROBE MARGIN_MIB` (CPU). 16 count-char prompts of about 40 tokens,
4 prompts × G 4 per step, micro-batch 16, 16 completion tokens, 4 steps; the prompt the sampler draws in step 4 (the
first permutation of the seed, as `training.sampling` draws it) is replaced by one of about 250 tokens. After the
trainer is built, ``RLIMIT_AS`` is set to the address space in use plus MARGIN_MIB: a short step's tensors fit,
the long step's do not (TRL's fused head allocates a 4,096-token × 32,768-column float32 tile, 512 MiB, for its
16 × 265 scored positions). PROBE is memory_probe (on / off). Prints ``STEPS n`` (steps done) and ``ERROR text``.
"""

import os
import resource
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from factories import tiny_trainer  # noqa: E402

from trl_grpo_ext.models.embedded import tiny  # noqa: E402

SEED, PROMPTS, G = 42, 4, 4


def reward(completions, **kwargs):
    return [float(i % G) for i in range(len(completions))]


def address_space() -> int:
    """Virtual memory in use by this process [bytes] (/proc/self/status VmSize)."""
    with open("/proc/self/status") as fh:
        line = next(line for line in fh if line.startswith("VmSize:"))
    return int(line.split()[1]) * 1024


def main(out_dir: str, probe: str, margin_mib: int) -> None:
    rows = tiny.count_char_rows(16)
    order = torch.randperm(16, generator=torch.Generator().manual_seed(SEED)).tolist()
    late = order[3 * PROMPTS]  # the first prompt of step 4
    rows[late] = {**rows[late], "prompt": [{"role": "user", "content": "write a " * 30 + "please"}]}
    trainer = tiny_trainer(out_dir, reward, Dataset.from_list(rows), prompts_per_step=PROMPTS, num_generations=G,
                           micro_batch_size=16, max_completion_length=16, total_training_steps=4, seed=SEED,
                           memory_probe=probe)
    limit = address_space() + margin_mib * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    try:
        trainer.train()
    except Exception as err:  # noqa: BLE001 - the test reads what failed and when
        print(f"STEPS {trainer.state.global_step}", flush=True)
        print(f"ERROR {type(err).__name__}: {err}", flush=True)
        sys.exit(3)
    print(f"STEPS {trainer.state.global_step}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
