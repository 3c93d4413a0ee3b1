"""Which checkpoint a resume uses, and whether its saved plan allows it (no trainer import).

Resume compatibility lives here, in one place: :data:`RESUME_SAFE_FIELDS`, :func:`check_resume_compatible` (a saved
plan against the new one) and :func:`check_checkpoint_plan` (a checkpoint folder against the new plan), called once
per run before any model loads (the recipe) or when training starts (`GRPOExtTrainer.train`, for library users).

A checkpoint is *complete* when transformers wrote its ``trainer_state.json``, which happens last in
`Trainer._save_checkpoint`: a folder killed mid-save lacks it and is never picked by ``resume_from_checkpoint:
last``.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path

from ..config.checks import resumes
from ..models.source import ADAPTER_CONFIG_FILE, LORA_FIELDS, lora_differences, resolve_model_source
from ..plan import QuantityError, RunPlan

PLAN_FILE = "run_plan.json"
ZERO_VARIANCE_STATE_FILE = "zero_variance_state.json"
SETTINGS_FILE = "resume_settings.json"
#: The optimizer state a checkpoint may hold: DDP's, DeepSpeed's (behind its `latest` file), FSDP's (full or sharded).
OPTIMIZER_STATE = ("optimizer.pt", "latest", "optimizer.bin", "optimizer_0")
#: Settings a resumed run takes from its checkpoint whatever the config says: transformers restores the optimizer's
#: param groups (learning rate, betas, ε, weight decay) and the scheduler's base rates, so a new value would be ignored
#: or mixed with the old one (a new lr_scheduler_type over the old base rate). Saved in :data:`SETTINGS_FILE`.
RESUME_FIXED_FIELDS = ("learning_rate", "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_steps", "weight_decay",
                       "adam_beta1", "adam_beta2", "adam_epsilon", "optim", "optim_args")
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The ``checkpoint-N`` folder of ``output_dir`` with the largest N that holds ``trainer_state.json``, or None."""
    root = Path(output_dir)
    if not root.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _CHECKPOINT.match(p.name)) and p.is_dir()]
    for _, path in sorted(found, reverse=True):
        if (path / "trainer_state.json").is_file():
            return str(path)
    return None


def resolve_resume_checkpoint(resume_from_checkpoint, output_dir: str) -> str | None:
    """Map ``resume_from_checkpoint`` (None/False, True, ``"last"`` or a path) to a checkpoint folder or None.

    Raises:
        ValueError: ``True``/``"last"`` with no complete checkpoint in ``output_dir``, or a path that is not a
            folder holding ``trainer_state.json``; the message says what to do instead.
    """
    if not resumes(resume_from_checkpoint):
        return None
    if resume_from_checkpoint is True or str(resume_from_checkpoint).lower() in ("last", "true"):
        checkpoint = last_complete_checkpoint(output_dir)
        if checkpoint is None:
            raise ValueError(
                f"resume_from_checkpoint={resume_from_checkpoint!r}, but {output_dir} holds no complete checkpoint-* "
                "folder (one with trainer_state.json). Start without it, or point it at a checkpoint folder."
            )
        return checkpoint
    path = Path(resume_from_checkpoint)
    if not (path / "trainer_state.json").is_file():
        raise ValueError(
            f"resume_from_checkpoint={str(path)!r} is not a complete checkpoint folder (no trainer_state.json). "
            f"Use resume_from_checkpoint: last to take the newest complete one in {output_dir}."
        )
    return str(path)


#: The fixes :func:`check_output_dir` offers, in the words of the command line (the recipe) and of Python.
OUTPUT_DIR_FIXES = {
    "command line": "Resume it with --resume_from_checkpoint last, choose another --output_dir, or delete the folder.",
    "python": "To continue it instead: trainer.train(resume_from_checkpoint=True); to keep it: another output_dir; "
              "trainer.train(overwrite_output_dir=True) starts over without this warning.",
}
#: The same for a run that reached its last step (nothing to resume).
FINISHED_OUTPUT_DIR_FIXES = {
    "command line": "Choose another --output_dir (with --model_name_or_path {dir} to continue its adapter), pass "
                    "--overwrite_output_dir true to start over in it, or delete the folder.",
    "python": "To keep it: another output_dir (with model_name_or_path={dir!r} to continue its adapter); "
              "trainer.train(overwrite_output_dir=True) starts over without this warning.",
}


