"""Memory forecast of a GRPO run on one device, by part, from the model's config alone (pure Python: no torch, no TRL).

Every part is a formula in the model's shape (`ModelShape`, read from a ``config.json`` mapping) and the run's
quantities (`MemorySettings`); docs/quantifiers.md ("How much memory") gives each one with its source. Units: bytes
everywhere; tokens, completions and parameters are counts. The peak is

    peak = always + max(generation phase, training phase)

where ``always`` holds the weights, the trainable adapter (or model) with its gradients and AdamW state, and the
reference model; the generation phase the KV cache of one generation batch; the training phase the activations of one
micro-batch at the maximum lengths and TRL's log-probability buffers. It counts tensors, not the allocator's slack
or the CUDA context (about 0.3–0.5 GiB that ``torch.cuda.max_memory_allocated`` does not see either).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ModelShape", "MemorySettings", "MemoryPart", "MemoryForecast", "forecast_memory", "memory_fix",
           "parse_memory", "format_bytes", "GiB", "DEFAULT_LORA_TARGETS"]

GiB = 2**30
#: TRL's fused LM head scores at most this many tokens per tile (``trl/kernels/chunked_logprob.py``).
TOKEN_CHUNK_SIZE = 4096
#: ... over this many vocabulary columns; its buffer is allocated at this width even for a smaller vocabulary
#: (``trl/trainer/utils.py`` ``_CHUNKED_LOGPROB_CHUNK_SIZE``).
VOCAB_CHUNK_SIZE = 32768
#: bitsandbytes' NF4 block: one absmax per 64 weights (4 bytes; with double quantisation 1 byte, plus one float32
#: per 256 absmax blocks).
NF4_BLOCK, NF4_NESTED_BLOCK = 64, 256
#: PEFT's default LoRA targets for Llama / Qwen2 / Mistral (``peft.utils.constants``), when none are given.
DEFAULT_LORA_TARGETS = ("q_proj", "v_proj")
_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelShape:
    """The shape of a Llama-style decoder (Llama, Qwen2, Mistral, SmolLM2), as in its ``config.json``.

    Attributes: hidden_size h, num_hidden_layers L, num_attention_heads a, num_key_value_heads k, head_dim d (defaults
    to h / a), intermediate_size i, vocab_size V (tokens), tie_word_embeddings, attention_bias (q/k/v biases: Qwen2).
    """

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    head_dim: int | None = None

    @classmethod
    def from_config(cls, config: Mapping) -> ModelShape:
        """From a ``config.json`` mapping (or ``PretrainedConfig.to_dict()``). Qwen2 has q/k/v biases (its config has
        no ``attention_bias`` key). Raises `ValueError` naming a missing key."""
        missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                               "vocab_size") if config.get(k) is None]
        if missing:
            raise ValueError(f"the model config has no {', '.join(missing)}: the memory forecast needs a Llama-style "
                             "decoder config (hidden_size, num_hidden_layers, ...)")
        heads = config["num_attention_heads"]
        return cls(hidden_size=config["hidden_size"], num_hidden_layers=config["num_hidden_layers"],
                   num_attention_heads=heads, num_key_value_heads=config.get("num_key_value_heads") or heads,
                   intermediate_size=config["intermediate_size"], vocab_size=config["vocab_size"],
                   tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
                   attention_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
                   head_dim=config.get("head_dim"))

    @property
    def d(self) -> int:
        """Head dimension [elements]."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of each linear layer of one decoder layer."""
        h, q, kv, i = self.hidden_size, self.num_attention_heads * self.d, self.num_key_value_heads * self.d, \
            self.intermediate_size
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), "gate_proj": (h, i),
                "up_proj": (h, i), "down_proj": (i, h)}

    @property
    def linear_params(self) -> int:
        """Weights of the decoder layers' linear layers (what 4-bit quantises) [parameters]."""
        return self.num_hidden_layers * sum(n_in * n_out for n_in, n_out in self.linear_shapes().values())

    @property
    def other_params(self) -> int:
        """Embeddings, lm_head (untied), q/k/v biases and RMSNorm weights [parameters]."""
        h, L = self.hidden_size, self.num_hidden_layers
        bias = (self.num_attention_heads + 2 * self.num_key_value_heads) * self.d if self.attention_bias else 0
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + head + L * (bias + 2 * h) + h

    @property
    def num_parameters(self) -> int:
        return self.linear_params + self.other_params


