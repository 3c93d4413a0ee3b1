"""Generation for a 4-bit QLoRA policy on one GPU: what is refused, what is measured, what is kept intact.

Three generation back ends exist in TRL 1.16 (`trl/trainer/grpo_trainer.py`, `_generate_single_turn`):

- vLLM (`use_vllm: true`). Before each generation batch TRL pushes the policy's weights to the vLLM engine
  (`trl/generation/vllm_generation.py`, `VLLMGeneration._iter_named_params`); for a PEFT model it calls
  ``merge_adapter()`` and then ``unmerge_adapter()``. On a 4-bit NF4 base every merge and unmerge de-quantizes the
  frozen weight, adds or subtracts the LoRA delta and quantizes again (peft ``lora/bnb.py``, ``Linear4bit.merge``), so
  the frozen base drifts a little further from where it started at every sync. :func:`check_generation_settings`
  refuses the combination unless ``allow_vllm_4bit_merge`` is set; then :class:`BaseDriftMonitor` measures the drift.
- transformers' continuous batching (`use_transformers_continuous_batching: true`, ``model.generate_batch``). TRL
  casts the whole model to bf16 before it (``unwrapped_model.to(torch.bfloat16)`` when ``bf16``) and never casts it
  back, which would leave a float32 adapter in bf16 for the rest of training; :func:`preserved_dtypes` restores the
  exact float32 tensors afterwards. Its model runner calls ``model.eval()``; on a CPU with AVX512-BF16,
  bitsandbytes then repacks 4-bit weights for inference and the next training forward fails;
  ``models.keep_4bit_training_layout`` (called by the trainer) turns that repacking off.
- ``model.generate`` (the default), with any transformers cache (`cache_implementation: static`).

Settings that a back end would silently ignore are refused by :func:`check_generation_settings` (see
``docs/generation.md``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

logger = logging.getLogger(__name__)

#: Name of the opt-in that lets `use_vllm` run on a 4-bit base.
VLLM_4BIT_OPT_IN = "allow_vllm_4bit_merge"
#: Name of the logged drift metric.
DRIFT_METRIC = "vllm/base_drift"
#: Relative drift above which the trainer warns once (1%).
DRIFT_WARNING_THRESHOLD = 0.01
#: Generation kwargs that continuous batching drops (transformers marks their logits processors
#: ``supports_continuous_batching = False``); the top-level field is named where one exists.
CB_UNSUPPORTED_GENERATION_KWARGS = ("min_new_tokens", "min_length", "encoder_repetition_penalty")
# (repetition_penalty in generation_kwargs is refused for every back end: SHADOWED_GENERATION_KWARGS)

#: ``generation_kwargs`` keys that would override a setting TRL builds from a field (TRL 1.16 updates its own
#: ``GenerationConfig`` / vLLM ``SamplingParams`` arguments with ``generation_kwargs``), with that field.
SHADOWED_GENERATION_KWARGS = {
    "max_new_tokens": "max_completion_length", "max_length": "max_completion_length",
    "max_tokens": "max_completion_length", "num_return_sequences": "num_generations", "n": "num_generations",
    **{name: name for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "cache_implementation")},
}

#: ``generation_kwargs`` keys of `SHADOWED_GENERATION_KWARGS` that break the run: more sequences per prompt than TRL's
#: own broke torch.cat at the first step (measured); the others are applied, as TRL applies them.
BREAKING_GENERATION_KWARGS = ("num_return_sequences", "n")
#: TRL 1.16's defaults of the fields a ``generation_kwargs`` key may duplicate ("also set" means another value).
_TRL_GENERATION_DEFAULTS = {"max_completion_length": 512, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": None,
                            "repetition_penalty": 1.0, "cache_implementation": None, "num_generations": 8}

#: ``generation_kwargs`` keys that fail TRL 1.16's generation at the first step (a breaker's finding, each tried):
#: a dict return, stop strings (generate needs the tokenizer), assisted or constrained generation.
UNUSABLE_GENERATION_KWARGS = ("return_dict_in_generate", "output_scores", "output_logits", "output_attentions",
                              "output_hidden_states", "stop_strings", "prompt_lookup_num_tokens",
                              "assistant_early_exit", "force_words_ids", "constraints")


def vllm_4bit_refusal(what: str) -> str:
    """The one-paragraph refusal for `use_vllm` on a 4-bit base. ``what`` names how the base is quantized."""
    return (
        f"use_vllm=True with a 4-bit base ({what}) is refused: TRL 1.16 hands the weights to vLLM by calling "
        "merge_adapter() and then unmerge_adapter() on the PEFT model at every weight sync (once per generation "
        "batch), and on a 4-bit NF4 base each merge and unmerge de-quantizes the frozen weights, adds or subtracts "
        "the LoRA delta and quantizes them again, so rounding errors pile up in the frozen base: on one 1024 x 1024 "
        "NF4 layer with LoRA r 16, the de-quantized base moved 30% (relative Frobenius norm) from its start after "
        "50 syncs with lora_B of std 1e-4, and 253% with 1e-3, and the model you train is no longer the base you "
        "loaded plus the adapter you save. Fix: set `use_vllm: false` and generate with transformers "
        "(`use_transformers_continuous_batching: true`, or `cache_implementation: static`; see docs/generation.md), "
        f"or load the base unquantized (`load_in_4bit: false`), or set `{VLLM_4BIT_OPT_IN}: true` to run anyway "
        f"and watch the logged metric `{DRIFT_METRIC}`."
    )


def is_4bit(quantization_config: Any) -> bool:
    """Whether a quantization config (a `BitsAndBytesConfig`, its dict form, or None) loads weights in 4 bit."""
    if quantization_config is None:
        return False
    if isinstance(quantization_config, Mapping):
        return bool(quantization_config.get("load_in_4bit"))
    return bool(getattr(quantization_config, "load_in_4bit", False))


def is_8bit(quantization_config: Any) -> bool:
    """Whether a quantization config (a `BitsAndBytesConfig`, its dict form, or None) loads weights in 8 bit."""
    if quantization_config is None:
        return False
    if isinstance(quantization_config, Mapping):
        return bool(quantization_config.get("load_in_8bit"))
    return bool(getattr(quantization_config, "load_in_8bit", False))


def check_vllm_quantization(args, load_in_4bit: bool, load_in_8bit: bool = False, source: str | None = None) -> None:
    """Refuse `use_vllm` on a quantized base, before any model loads.

    Args:
        args (`GRPOExtConfig`): reads ``use_vllm`` and ``allow_vllm_4bit_merge``.
        load_in_4bit (`bool`): the base is (or will be) loaded in 4 bit.
        load_in_8bit (`bool`, defaults to `False`): the base is (or will be) loaded in 8 bit.
        source (`str`, *optional*): where the quantization was requested, for the message (e.g.
            ``"model_init_kwargs.quantization_config"``); the recipe's ``load_in_4bit`` field when unset.

    Raises:
        ValueError: 4 bit without ``allow_vllm_4bit_merge`` (the paragraph of :func:`vllm_4bit_refusal`); 8 bit in
            any case (TRL's `VLLMGeneration` refuses it too, but only after loading the model).
    """
    if not getattr(args, "use_vllm", False):
        return
    where = "" if source is None else f"{source}: "
    if load_in_8bit:
        raise ValueError(
            f"use_vllm=True with an 8-bit base ({where}load_in_8bit=True): vLLM cannot load an 8-bit "
            "bitsandbytes model (TRL raises this only after loading the model). Fix: set `use_vllm: false`, or use "
            "`load_in_4bit: true` (see docs/generation.md), or load the base unquantized."
        )
    if load_in_4bit and not getattr(args, VLLM_4BIT_OPT_IN, False):
        raise ValueError(vllm_4bit_refusal(f"{where}load_in_4bit=True"))



def check_vllm_settings(values) -> None:
    """`check_vllm_quantization` on a run's fields (anything with ``.get``): ``model_init_kwargs.quantization_config``,
    then the recipe's ``load_in_4bit`` / ``load_in_8bit``."""
    from types import SimpleNamespace

    args = SimpleNamespace(use_vllm=bool(values.get("use_vllm")), allow_vllm_4bit_merge=bool(values.get(VLLM_4BIT_OPT_IN)))
    quantization = as_dict(values.get("model_init_kwargs")).get("quantization_config")
    if is_4bit(quantization) or is_8bit(quantization):
        check_vllm_quantization(args, is_4bit(quantization), is_8bit(quantization),
                                source="model_init_kwargs.quantization_config")
    check_vllm_quantization(args, bool(values.get("load_in_4bit")), bool(values.get("load_in_8bit")))


def check_vllm_before_loading(model, args, quantization_config) -> None:
    """`check_vllm_quantization` on what a trainer was given, before TRL loads anything: a model id with the
    ``quantization_config=`` argument, or an already loaded (possibly 4-bit) model."""
    if isinstance(model, str):
        check_vllm_quantization(args, is_4bit(quantization_config), is_8bit(quantization_config),
                                source="quantization_config")
        return
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    check_vllm_quantization(args, bool(getattr(base, "is_loaded_in_4bit", False)),
                            bool(getattr(base, "is_loaded_in_8bit", False)), source="the model passed")

def check_generation_settings(values, on_cpu: bool) -> None:
    """Refuse generation settings that TRL 1.16 would silently ignore or that cannot work (`validation.rules`'s
    ``generation`` rule).

    Args:
        values: the run's fields (anything with ``.get``: a `validation.rules.RunView` or a mapping).
        on_cpu (`bool`): training runs on the CPU.

    Raises:
        RunArgumentError: naming the field, its value and a fix, when
            - ``use_vllm`` and ``use_transformers_continuous_batching`` are both set (TRL uses vLLM);
            - ``cache_implementation`` is set with vLLM or continuous batching (TRL passes it only to
              ``model.generate``), or is not a cache transformers knows;
            - continuous batching with ``repetition_penalty`` != 1 or a ``generation_kwargs`` key it drops
              (:data:`CB_UNSUPPORTED_GENERATION_KWARGS`);
            - continuous batching on a CPU without ``num_blocks`` in ``transformers_continuous_batching_config``
              (its cache is then sized from free host memory: 6.8 GB resident for the 81k-parameter tiny model);
            - ``allow_vllm_4bit_merge`` without ``use_vllm``;
            - a ``generation_kwargs`` key that overrides a field, ``do_sample``, or one generation would ignore
              (`_check_generation_kwargs`).
    """
    from ..config.checks import RunArgumentError, as_number

    def get(name, default=None):
        return getattr(values.get(name, default), "value", values.get(name, default))

    use_vllm = bool(get("use_vllm"))
    cb = bool(get("use_transformers_continuous_batching") or get("use_transformers_paged"))  # TRL's alias
    cache = get("cache_implementation")
    if get(VLLM_4BIT_OPT_IN) and not use_vllm:
        raise RunArgumentError(f"{VLLM_4BIT_OPT_IN}=True does nothing without use_vllm=True (it only lets vLLM run on "
                               f"a 4-bit base). Fix: remove `{VLLM_4BIT_OPT_IN}`.")
    if use_vllm and cb:
        raise RunArgumentError(
            "use_vllm=True and use_transformers_continuous_batching=True: TRL generates with vLLM and ignores "
            "continuous batching. Fix: keep one of them (`use_vllm: false` for continuous batching).")
    if cache is not None:
        if use_vllm or cb:
            backend = "use_vllm=True" if use_vllm else "use_transformers_continuous_batching=True"
            raise RunArgumentError(
                f"cache_implementation={cache!r} with {backend}: that back end manages its own KV cache and TRL passes "
                "cache_implementation only to model.generate. Fix: remove `cache_implementation`, or set "
                f"`{backend.split('=')[0]}: false`.")
        from transformers.generation.configuration_utils import ALL_CACHE_IMPLEMENTATIONS  # imports no torch

        if cache not in ALL_CACHE_IMPLEMENTATIONS:
            raise RunArgumentError(f"cache_implementation={cache!r} is not a transformers cache; choose one of "
                                   f"{', '.join(map(repr, ALL_CACHE_IMPLEMENTATIONS))} (`static` for a static KV "
                                   "cache).")
    _check_generation_kwargs(as_dict(get("generation_kwargs")), use_vllm, get)
    if not cb:
        return
    penalty = as_number(get("repetition_penalty", 1.0))
    if penalty is not None and penalty != 1.0:
        raise RunArgumentError(
            f"repetition_penalty={get('repetition_penalty')} with use_transformers_continuous_batching=True: "
            "continuous batching drops the repetition-penalty logits processor, so it would not apply. Fix: set "
            "`repetition_penalty: 1.0`, or `use_transformers_continuous_batching: false`.")
    dropped = sorted(set(as_dict(get("generation_kwargs"))) & set(CB_UNSUPPORTED_GENERATION_KWARGS))
    if dropped:
        raise RunArgumentError(
            f"generation_kwargs {dropped} with use_transformers_continuous_batching=True: continuous batching drops "
            "these logits processors, so they would not apply. Fix: remove them from `generation_kwargs`, or set "
            "`use_transformers_continuous_batching: false`.")
    cb_config = as_dict(get("transformers_continuous_batching_config"))
    if on_cpu and cb_config.get("num_blocks") is None:
        raise RunArgumentError(
            "use_transformers_continuous_batching=True on a CPU without `num_blocks` in "
            f"transformers_continuous_batching_config ({cb_config}): transformers then sizes the KV cache from "
            "free host memory (6.8 GB resident for the 81k-parameter tiny model, measured). Fix: set e.g. "
            "`transformers_continuous_batching_config: {num_blocks: 8, page_size: 64, max_batch_tokens: 512}`.")


def _check_generation_kwargs(kwargs: dict, use_vllm: bool, get=None) -> None:
    """Check ``generation_kwargs`` as TRL 1.16 applies them (it updates its own ``GenerationConfig`` / vLLM
    ``SamplingParams`` arguments with them, so a key wins over the field it duplicates).

    Refused (`RunArgumentError` naming the key and the fix), each breaking the run: ``num_return_sequences`` / ``n``
    (`BREAKING_GENERATION_KWARGS`: TRL's batch shapes), keys its generation cannot use (`UNUSABLE_GENERATION_KWARGS`),
    ``do_sample`` other than true (GRPO samples: greedy makes every group uniform). Accepted with a `UserWarning`:
    without vLLM, keys `transformers.GenerationConfig` does not have (generation ignores them); a key that
    duplicates a field (`SHADOWED_GENERATION_KWARGS`) when that field is set too (``get(field)`` differs from TRL's
    default: the key's value is the one used), and a completion-length key always (the plan counts tokens with
    ``max_completion_length``)."""
    import warnings

    from ..config.checks import RunArgumentError

    broken = {key: SHADOWED_GENERATION_KWARGS[key] for key in kwargs if key in BREAKING_GENERATION_KWARGS}
    if broken:
        fields = ", ".join(f"{key} -> {field}: {kwargs[key]!r}" for key, field in broken.items())
        raise RunArgumentError(
            f"generation_kwargs {sorted(broken)}: TRL generates num_generations completions per prompt itself, so more "
            f"sequences per prompt break its batch shapes at the first step. Fix: set the field instead ({fields}) and "
            "remove the key from generation_kwargs.")
    for key in sorted(set(kwargs) & set(SHADOWED_GENERATION_KWARGS)):
        field = SHADOWED_GENERATION_KWARGS[key]
        value = get(field) if get is not None else None
        also_set = value is not None and value != _TRL_GENERATION_DEFAULTS.get(field)
        if field == "max_completion_length":
            warnings.warn(f"generation_kwargs {key}={kwargs[key]!r} sets the completion length (TRL applies "
                          "generation_kwargs over its own settings); the plan counts tokens with "
                          f"max_completion_length={value!r}. Set max_completion_length instead to keep them equal.",
                          UserWarning, stacklevel=2)
        elif also_set:
            warnings.warn(f"generation_kwargs {key}={kwargs[key]!r} and {field}={value!r} are both set: TRL applies "
                          f"generation_kwargs over its own settings, so {key}={kwargs[key]!r} is used. Keep one.",
                          UserWarning, stacklevel=2)
    unusable = sorted(set(kwargs) & set(UNUSABLE_GENERATION_KWARGS))
    if unusable:
        raise RunArgumentError(
            f"generation_kwargs {unusable}: TRL's generation cannot use them (they change what generate returns, or "
            "need a tokenizer, an assistant model or constrained beam search, and the first step fails). Fix: remove "
            "them from generation_kwargs.")
    if kwargs.get("do_sample", True) is not True:  # True is TRL's own setting
        raise RunArgumentError(
            f"generation_kwargs do_sample={kwargs['do_sample']!r}: GRPO samples G completions per prompt (TRL sets "
            "do_sample=True); greedy decoding makes all G alike, so every group would be uniform. Fix: remove "
            "do_sample from generation_kwargs (temperature sets how much the completions differ).")
    if not use_vllm:
        from transformers import GenerationConfig

        unknown = sorted(set(kwargs) - set(GenerationConfig().to_dict()))
        if unknown:  # TRL accepts them and the run trains: they have no effect
            warnings.warn(
                f"generation_kwargs {unknown}: not a transformers GenerationConfig setting, so generation ignores "
                "them. Fix: remove them, or use a GenerationConfig name (e.g. no_repeat_ngram_size, "
                "suppress_tokens).", UserWarning, stacklevel=2)


def as_dict(value) -> dict:
    """A dict field as TRL will see it: a JSON string from the command line is parsed only later, in
    `TrainingArguments.__post_init__`; anything unparsable is left for TRL to report."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return dict(value) if isinstance(value, Mapping) else {}


class BaseDriftMonitor:
    """How far the frozen 4-bit base of a few fixed LoRA-adapted layers has moved since the monitor was created.

    drift = ‖W_t − W_0‖_F / ‖W_0‖_F over the chosen layers together, where W is the de-quantized weight
    (``bitsandbytes.functional.dequantize_4bit``) of each layer's ``bnb.nn.Linear4bit`` base, W_0 at creation and
    W_t now. A frozen base that is never re-quantized gives exactly 0.

    Args:
        model (`nn.Module`): a PEFT model over a 4-bit bitsandbytes base.
        num_layers (`int`, defaults to `3`): how many adapted 4-bit layers to follow: the first, the middle and the
            last in module order (fewer if the model has fewer).

    Attributes:
        layer_names (`list[str]`): qualified names of the followed base layers.
        history (`list[float]`): every value returned by :meth:`measure`.

    Memory: one copy of the packed 4-bit weights (0.5 byte per weight) and quantization state per followed layer.

    Raises:
        ValueError: the model has no LoRA-adapted 4-bit layer.
    """

    def __init__(self, model, num_layers: int = 3):
        import bitsandbytes as bnb
        from peft.tuners.tuners_utils import BaseTunerLayer

        adapted = [
            (f"{name}.base_layer", module.get_base_layer())
            for name, module in model.named_modules()
            if isinstance(module, BaseTunerLayer) and isinstance(module.get_base_layer(), bnb.nn.Linear4bit)
        ]
        if not adapted:
            raise ValueError("BaseDriftMonitor needs a PEFT model with LoRA on 4-bit (bnb.nn.Linear4bit) layers.")
        picks = sorted({0, len(adapted) // 2, len(adapted) - 1})[:num_layers]
        self._layers = [adapted[i][1] for i in picks]
        self.layer_names = [adapted[i][0] for i in picks]
        self._initial = [(layer.weight.data.clone(), copy.deepcopy(layer.weight.quant_state)) for layer in self._layers]
        self.history: list[float] = []
        self.warned = False  # the drift warning was given

    def measure(self, warn_at_step: int | None = None) -> float:
        """The relative Frobenius drift now (a float ≥ 0; 0.3 = 30%); also appended to :attr:`history`. With
        ``warn_at_step`` (the optimizer step), a warning the first time it exceeds :data:`DRIFT_WARNING_THRESHOLD`."""
        import torch
        from bitsandbytes.functional import dequantize_4bit

        diff = base = 0.0
        with torch.no_grad():
            for layer, (data, state) in zip(self._layers, self._initial):
                w0 = dequantize_4bit(data, state).double()  # float64 sums: 1e6-element float32 sums lose ~1e-5
                w = dequantize_4bit(layer.weight.data, layer.weight.quant_state).double()
                diff += float((w - w0).pow(2).sum())
                base += float(w0.pow(2).sum())
        drift = (diff / base) ** 0.5 if base > 0 else 0.0
        if warn_at_step is not None and drift > DRIFT_WARNING_THRESHOLD and not self.warned:
            self.warned = True
            logger.warning("The 4-bit base has drifted %.1f%% (relative Frobenius norm of layers %s) since the start, at "
                           "optimizer step %d: TRL's vLLM weight sync re-quantizes it at every generation batch "
                           "(allow_vllm_4bit_merge=True). See docs/generation.md.",
                           100 * drift, ", ".join(self.layer_names), warn_at_step)
        self.history.append(drift)
        return drift


@contextlib.contextmanager
def preserved_dtypes(model) -> Iterator[None]:
    """Undo any dtype change made to ``model``'s parameters, gradients and buffers inside the block.

    TRL's continuous-batching generation casts the whole model to bf16 (``model.to(torch.bfloat16)``) and never back,
    which would store a float32 adapter in bf16 from then on (see `docs/adapter_precision.md`). ``nn.Module.to``
    replaces ``param.data`` by a new tensor, so keeping a reference to the old one and putting it back restores the
    exact values at no copy cost. Tensors whose dtype did not change are left alone.
    """
    # `nn.Module._apply` sets `param.data` and `param.grad.data` to new tensors: keep the old ones
    params = [(p, p.data, p.grad, None if p.grad is None else p.grad.data) for p in model.parameters()]
    buffers = [(m, name, b) for m in model.modules() for name, b in m.named_buffers(recurse=False)]
    try:
        yield
    finally:
        for param, data, grad, grad_data in params:
            if param.data.dtype != data.dtype:
                param.data = data
            if grad is not None and grad.data.dtype != grad_data.dtype:
                grad.data = grad_data
        for module, name, buffer in buffers:
            current = getattr(module, name, None)
            if current is not None and current.dtype != buffer.dtype:
                setattr(module, name, buffer)  # a registered buffer: nn.Module.__setattr__ keeps it one