def check_output_dir(output_dir: str | os.PathLike, resuming: bool, fixes: str = "command line") -> None:
    """Refuse to start a new run in an ``output_dir`` that holds checkpoints of another: they would be overwritten.
    In Python (``fixes="python"``) a warning instead: a TRL script run twice overwrites its run, as with
    `trl.GRPOTrainer`.

    Args:
        output_dir (`str` or `os.PathLike`): the run's output folder (may not exist yet).
        resuming (`bool`): the run resumes (or was told to overwrite): nothing is refused but a file.
        fixes (`str`, defaults to ``"command line"``): a key of :data:`OUTPUT_DIR_FIXES`, the wording of the fix.

    Raises:
        ValueError: ``output_dir`` is a file, or (command line) holds a complete ``checkpoint-*`` folder and
            ``resuming`` is False; the message offers resuming (for a finished run: continuing its adapter), another
            ``output_dir``, starting over, or deleting the old run.
    """
    root = Path(output_dir)
    if root.exists() and not root.is_dir():
        raise ValueError(f"output_dir={str(root)!r} is a file, not a directory. Choose another output_dir.")
    newest = last_complete_checkpoint(root)
    if newest is None or resuming:
        return
    step, last = checkpoint_steps(newest)
    finished = step is not None and last and step >= last  # resuming it is refused too
    held = f"a finished run ({Path(newest).name}: step {step} of {last})" if finished else f"a run ({Path(newest).name})"
    fix = FINISHED_OUTPUT_DIR_FIXES[fixes].format(dir=str(root)) if finished else OUTPUT_DIR_FIXES[fixes]
    if fixes == "python":
        warnings.warn(f"output_dir={str(root)!r} already holds {held}; this new run overwrites it, as "
                      f"trl.GRPOTrainer does. {fix}", UserWarning, stacklevel=3)
        return
    raise ValueError(f"output_dir={str(root)!r} already holds {held}; starting a new one would overwrite it. {fix}")


def checkpoint_steps(checkpoint: str) -> tuple[int | None, int | None]:
    """``(global_step, max_steps)`` of a checkpoint's ``trainer_state.json``; None where unreadable."""
    try:
        state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return None, None
    if not isinstance(state, dict):
        return None, None
    step, last = state.get("global_step"), state.get("max_steps")
    return (step if isinstance(step, int) else None), (last if isinstance(last, int) else None)


#: The key `GRPOExtTrainer.train` adds to a resumed run's metrics (``train_results.json``): the checkpoint's
#: ``global_step`` (None for a run that did not resume). transformers' ``train_runtime``, ``train_loss`` and
#: ``train_*_per_second`` then cover the steps after it only.
RESUMED_FROM_STEP = "resumed_from_step"


#: Plan fields that may differ on resume: they change how the same steps are computed (batch split across devices
#: and micro-batches, the completion length cap, or the label of the stop rule), not which prompts a step sees, the
#: number of steps, nor the stop point. Every other field must be equal.
RESUME_SAFE_FIELDS = frozenset({
    "world_size", "micro_batch_size", "gradient_accumulation_steps", "steps_per_generation",
    "max_completion_length", "token_budget", "token_budget_total", "stop_semantics",
})


def check_resume_compatible(saved: dict, plan: RunPlan) -> None:
    """Refuse to resume when the quantities that decide the data order, the step count or the stop point changed.

    Args:
        saved (`dict`): the plan saved with the checkpoint (:meth:`RunPlan.to_dict`).
        plan (`RunPlan`): the plan of the resumed run.

    Differences in :data:`RESUME_SAFE_FIELDS` (e.g. a new micro_batch_size or number of devices with the same
    prompts_per_step) are allowed and explained with a ``UserWarning``: transformers skips ``global_step`` optimizer
    steps of data, and every step still sees the same prompts. Any other difference (prompts_per_step,
    num_generations, dataset_size, steps_per_epoch, a limit, total_steps, ...) would silently move the learning-rate
    schedule, the data skipped on resume, or the stop point.

    Raises:
        QuantityError: listing every unsafe difference ("prompts_per_step: 4 in the checkpoint, 8 now") and the fix.
    """
    now = plan.to_dict()
    unsafe, safe = [], []
    for key, value in now.items():
        if key not in saved:
            unsafe.append(f"{key}: missing in the checkpoint, {value} now")
        elif saved[key] != value:
            (safe if key in RESUME_SAFE_FIELDS else unsafe).append(f"{key}: {saved[key]} in the checkpoint, {value} now")
    if unsafe:
        raise QuantityError(
            "cannot resume: the run's quantities differ from the checkpoint's plan (" + "; ".join(unsafe) + "); "
            "resume with the original config, or start a new output_dir (load the checkpoint as the model)")
    if safe:
        warnings.warn("resuming with changes that keep the data order, step count and stop point: " + "; ".join(safe),
                      UserWarning, stacklevel=2)


