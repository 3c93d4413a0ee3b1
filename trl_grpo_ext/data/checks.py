"""Bad datasets get the treatment of bad configs: refused before any model loads, in one line naming the dataset,
its file or column, and a fix; never a traceback from `datasets`.

`data.load_prompt_dataset` reads every non-embedded dataset through :func:`read_dataset` and checks the rows it
will train on with :func:`check_prompt_rows`; the recipe checks the columns its rewards score against with
:func:`check_reward_values`. Each raises :class:`DatasetError` (a `ValueError`, which the recipe and ``plan`` answer
with one line and exit status 2).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path


class DatasetError(ValueError):
    """A dataset that cannot serve the run; the message names the dataset, the file or column, and a fix.
    ``missing_split``: for a split the dataset does not have, the message without its fix (a caller gives its own)."""

    def __init__(self, message: str, missing_split: str | None = None):
        super().__init__(message)
        self.missing_split = missing_split


def _split_files(name: str, split: str) -> list[str]:
    """The files of a local folder that `datasets` reads as ``split`` (named ``split*``, as its default patterns)."""
    root = Path(name).expanduser()
    if not root.is_dir():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob(f"{split}*") if p.is_file())


def describe(name: str, split: str) -> str:
    """``dataset_name='data' ('train' split: train.jsonl)``: how the messages name a dataset split."""
    files = _split_files(name, split)
    shown = f": {', '.join(files[:3])}{', ...' if len(files) > 3 else ''}" if files else ""
    return f"dataset_name={name!r} ({split!r} split{shown})"


def _reason(err: BaseException) -> str:
    """The innermost message of an exception chain (pyarrow's "JSON parse error: ... in row 1" under datasets'
    "An error occurred while generating the dataset"), on one line."""
    while err.__cause__ is not None or (err.__context__ is not None and not err.__suppress_context__):
        err = err.__cause__ or err.__context__
    return " ".join(f"{type(err).__name__}: {err}".split())[:300]


_COMPRESSION = {".gz", ".bz2", ".xz", ".zst", ".zip", ".lz4"}
#: What to do about a split file of each format that datasets cannot read (``{file}``: its name).
_FORMAT_FIXES = {
    ".jsonl": "make each line of {file} one JSON object (JSON lines), e.g. {{\"prompt\": \"...\", \"answer\": \"...\"}}",
    ".json": "make {file} JSON lines (one object a line) or one JSON list of objects",
    ".csv": "make {file} a CSV with one header row (e.g. prompt,answer) and that many fields on every line; quote a "
            "field that holds a comma",
    ".tsv": "make {file} tab-separated with one header row and that many fields on every line",
    ".parquet": "{file} is not a valid Parquet file: write it again (datasets' Dataset.to_parquet or pandas' "
                "DataFrame.to_parquet), or give the split as JSON lines",
    ".arrow": "{file} is not an Arrow stream datasets can read: write the split as .jsonl or .parquet instead "
              "(Dataset.to_json / Dataset.to_parquet)",
}
_FORMATS = ".jsonl, .json, .csv, .parquet"


def file_format(file: str) -> str:
    """The data format suffix of ``file`` (``train.jsonl.gz`` -> ``.jsonl``), lower case; ``""`` without one."""
    suffixes = [x.lower() for x in Path(file).suffixes]
    while suffixes and suffixes[-1] in _COMPRESSION:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def format_fix(files: list[str]) -> str:
    """The fix for split ``files`` that datasets could not read, for their format (:data:`_FORMAT_FIXES`)."""
    file = files[0] if files else "the split's file"
    fix = _FORMAT_FIXES.get(file_format(file))
    return fix.format(file=file) if fix else f"give {file} in a format datasets reads ({_FORMATS})"


def check_one_format(name: str, split: str, files: list[str]) -> None:
    """Refuse a split whose files are of several formats: datasets reads those of one format and drops the rest."""
    formats = sorted({file_format(f) for f in files})
    if len(formats) > 1:
        raise DatasetError(f"{describe(name, split)} mixes file formats ({', '.join(f or 'none' for f in formats)}); "
                           "datasets would read the files of one format and silently drop the others. Fix: keep one "
                           "format per split (convert or remove the other files).")


def read_dataset(name: str, config: str | None, split: str, split_field: str):
    """``datasets.load_dataset(name, name=config, split=split)``, every failure answered in one line.

    Args:
        name (`str`): ``dataset_name``: a Hub id or a local folder.
        config (`str` or `None`): ``dataset_config``.
        split (`str`): the split to read.
        split_field (`str`): the field that named the split (``"dataset_train_split"``), for the message.

    Raises:
        DatasetError: ``name`` is a file (datasets reads folders), a missing path, a folder without data files, a
            split that does not exist, or files that cannot be parsed (empty, not JSON, ...): naming the folder, the
            split's files and what to do.
    """
    from datasets import load_dataset

    path = Path(name).expanduser()
    if path.is_file():
        raise DatasetError(f"dataset_name={name!r} is a file; datasets reads a folder, one file per split. Fix: put it in "
                           f"a folder as {split}{path.suffix} and set dataset_name to the folder.")
    local = path.is_dir() or name.startswith((".", "/", "~"))
    if local and not path.exists():
        raise DatasetError(f"dataset_name={name!r} does not exist. Fix: point it at the folder holding the split files "
                           f"({split}.jsonl, ...), or at a Hub dataset id.")
    files = _split_files(name, split)
    check_one_format(name, split, files)
    if files and all((path / f).stat().st_size == 0 for f in files):
        how = {".jsonl": ", one JSON object a line", ".json": ", one JSON object a line",
               ".csv": ", a header row (e.g. prompt,answer) then one row per prompt"}.get(file_format(files[0]), "")
        raise DatasetError(f"{describe(name, split)} is empty (0 bytes). Fix: add prompts to it{how}.")
    try:
        with _quiet_builders():
            return load_dataset(name, name=config, split=split)
    except Exception as err:  # datasets raises its own errors, pyarrow's, StopIteration on an empty file, ...
        reason = _reason(err)
        if local and files:
            _refuse_the_bad_split(name, config, split)  # datasets builds every split of a folder: name the one at fault
        if "split" in reason.lower() and ("unknown" in reason.lower() or "should be one of" in reason.lower()):
            other = ", or set eval_strategy: no and final_eval: none" if split_field == "dataset_test_split" else ""
            problem = f"{split_field}={split!r}: {reason.rstrip('.')}."
            raise DatasetError(f"{problem} Fix: name a split that exists{other}.", missing_split=problem) from None
        if local and not files:
            raise DatasetError(f"dataset_name={name!r} holds no file for the {split!r} split ({reason}). Fix: name "
                               f"its file {split}.jsonl (or .csv, .parquet), or set {split_field} to the split's "
                               "name.") from None
        if config is not None and "BuilderConfig" in reason:
            raise DatasetError(f"dataset_config={config!r}: {reason}. Fix: name a configuration the dataset has, or "
                               "remove dataset_config (a local folder has only 'default').") from None
        where = describe(name, split) if local else f"dataset_name={name!r} ({split!r} split)"
        if local:
            fix = format_fix(files)
        elif not path.exists():
            fix = (f"no local folder {name!r} exists (relative to {Path.cwd()}) either: point dataset_name at the "
                   "folder holding the split files, or check the Hub id, dataset_config and your network or cache")
        else:
            fix = "check the id, dataset_config and your network or cache"
        raise DatasetError(f"{where} cannot be read ({reason}). Fix: {fix}.") from None


@contextmanager
def _quiet_builders():
    """datasets' file readers (``datasets.packaged_modules``) log "Failed to load JSON from file ..." before raising;
    `read_dataset` answers the failure in one line of its own, so that log line is not printed during the read."""
    logger = logging.getLogger("datasets.packaged_modules")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _refuse_the_bad_split(name: str, config: str | None, split: str) -> None:
    """After a local folder failed to load: datasets builds all of its splits together, so a bad ``test.jsonl`` fails
    the read of the training split too. Read each split's files (datasets' own resolution) alone and refuse the first
    split that cannot be read, or the splits' different columns when each reads alone. ``split``: the split read.

    Raises:
        DatasetError: naming that split's files and their problem, or each split's columns; nothing when the folder's
            splits cannot be resolved, ``split`` is not one of them, or they read alone and agree (the caller then
            reports the failure as it was)."""
    from datasets import load_dataset, load_dataset_builder

    root = Path(name).expanduser()
    try:
        with _quiet_builders():
            data_files = {str(s): list(f) for s, f in load_dataset_builder(name, name=config).config.data_files.items()}
    except Exception:  # noqa: BLE001 (the caller's own message stands)
        return
    if split not in data_files:  # a split the folder does not have: the caller's message names it
        return
    columns = {}
    for other, paths in data_files.items():
        try:
            with _quiet_builders():
                columns[other] = load_dataset(name, name=config, data_files={other: paths}, split=other).features
        except Exception as err:  # noqa: BLE001 (as read_dataset's)
            shown = [str(Path(p).relative_to(root)) if Path(p).is_relative_to(root) else p for p in paths]
            raise DatasetError(f"{describe(name, other)} cannot be read ({_reason(err)}). Fix: "
                               f"{format_fix(shown)}.") from None
    names = {other: list(features) for other, features in columns.items()}
    if len({tuple(cols) for cols in names.values()}) > 1:
        what, listed = "columns", ", ".join(f"{other} {cols}" for other, cols in names.items())
    elif len({repr(features) for features in columns.values()}) > 1:
        what = "column types"
        listed = ", ".join(f"{other} {({k: str(v) for k, v in f.items()})}" for other, f in columns.items())
    else:  # each split reads alone and they agree: the failure is another one (the caller names it)
        return
    raise DatasetError(f"dataset_name={name!r}: the splits have different {what}: {listed}; datasets builds a "
                       "folder's splits together, so it reads none of them. Fix: give every split's file the same "
                       "columns, of the same types.")


def _empty_prompt(prompt) -> bool:
    if prompt is None:
        return True
    if isinstance(prompt, str):
        return not prompt.strip()
    if isinstance(prompt, list):
        return not prompt or all(not str((m or {}).get("content") or "").strip() for m in prompt if isinstance(m, dict))
    return False


def prompt_kind_problem(prompt, chat: bool = True) -> str:
    """Why ``prompt`` is neither text nor (with ``chat``) a list of chat messages (dicts with a ``role`` and a text
    ``content``, or a list of content parts), or ``""`` when it is one of those."""
    if prompt is None or isinstance(prompt, str):
        return ""
    if not chat or not isinstance(prompt, list):
        return f"{type(prompt).__name__} {str(prompt)[:40]!r}"
    for message in prompt:
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            return f"a list whose item {str(message)[:40]!r} is not a chat message {{'role': ..., 'content': ...}}"
        content = message["content"]
        if content is not None and not isinstance(content, (str, list)):
            return f"a message whose content is {type(content).__name__} {str(content)[:40]!r}"
    if prompt and prompt[-1]["role"] not in PROMPT_LAST_ROLES:  # TRL raises at the first generation
        return (f"chat messages ending with a {prompt[-1]['role']!r} message (TRL generates after a user or tool "
                "message, or continues an assistant one)")
    return ""


#: The roles a conversational prompt may end with (TRL 1.16 `data_utils.apply_chat_template`; any other raises).
PROMPT_LAST_ROLES = ("user", "tool", "assistant")


def final_assistant_warning(dataset, where: str, column: str = "prompt") -> list[str]:
    """One warning when prompts end with an assistant message: TRL continues it (a prefill), so whole conversations
    used as prompts show the model their answers; ``[]`` otherwise."""
    ends = [i for i, prompt in enumerate(dataset[column]) if isinstance(prompt, list) and prompt
            and isinstance(prompt[-1], dict) and prompt[-1].get("role") == "assistant"]
    if not ends:
        return []
    return [f"{where}: {len(ends)} of {len(dataset)} prompts end with an assistant message (row {ends[0]}), which TRL "
            "continues instead of answering the user: if these are whole conversations, the model is shown its "
            "answer. Drop the final assistant message (keep it only as a deliberate prefill)."]


def check_prompt_kinds(dataset, where: str, column: str = "prompt", chat: bool = True) -> None:
    """Refuse a split whose ``column`` holds values other than text or (with ``chat``) chat messages.

    Raises:
        DatasetError: naming ``where``, the column, how many rows, the first rows and what the first one holds.
    """
    bad = [(i, kind) for i, prompt in enumerate(dataset[column]) if (kind := prompt_kind_problem(prompt, chat))]
    if bad:
        rows = ", ".join(str(i) for i, _ in bad[:5]) + (", ..." if len(bad) > 5 else "")
        wanted = "text or a list of chat messages [{'role': 'user', 'content': '...'}]" if chat else "text"
        raise DatasetError(f"{where}: {len(bad)} of {len(dataset)} rows have a {column!r} that is not {wanted} (rows "
                           f"{rows}, counted from 0; row {bad[0][0]}: {bad[0][1]}). Fix: write each prompt as "
                           f"{'text or chat messages' if chat else 'text'}, or set dataset_prompt_column to the "
                           "column that holds them.")


def check_not_empty(dataset, where: str) -> None:
    """Refuse a split with no rows (`DatasetError` naming ``where``, see :func:`describe`)."""
    if len(dataset) == 0:
        raise DatasetError(f"{where} has no rows. Fix: add prompts to it, or point dataset_name at a dataset with rows.")


def check_prompt_rows(dataset, where: str, column: str = "prompt", chat: bool = True) -> None:
    """Refuse a split with no rows, with rows whose prompt (``column``: text, or chat messages when ``chat``) is of
    another kind (:func:`check_prompt_kinds`), or missing or empty.

    Raises:
        DatasetError: ``where`` (see :func:`describe`) has no rows, or N of its rows have an empty prompt (the
            first few row numbers are named).
    """
    check_not_empty(dataset, where)
    check_prompt_kinds(dataset, where, column, chat=chat)
    check_empty_prompts(dataset, where, column)


def check_empty_prompts(dataset, where: str, column: str = "prompt") -> None:
    """Refuse a split with rows whose ``column`` is missing or empty (`DatasetError` naming the first rows)."""
    empty = [i for i, prompt in enumerate(dataset[column]) if _empty_prompt(prompt)]
    if empty:
        rows = ", ".join(map(str, empty[:5])) + (", ..." if len(empty) > 5 else "")
        raise DatasetError(f"{where}: {len(empty)} of {len(dataset)} rows have an empty {column!r} (rows {rows}, "
                           "counted from 0). Fix: remove those rows or give them a prompt.")


def registered_rewards(specs):
    """``(spec, reward)`` for each registered reward of ``specs`` (`RewardSpec`) that builds: import paths and
    rewards refused with their own message by the config checks are left out."""
    from ..rewards.registry import get_reward, is_import_path

    for spec in specs:
        if is_import_path(spec.name):
            continue
        try:
            reward = get_reward(spec.name, **spec.kwargs)
        except (TypeError, ValueError):
            continue
        yield spec, reward


def reward_columns(specs) -> list[str]:
    """The dataset columns the registered rewards of ``specs`` (`RewardSpec`) read (``required_columns``)."""
    columns = []
    for _, reward in registered_rewards(specs):
        for alternatives in getattr(reward, "required_columns", ()) or ():
            columns += [c for c in alternatives if c not in columns]
    return columns


def check_reward_values(dataset, where: str, columns) -> None:
    """Refuse a split in which a column the rewards score against (an answer) is empty in every row.

    Args:
        dataset (`datasets.Dataset`): the split. where (`str`): how to name it (:func:`describe`).
        columns (iterable of `str`): the columns the rewards read (:func:`reward_columns`); absent ones are skipped.

    Raises:
        DatasetError: every value of such a column is None or blank: no reward could score a completion; or a value
            is a mapping or a list (verl's ``reward_model: {ground_truth: ...}``), which a reward would read as text.
    """
    for column in columns:
        if column not in dataset.column_names or len(dataset) == 0:
            continue
        row, value = next(((i, v) for i, v in enumerate(dataset[column]) if isinstance(v, (dict, list))), (0, None))
        if value is not None:
            keys = list(value) if isinstance(value, dict) else [0]
            inner = next((k for k in ("ground_truth", "answer", "solution") if k in keys), keys[0] if keys else 0)
            raise DatasetError(
                f"{where}: the column {column!r} that the rewards score against holds a {type(value).__name__} in row "
                f"{row} ({str(value)[:80]}), not an answer. Fix: move the answer into a column of its own, e.g. "
                f"dataset.map(lambda r: {{'answer': r[{column!r}][{inner!r}]}}), and point the reward's column at it.")
        if all(value is None or not str(value).strip() for value in dataset[column]):
            raise DatasetError(f"{where}: the column {column!r} that the rewards score against is empty in all "
                               f"{len(dataset)} rows, so no completion could be scored. Fix: fill it with the answers, "
                               "or point the reward's column parameter at the column that holds them.")
