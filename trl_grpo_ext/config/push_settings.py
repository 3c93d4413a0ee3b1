"""The recipe's push settings (`HubPushArguments`, parsed beside `GRPOExtConfig`), resolved into `HubPushSettings`,
and the checks run on them before any model loads. `hub.push` does the push itself."""

from __future__ import annotations

from dataclasses import dataclass, field

from .checks import RunArgumentError, check_choice

#: Dtypes a merged export can be saved in (``HubPushArguments.merge_dtype``, ``trl-grpo-ext push --merge-dtype``).
MERGE_DTYPES = ("bfloat16", "float16", "float32")
#: What the recipe pushes after training (``HubPushArguments.push_to_hub_mode``): nothing, the adapter, or the merge.
PUSH_MODES = ("none", "adapter", "merged")


def push_mode(push_to_hub_mode: str | None, push_to_hub: bool = False) -> str:
    """What the recipe pushes: ``push_to_hub_mode``, except that TRL's ``push_to_hub: true`` next to ``none`` (or
    unset) pushes the adapter."""
    mode = push_to_hub_mode or "none"
    return "adapter" if mode == "none" and push_to_hub else mode


def check_push_adapter(mode: str, use_peft: bool, named: str | None = None) -> None:
    """The recipe pushes a LoRA adapter or the base merged with it (``mode`` from :func:`push_mode`): a full
    fine-tune (``use_peft`` false) has neither, so the push would fail after training. ``named``: the setting the
    message names (default ``push_to_hub_mode=<mode>``; TRL's ``push_to_hub=True`` where that set the mode).

    Raises:
        ValueError: naming the mode and the fix."""
    if mode != "none" and not use_peft:
        raise ValueError(
            f"{named or f'push_to_hub_mode={mode!r}'} pushes a LoRA adapter (merged: the base merged with it), but "
            "use_peft=False trains the whole model, which the recipe does not push: the push would fail after training. Fix: set "
            "use_peft: true, or push_to_hub_mode: none (and push_to_hub: false) and upload output_dir yourself "
            "(huggingface_hub's upload_folder).")


def check_push_settings(v, adapter: bool) -> None:
    """`check_push_adapter` (``adapter``), else `check_push_repository`, on the run's push settings (``v``: a
    `validation.rules.RunView`; the rules ``push_needs_adapter`` and ``push_needs_repository``).

    Raises:
        RunArgumentError: naming the fields and the fix."""
    field_mode, push = v.get("push_to_hub_mode") or "none", v.get("push_to_hub")
    mode = push_mode(field_mode, push is True)
    named = None if field_mode != "none" else "push_to_hub=True (a push of the adapter)"
    if not adapter and push is True and field_mode == "none" and v.is_set("push_to_hub_mode"):
        raise RunArgumentError("push_to_hub=True pushes the adapter after training, but push_to_hub_mode='none' says "
                               "push nothing. Fix: keep one: push_to_hub_mode: adapter, or push_to_hub: false.")
    if not adapter and mode != "none" and (v.user or {}).get("push_to_hub") is False:  # `--push_to_hub false`
        raise RunArgumentError(f"push_to_hub=False, but push_to_hub_mode={mode!r} pushes after training all the same. "
                               "Fix: set push_to_hub_mode: none to push nothing.")
    try:
        (check_push_adapter(mode, v.get("use_peft"), named) if adapter else
         check_push_repository(mode, v.get("hub_repo_id") or v.get("hub_model_id"), named,
                               "hub_repo_id" if v.get("hub_repo_id") else "hub_model_id", v.get("hub_revision")))
    except ValueError as err:
        raise RunArgumentError(str(err)) from None


def check_push_repository(mode: str, repo_id: str | None, named: str | None = None,
                          field: str = "hub_repo_id", revision: str | None = None) -> None:
    """A push (``mode`` from :func:`push_mode`; ``named`` as in :func:`check_push_adapter`) needs a repository.

    Raises:
        ValueError: ``mode`` is not ``"none"`` and ``repo_id`` (``hub_repo_id``, else TRL's ``hub_model_id``) is
            unset or not a valid Hub id (`huggingface_hub.utils.validate_repo_id`), or ``revision``
            (``hub_revision``) is no valid branch name (`check_revision`)."""
    if mode != "none" and not repo_id:
        raise ValueError(f"{named or f'push_to_hub_mode={mode!r}'} needs a repository: set hub_repo_id (or TRL's "
                         "hub_model_id), e.g. --hub_repo_id your-name/your-model.")
    if mode != "none":  # the push would refuse them after training
        from huggingface_hub.utils import HFValidationError, validate_repo_id

        check_revision(revision, "hub_revision")
        try:
            validate_repo_id(repo_id)
        except HFValidationError as err:
            raise ValueError(f"{field}={repo_id!r} is not a valid Hub repository id: {err} Fix: e.g. "
                             f"--{field} your-name/your-model.") from None