class CheckedCheckpoint(str):
    """A checkpoint folder (its path, a `str`) whose saved plan was checked against :attr:`plan`.

    Returned by :func:`check_checkpoint_plan`; `GRPOExtTrainer.train` takes it as ``resume_from_checkpoint`` and does
    not check it again when its plan is the trainer's (the recipe checks before any model loads, so the check runs
    once per run).
    """

    plan: RunPlan

    def __new__(cls, path: str, plan: RunPlan) -> CheckedCheckpoint:
        checked = super().__new__(cls, path)
        checked.plan = plan
        return checked


def filter_settings(zero_variance, seed: int | None = None) -> dict:
    """The settings that decide which prompts a step trains, as saved in every checkpoint's
    ``zero_variance_state.json``: the filter (skip's decisions, resample's extra prompts), skip's p, what counts as a
    uniform group under skip or resample (``zero_variance_tolerance``, ``zero_variance_reward``: skip's streaks and
    resample's rounds follow it) and the run's ``seed`` (the sampler's order of every epoch; a resumed run's random
    state is the checkpoint's whatever the seed). ``zero_variance``: a `ZeroVarianceSettings` (``resolved.zero_variance``);
    ``seed`` None: not saved or compared. A key a checkpoint of an earlier version lacks is not compared."""
    mode = zero_variance.zero_variance_filter
    selects = mode in ("skip", "resample")
    return {"zero_variance_filter": mode,
            "skip_exploration_probability": zero_variance.skip_exploration_probability if mode == "skip" else None,
            "zero_variance_tolerance": zero_variance.zero_variance_tolerance if selects else None,
            "zero_variance_reward": zero_variance.zero_variance_reward if selects else None,
            **({} if seed is None else {"seed": seed})}


def check_filter_unchanged(checkpoint: str, settings: dict) -> None:
    """Refuse (`QuantityError`) resuming ``checkpoint`` with other `filter_settings` than it was saved with.

    A checkpoint of an earlier version holds no settings: its filter is read from its state (a prompt history: skip;
    a resample cursor: resample; no state file: neither, i.e. mask or off)."""
    path = Path(checkpoint) / ZERO_VARIANCE_STATE_FILE
    if path.is_file():
        state = json.loads(path.read_text())
        saved = state.get("settings") or {"zero_variance_filter": "skip" if "prompt_history" in state else "resample"}
    elif settings["zero_variance_filter"] in ("skip", "resample"):
        saved = {"zero_variance_filter": "mask or off"}
    else:
        return
    changed = [f"{key}: {saved[key]!r} in the checkpoint, {value!r} now" for key, value in settings.items()
               if key in saved and saved[key] != value]
    if changed:
        raise QuantityError(
            f"cannot resume {checkpoint}: {'; '.join(changed)}. These settings decide which prompts each step trains "
            "(the sampler's order, skip's decisions, resample's extra prompts), so the resumed run would not continue "
            "the checkpoint's. Fix: resume with the checkpoint's settings, or start a new output_dir (load the "
            "checkpoint as the model).")


