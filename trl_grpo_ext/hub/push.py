"""Push a finished run to the Hugging Face Hub: local first, nothing lost, no token anywhere.

A push has two phases.

1. Local (:func:`prepare_upload`), no network: the model card is written to ``output_dir/README.md``, and a folder
   holding exactly the files to upload is written: ``output_dir/adapter`` (adapter mode: adapter, tokenizer, card,
   reward plot, ``run_plan.json``, ``train_results.json`` and a secret-free ``run_config.json``) or
   ``output_dir/merged`` (merged mode: the merged model from :func:`export_merged` plus the same extras). Files the run
   wrote are only read; the one run file rewritten is ``README.md`` (PEFT's placeholder card becomes the real one).
2. Network (:func:`push_run`): ``create_repo(exist_ok=True)``, ``create_branch`` when a revision is given, one
   ``upload_folder`` of that folder. Any failure raises :class:`HubPushError`, whose message says which call failed
   and gives the exact ``trl-grpo-ext push`` command that retries; no local file is touched in this phase.

The token (argument, ``HF_TOKEN`` or huggingface_hub's stored login) is passed to huggingface_hub only. It is never
printed or logged, any string equal to it is replaced in error messages, and
:func:`~trl_grpo_ext.config.secrets.scrub_secrets` removes secrets from every JSON file this module writes.
"""

from __future__ import annotations

import json
import logging
import shlex
import shutil
from pathlib import Path

from ..config.checks import check_choice
from ..config.push_settings import (  # noqa: F401 (HubPushArguments, HubPushSettings: lent to hub/__init__)
    MERGE_DTYPES,
    PUSH_MODES,
    HubPushArguments,
    HubPushSettings,
    check_push_repository,
)
from ..config.secrets import redact_text, scrub_secrets
from .card import REWARD_PLOT_FILE, build_model_card
from .merge import (
    ADAPTER_FILES,
    MERGE_INFO_FILE,
    TOKENIZER_FILES,
    UPLOAD_MODES,
    check_adapter_dir,
    export_merged,
    merged_export_is_current,
    read_json,
)

__all__ = [
    "HubPushArguments",
    "HubPushError",
    "HubPushInterrupted",
    "HubPushSettings",
    "prepare_upload",
    "push_settings",
    "push_run",
    "retry_command",
    "upload_dir",
]

logger = logging.getLogger(__name__)

#: Run files uploaded next to the model when present.
RUN_FILES = ("run_plan.json", "train_results.json", REWARD_PLOT_FILE)


class HubPushError(RuntimeError):
    """A push to the Hub failed after every local file was written. The message names the failed call and the
    command that retries; no local file was modified or deleted by the failed network phase."""


class HubPushInterrupted(KeyboardInterrupt):
    """The network phase of a push was interrupted (Ctrl-C). Still a `KeyboardInterrupt`, so it stops the program as
    one; its message says that local files are intact and gives the command that retries."""


def push_settings(settings: HubPushSettings, output_dir: str | Path) -> str:
    """:func:`push_run` with the resolved ``settings`` (:meth:`HubPushArguments.resolve`); returns the repository URL."""
    return push_run(output_dir, settings.repo_id, mode=settings.mode, revision=settings.revision,
                    private=settings.private, token=settings.token, merge_dtype=settings.merge_dtype)


def upload_dir(output_dir: str | Path, mode: str) -> Path:
    """The folder whose files a push uploads: ``output_dir/adapter`` or ``output_dir/merged``."""
    return Path(output_dir) / ("merged" if mode == "merged" else "adapter")


