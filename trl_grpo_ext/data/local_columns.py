"""The columns of a local JSON-lines or CSV dataset split, read without `datasets` (for `plan`, which loads neither
torch nor pyarrow): the keys of every JSON line, or the CSV header. Anything else (Parquet, a Hub id, a large or
unreadable file) is unknown (``None``), and the recipe checks the columns once it has read the dataset.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

#: Above this many bytes a split is not scanned here (the recipe reads it anyway).
MAX_BYTES = 64 * 2**20


def local_columns(name: object, split: object) -> list[str] | None:
    """The column names of the ``split`` files (``split*.jsonl`` / ``.json`` / ``.csv``, as `datasets` matches a
    folder's split files) of the local folder ``name``, or ``None`` when they cannot be known this way.

    Args:
        name: ``dataset_name`` (a local folder, else ``None`` is returned).
        split: the split's name (``dataset_train_split``).

    Returns:
        `list[str]` or `None`: the columns in the order first seen: every key of every JSON line (datasets unifies
        them), or the CSV header; ``None`` for another format, mixed formats, a file over :data:`MAX_BYTES`, or one
        that does not parse.
    """
    if not isinstance(name, str) or not isinstance(split, str) or not split:
        return None
    root = Path(name).expanduser()
    if not root.is_dir():
        return None
    files = sorted(p for p in root.rglob(f"{split}*") if p.is_file())
    suffixes = {p.suffix.lower() for p in files}
    if not files or len(suffixes) != 1 or sum(p.stat().st_size for p in files) > MAX_BYTES:
        return None
    columns: dict[str, None] = {}
    try:
        for path in files:
            with path.open(encoding="utf-8") as fh:
                if suffixes == {".csv"}:
                    columns.update(dict.fromkeys(next(csv.reader(fh), [])))
                elif suffixes <= {".jsonl", ".json"}:
                    for line in fh:
                        if line.strip():
                            row = json.loads(line)
                            if not isinstance(row, dict):
                                return None
                            columns.update(dict.fromkeys(row))
                else:
                    return None
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return list(columns) or None
