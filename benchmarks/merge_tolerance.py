"""How close is a merged export to the model that was trained? Prints max |logit difference| per export.

Builds a 4-bit NF4 + LoRA run of the embedded tiny model (tests/hub_testing.make_finished_run: LoRA r=8 on q/k/v/o
with random non-zero lora_B, plus a trained lm_head copy), takes the logits of two prompts from the 4-bit base +
adapter through the training forward, exports it with every method and dtype of
:func:`trl_grpo_ext.hub.merge.export_merged`, reloads each export with plain transformers and compares.

    python benchmarks/merge_tolerance.py                     # CPU, float32 load/compute dtype (the recipe on CPU)
    python benchmarks/merge_tolerance.py --device cuda --dtype bfloat16   # the recipe on a GPU
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="where the run is trained, exported and evaluated")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="load/compute")
    args = parser.parse_args()

    import torch
    from hub_testing import make_finished_run, trained_logits
    from transformers import AutoModelForCausalLM

    from trl_grpo_ext.hub import merge as hub_merge
    from trl_grpo_ext.models.embedded import tiny

    with tempfile.TemporaryDirectory() as tmp:
        output_dir, reference, _ = make_finished_run(Path(tmp) / "run", dtype=args.dtype, device=args.device)
        reference = reference.cpu()
        print(f"device={args.device} compute/load dtype={args.dtype} max|logit|={reference.abs().max().item():.3f}")
        print("| method | saved dtype | max abs logit difference |\n|---|---|---|")
        for method in hub_merge.MERGE_METHODS:
            for dtype in ("float32", "bfloat16", "float16"):
                dest = hub_merge.export_merged(
                    output_dir, Path(tmp) / f"{method}-{dtype}", dtype=dtype, method=method, device=args.device
                )
                model = AutoModelForCausalLM.from_pretrained(dest, dtype=getattr(torch, dtype), device_map=args.device)
                logits = trained_logits(model, tiny.load_tokenizer(dest)).cpu()
                print(f"| {method} | {dtype} | {(logits - reference).abs().max().item():.2e} |")


if __name__ == "__main__":
    main()
