"""Generation with the LoRA adapter merged into the base (`merge_adapter_for_generation`) against TRL's unmerged
generation, on the shipped SmolLM2 run's step, in one process.

One `GRPOExtTrainer` on the shipped CPU config's model settings (SmolLM2-135M-Instruct, float32 base, LoRA r 16 on
every linear layer; lora_B drawn at std 0.01 so that the adapter changes the output, as a trained one does). Its
generation call, TRL's ``_generate_single_turn``, is timed on the same prompts (the config's system prompt and chat
template, ``--prompts`` training problems × G 8, temperature 0.7, at most 64 new tokens) with the flag off and on,
alternately (the order flips every pair), each pair from the same torch seed: the two arms sample the same tokens
(checked and printed), so the times compare one to one. Reported per arm: CPU seconds of the process and wall
seconds per call (the merge, restore and generation together), and the ratio merged / unmerged.

    python benchmarks/merged_generation.py              # 5 pairs: about 3 minutes on 2 cores
    python benchmarks/merged_generation.py --pairs 10 --prompts 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CONFIG = ROOT / "recipes" / "configs" / "smollm2_arithmetic_cpu.yaml"


def _zero(completions, **kwargs):
    return [0.0] * len(completions)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5, help="timed pairs (one call per arm each)")
    parser.add_argument("--prompts", type=int, default=3, help="prompts per call (each G = 8 times)")
    parser.add_argument("--max-completion-length", type=int, default=64)
    args = parser.parse_args(argv)

    import torch
    import yaml
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer

    from trl_grpo_ext import GRPOExtConfig, GRPOExtTrainer
    from trl_grpo_ext.data import arithmetic
    from trl_grpo_ext.data.load import to_chat_prompt
    from trl_grpo_ext.models.embedded import smollm2

    shipped = yaml.safe_load(CONFIG.read_text())
    path = smollm2.ensure_smollm2()
    tokenizer = AutoTokenizer.from_pretrained(path)
    lora = LoraConfig(r=shipped["lora_r"], lora_alpha=shipped["lora_alpha"], lora_dropout=shipped["lora_dropout"],
                      target_modules=shipped["lora_target_modules"], task_type="CAUSAL_LM")
    g = shipped["num_generations"]
    rows = arithmetic.arithmetic_rows("train", num_problems=args.prompts)
    prompts = [to_chat_prompt(row["question"], shipped["system_prompt"]) for row in rows]
    with tempfile.TemporaryDirectory() as out:
        config = GRPOExtConfig(
            output_dir=out, use_cpu=True, bf16=False, report_to=[], save_strategy="no", disable_tqdm=True,
            prompts_per_step=args.prompts, num_generations=g, micro_batch_size=args.prompts * g,
            total_training_steps=1, max_completion_length=args.max_completion_length,
            temperature=shipped["temperature"], merge_adapter_for_generation=True,
            model_init_kwargs={"dtype": torch.float32})
        trainer = GRPOExtTrainer(str(path), reward_funcs=[_zero], args=config,
                                 train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
                                 processing_class=tokenizer, peft_config=lora)
        torch.manual_seed(0)
        with torch.no_grad():
            for name, param in trainer.model.named_parameters():
                if "lora_B" in name:
                    param.normal_(0, 0.01)
        prompt_ids = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True,
                                                    return_dict=False) for p in prompts for _ in range(g)]

        def call(merge: bool, seed: int):
            trainer.args.merge_adapter_for_generation = merge
            torch.manual_seed(seed)
            cpu, wall = time.process_time(), time.perf_counter()
            result = trainer._generate_single_turn(prompt_ids, None, {}, g)
            return time.process_time() - cpu, time.perf_counter() - wall, result[0]

        call(False, 0)  # warm-up (one-off allocations)
        times = {False: [], True: []}
        same = 0
        for pair in range(args.pairs):
            order = (False, True) if pair % 2 == 0 else (True, False)
            outputs = {}
            for merge in order:
                cpu, wall, completion_ids = call(merge, 1000 + pair)
                times[merge].append((cpu, wall))
                outputs[merge] = [list(map(int, ids)) for ids in completion_ids]
            same += outputs[False] == outputs[True]
            tokens = sum(len(ids) for ids in outputs[False])
            print(f"pair {pair + 1}: unmerged {times[False][-1][1]:.2f} s, merged {times[True][-1][1]:.2f} s wall "
                  f"({tokens} completion tokens)", flush=True)
    cpu = {merge: statistics.mean(c for c, _ in times[merge]) for merge in times}
    wall = {merge: statistics.mean(w for _, w in times[merge]) for merge in times}
    print(f"\n{len(prompt_ids)} completions of at most {args.max_completion_length} tokens, {args.pairs} pairs; "
          f"the same tokens in {same} of {args.pairs} pairs")
    print("| | unmerged (TRL) | merged | ratio |\n|---|---|---|---|")
    print(f"| CPU s / generation | {cpu[False]:.2f} | {cpu[True]:.2f} | {cpu[True] / cpu[False]:.2f}× |")
    print(f"| wall s / generation | {wall[False]:.2f} | {wall[True]:.2f} | {wall[True] / wall[False]:.2f}× |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