@dataclass(frozen=True)
class MemorySettings:
    """What a run does with the model on one device.

    Attributes:
        micro_batch_size: completions per forward/backward.
        generation_batch: completions generated at once on one device (TRL: per_device_train_batch_size ×
            steps_per_generation).
        max_prompt_length, max_completion_length: tokens.
        compute_bytes: bytes per element of activations (2 for bf16/fp16, 4 for float32).
        weight_bytes: bytes per element of the weights not quantised (the load dtype).
        load_in_4bit, double_quant: NF4 weights, with bitsandbytes' nested quantisation.
        use_peft, lora_r, lora_targets, lora_dropout: the LoRA adapter (``"all-linear"`` or module names).
        adapter_bytes: bytes per adapter element (4: trl-grpo-ext's adapter_dtype float32 on a quantised base;
            otherwise the base's dtype).
        modules_to_save: PEFT's fully trained module copies (``lora_modules_to_save``); ``lm_head`` and
            ``embed_tokens`` are counted (V × h parameters each, in ``adapter_bytes``), norms are left out.
        beta: the KL coefficient; a reference model is kept when beta > 0 and there is no adapter to disable.
        gradient_checkpointing: TRL's default is True.
        compact_head: TRL's fused LM head scores only completion tokens (CUDA with Triton); else every position
            (CPU), with three float32 temporaries per tile.
        generation_backend: ``"transformers"`` (KV cache on the device), ``"vllm_colocate"`` (vLLM reserves
            ``vllm_gpu_memory_utilization`` of the device), ``"vllm_server"`` (none on the training device).
        attention: ``"sdpa"`` (no S² tensor kept) or ``"eager"`` (the a × S² probabilities kept per layer).
    """

    micro_batch_size: int
    generation_batch: int
    max_prompt_length: int
    max_completion_length: int
    compute_bytes: int = 2
    weight_bytes: int = 2
    load_in_4bit: bool = False
    double_quant: bool = False
    use_peft: bool = False
    lora_r: int = 16
    lora_targets: tuple[str, ...] | str = DEFAULT_LORA_TARGETS
    lora_dropout: float = 0.05
    adapter_bytes: int = 4
    modules_to_save: tuple[str, ...] = ()
    beta: float = 0.0
    gradient_checkpointing: bool = True
    compact_head: bool = True
    generation_backend: str = "transformers"
    vllm_gpu_memory_utilization: float = 0.3
    attention: str = "sdpa"

    @property
    def sequence_length(self) -> int:
        """S = max_prompt_length + max_completion_length [tokens]."""
        return self.max_prompt_length + self.max_completion_length

    def targets(self) -> tuple[str, ...]:
        return _LINEAR if self.lora_targets == "all-linear" else tuple(
            t for t in _LINEAR if t in tuple(self.lora_targets))


@dataclass(frozen=True)
class MemoryPart:
    """One part of the forecast: ``name``, ``bytes``, the ``phase`` it lives in (always, generation, training) and
    the ``formula`` with the run's numbers."""

    name: str
    bytes: int
    phase: str
    formula: str


@dataclass(frozen=True)
class MemoryForecast:
    """The parts and the peak [bytes] of one device."""

    parts: tuple[MemoryPart, ...]

    def phase_bytes(self, phase: str) -> int:
        return sum(p.bytes for p in self.parts if p.phase == phase)

    @property
    def peak_bytes(self) -> int:
        return self.phase_bytes("always") + max(self.phase_bytes("generation"), self.phase_bytes("training"))

    @property
    def peak_phase(self) -> str:
        return "generation" if self.phase_bytes("generation") > self.phase_bytes("training") else "training"

    def part(self, name: str) -> MemoryPart:
        return next(p for p in self.parts if p.name == name)

    def table(self) -> str:
        rows = [f"{p.name:<26}{format_bytes(p.bytes):>12}  {p.phase:<10} {p.formula}" for p in self.parts]
        rows.append(f"{'peak':<26}{format_bytes(self.peak_bytes):>12}  {'':<10} = always + max(generation "
                    f"{format_bytes(self.phase_bytes('generation'))}, training {format_bytes(self.phase_bytes('training'))})")
        return "\n".join(rows)


