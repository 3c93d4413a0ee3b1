"""Every private or internal TRL / transformers name trl_grpo_ext relies on, in one place (TRL 1.16).

TRL has no public extension points for what this package adds, so `GRPOExtTrainer` overrides a few private methods
(each calls ``super()`` and post-processes) and reads a few private attributes. They are listed in `SURFACE`;
`tests/test_trl_contract.py` checks every entry against the installed TRL (the name exists, with the parameters
given), and a scan there fails if such a name is used anywhere else in the package or the recipes.
Method *definitions* that override a private method stay on the trainer (TRL calls them by name) and are listed in
`OVERRIDDEN_PRIVATE_METHODS`; every other touch goes through a function below.

Metrics: TRL 1.16 has no public way to add a logged metric from a trainer subclass (``log_metric``, the reward
functions' hook, is ``GRPOTrainer._log_metric``: it averages across processes and flushes only inside the
generation step), so metrics are appended to ``GRPOTrainer._metrics[mode]``, here only.

Importing this module imports neither torch nor TRL (the plan command imports it too); TRL is imported on first use.
Upgrading TRL: run tests/test_trl_contract.py, adapt this module (and the overrides it names), update the pin.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TouchPoint:
    """One private or internal name of TRL / transformers that we override, call or read.

    Attributes:
        owner (`str`): where it lives: ``"trl.GRPOTrainer"``, ``"transformers.Trainer"``, ``"trl.trainer.utils"``.
        name (`str`): the attribute, method, function or class name.
        kind (`str`): ``"override"`` (a method our trainer defines under TRL's name; public ones are pinned too),
            ``"attribute"`` (an instance attribute we read), ``"function"`` / ``"class"`` (imported from an internal
            module), ``"module"`` (an internal module).
        params (`tuple[str, ...]`, *optional*): the expected parameters of a method or function (``self`` included),
            of a class's ``__init__``; None for attributes and modules.
        used_by (`str`): which of our code depends on it (named in contract failures).
    """

    owner: str
    name: str
    kind: str
    params: tuple[str, ...] | None
    used_by: str


SURFACE: tuple[TouchPoint, ...] = (
    TouchPoint("trl.GRPOTrainer", "_calculate_rewards", "override",
               ("self", "inputs", "prompts", "completions", "completion_ids_list"),
               "trainer.py GRPOExtTrainer._calculate_rewards (keeps the gathered reward tensor)"),
    TouchPoint("trl.GRPOTrainer", "_generate_and_score_completions", "override", ("self", "inputs"),
               "trainer.py GRPOExtTrainer._generate_and_score_completions, and zero_variance.filter's resample rounds "
               "(super() called with dataset rows)"),
    TouchPoint("trl.GRPOTrainer", "_generate_single_turn", "override",
               ("self", "prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images"),
               "trainer.py GRPOExtTrainer._generate_single_turn (merge_adapter_for_generation)"),
    TouchPoint("trl.GRPOTrainer", "_compute_loss", "override", ("self", "model", "inputs"),
               "trainer.py GRPOExtTrainer._compute_loss (zero-variance loss rescale)"),
    TouchPoint("trl.GRPOTrainer", "_get_per_token_logps_and_entropies", "override",
               ("self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy",
                "compute_aux_loss", "pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask",
                "spatial_shapes", "num_tiles", "image_sizes", "token_type_ids", "mm_token_type_ids",
                "image_position_ids"),
               "trainer.py GRPOExtTrainer._get_per_token_logps_and_entropies (zero_variance_signal: token advantages "
               "from the loss forward's entropies)"),
    TouchPoint("trl.GRPOTrainer", "_get_train_sampler", "override", ("self", "dataset"),
               "trainer.py GRPOExtTrainer._get_train_sampler (EpochRepeatSampler: resume in any epoch)"),
    TouchPoint("trl.GRPOTrainer", "training_step", "override", ("self", "model", "inputs", "num_items_in_batch"),
               "trainer.py GRPOExtTrainer.training_step (skip decision at the end of an accumulation window)"),
    TouchPoint("transformers.Trainer", "set_initial_training_values", "override", ("self", "args", "dataloader"),
               "trainer.py GRPOExtTrainer.set_initial_training_values (stop rule: max_steps = plan.total_steps)"),
    TouchPoint("transformers.Trainer", "create_optimizer", "override", ("self", "model"),
               "trainer.py GRPOExtTrainer.create_optimizer (lost-update hooks, guarded optimizer.step)"),
    TouchPoint("transformers.Trainer", "_load_from_checkpoint", "function", ("self", "resume_from_checkpoint", "model"),
               "_trl_compat.load_checkpoint_weights -> trainer.py GRPOExtTrainer.load_finished (a complete run)"),
    TouchPoint("trl.GRPOTrainer", "_metrics", "attribute", None,
               "_trl_compat.train_metrics: every metric we log (zero_variance/*, advantages/*, adapter/*, vllm/*)"),
    TouchPoint("trl.GRPOTrainer", "_step", "attribute", None,
               "_trl_compat.micro_batches_done -> interrupt.py (stop at a generation-batch boundary)"),
    TouchPoint("trl.GRPOTrainer", "_tokenizer", "attribute", None,
               "_trl_compat.eos_and_pad_ids -> zero_variance.filter (truncation in resample's batch metrics)"),
    TouchPoint("trl.trainer.utils", "get_callable_name", "function", ("func",),
               "_trl_compat.reward_func_name -> trainer.py (reward names, guard names, zero_variance_reward)"),
    TouchPoint("trl.trainer.utils", "get_config_model_id", "function", ("config",),
               "_trl_compat.reward_func_name -> trainer.py (the name of a reward model); default_output_dir -> "
               "training/trainer_args.py (args=None)"),
    TouchPoint("trl.trainer.utils", "nanstd", "function", ("tensor", "dim", "keepdim"),
               "_trl_compat.nanstd -> zero_variance.metrics (TRL's metrics of the batch trained on)"),
    TouchPoint("trl.trainer.utils", "RepeatSampler", "class",
               ("self", "data_source", "mini_repeat_count", "batch_size", "repeat_count", "shuffle", "seed"),
               "_trl_compat.repeat_sampler_class -> sampling.py EpochRepeatSampler, trainer.py _get_train_sampler"),
    TouchPoint("trl.trainer.utils", "create_model_from_path", "function", ("model_id", "architecture", "kwargs"),
               "_trl_compat.create_model -> models.load_continued_model (the base of a continued adapter, loaded as "
               "TRL loads a model id)"),
    TouchPoint("trl.GRPOTrainer", "_get_per_token_logps_and_entropies", "function",
               ("self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy",
                "compute_aux_loss", "pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask",
                "spatial_shapes", "num_tiles", "image_sizes", "token_type_ids", "mm_token_type_ids",
                "image_position_ids"),
               "_trl_compat.per_token_logps -> training.memory_probe (the probe's forward through TRL's fused head)"),
    TouchPoint("trl.scripts", "_hf_argparser", "module", None,
               "_trl_compat.hf_argparser_module; frontdoor.hf_argument_parser (plan's torch-free parsing)"),
)

#: The private methods `GRPOExtTrainer` defines under TRL's names (TRL calls them; each calls ``super()``).
OVERRIDDEN_PRIVATE_METHODS: tuple[str, ...] = tuple(
    point.name for point in SURFACE if point.kind == "override" and point.name.startswith("_")
)
#: Every private name in `SURFACE`: used nowhere but here and in those overrides (scanned by test_trl_contract.py).
PRIVATE_NAMES: frozenset[str] = frozenset(point.name for point in SURFACE if point.name.startswith("_"))


# -- metrics ------------------------------------------------------------------------------------------------------------
def train_metrics(trainer, mode: str = "train") -> dict[str, list[float]]:
    """TRL's metric lists of ``mode``: ``{name: [value, ...]}``, a ``defaultdict(list)``; `GRPOTrainer.log` logs the
    NaN-skipping mean of each list and clears them."""
    return trainer._metrics[mode]


def record_metric(trainer, name: str, value: float, mode: str = "train") -> None:
    """Add one value of metric ``name`` to the next log (averaged with the other values of the interval)."""
    trainer._metrics[mode][name].append(value)


def metric_marks(trainer, mode: str = "train") -> dict[str, int]:
    """How many values each metric holds now (to find the values a later call added)."""
    return {name: len(values) for name, values in trainer._metrics[mode].items()}


# -- trainer state --------------------------------------------------------------------------------------------------
def micro_batches_done(trainer) -> int | None:
    """Micro-batches TRL has run since the process started (``GRPOTrainer._step``); None for a trainer without it."""
    return getattr(trainer, "_step", None)


def per_token_logps(trainer, model, input_ids, attention_mask, logits_to_keep: int):
    """TRL's per-token log-probabilities and entropies of the last ``logits_to_keep`` tokens (its fused LM head), as
    the loss computes them (`GRPOTrainer._get_per_token_logps_and_entropies`): ``(logps, entropies)``, (B, T) each."""
    logps, entropies, _ = trainer._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep,
                                                                     compute_entropy=True)
    return logps, entropies


def eos_and_pad_ids(trainer) -> set[int]:
    """The token ids TRL counts as the end of a completion: its ``eos_token_ids`` and the pad token (TRL's ``_generate``
    marks a completion truncated when its last token is none of them)."""
    return {*trainer.eos_token_ids, trainer._tokenizer.pad_token_id}


# -- trl.trainer.utils --------------------------------------------------------------------------------------------------
def reward_func_name(reward_func) -> str:
    """The name TRL gives a reward function or reward model (`GRPOTrainer.__init__`, ``reward_func_names``)."""
    import torch
    from trl.trainer.utils import get_callable_name, get_config_model_id

    if isinstance(reward_func, torch.nn.Module):
        return get_config_model_id(reward_func.config).split("/")[-1]
    return get_callable_name(reward_func)


def load_checkpoint_weights(trainer, checkpoint: str) -> None:
    """Load a checkpoint's model weights (an adapter's too) into ``trainer.model``, as ``Trainer.train`` does when it
    resumes (``Trainer._load_from_checkpoint``), without training."""
    trainer._load_from_checkpoint(checkpoint)


def default_output_dir(model) -> str:
    """The ``output_dir`` TRL's `GRPOTrainer` gives ``GRPOConfig`` when ``args`` is None: ``<model name>-GRPO``."""
    from trl.trainer.utils import get_config_model_id

    name = model if isinstance(model, str) else get_config_model_id(model.config)
    return f"{name.split('/')[-1]}-GRPO"


