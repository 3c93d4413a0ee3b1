"""Where a run's model comes from, and the original base model behind it (no torch, no TRL).

``model_name_or_path`` is one of: an embedded model (``embedded:tiny-qwen2``), a Hub id (``Qwen/Qwen2.5-0.5B``), a
local model folder (``config.json``), or the adapter of an earlier run: its ``output_dir`` or one of its
``checkpoint-N`` folders (``adapter_config.json``). An adapter is trained further ("continued from"): its base loads
as the run configures it and the adapter is loaded trainable on top (`models.load_continued_model`).

:func:`resolve_model_source` answers this once, before any model loads; the recipe records the answer in
``run_config.json`` (``model_source``) and the model card reads it back (:func:`recorded_model_source`), so that a
relative local path stays local when the card is built from another directory.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .cache import embedded_name_of

ADAPTER_CONFIG_FILE = "adapter_config.json"
MODEL_CONFIG_FILE = "config.json"
#: The kinds of `ModelSource`.
KINDS = ("embedded", "hub", "local", "adapter")


#: ``ModelConfig`` LoRA fields and the ``adapter_config.json`` keys they set.
LORA_FIELDS = {"lora_r": "r", "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout",
               "lora_target_modules": "target_modules", "lora_modules_to_save": "modules_to_save",
               "use_rslora": "use_rslora", "use_dora": "use_dora"}


def _modules(value) -> list[str] | str | None:
    return value if value is None or isinstance(value, str) else sorted({str(name) for name in value})


def lora_differences(mine: dict, adapter_config: dict, skip: tuple[str, ...] = ()) -> list[tuple[str, object, object]]:
    """``(field, the adapter's value, mine)`` for each `LORA_FIELDS` field of ``mine`` (trl.ModelConfig's names) that
    ``adapter_config`` (an ``adapter_config.json`` mapping) holds otherwise. Module lists are compared as sets, by
    their last names when one side lists bare names (PEFT saves ``all-linear`` as full paths); not compared: ``skip``,
    a value of None, target modules left to PEFT (``all-linear``), a key the adapter's file lacks."""
    found = []
    for field, key in LORA_FIELDS.items():
        value, theirs = mine.get(field), adapter_config.get(key)
        if field in skip or value is None or key not in adapter_config or (
                field == "lora_target_modules" and value == "all-linear"):
            continue
        if field in ("lora_target_modules", "lora_modules_to_save") and not isinstance(value, str):
            value, theirs = _modules(value), _modules(theirs) or []
            bare = isinstance(theirs, list) and not (any("." in n for n in value) and any("." in n for n in theirs))
            same = {n.rsplit(".", 1)[-1] for n in value} == {n.rsplit(".", 1)[-1] for n in theirs} if bare else \
                value == theirs
        else:
            same = value == theirs
        if not same:
            found.append((field, theirs, value))
    return found


@dataclass(frozen=True)
class ModelSource:
    """What ``model_name_or_path`` named, resolved.

    Attributes:
        name (`str`): ``model_name_or_path`` as given.
        kind (`str`): one of :data:`KINDS`.
        base (`str`): the base model that loads: the embedded name, the Hub id, or an absolute local folder.
        base_is_local (`bool`): ``base`` is a local folder (never a Hub id, whatever it looks like).
        adapter (`str` or `None`): the absolute folder of the adapter continued from (kind ``"adapter"``).
    """

    name: str
    kind: str
    base: str
    base_is_local: bool
    adapter: str | None = None

    @property
    def continued(self) -> bool:
        """Training continues an earlier run's adapter."""
        return self.adapter is not None

    @property
    def hub_id(self) -> str | None:
        """``base`` when it is a Hub id (the card's ``base_model`` metadata), else None."""
        return None if self.base_is_local or self.base.startswith("embedded:") else self.base

    def describe(self) -> str:
        """One line for the plan and the console: ``model: continued from the adapter in X (base: Y)``."""
        where = f"{self.base} (a local folder)" if self.base_is_local else self.base
        if self.continued:
            return f"model: continued from the adapter in {self.adapter} (base: {where})"
        return f"model: {where}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> ModelSource:
        return cls(**{key: values.get(key) for key in ("name", "kind", "base", "base_is_local", "adapter")})