def format_bytes(n: float) -> str:
    """``n`` bytes as GiB (MiB below 1 GiB, KiB below 1 MiB), 2 decimals."""
    for unit, size in (("GiB", GiB), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def parse_memory(text: str) -> int:
    """``"24GB"``, ``"24 GiB"``, ``"80G"``, ``"512MiB"`` -> bytes. GB and GiB both read as 2^30 (GPU memory is sold in
    binary units: a "24 GB" card holds 24 GiB); a bare number is GiB. Raises `ValueError`."""
    s = str(text).strip().replace(" ", "")
    units = (("tib", 2**40), ("tb", 2**40), ("gib", GiB), ("gb", GiB), ("mib", 2**20), ("mb", 2**20), ("t", 2**40),
             ("g", GiB), ("m", 2**20))
    scale = GiB
    for suffix, size in units:
        if s.lower().endswith(suffix):
            s, scale = s[: -len(suffix)], size
            break
    try:
        value = float(s)
    except ValueError:
        raise ValueError(f"{text!r} is not a memory size (e.g. 24GB, 80GiB, 512MiB)") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{text!r} is not a memory size > 0 (e.g. 24GB)")
    return int(value * scale)


def _weights(shape: ModelShape, s: MemorySettings, label: str) -> MemoryPart:
    n, other = shape.linear_params, shape.other_params
    if not s.load_in_4bit:
        return MemoryPart(label, (n + other) * s.weight_bytes, "always",
                          f"= {n + other:,} parameters × {s.weight_bytes} B")
    absmax = -(-n // NF4_BLOCK)
    quant = n // 2 + (absmax + -(-absmax // NF4_NESTED_BLOCK) * 4 if s.double_quant else absmax * 4)
    scales = (f"{absmax:,} absmax × 1 B + {-(-absmax // NF4_NESTED_BLOCK):,} × 4 B (double quant)" if s.double_quant
              else f"{absmax:,} absmax × 4 B")
    return MemoryPart(label, quant + other * s.weight_bytes, "always",
                      f"= {n:,} linear × 0.5 B (NF4) + {scales} + {other:,} others × {s.weight_bytes} B")


def _adapter_params(shape: ModelShape, s: MemorySettings) -> int:
    lin = shape.linear_shapes()
    return shape.num_hidden_layers * sum(s.lora_r * (lin[t][0] + lin[t][1]) for t in s.targets())


def _saved_params(shape: ModelShape, s: MemorySettings) -> int:
    """Parameters of the ``modules_to_save`` copies PEFT trains in full: the LM head and the embeddings, V × h each."""
    return sum(shape.vocab_size * shape.hidden_size for name in s.modules_to_save if name in ("lm_head", "embed_tokens"))


def _activations(shape: ModelShape, s: MemorySettings) -> tuple[int, str]:
    """Tensors one micro-batch keeps for backward [bytes]; see docs/quantifiers.md for each term."""
    h, a, i, d, L, c = shape.hidden_size, shape.num_attention_heads, shape.intermediate_size, shape.d, \
        shape.num_hidden_layers, s.compute_bytes
    tokens, S = s.micro_batch_size * s.sequence_length, s.sequence_length
    # per token per layer: the two RMSNorm inputs in float32; their outputs; q, and K and V repeated to every head;
    # the attention output and its contiguous copy; gate, silu(gate), up and their product; the logsumexp
    layer = 2 * h * 4 + (2 * h + 3 * a * d + 2 * a * d + 4 * i) * c + a * 4
    lora = 0
    if s.use_peft:
        lin, copies = shape.linear_shapes(), s.adapter_bytes != c or s.lora_dropout > 0
        for t in s.targets():  # lora_A's input (a cast or dropout copy), dropout's mask, lora_B's input
            lora += (lin[t][0] * s.adapter_bytes if copies else 0) + (lin[t][0] if s.lora_dropout > 0 else 0) \
                + s.lora_r * s.adapter_bytes
    eager = a * S * 2 * c if s.attention == "eager" else 0  # the a × S probabilities (and dropout's output) per token
    per_layer = layer + lora + eager
    mask = s.micro_batch_size * S * S  # the boolean 4-D attention mask, shared by the layers
    if s.gradient_checkpointing:
        total = L * tokens * h * c + tokens * per_layer + mask
        return total, (f"= {L} layers × {tokens:,} tokens × {h} × {c} B (layer inputs) + one layer recomputed "
                       f"({tokens:,} × {per_layer:,} B) + mask {s.micro_batch_size} × {S}² B")
    total = L * tokens * per_layer + mask
    return total, f"= {L} layers × {tokens:,} tokens ({s.micro_batch_size} × {S}) × {per_layer:,} B + mask"


def _logprob_buffers(shape: ModelShape, s: MemorySettings) -> tuple[int, str]:
    """TRL's fused LM head (``trl/kernels/chunked_logprob.py``): the backward's peak [bytes]."""
    c, h, V = s.compute_bytes, shape.hidden_size, shape.vocab_size
    scored = s.micro_batch_size * (s.max_completion_length if s.compact_head else s.sequence_length - 1)
    n, cols = min(scored, TOKEN_CHUNK_SIZE), min(V, VOCAB_CHUNK_SIZE)
    tile = n * VOCAB_CHUNK_SIZE * c  # mm_buf, allocated at the full chunk width
    # the backward's torch fold (no Triton) keeps 7 float32 tiles alive at once (y, z, log p, p, grad and the two
    # products of the log-prob gradient) and the boolean target mask; the forward's fold fewer
    temporaries = 0 if s.compact_head else n * cols * (7 * 4 + 1)
    grad_hidden = scored * h * 4  # float32 accumulator, plus the hidden states it returns in the compute dtype
    total = tile + temporaries + grad_hidden + scored * h * c
    temp = "" if s.compact_head else f" + backward temporaries {n:,} × {cols:,} × (7 × 4 + 1) B"
    return total, (f"= tile {n:,} × {VOCAB_CHUNK_SIZE:,} × {c} B{temp} + grad of {scored:,} scored tokens × {h} × "
                   f"({4} + {c}) B")


def forecast_memory(shape: ModelShape, s: MemorySettings, device_bytes: int | None = None) -> MemoryForecast:
    """Forecast the memory of one device, by part (``device_bytes`` is needed only for colocated vLLM's share)."""
    parts = [_weights(shape, s, "weights")]
    if s.use_peft:
        n, saved = _adapter_params(shape, s), _saved_params(shape, s)
        b = s.adapter_bytes
        copies = f" + {saved:,} of modules_to_save copies" if saved else ""
        parts.append(MemoryPart("adapter + grad + AdamW", (n + saved) * b * 4, "always",
                                f"= ({n:,} LoRA parameters (r {s.lora_r}, {len(s.targets())} modules × "
                                f"{shape.num_hidden_layers} layers){copies}) × {b} B × 4 (weight, gradient, 2 Adam "
                                "moments)"))
    else:
        n, b = shape.num_parameters, s.weight_bytes
        parts.append(MemoryPart("grad + AdamW", n * b * 3, "always",
                                f"= {n:,} parameters × {b} B × 3 (gradient, 2 Adam moments)"))
    if s.beta > 0 and not s.use_peft:
        ref = _weights(shape, s, "reference model")
        parts.append(dataclasses.replace(ref, formula=f"beta {s.beta:g} > 0 without an adapter: the weights again"))
    L, k, d, c, G = shape.num_hidden_layers, shape.num_key_value_heads, shape.d, s.compute_bytes, s.generation_batch
    if s.generation_backend == "transformers":
        kv = 2 * L * k * d * c * G * s.sequence_length
        parts.append(MemoryPart("KV cache", kv, "generation", f"= 2 × {L} layers × {k} KV heads × {d} × {c} B × {G} "
                                f"completions × {s.sequence_length} tokens"))
        logits = 2 * G * shape.vocab_size * 4
        parts.append(MemoryPart("generation logits", logits, "generation",
                                f"= {G} completions × {shape.vocab_size:,} vocab × 4 B × 2 (last logits, probabilities)"))
    elif s.generation_backend == "vllm_colocate":
        share = int(s.vllm_gpu_memory_utilization * (device_bytes or 0))
        parts.append(MemoryPart("vLLM (colocate)", share, "always",
                                f"= vllm_gpu_memory_utilization {s.vllm_gpu_memory_utilization} × device memory"))
    act, formula = _activations(shape, s)
    parts.append(MemoryPart("activations" + (" (checkpointed)" if s.gradient_checkpointing else ""), act,
                            "training", formula))
    buf, formula = _logprob_buffers(shape, s)
    parts.append(MemoryPart("log-prob buffers", buf, "training", formula))
    return MemoryForecast(tuple(parts))


def _divisors(n: int) -> list[int]:
    return [x for x in range(1, n + 1) if n % x == 0]


def memory_fix(shape: ModelShape, s: MemorySettings, device_bytes: int, completions_per_device: int,
               num_generations: int, world_size: int = 1) -> str | None:
    """What to lower first, and to what, so that the forecast fits ``device_bytes``; None when it fits already.

    The order: the phase that sets the peak first. Training: gradient_checkpointing on (if off), then the largest
    ``micro_batch_size`` dividing ``completions_per_device`` that fits (prompts_per_step stays), then
    ``max_completion_length``. Generation: the largest ``prompts_per_step`` that fits (the generation batch is one
    step's completions), then ``max_completion_length``. Weights that do not fit alone: 4-bit.
    """
    def fits(**change) -> bool:
        return forecast_memory(shape, dataclasses.replace(s, **change), device_bytes).peak_bytes <= device_bytes

    if fits():
        return None
    f = forecast_memory(shape, s, device_bytes)
    if f.phase_bytes("always") > device_bytes:
        if not s.load_in_4bit and fits(load_in_4bit=True, double_quant=True, use_peft=True):
            return "load_in_4bit: true with use_peft: true (QLoRA): the weights and optimizer state alone do not fit"
        return "a device with more memory: the weights and optimizer state alone do not fit"
    micro = s.micro_batch_size
    if f.peak_phase == "training":
        if not s.gradient_checkpointing and fits(gradient_checkpointing=True):
            return "gradient_checkpointing: true (TRL's default)"
        fit = [m for m in _divisors(completions_per_device) if m < micro and fits(micro_batch_size=m)]
        if fit:
            return f"micro_batch_size: {fit[-1]} (from {micro}; gradient accumulation grows, prompts_per_step stays)"
        micro = 1  # not enough alone: the smallest micro-batch with a shorter completion
    else:
        fit = [p for p in range(s.generation_batch // num_generations - 1, 0, -1)
               if (p * num_generations) % world_size == 0 and fits(generation_batch=p * num_generations)]
        if fit:
            return (f"prompts_per_step: {fit[0] * world_size} (from {s.generation_batch * world_size // num_generations}"
                    f"; the KV cache of one generation batch holds every completion of a step)")
    lengths = [n for n in range(s.max_completion_length - 1, 0, -1) if fits(micro_batch_size=micro,
                                                                            max_completion_length=n)]
    if lengths:
        extra = "" if micro == s.micro_batch_size else f" with micro_batch_size: {micro}"
        return f"max_completion_length: {_round_down(lengths[0])} (from {s.max_completion_length}){extra}"
    return "a device with more memory, or shorter prompts (max_prompt_length)"


def _round_down(n: int) -> int:
    """``n`` rounded down to a multiple of 64 (16 below 128), at least 1: a length a user would write."""
    step = 64 if n >= 128 else 16
    return max(n - n % step, 1) if n >= step else n