def resume_settings(args, lora: dict | None = None) -> dict:
    """What :func:`check_settings_unchanged` compares, saved with each checkpoint: ``args``'
    :data:`RESUME_FIXED_FIELDS`, the engine that writes the optimizer state (DeepSpeed's ``global_step*/``, FSDP's
    ``optimizer_0/`` and DDP's ``optimizer.pt`` are read by their own engine only) and ``lora`` (the run's
    `models.source.LORA_FIELDS` by trl.ModelConfig's names; None: no adapter, or a continued one, which keeps its
    own)."""
    from ..config.engines import resolve_engine

    engine = resolve_engine(vars(args))
    kind = {"single": "ddp", "deepspeed": f"deepspeed ZeRO-{engine.zero_stage}",
            "fsdp": f"fsdp{engine.fsdp_version or ''}"}.get(engine.kind, engine.kind)
    values = {name: getattr(args, name, None) for name in RESUME_FIXED_FIELDS}
    plain = {name: None if value in ({}, "", []) else getattr(value, "value", value)  # enums as their values;
             for name, value in values.items()}  # `--lr_scheduler_kwargs '{}'` is no change from unset
    settings = {**plain, "engine": kind, "lora": lora}
    return json.loads(json.dumps(settings, default=lambda v: sorted(v) if isinstance(v, (set, frozenset)) else str(v)))


def peft_lora_settings(model) -> dict | None:
    """`models.source.LORA_FIELDS` of ``model``'s default PEFT adapter by trl.ModelConfig's names; None without one."""
    config = (getattr(model, "peft_config", None) or {}).get("default")
    return None if config is None else {field: getattr(config, key, None) for field, key in LORA_FIELDS.items()}


def config_lora_settings(model_args) -> dict | None:
    """`models.source.LORA_FIELDS` of ``model_args`` (trl.ModelConfig); None without ``use_peft`` or for a continued
    adapter (``model_name_or_path`` an adapter folder: it keeps its own)."""
    if not model_args.use_peft or resolve_model_source(model_args.model_name_or_path).continued:
        return None
    return {field: getattr(model_args, field, None) for field in LORA_FIELDS}


class ResumeSettingsError(QuantityError):
    """A checkpoint resumed with other optimizer, engine or adapter settings (`check_settings_unchanged`)."""


def check_settings_unchanged(checkpoint: str, settings: dict) -> None:
    """Refuse (`ResumeSettingsError`) resuming ``checkpoint`` with other `resume_settings` than it was saved with (its
    :data:`SETTINGS_FILE`; a checkpoint without one is not judged) or another adapter than its adapter_config.json."""
    saved_path, adapter = Path(checkpoint) / SETTINGS_FILE, Path(checkpoint) / ADAPTER_CONFIG_FILE
    saved = json.loads(saved_path.read_text()) if saved_path.is_file() else {}
    if not any((Path(checkpoint) / name).exists() for name in OPTIMIZER_STATE):  # save_only_model: nothing restored
        saved = {}
    changed = [f"{key}: {saved[key]!r} in the checkpoint, {value!r} now" for key, value in settings.items()
               if key != "lora" and key in saved and saved[key] != value]
    lora = settings.get("lora")
    if lora and adapter.is_file():  # (a new lora_dropout takes effect: the modules are built anew)
        lora = {**lora, "lora_modules_to_save": lora.get("lora_modules_to_save") or []}  # None: no module saved
        for field, theirs, mine in lora_differences(lora, json.loads(adapter.read_text()), skip=("lora_dropout",)):
            shown = [v if not isinstance(v, list) or len(v) <= 8 else f"{len(v)} modules ({', '.join(v[:3])}, ...)"
                     for v in (theirs, mine)]
            changed.append(f"{field}: {shown[0]!r} in the checkpoint, {shown[1]!r} now")
    if changed:
        raise ResumeSettingsError(
            f"cannot resume {checkpoint}: {'; '.join(changed)}. A resumed run takes its optimizer and schedule state, "
            "the engine's files and the adapter's shape from the checkpoint, so the new values would be ignored or "
            "fail after the model loads. Fix: resume with the checkpoint's values, or start a new output_dir with "
            "model_name_or_path set to the checkpoint (its adapter trains on under the new optimizer settings).")