def check_revision(revision: str | None, field: str = "--revision") -> None:
    """A branch name git (and so the Hub) accepts (`git check-ref-format`'s rules), or None for ``main``.

    Raises:
        ValueError: naming ``field``, the value and a fix."""
    bad = revision is not None and (
        not revision.strip() or any(c.isspace() or c in "~^:?*[\\" or ord(c) < 32 for c in revision)
        or ".." in revision or "@{" in revision or revision.startswith(("-", "/", ".")) or revision.endswith(
            ("/", ".", ".lock")) or "//" in revision or "/." in revision)
    if bad:
        raise ValueError(f"{field}={revision!r} is not a valid branch name (no spaces, '..', '~^:?*[\\', leading "
                         "'-', '/' or '.', trailing '/', '.' or '.lock'). Fix: e.g. experiment-1.")



@dataclass
class HubPushArguments:
    r"""
    Where and how the recipe pushes a finished run to the Hugging Face Hub (parsed by TRL's `TrlParser` next to
    `GRPOExtConfig`). The push happens after training, once every file is saved locally; see
    [`trl_grpo_ext.hub.push_run`]. TRL's own `hub_revision` (branch), `hub_model_id` (fallback repo id),
    `hub_private_repo`, `hub_token` and `push_to_hub` are read from the training arguments by [`resolve`].

    Parameters:
        push_to_hub_mode (`str`, *optional*, defaults to `"none"`):
            What to push: `"none"` (nothing), `"adapter"` (the LoRA adapter, loads with peft onto its base) or
            `"merged"` (the adapter merged into the de-quantized base, a plain transformers model). TRL's
            `push_to_hub=True` with this left at `"none"` means `"adapter"`.
        hub_repo_id (`str` or `None`, *optional*, defaults to `None`):
            Target repository, `"user/name"` or `"org/name"`. Falls back to TRL's `hub_model_id`.
        hub_private (`bool`, *optional*, defaults to `True`):
            Create the repository private. TRL's `hub_private_repo`, when set, takes precedence. An existing
            repository keeps its visibility.
        merge_dtype (`str`, *optional*, defaults to `"bfloat16"`):
            Dtype of the merged weights in `"merged"` mode: `"bfloat16"`, `"float16"` or `"float32"`.
        hub_license (`str`, *optional*, defaults to `"apache-2.0"`):
            The license in the model card's metadata (a Hub license id). The default is the license of the shipped
            configs' base models (Qwen2.5, SmolLM2); set your base model's (e.g. `llama3.1`, `other`) for others.
    """

    push_to_hub_mode: str = field(
        default="none",
        metadata={
            "help": "What to push after training: 'none', 'adapter' (LoRA adapter, loads with peft) or 'merged' "
            "(adapter merged into the de-quantized base, plain transformers). TRL's --push_to_hub means 'adapter'.",
            "choices": list(PUSH_MODES),
        },
    )
    hub_repo_id: str | None = field(
        default=None,
        metadata={"help": "Hub repository to push to ('user/name'). Falls back to TRL's --hub_model_id."},
    )
    hub_private: bool = field(
        default=True,
        metadata={"help": "Create the repository private (default). TRL's --hub_private_repo, when set, wins."},
    )
    merge_dtype: str = field(
        default="bfloat16",
        metadata={"help": "Dtype of the merged weights in 'merged' mode.", "choices": list(MERGE_DTYPES)},
    )
    hub_license: str = field(
        default="apache-2.0", metadata={"help": "License id in the model card (follow the base model's license)."}
    )

    def __post_init__(self):
        check_choice("push_to_hub_mode", self.push_to_hub_mode, PUSH_MODES, error=ValueError)
        check_choice("merge_dtype", self.merge_dtype, MERGE_DTYPES, error=ValueError)

    def resolve(self, training_args=None) -> HubPushSettings:
        """Combine these arguments with TRL's hub fields into the settings of the push.

        Args:
            training_args: the run's `GRPOConfig` / `TrainingArguments` (or `None`). Read: `push_to_hub`,
                `hub_model_id`, `hub_revision`, `hub_private_repo`, `hub_token`. When `push_to_hub` is `True` it is
                set to `False` on this object: the recipe pushes after saving, and the Trainer must not push on its
                own (it would create the repo when it starts and push before the card exists).

        Returns:
            :class:`HubPushSettings`.

        Raises:
            ValueError: when a push is asked for but no repository is named.
        """
        trl_push = bool(getattr(training_args, "push_to_hub", False))
        mode = push_mode(self.push_to_hub_mode, trl_push)
        if trl_push:
            training_args.push_to_hub = False
        repo_id = self.hub_repo_id or getattr(training_args, "hub_model_id", None)
        check_push_repository(mode, repo_id)
        trl_private = getattr(training_args, "hub_private_repo", None)
        return HubPushSettings(
            mode=mode,
            repo_id=repo_id,
            revision=getattr(training_args, "hub_revision", None),
            private=self.hub_private if trl_private is None else bool(trl_private),
            merge_dtype=self.merge_dtype,
            token=getattr(training_args, "hub_token", None),
        )


@dataclass(frozen=True)
class HubPushSettings:
    """The resolved push of a run (see :meth:`HubPushArguments.resolve`). ``token`` is excluded from ``repr``."""

    mode: str
    repo_id: str | None
    revision: str | None = None
    private: bool = True
    merge_dtype: str = "bfloat16"
    token: str | None = field(default=None, repr=False)

    @property
    def enabled(self) -> bool:
        """Whether anything is to be pushed (``mode != "none"``)."""
        return self.mode != "none"
