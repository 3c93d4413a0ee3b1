"""How transformers reads a field typed ``dict``: a mapping, JSON of one, or a JSON file's path; the one reader the
front door's check (`user_values.check_user_values`) and the rules on the mappings' keys (`trainer_settings`) share."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

#: The mapping fields transformers also reads from a JSON file (`TrainingArguments.__post_init__`).
PATH_FIELDS = ("accelerator_config", "deepspeed", "fsdp_config")


def read_mapping(name: str, value: Any) -> Any:
    """Mapping field ``name``'s value as transformers reads it: a string that starts with "{" as JSON, another string
    as a JSON file's path (:data:`PATH_FIELDS`), anything else as it is (a mapping, None, or what ``__post_init__``
    built of one: an `AcceleratorConfig`).

    Raises:
        ValueError: the line saying why the value is no mapping, with its fix."""
    fix = f"Fix: write it as a mapping in the YAML ({name}: {{key: value}}) or as JSON on the command line (--{name} " \
          "'{\"key\": 1}')."
    if not isinstance(value, (str, list, tuple, int, float)):
        return value
    if not (isinstance(value, str) and (value.startswith("{") or name in PATH_FIELDS)):
        raise ValueError(f"{name}={value!r} is not a mapping (a {type(value).__name__}). {fix}")
    try:
        if value.startswith("{"):
            return json.loads(value)
        with open(os.path.expanduser(value), encoding="utf-8") as f:
            loaded = json.load(f)
    except OSError as err:
        raise ValueError(f"{name}={value!r} names no JSON file it can read ({err.strerror}). Fix: give the file's "
                         f"path, or {fix[5:]}") from None
    except ValueError as err:
        raise ValueError(f"{name}={value!r} is not JSON ({err}). {fix}") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"{name}={value!r} holds a {type(loaded).__name__}, not a mapping. {fix}")
    return loaded


def as_mapping(name: str, value: Any) -> Mapping:
    """:func:`read_mapping` of a value as a mapping: {} when unset or refused (`user_values.check_user_values` says
    why); the dataclass ``__post_init__`` built of one (an `AcceleratorConfig`) as its fields."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    try:
        value = read_mapping(name, value)
    except ValueError:
        return {}
    return value if isinstance(value, Mapping) else {}