def nanstd(tensor, dim: int | None = None, keepdim: bool = False):
    """TRL's NaN-ignoring sample std (``trl.trainer.utils.nanstd``), so that recomputed metrics equal TRL's."""
    from trl.trainer.utils import nanstd as trl_nanstd

    return trl_nanstd(tensor, dim=dim, keepdim=keepdim)


def repeat_sampler_class() -> type:
    """TRL's ``RepeatSampler``, the GRPO train sampler (`sampling.EpochRepeatSampler` subclasses it)."""
    from trl.trainer.utils import RepeatSampler

    return RepeatSampler


def create_model(model_id: str, **kwargs):
    """TRL's ``create_model_from_path``: the model class from the config, dtype names, the CPU/GPU device map."""
    from trl.trainer.utils import create_model_from_path

    return create_model_from_path(model_id, **kwargs)


# -- trl.scripts._hf_argparser ------------------------------------------------------------------------------------------
HF_ARGPARSER_MODULE = "trl.scripts._hf_argparser"


def hf_argparser_path() -> Path | None:
    """The file of TRL's ``HfArgumentParser`` (``trl/scripts/_hf_argparser.py``, standard library only), found without
    importing TRL; None when TRL is not installed. ``sys.modules[HF_ARGPARSER_MODULE]`` holds it once TRL is loaded."""
    if HF_ARGPARSER_MODULE in sys.modules:
        return Path(sys.modules[HF_ARGPARSER_MODULE].__file__)
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "scripts" / "_hf_argparser.py"


def hf_argparser_module():
    """TRL's ``_hf_argparser`` module: TRL's own once TRL is imported, else loaded from :func:`hf_argparser_path`
    (standard library only), so that `plan` skips TRL's import-time package scan; None when TRL is not installed."""
    module = sys.modules.get(HF_ARGPARSER_MODULE) or sys.modules.get("trl_grpo_ext._trl_hf_argparser")
    if module is not None:
        return module
    path = hf_argparser_path()
    if path is None:
        return None
    name = "trl_grpo_ext._trl_hf_argparser"
    file_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(file_spec)
    sys.modules[name] = module
    file_spec.loader.exec_module(module)
    return module