def read_json(path: Path) -> dict:
    """The JSON object in ``path``, or ``{}`` when it is missing or not a JSON object."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _earlier_run_source(adapter_dir: Path) -> ModelSource | None:
    """The ``model_source`` the earlier run recorded in its ``run_config.json`` (the folder, or for a
    ``checkpoint-N`` folder its parent), or None."""
    for folder in (adapter_dir, adapter_dir.parent):
        record = read_json(folder / "run_config.json").get("model_source")
        if isinstance(record, dict) and record.get("base"):
            return ModelSource.from_dict(record)
    return None


def resolve_model_source(name: str, cwd: str | Path | None = None) -> ModelSource:
    """Resolve ``model_name_or_path`` (relative paths against ``cwd``, defaults to the working directory).

    Raises:
        ValueError: a folder with neither ``config.json`` nor ``adapter_config.json``; an adapter folder whose
            ``adapter_config.json`` names no base model, or names another adapter's folder.
    """
    if name.startswith("embedded:"):
        return ModelSource(name, "embedded", name, False)
    path = Path(name).expanduser()
    path = path if path.is_absolute() else Path(cwd or Path.cwd()) / path
    if not path.is_dir():
        return ModelSource(name, "hub", name, False)
    path = path.resolve()
    if (path / ADAPTER_CONFIG_FILE).is_file():
        base = read_json(path / ADAPTER_CONFIG_FILE).get("base_model_name_or_path")
        if not base:
            raise ValueError(f"model_name_or_path={name!r} is an adapter folder, but its {ADAPTER_CONFIG_FILE} names no "
                             "base model (base_model_name_or_path). Set it there to the base model's Hub id or folder.")
        earlier = _earlier_run_source(path)
        if earlier is not None:  # the earlier run recorded its original base (resolved when it started)
            resolved = ModelSource(base, "local" if earlier.base_is_local else "hub", earlier.base,
                                   earlier.base_is_local)
        else:
            resolved = resolve_model_source(base, cwd)
            embedded = embedded_name_of(resolved.base) if resolved.base_is_local else None
            if embedded is not None:  # PEFT wrote the embedded model's cached folder
                resolved = ModelSource(base, "embedded", embedded, False)
        if resolved.kind == "adapter":
            raise ValueError(f"model_name_or_path={name!r}: the base of this adapter ({base}) is itself an adapter "
                             "folder. Point base_model_name_or_path in its adapter_config.json at the base model.")
        return ModelSource(name, "adapter", resolved.base, resolved.base_is_local, adapter=str(path))
    if (path / MODEL_CONFIG_FILE).is_file():
        return ModelSource(name, "local", str(path), True)
    raise ValueError(
        f"model_name_or_path={name!r} is a folder with neither {MODEL_CONFIG_FILE} (a model) nor {ADAPTER_CONFIG_FILE} "
        "(the adapter of an earlier run, or one of its checkpoint-N folders). Point it at one of those.")


def _run_directory(output_dir: Path, recorded_output_dir: str | None) -> Path | None:
    """The directory a run was started from: ``output_dir`` minus the relative ``output_dir`` the run recorded."""
    if not recorded_output_dir or Path(recorded_output_dir).is_absolute():
        return None
    parts = Path(recorded_output_dir).parts
    resolved = output_dir.resolve()
    if tuple(resolved.parts[-len(parts):]) != parts:
        return None
    return resolved.parents[len(parts) - 1]


def recorded_model_source(run_config: dict, output_dir: str | Path, adapter_config: dict | None = None):
    """The `ModelSource` of a finished run, for its model card; None when nothing names a model.

    ``run_config["model_source"]`` when the run recorded it; else ``model_args.model_name_or_path`` (or
    ``script_args``', or ``adapter_config["base_model_name_or_path"]``), resolved against the directory the run was
    started from (worked out from the relative ``training_args.output_dir``), then against the working directory. A
    name that is no folder in either is taken as a Hub id.
    """
    record = run_config.get("model_source")
    if isinstance(record, dict) and record.get("base"):
        return ModelSource.from_dict(record)
    name = ((run_config.get("model_args") or {}).get("model_name_or_path")
            or (run_config.get("script_args") or {}).get("model_name_or_path")
            or (adapter_config or {}).get("base_model_name_or_path"))
    if not name:
        return None
    started_in = _run_directory(Path(output_dir), (run_config.get("training_args") or {}).get("output_dir"))
    for cwd in ([started_in] if started_in else []) + [None]:
        try:
            source = resolve_model_source(name, cwd)
        except ValueError:
            continue
        if source.kind != "hub":
            return source
    return ModelSource(name, "hub", name, False)
