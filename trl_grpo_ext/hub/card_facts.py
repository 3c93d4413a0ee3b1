"""What the model card may say about a run, each statement read from what the run recorded (no torch).

`card.build_model_card` asks here how the base was loaded (4-bit NF4 QLoRA, 8-bit, or not quantized), which base
model it was and whether it is a Hub id (`model_source`), which tags and citations follow from that, and which of the
final metrics were measured. A statement the files do not support is left out, never assumed: a run whose
``run_config.json`` says ``load_in_4bit: false`` is not called QLoRA, and ``total_flos: 0`` (transformers writes 0
when it could not count the FLOPs) is not a metric.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..models.source import ModelSource, recorded_model_source
from ..training.checkpoints import RESUMED_FROM_STEP
from .card_template import LORA_CITATION, QLORA_CITATION

#: Final metrics whose value 0 means "not measured" (transformers leaves ``total_flos`` at 0 when the model cannot
#: count its floating-point operations).
UNMEASURED_WHEN_ZERO = ("total_flos",)


@dataclass(frozen=True)
class BaseLoading:
    """How the run loaded its base model (``run_config.json``'s ``model_args``; TRL's `ModelConfig` fields).

    Attributes:
        bits (`int` or `None`): 4, 8, or None (not quantized).
        quant_type (`str`): the 4-bit type (``"nf4"`` or ``"fp4"``); ``""`` otherwise.
        double_quant (`bool`): 4-bit double quantisation (``use_bnb_nested_quant``).
        dtype (`str`): the load and compute dtype (``"float32"``, ``"bfloat16"``, ...; ``"auto"``: the checkpoint's).
    """

    bits: int | None
    quant_type: str = ""
    double_quant: bool = False
    dtype: str = "float32"

    @property
    def qlora(self) -> bool:
        return self.bits == 4

    def phrase(self) -> str:
        """How the card names the base: ``a 4-bit NF4 base (QLoRA)``, ``an 8-bit base``, ``a float32 base (not
        quantized)``."""
        if self.bits == 4:
            return f"a 4-bit {self.quant_type.upper()} base (QLoRA)"
        if self.bits == 8:
            return "an 8-bit (LLM.int8) base"
        if self.dtype == "auto":
            return "the base in its own dtype (not quantized)"
        return f"a {self.dtype} base (not quantized)"


def base_loading(config: dict) -> BaseLoading | None:
    """The `BaseLoading` of a run's ``run_config.json`` (as a dict), or None when it recorded no ``model_args``."""
    model_args = config.get("model_args") or {}
    if not model_args:
        return None
    training_args = config.get("training_args") or {}
    dtype = model_args.get("dtype") or model_args.get("torch_dtype")
    if dtype in (None, "auto"):  # models.load_dtype's rule
        dtype = "auto" if training_args.get("bf16") else "float32"
    if model_args.get("load_in_8bit"):
        return BaseLoading(8, dtype=dtype)
    if model_args.get("load_in_4bit"):
        return BaseLoading(4, model_args.get("bnb_4bit_quant_type") or "nf4",
                           bool(model_args.get("use_bnb_nested_quant")), dtype)
    return BaseLoading(None, dtype=dtype)


def model_source(config: dict, output_dir: str | Path, adapter_config: dict) -> ModelSource | None:
    """The run's `ModelSource` (`model_source.recorded_model_source`)."""
    return recorded_model_source(config, output_dir, adapter_config)


def tags(loading: BaseLoading | None, mode: str) -> list[str]:
    """The card's tags: ``trl``, ``grpo``, ``qlora`` only for a 4-bit run, ``trl-grpo-ext``, then ``lora``
    (``mode`` ``"adapter"``), ``merged`` or nothing (``"full"``: a full fine-tune, no adapter)."""
    return ["trl", "grpo"] + (["qlora"] if loading is not None and loading.qlora else []) + [
        "trl-grpo-ext"] + {"adapter": ["lora"], "merged": ["merged"]}.get(mode, [])


def method_citation(loading: BaseLoading | None, full: bool = False) -> str | None:
    """QLoRA's BibTeX for a 4-bit run, else LoRA's; None for a full fine-tune (``full``: no adapter)."""
    if full:
        return None
    return QLORA_CITATION if loading is not None and loading.qlora else LORA_CITATION


def training_sentence(loading: BaseLoading | None, full: bool = False) -> str:
    """The sentence of the card's "Training procedure" that names the adapter method (none for a ``full`` fine-tune)
    and the base."""
    if full:
        base = "" if loading is None else f", on {loading.phrase()}"
        return f"with every weight of the base trained{base}: a full fine-tune, no adapter."
    if loading is not None and loading.qlora:
        return (f"with a LoRA adapter on a 4-bit {loading.quant_type.upper()} base "
                "([QLoRA, Dettmers et al., 2023](https://huggingface.co/papers/2305.14314)).")
    base = "on how the base was loaded (not recorded)" if loading is None else f"on {loading.phrase()}"
    return f"with a LoRA adapter ([Hu et al., 2021](https://huggingface.co/papers/2106.09685)) {base}."


def quantized_snippet(loading: BaseLoading | None, base: str, model_ref: str) -> str:
    """The card's second loading snippet, on the quantized base the run trained on; ``""`` for a run without one."""
    if loading is None or loading.bits is None:
        return ""
    if loading.bits == 8:
        bnb, what = "bnb = BitsAndBytesConfig(load_in_8bit=True)\n", "the 8-bit base"
    else:
        dtype = "bfloat16" if loading.dtype == "auto" else loading.dtype
        bnb = (f'bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="{loading.quant_type}", '
               f"bnb_4bit_use_double_quant={loading.double_quant},\n"
               f"                         bnb_4bit_compute_dtype=torch.{dtype})\n")
        what = f"the 4-bit {loading.quant_type.upper()} base"
    return (
        f"\n\nTo run it on {what} it was trained on:\n\n"
        "```python\nimport torch\nfrom peft import PeftModel\n"
        "from transformers import AutoModelForCausalLM, BitsAndBytesConfig\n\n"
        + bnb
        + f'base = AutoModelForCausalLM.from_pretrained("{base}", quantization_config=bnb)\n'
        f'model = PeftModel.from_pretrained(base, "{model_ref}")\n```'
    )


def measured(results: dict) -> list[tuple]:
    """``train_results.json``'s metrics, without those that were not measured (:data:`UNMEASURED_WHEN_ZERO` at 0,
    and None). A resumed run's (`checkpoints.RESUMED_FROM_STEP`: the checkpoint's step N) transformers figures
    (``train_runtime``, ``train_loss``, ``train_*_per_second``) cover the steps after N alone, and say so."""
    resumed = results.get(RESUMED_FROM_STEP)
    rows = []
    for key, value in results.items():
        if value is None or (key in UNMEASURED_WHEN_ZERO and value == 0) or key == RESUMED_FROM_STEP:
            continue
        if resumed is not None and key.startswith("train_"):
            key = f"{key} (the steps after {resumed} alone: the run resumed from checkpoint-{resumed})"
        rows.append((key, value))
    return rows