def check_history_prompts(checkpoint: str, prompt_keys) -> None:
    """Refuse (`QuantityError`) resuming a skip run's ``checkpoint`` whose prompt history holds prompts the run's
    training set lacks (another dataset, split, seed or system prompt: every prompt it recorded was a training prompt).
    ``prompt_keys``: () -> the `prompt_key` of every training prompt (called only for a skip checkpoint)."""
    path = Path(checkpoint) / ZERO_VARIANCE_STATE_FILE
    history = json.loads(path.read_text()).get("prompt_history") if path.is_file() else None
    recorded = {int(key) for key in ((history or {}).get("streaks") or {})}
    foreign = recorded - set(prompt_keys()) if recorded else set()
    if foreign:
        raise QuantityError(
            f"cannot resume {checkpoint}: {len(foreign)} of the {len(recorded)} prompts its skip history recorded are "
            "not among this run's training prompts, so the dataset differs from the one the checkpoint trained on "
            "(dataset_name, its split, embedded_seed, system_prompt or chat_template). Fix: resume with the "
            "checkpoint's dataset settings, or start a new output_dir (load the checkpoint as the model).")


def check_checkpoint_plan(checkpoint: str | None, plan: RunPlan, zero_variance: dict | None = None,
                          prompt_keys=None, settings: dict | None = None) -> CheckedCheckpoint | None:
    """Refuse (`QuantityError`) a checkpoint whose saved plan differs from ``plan`` (see `check_resume_compatible`),
    or, given ``zero_variance`` (`filter_settings`), whose filter does (`check_filter_unchanged`), or, given
    ``prompt_keys`` (`check_history_prompts`), whose skip history is of other prompts, or, given ``settings``
    (`resume_settings`), whose optimizer, engine or adapter does (`check_settings_unchanged`).

    Returns:
        `CheckedCheckpoint` or `None`: the checkpoint, marked as checked against ``plan`` (None when ``checkpoint``
        is None). A checkpoint without ``run_plan.json`` (saved by another tool) is not checked.
    """
    if checkpoint is None:
        return None
    saved = Path(checkpoint) / PLAN_FILE
    if saved.is_file():
        check_resume_compatible(json.loads(saved.read_text()), plan)
    if zero_variance is not None:
        check_filter_unchanged(checkpoint, zero_variance)
    if prompt_keys is not None:
        check_history_prompts(checkpoint, prompt_keys)
    if settings is not None:
        check_settings_unchanged(checkpoint, settings)
    check_checkpoint_unfinished(checkpoint, plan)
    return CheckedCheckpoint(checkpoint, plan)


def check_checkpoint_unfinished(checkpoint: str, plan: RunPlan) -> None:
    """Refuse (`RunComplete`, a `QuantityError`) resuming a checkpoint that already holds the plan's last step (the
    recipe answers it by writing the outputs the run's end left out, and exits 0).

    transformers 5.24 does not stop there: resumed at ``global_step == max_steps`` it trains one more step and saves
    ``checkpoint-<max_steps + 1>`` (measured with plain TRL on the tiny model: a 2-step run resumed with
    ``resume_from_checkpoint=True`` ends at step 3), past the plan the run was sized for. A checkpoint without
    ``trainer_state.json`` is not judged.
    """
    step, _ = checkpoint_steps(checkpoint)
    if step is not None and step >= plan.total_steps:
        raise RunComplete(
            checkpoint, step, plan.total_steps,
            f"resume_from_checkpoint: {checkpoint} already holds step {step} of the plan's {plan.total_steps}: the run "
            "is complete, and resuming it would train a step past its plan (transformers runs one more). Fix: use "
            "the adapter it saved; to train further, start a new output_dir with model_name_or_path set to that "
            "checkpoint (its adapter is continued), or set overwrite_output_dir: true to start over.")


class RunComplete(QuantityError):
    """The checkpoint to resume holds the plan's last step (`check_checkpoint_unfinished`). ``checkpoint``, ``step``,
    ``total_steps``: what the recipe needs to finish the outputs instead (`training.finished`)."""

    def __init__(self, checkpoint: str, step: int, total_steps: int, message: str):
        super().__init__(message)
        self.checkpoint, self.step, self.total_steps = checkpoint, step, total_steps


def write_json(directory: str | os.PathLike, name: str, values: dict) -> None:
    """Write ``values`` as ``directory/name`` (JSON, indented)."""
    Path(directory, name).write_text(json.dumps(values, indent=2))


def write_plan(plan: RunPlan, directory: str) -> None:
    """Save ``plan`` as ``directory/run_plan.json`` (`RunPlan.to_json`; `RunPlan.read` rebuilds it)."""
    with open(os.path.join(directory, PLAN_FILE), "w") as f:
        f.write(plan.to_json())
