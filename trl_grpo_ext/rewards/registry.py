"""The reward-function registry: register by name, look up by name (with parameters), list what is registered.

Three ways to put a reward in the registry, one way to get it out:

* ``@register_reward("name", "alias", ...)`` on a function or a callable class (this package's built-ins do this);
* an ``importlib.metadata`` entry point in the group ``trl_grpo_ext.rewards`` declared by a third-party distribution
  (``my_reward = my_pkg.rewards:my_reward``), scanned once, lazily, on the first lookup; the environment variable
  ``TRL_GRPO_EXT_DISABLE_ENTRY_POINTS=1`` switches the scan off;
* no registration at all: a dotted import path ``"pkg.module:obj"`` or ``"pkg.module.obj"`` is imported on lookup.

:func:`get_reward` returns the callable TRL's ``GRPOTrainer`` accepts in ``reward_funcs``. A *class* is a
parameterised reward: its ``__init__`` arguments are the parameters, and the lookup keyword arguments instantiate it.
A *function*'s parameters are its keyword-only arguments (those after ``*``); its other named arguments are dataset
columns, filled by the trainer (:mod:`~trl_grpo_ext.rewards.parameters`). Nothing here imports torch, transformers or
trl.

The design follows lm-evaluation-harness and timm registries (lazy targets, fatal duplicates, "did you mean") and
pytest's plugin entry points (one lazy scan, an off switch).
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import asdict, dataclass, field
from importlib import import_module
from typing import Any

from .parameters import RewardParameter, bind_parameters, parameters_of

#: ``importlib.metadata`` entry-point group scanned for third-party rewards.
ENTRY_POINT_GROUP = "trl_grpo_ext.rewards"
#: Environment variable that, set to a non-empty value other than ``0``, disables the entry-point scan.
DISABLE_ENTRY_POINTS_ENV = "TRL_GRPO_EXT_DISABLE_ENTRY_POINTS"
#: Modules that register the built-in rewards on import; imported on the first lookup.
BUILTIN_MODULES = ("trl_grpo_ext.rewards.builtin", "trl_grpo_ext.rewards.math", "trl_grpo_ext.rewards.trl_rewards")

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
#: Attribute the decorator sets on a registered object: its canonical reward name.
REWARD_NAME_ATTR = "__reward_name__"


class UnknownRewardError(ValueError):
    """A reward name, alias or import path that resolves to nothing (the message suggests the closest names)."""


class DuplicateRewardError(ValueError):
    """Two different rewards claim the same name or alias."""


@dataclass(frozen=True)
class RewardInfo:
    """What :func:`list_rewards` reports about one registered reward.

    Args:
        name (`str`): canonical name; also the metric name TRL logs (``rewards/<name>/mean``).
        aliases (`tuple[str, ...]`): other names that select it.
        description (`str`): one line (the first line of its docstring unless given at registration).
        parameters (`tuple[RewardParameter, ...] | None`): its parameters; ``None`` for an entry point not loaded yet.
        source (`str`): ``"module:qualname"`` of a loaded reward, or ``"entry point <dist> (<target>)"``.
        example_kwargs (`dict`): keyword arguments that make a working instance (used by tests and the CLI listing).
    """

    name: str
    aliases: tuple[str, ...]
    description: str
    parameters: tuple[RewardParameter, ...] | None
    source: str
    example_kwargs: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """A JSON-serialisable dict (parameters as a list of dicts, ``None`` when unknown)."""
        out = asdict(self)
        out["aliases"] = list(self.aliases)
        out["parameters"] = None if self.parameters is None else [asdict(p) for p in self.parameters]
        return out


@dataclass
class _Entry:
    name: str
    aliases: tuple[str, ...]
    description: str | None
    target: str  # "module:qualname", the identity of the entry
    obj: Any = None  # the loaded object (None until a lazy entry is loaded)
    source: str = ""
    example_kwargs: dict = field(default_factory=dict)


class _State:
    def __init__(self) -> None:
        self.entries: dict[str, _Entry] = {}
        self.names: dict[str, str] = {}  # name or alias -> canonical name
        self.builtins_loaded = False
        self.entry_points_loaded = False


_STATE = _State()


def _target_of(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def _first_line(doc: str | None) -> str:
    for line in (doc or "").strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def _add(entry: _Entry) -> None:
    for key in (entry.name, *entry.aliases):
        if not isinstance(key, str) or not _NAME_RE.match(key):
            raise ValueError(
                f"Reward name {key!r} (for {entry.target}) is not valid: use letters, digits, '_' or '-', starting "
                "with a letter or '_' (names with '.' or ':' are read as import paths)."
            )
        owner = _STATE.names.get(key)
        if owner is not None and _STATE.entries[owner].target != entry.target:
            raise DuplicateRewardError(
                f"Reward name {key!r} is already registered by {_STATE.entries[owner].source or owner} and cannot be "
                f"registered again by {entry.source or entry.target}. Rename one of them; to skip third-party entry "
                f"points set {DISABLE_ENTRY_POINTS_ENV}=1."
            )
    old = _STATE.entries.get(entry.name)
    if old is not None:  # same target registered again (module reload, or an entry point whose module registers)
        entry.aliases = tuple(dict.fromkeys((*old.aliases, *entry.aliases)))
        entry.example_kwargs = entry.example_kwargs or old.example_kwargs
        entry.description = entry.description or old.description
        if old.source.startswith("entry point"):
            entry.source = old.source
    _STATE.entries[entry.name] = entry
    for key in (entry.name, *entry.aliases):
        _STATE.names[key] = entry.name


def register_reward(name: str, *aliases: str, description: str | None = None, example_kwargs: dict | None = None):
    """Decorator registering a reward function or a callable reward class under ``name`` and ``aliases``.

    Args:
        name (`str`): canonical name, used in YAML/CLI and as the metric name (``rewards/<name>/mean``). Letters,
            digits, ``_`` and ``-``.
        *aliases (`str`): other names selecting the same reward.
        description (`str`, *optional*): one line for the listing; defaults to the first line of the docstring.
        example_kwargs (`dict`, *optional*): keyword arguments giving a working instance of a class with required
            parameters (the registry-wide tests and ``trl-grpo-ext rewards`` use it).

    Returns:
        The decorated object, unchanged except for a ``__reward_name__`` attribute holding ``name``.

    Raises:
        DuplicateRewardError: ``name`` or an alias is already taken by a different object.
        ValueError: a name is not valid, or the object is not callable.
    """

    def decorator(obj):
        if not callable(obj):
            raise ValueError(f"register_reward({name!r}) decorates {obj!r}, which is not callable.")
        _add(
            _Entry(
                name=name,
                aliases=tuple(aliases),
                description=description or _first_line(obj.__doc__) or None,
                target=_target_of(obj),
                obj=obj,
                source=_target_of(obj),
                example_kwargs=dict(example_kwargs or {}),
            )
        )
        setattr(obj, REWARD_NAME_ATTR, name)
        return obj

    return decorator


def _ensure_loaded() -> None:
    if not _STATE.builtins_loaded:
        _STATE.builtins_loaded = True
        for module in BUILTIN_MODULES:
            import_module(module)
    if not _STATE.entry_points_loaded:
        _load_entry_points()


def _load_entry_points() -> None:
    if os.environ.get(DISABLE_ENTRY_POINTS_ENV, "") not in ("", "0"):
        _STATE.entry_points_loaded = True
        return
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep.dist, "name", None) or "an unknown distribution"
        _add(
            _Entry(
                name=ep.name,
                aliases=(),
                description=None,
                target=ep.value,
                source=f"entry point {dist} ({ep.value})",
            )
        )
    _STATE.entry_points_loaded = True


def reload_entry_points() -> None:
    """Forget the entry points scanned so far and scan the group again on the next lookup.

    For tests and notebooks that install a distribution after the first lookup. Entries registered by decorators are
    kept; lazy entry-point entries that were never loaded are dropped first.
    """
    for name, entry in list(_STATE.entries.items()):
        if entry.source.startswith("entry point") and entry.obj is None:
            del _STATE.entries[name]
            for key in [k for k, v in _STATE.names.items() if v == name]:
                del _STATE.names[key]
    _STATE.entry_points_loaded = False


def is_import_path(name: str) -> bool:
    """Whether a reward name is read as an import path (it holds ``:`` or ``.``, which registered names cannot)."""
    return ":" in name or "." in name


def split_import_path(path: str) -> tuple[str, str]:
    """``(module, attribute)`` of an import path: ``"pkg.module:obj.attr"`` splits at the colon, ``"pkg.module.obj"``
    at the last dot.

    Raises:
        UnknownRewardError: either part is empty ("is malformed; write 'pkg.module:function'").
    """
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise UnknownRewardError(f"Reward import path {path!r} is malformed; write 'pkg.module:function'.")
    return module_name, attr


def _import_path(path: str) -> Any:
    module_name, attr = split_import_path(path)
    try:
        obj = import_module(module_name)
    except ImportError as exc:
        raise UnknownRewardError(
            f"Reward import path {path!r}: cannot import module {module_name!r} ({exc}). Check the spelling and "
            "that the package is installed."
        ) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise UnknownRewardError(
                f"Reward import path {path!r}: module {module_name!r} has no attribute {attr!r}."
            ) from exc
    return obj


def _load(entry: _Entry) -> Any:
    if entry.obj is None:
        try:
            entry.obj = _import_path(entry.target)
        except UnknownRewardError as exc:
            raise UnknownRewardError(
                f"Reward {entry.name!r} from {entry.source} cannot be loaded: {exc} Set {DISABLE_ENTRY_POINTS_ENV}=1 to "
                "skip third-party rewards."
            ) from exc
        entry.description = entry.description or _first_line(getattr(entry.obj, "__doc__", None)) or None
    return entry.obj


def _info(entry: _Entry) -> RewardInfo:
    params = None if entry.obj is None else parameters_of(entry.obj)
    return RewardInfo(
        name=entry.name,
        aliases=entry.aliases,
        description=entry.description or f"(no description; see {entry.target})",
        parameters=params,
        source=entry.source,
        example_kwargs=dict(entry.example_kwargs),
    )


def _all_names() -> list[str]:
    return sorted(_STATE.names)


def _unknown(name: str) -> UnknownRewardError:
    names = _all_names()
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return UnknownRewardError(
        f"Unknown reward {name!r}.{hint} Available: {', '.join(sorted(_STATE.entries))}. "
        "An import path ('pkg.module:function') also works."
    )


def get_reward_info(name: str) -> RewardInfo:
    """The :class:`RewardInfo` of a registered reward, by name or alias (import paths are not registered).

    Raises:
        UnknownRewardError: nothing is registered under ``name``; the message suggests the closest name.
    """
    _ensure_loaded()
    canonical = _STATE.names.get(name)
    if canonical is None:
        raise _unknown(name)
    return _info(_STATE.entries[canonical])


def check_reward_name(name: str) -> str:
    """Check that ``name`` selects a reward without importing anything heavy; return the canonical/metric name.

    A registered name or alias gives its canonical name. An import path is only checked for its form (it is
    imported by :func:`get_reward`), and gives its last component as the name.

    Raises:
        UnknownRewardError: an unknown name (with a "did you mean" suggestion), a malformed path, or a model id.
    """
    if not isinstance(name, str) or not name:
        raise UnknownRewardError(f"Reward name {name!r} must be a non-empty string such as 'accuracy'.")
    _ensure_loaded()
    if name in _STATE.names:
        return _STATE.names[name]
    if "/" in name:  # TRL's reward_funcs also take a reward model's Hub id or folder; the registry does not
        raise UnknownRewardError(
            f"Reward {name!r} looks like a model id or path: reward models (a sequence-classification model in TRL's "
            "reward_funcs) are not selectable here. Select reward functions by name, or wrap the model in a reward "
            "function registered with @register_reward (docs/rewards.md).")
    if is_import_path(name):
        return split_import_path(name)[1].split(".")[-1]
    raise _unknown(name)


def get_reward(name_or_path: str, **kwargs: Any) -> Any:
    """Look up a reward and return a callable for TRL's ``reward_funcs``.

    Args:
        name_or_path (`str`): a registered name or alias, an entry-point name, or an import path
            (``"pkg.module:obj"`` / ``"pkg.module.obj"``).
        **kwargs: parameters. A class is instantiated with them; a function gets them bound (``functools.partial``,
            keyword-only arguments only).

    Returns:
        A picklable callable ``f(prompts=, completions=, completion_ids=, **columns) -> list[float | None]`` when the
        registered object is picklable (built-ins are).

    Raises:
        UnknownRewardError: unknown name (with "did you mean" and the list of available names), or an import path
            that cannot be imported.
        ValueError: unknown or missing parameters (the message lists the accepted ones), or a non-callable object.
    """
    if not isinstance(name_or_path, str) or not name_or_path:
        raise UnknownRewardError(f"Reward name {name_or_path!r} must be a non-empty string such as 'accuracy'.")
    _ensure_loaded()
    canonical = _STATE.names.get(name_or_path)
    if canonical is not None:
        obj = _load(_STATE.entries[canonical])
        return bind_parameters(canonical, obj, kwargs)
    if is_import_path(name_or_path):
        obj = _import_path(name_or_path)
        name = getattr(obj, REWARD_NAME_ATTR, None) or getattr(obj, "__name__", name_or_path)
        return bind_parameters(name, obj, kwargs)
    raise _unknown(name_or_path)


def list_rewards() -> list[RewardInfo]:
    """Every registered reward (built-ins, decorated, entry points), sorted by name.

    Entry points are listed without importing their modules, so their ``parameters`` are ``None`` until first used.
    """
    _ensure_loaded()
    return [_info(_STATE.entries[name]) for name in sorted(_STATE.entries)]