def _write_extras(source: Path, dest: Path, card, token: str | None) -> list[str]:
    card.save(dest / "README.md")
    names = ["README.md"]
    for name in RUN_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, dest / name)
            names.append(name)
    if (source / "run_config.json").is_file():
        config = scrub_secrets(read_json(source / "run_config.json"), token)
        (dest / "run_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        names.append("run_config.json")
    return names


def prepare_upload(
    output_dir: str | Path,
    *,
    mode: str = "adapter",
    repo_id: str | None = None,
    merge_dtype: str = "bfloat16",
    token: str | None = None,
) -> tuple[Path, list[str]]:
    """Write everything a push uploads, locally, without any network call.

    Args:
        output_dir (`str` or `Path`): a finished run's directory (must hold ``adapter_config.json`` and
            ``adapter_model.safetensors``).
        mode (`str`, defaults to ``"adapter"``): ``"adapter"`` or ``"merged"``.
        repo_id (`str`, *optional*): used in the card's loading snippets.
        merge_dtype (`str`, defaults to ``"bfloat16"``): merged mode only: dtype of the merged weights. A complete
            earlier export with the same adapter, dtype and method is reused, so a retried push does not merge again.
        token (`str`, *optional*): a token value to scrub from the cards and the copied config, whatever its key.

    Returns:
        ``(folder, files)``: the folder to upload (:func:`upload_dir`) and the file names in it that belong to this
        push. ``output_dir/README.md`` is left as it is (its snippets load ``output_dir``); `push_run` points it
        at the repository once an adapter push succeeds.

    Raises:
        ValueError: on an unknown ``mode`` or ``merge_dtype``, or when ``output_dir`` holds no adapter.
    """
    check_choice("mode", mode, UPLOAD_MODES, error=ValueError)
    check_choice("merge_dtype", merge_dtype, MERGE_DTYPES, error=ValueError)
    source = check_adapter_dir(output_dir)
    dest = upload_dir(source, mode)
    if mode == "merged":
        if not merged_export_is_current(source, dest, merge_dtype, "dequantized"):
            export_merged(source, dest, dtype=merge_dtype)
        files = list(read_json(dest / MERGE_INFO_FILE)["files"]) + [MERGE_INFO_FILE]
    else:
        dest.mkdir(exist_ok=True)
        files = []
        for name in ADAPTER_FILES + TOKENIZER_FILES:
            if (source / name).is_file():
                shutil.copy2(source / name, dest / name)
                files.append(name)
    card = build_model_card(source, mode=mode, repo_id=repo_id, token=token)
    files += _write_extras(source, dest, card, token)
    return dest, sorted(set(files))


def retry_command(
    output_dir: str | Path,
    repo_id: str,
    *,
    mode: str = "adapter",
    revision: str | None = None,
    private: bool = True,
    merge_dtype: str = "bfloat16",
) -> str:
    """The ``trl-grpo-ext push`` command line that repeats a push: shell-quoted, with ``output_dir`` made absolute so
    it works from any directory, and never holding a token (the CLI reads ``HF_TOKEN`` or the stored login)."""
    parts = ["trl-grpo-ext", "push", str(Path(output_dir).resolve()), "--repo-id", repo_id]
    if mode == "merged":
        parts.append("--merge")
        if merge_dtype != "bfloat16":
            parts += ["--merge-dtype", merge_dtype]
    if revision:
        parts += ["--revision", revision]
    if not private:
        parts.append("--public")
    return shlex.join(parts)


def push_run(
    output_dir: str | Path,
    repo_id: str,
    *,
    mode: str = "adapter",
    revision: str | None = None,
    private: bool = True,
    token: str | None = None,
    merge_dtype: str = "bfloat16",
) -> str:
    """Push a finished run to the Hub, writing everything locally first.

    Args:
        output_dir (`str` or `Path`): the run's directory (see :func:`prepare_upload`).
        repo_id (`str`): ``"user/name"`` or ``"org/name"``; created if missing.
        mode (`str`, defaults to ``"adapter"``): ``"adapter"`` or ``"merged"``.
        revision (`str`, *optional*): branch to push to; created from ``main`` if missing.
        private (`bool`, defaults to `True`): visibility of a newly created repository.
        token (`str`, *optional*): Hub token; defaults to ``HF_TOKEN`` or the stored ``hf auth login`` token.
        merge_dtype (`str`, defaults to ``"bfloat16"``): merged mode only, see :func:`prepare_upload`.

    Returns:
        `str`: the repository URL (``.../tree/<revision>`` when a revision is given).

    Raises:
        ValueError: bad arguments or no adapter in ``output_dir`` (before anything is written).
        HubPushError: no token, or a Hub call failed. Local files are complete and untouched; the message gives the
            retry command.
        HubPushInterrupted: Ctrl-C during the network phase (a `KeyboardInterrupt` with the same guarantees). The
            original exception is not chained, since its text may hold credentials echoed by a server; its type and
            redacted message are in the message.
    """
    from huggingface_hub import HfApi, get_token
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise ValueError(f"repo_id={repo_id!r} is not a valid Hub repository id ('user/name'): {err}") from None
    folder, files = prepare_upload(output_dir, mode=mode, repo_id=repo_id, merge_dtype=merge_dtype, token=token)
    retry = retry_command(output_dir, repo_id, mode=mode, revision=revision, private=private, merge_dtype=merge_dtype)
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:  # before the token: logging in would not help
        raise HubPushError(
            f"HF_HUB_OFFLINE is set, so nothing was pushed. The {mode} files are ready in {folder}. "
            f"Unset HF_HUB_OFFLINE (and log in with `hf auth login` if needed), then run:\n  {retry}"
        )
    if token is None and get_token() is None:
        raise HubPushError(
            f"No Hugging Face token found, so nothing was pushed. The {mode} files are ready in {folder}. "
            f"Log in with `hf auth login` (or set HF_TOKEN), then run:\n  {retry}"
        )
    from trl_grpo_ext._version import __version__

    api = HfApi(token=token, library_name="trl-grpo-ext", library_version=__version__)
    step = "create_repo"
    try:
        url = str(api.create_repo(repo_id, private=private, exist_ok=True))
        if revision:
            step = "create_branch"
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        step = "upload_folder"
        logger.info("Uploading %d files from %s to %s", len(files), folder, repo_id)
        api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            allow_patterns=files,
            revision=revision,
            commit_message=f"Upload {mode} with trl-grpo-ext {__version__}",
        )
    except KeyboardInterrupt:
        raise HubPushInterrupted(
            f"Push of {folder} to {repo_id} interrupted at {step}; nothing local was lost (the upload folder and its card stay ready).\n"
            f"Retry with:\n  {retry}"
        ) from None
    except Exception as err:  # any failure of the network phase becomes one actionable error
        detail = redact_text(f"{type(err).__name__}: {err}", token)
        raise HubPushError(
            f"Pushing {mode} files from {folder} to {repo_id} failed at {step} ({detail}).\n"
            f"Nothing local was lost: the {mode} files, the card and the run files are in {folder}.\n"
            f"Retry with:\n  {retry}"
        ) from None
    if mode == "adapter":  # pushed: the run's own card (of the same adapter) now points at the repository too
        build_model_card(output_dir, mode="adapter", repo_id=repo_id, token=token).save(Path(output_dir) / "README.md")
    return f"{url}/tree/{revision}" if revision else url
