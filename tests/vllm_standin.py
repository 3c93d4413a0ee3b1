"""A stand-in for the vLLM engine, for CPU tests of `use_vllm: true` (vLLM itself cannot be installed here).

`StandInVLLMGeneration` is TRL's own `trl.generation.vllm_generation.VLLMGeneration` with only the engine replaced:
`__init__`, `sync_weights` and `_iter_named_params` (which call `merge_adapter()` / `unmerge_adapter()` on a PEFT
model) are TRL's code, so the 4-bit re-quantization they cause really happens. `_init_vllm` builds a fake colocated
engine (`StandInLLM`) that records the weights it is sent; `generate` samples the completions with the Hugging Face
model itself (one per prompt row, as colocated vLLM does) and returns the sampled tokens' log-probabilities.

The private TRL names used here are pinned in tests/test_trl_contract.py.
"""

from __future__ import annotations

import torch
from trl.generation.vllm_generation import VLLMGeneration


class _Model:
    def __init__(self, engine):
        self.engine = engine

    def load_weights(self, weights):
        for name, tensor in weights:
            self.engine.loaded[name] = tensor.shape


class StandInLLM:
    """Stands for `vllm.LLM` in colocate mode: the attribute chain TRL's `sync_weights` writes through."""

    def __init__(self):
        self.loaded: dict[str, torch.Size] = {}
        self.syncs = 0
        runner = type("Runner", (), {"model": _Model(self)})()
        worker = type("Worker", (), {"model_runner": runner})()
        executor = type("Executor", (), {"driver_worker": worker})()
        self.llm_engine = type("Engine", (), {"model_executor": executor})()

    def reset_prefix_cache(self):  # TRL calls it once at the end of every sync
        self.syncs += 1


class StandInVLLMGeneration(VLLMGeneration):
    """TRL's `VLLMGeneration` with a stand-in engine (see the module docstring)."""

    def _init_vllm(self):
        if self.mode != "colocate":
            raise ValueError("the stand-in engine only plays vLLM's colocate mode")
        self.llm = StandInLLM()
        self._llm_weights_sleeping = False

    def generate(self, prompts, images, num_generations, profiler=None):
        tokenizer = self.processing_class
        pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        device = next(self.model.parameters()).device
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=True, temperature=self.temperature,
                top_k=None, top_p=1.0, max_new_tokens=self.max_completion_length, output_scores=True,
                return_dict_in_generate=True, pad_token_id=pad, eos_token_id=eos,
            )
        new = out.sequences[:, width:]
        logps = torch.stack([s.float().log_softmax(-1) for s in out.scores], 1).gather(-1, new.unsqueeze(-1))
        completion_ids, logprobs = [], []
        for row, lps in zip(new.tolist(), logps.squeeze(-1).tolist()):
            n = row.index(eos) + 1 if eos in row else len(row)
            completion_ids.append(row[:n])
            logprobs.append([[lp] for lp in lps[:n]])
        return [list(p) for p in prompts], completion_ids, logprobs, None
