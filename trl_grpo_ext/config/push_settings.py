"""The recipe's push settings (`HubPushArguments`, parsed beside `GRPOExtConfig`), resolved into `HubPushSettings`,
and their checks before any model loads; `hub.push` pushes (docs/hub.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .checks import RunArgumentError, check_choice

#: Dtypes a merged export can be saved in (``HubPushArguments.merge_dtype``, ``trl-grpo-ext push --merge-dtype``).
MERGE_DTYPES = ("bfloat16", "float16", "float32")
#: What the recipe pushes after training (``HubPushArguments.push_to_hub_mode``): nothing, the adapter, or the merge.
PUSH_MODES = ("none", "adapter", "merged")


def check_push_settings(v, adapter: bool) -> None:
    """The rules ``push_needs_adapter`` (``adapter``: a push needs ``use_peft``) and ``push_needs_repository`` (a
    valid repository id) on ``v``, a `validation.view.RunView`; warns (``v.warn``) where ``push_to_hub``
    and ``push_to_hub_mode`` disagree.

    Raises:
        RunArgumentError: naming the fields and the fix."""
    field_mode, push = v.get("push_to_hub_mode") or "none", v.get("push_to_hub")
    mode = "adapter" if field_mode == "none" and push is True else field_mode  # TRL's push_to_hub: the adapter
    named = f"push_to_hub_mode={mode!r}" if field_mode != "none" else "push_to_hub=True (a push of the adapter)"
    if adapter and mode != "none" and not v.get("use_peft"):
        raise RunArgumentError(
            f"{named} pushes a LoRA adapter (merged: the base merged with it), but use_peft=False trains the whole "
            "model, which the recipe does not push: the push would fail after training. Fix: set use_peft: true, or "
            "push_to_hub_mode: none (and push_to_hub: false) and upload output_dir yourself (upload_folder).")
    if not adapter and mode != "none" and (field_mode == "none" and v.is_set("push_to_hub_mode") or
                                           (v.user or {}).get("push_to_hub") is False):  # `--push_to_hub false`
        v.warn(f"push_to_hub={push} and push_to_hub_mode={field_mode!r} disagree: the run pushes the {mode} after "
               "training. Fix: keep one of them (push_to_hub_mode: none and push_to_hub: false push nothing).")
    repo_field = "hub_repo_id" if v.get("hub_repo_id") else "hub_model_id"
    try:
        check_push_repository("none" if adapter else mode, v.get(repo_field), named, repo_field)
    except ValueError as err:
        raise RunArgumentError(str(err)) from None


def check_push_repository(mode: str, repo_id: str | None, named: str | None = None, field: str = "hub_repo_id") -> None:
    """A push (``mode``: ``push_to_hub_mode``, ``"adapter"`` for TRL's ``push_to_hub``; ``named``: the setting the
    message names) needs ``repo_id``, a valid Hub id (`huggingface_hub.utils.validate_repo_id`).

    Raises:
        ValueError: naming the field, the value and the fix."""
    if mode == "none":
        return
    if not repo_id:
        raise ValueError(f"{named or f'push_to_hub_mode={mode!r}'} needs a repository: set hub_repo_id (or TRL's "
                         "hub_model_id), e.g. --hub_repo_id your-name/your-model.")
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise ValueError(f"{field}={repo_id!r} is not a valid Hub repository id: {err} Fix: e.g. "
                         f"--{field} your-name/your-model.") from None


@dataclass
class HubPushArguments:
    """Where and how the recipe pushes a finished run, once every file is saved locally (docs/configuration.md;
    TRL's ``push_to_hub``, ``hub_model_id``, ``hub_revision``, ``hub_private_repo``, ``hub_token``: read by
    :meth:`resolve`)."""

    push_to_hub_mode: str = field(default="none", metadata={
        "help": "What to push after training: 'none', 'adapter' (LoRA adapter, loads with peft) or 'merged' (adapter "
        "merged into the de-quantized base, plain transformers). TRL's --push_to_hub means 'adapter'.",
        "choices": list(PUSH_MODES)})
    hub_repo_id: str | None = field(default=None, metadata={
        "help": "Hub repository to push to ('user/name'). Falls back to TRL's --hub_model_id."})
    hub_private: bool = field(
        default=True, metadata={"help": "Create the repository private (default). TRL's --hub_private_repo, when set, "
                                "wins."})
    merge_dtype: str = field(
        default="bfloat16", metadata={"help": "Dtype of the merged weights in 'merged' mode.",
                                      "choices": list(MERGE_DTYPES)})
    hub_license: str = field(
        default="apache-2.0", metadata={"help": "License id in the model card (follow the base model's license)."})

    def __post_init__(self):
        check_choice("push_to_hub_mode", self.push_to_hub_mode, PUSH_MODES, error=ValueError)
        check_choice("merge_dtype", self.merge_dtype, MERGE_DTYPES, error=ValueError)

    def resolve(self, training_args=None) -> HubPushSettings:
        """These arguments with TRL's hub fields of ``training_args`` (a `TrainingArguments` or None) as the push's
        settings; sets its ``push_to_hub`` to False (the recipe pushes once, after saving; the Trainer must not).

        Raises:
            ValueError: a push without a (valid) repository."""
        trl_push = bool(getattr(training_args, "push_to_hub", False))
        mode = "adapter" if self.push_to_hub_mode == "none" and trl_push else self.push_to_hub_mode
        if trl_push:
            training_args.push_to_hub = False
        repo_id = self.hub_repo_id or getattr(training_args, "hub_model_id", None)
        check_push_repository(mode, repo_id)
        trl_private = getattr(training_args, "hub_private_repo", None)
        return HubPushSettings(mode=mode, repo_id=repo_id, revision=getattr(training_args, "hub_revision", None),
                               private=self.hub_private if trl_private is None else bool(trl_private),
                               merge_dtype=self.merge_dtype, token=getattr(training_args, "hub_token", None))


@dataclass(frozen=True)
class HubPushSettings:
    """The resolved push of a run (:meth:`HubPushArguments.resolve`); ``token`` is left out of ``repr``."""

    mode: str
    repo_id: str | None
    revision: str | None = None
    private: bool = True
    merge_dtype: str = "bfloat16"
    token: str | None = field(default=None, repr=False)

    @property
    def enabled(self) -> bool:
        return self.mode != "none"
