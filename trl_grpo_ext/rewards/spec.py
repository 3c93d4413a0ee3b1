"""Reward selection from YAML/CLI: parse ``rewards:`` entries into :class:`RewardSpec` and build TRL's arguments.

Accepted forms of the ``rewards`` list (YAML), one item per reward::

    rewards:
      - accuracy                                   # a name: weight 1.0, no parameters
      - {name: format, weight: 0.5}
      - name: length
        weight: 0.2
        kwargs: {max_length: 256, unit: tokens}
      - my_pkg.rewards:my_reward                  # an import path

On the command line each item may also be a JSON string: ``--rewards accuracy '{"name": "format", "weight": 0.5}'``.
Weights go either on the items or in TRL's ``reward_weights`` list, not both. Pure Python: no torch import.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config.checks import Range, check_choice
from .guard import REWARD_ERROR_POLICIES, guard_reward
from .parameters import check_number
from .registry import check_reward_name, get_reward, is_import_path

_KEYS = ("name", "weight", "kwargs")
_EXAMPLE = "e.g. `- accuracy` or `- {name: format, weight: 0.5, kwargs: {answer_tag: answer}}`"


@dataclass(frozen=True)
class RewardSpec:
    """One selected reward: its name (or import path), weight in TRL's weighted sum, and parameters.

    Args:
        name (`str`): registered name, alias, entry-point name or import path (``"pkg.module:obj"``).
        weight (`float`, defaults to `1.0`): weight of this reward in TRL's ``reward_weights``.
        kwargs (`dict`, defaults to ``{}``): parameters passed to :func:`~trl_grpo_ext.rewards.get_reward`.
    """

    name: str
    weight: float = 1.0
    kwargs: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """``{"name", "weight", "kwargs"}``, JSON/YAML-serialisable when the kwargs are; it parses back unchanged."""
        return {"name": self.name, "weight": self.weight, "kwargs": dict(self.kwargs)}


#: A reward's weight in TRL's weighted sum: any finite number.
_WEIGHT = Range(fix="e.g. `weight: 0.5`.")


def weight_warnings(specs: Sequence[RewardSpec]) -> list[str]:
    """A warning per reward of weight 0: TRL computes and logs it (``rewards/<name>/mean``) but it adds nothing to
    the weighted sum, so it does not train. A negative weight is a penalty (it subtracts) and is not warned about.

    >>> weight_warnings([RewardSpec("accuracy", 1.0), RewardSpec("format", 0.0)])[0][:41]
    "rewards[1] 'format' has weight 0: it is c"
    """
    return [f"rewards[{i}] {spec.name!r} has weight 0: it is computed and logged (rewards/{spec.name}/mean) but adds "
            "nothing to the advantages, so it does not train (a metric only). Give it a weight if it should train, "
            "or remove it." for i, spec in enumerate(specs) if spec.weight == 0]


def _weight(value: Any, where: str) -> float:
    if isinstance(value, str):  # PyYAML reads `5e-1` as a string; argparse reads `learning_rate: 5e-1` as a float
        try:
            value = float(value)
        except ValueError:
            pass
    return float(check_number(f"{where}: weight", value, _WEIGHT))


def _list_string(item: Any) -> list:
    """A CLI string holding a JSON/YAML list (``--rewards '[accuracy, {"name": "format", "weight": 0.5}]'``) as its
    items; any other item as itself."""
    if not (isinstance(item, str) and item.strip().startswith("[")):
        return [item]
    import yaml

    try:
        items = yaml.safe_load(item)
    except yaml.YAMLError as exc:
        raise ValueError(f"rewards ({item!r}) is not a valid list ({type(exc).__name__}); {_EXAMPLE}, or on the CLI "
                         "--rewards accuracy format (one name each).") from exc
    return items if isinstance(items, list) else [item]


def _item(item: Any, index: int) -> tuple[RewardSpec, bool]:
    """Parse one item; returns the spec and whether it set its own weight."""
    where = f"rewards[{index}] ({item!r})"
    if isinstance(item, str) and item.strip().startswith("{"):  # a JSON or YAML flow mapping from the CLI
        import yaml

        try:
            item = yaml.safe_load(item)
        except yaml.YAMLError as exc:
            raise ValueError(
                f"{where} is not a valid mapping ({type(exc).__name__}); {_EXAMPLE}, or on the CLI "
                '\'{"name": "format", "weight": 0.5}\'.'
            ) from exc
    if isinstance(item, str):
        return RewardSpec(item.strip()), False
    if not isinstance(item, dict):
        raise ValueError(f"{where} must be a reward name or a mapping with keys {list(_KEYS)}; {_EXAMPLE}.")
    unknown = sorted(set(item) - set(_KEYS))
    if unknown:
        raise ValueError(
            f"{where} has unknown key(s) {unknown}; allowed keys are {list(_KEYS)} (reward parameters go under "
            "`kwargs`)."
        )
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{where} needs a `name` (a non-empty string); {_EXAMPLE}.")
    kwargs = item.get("kwargs") or {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise ValueError(
            f"{where}: kwargs must be a mapping of parameter names to values, e.g. `kwargs: {{ngram_size: 3}}`."
        )
    has_weight = item.get("weight") is not None
    weight = _weight(item["weight"], where) if has_weight else 1.0
    return RewardSpec(name.strip(), weight, dict(kwargs)), has_weight


def parse_reward_specs(
    value: Any, reward_weights: Sequence[float] | None = None, check_names: bool = True
) -> list[RewardSpec]:
    """Parse the ``rewards`` setting into :class:`RewardSpec` objects.

    Args:
        value: a list whose items are a name string, a dict ``{name, weight, kwargs}`` or a JSON string of such a
            dict; a single item is accepted as a one-item list; ``None`` or ``[]`` gives ``[]``.
        reward_weights (`list[float]`, *optional*): TRL's ``reward_weights``, one weight per item, instead of
            per-item weights.
        check_names (`bool`, defaults to `True`): check every name against the registry (entry points included;
            import paths are only checked for their form), so a typo fails before any model loads.

    Returns:
        `list[RewardSpec]` in the given order, weights filled in.

    Raises:
        ValueError: a malformed item (naming ``rewards[i]`` and the fix), a non-finite weight, weights given both
            per item and in ``reward_weights``, a ``reward_weights`` length different from the number of rewards,
            or the same reward selected twice (TRL would log both under one metric name).
        UnknownRewardError: an unknown name (with "did you mean").
    """
    if value is None:
        items: list = []
    elif isinstance(value, (str, dict)):
        items = [value]
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        raise ValueError(f"rewards={value!r} must be a list of rewards; {_EXAMPLE}.")
    items = [entry for item in items for entry in _list_string(item)]
    parsed = [_item(item, i) for i, item in enumerate(items)]
    specs = [spec for spec, _ in parsed]
    if reward_weights is not None:
        weights = list(reward_weights)
        own = [i for i, (_, has_weight) in enumerate(parsed) if has_weight]
        if own:
            raise ValueError(
                f"Weights are given both in reward_weights={weights} and on rewards{own}; give them in one place "
                "(preferably `weight:` on each reward) and remove the other."
            )
        if len(weights) != len(specs):
            raise ValueError(
                f"reward_weights has {len(weights)} values but {len(specs)} rewards are selected "
                f"({[s.name for s in specs]}); give one weight per reward, or put `weight:` on each reward instead."
            )
        specs = [
            RewardSpec(s.name, _weight(w, f"reward_weights[{i}]"), s.kwargs)
            for i, (s, w) in enumerate(zip(specs, weights))
        ]
    if check_names:
        seen: dict[str, int] = {}
        for i, spec in enumerate(specs):
            metric = check_reward_name(spec.name)
            if metric in seen:
                raise ValueError(
                    f"rewards[{seen[metric]}] and rewards[{i}] both select {metric!r}; TRL would log them under one "
                    "metric name. Select each reward once (combine the weights)."
                )
            seen[metric] = i
    return specs


def build_reward_funcs(specs: Sequence[RewardSpec], on_error: str = "raise") -> tuple[list, list[float]]:
    """Resolve specs through the registry into TRL's ``reward_funcs`` and ``reward_weights``.

    Args:
        specs (`list[RewardSpec]`): from :func:`parse_reward_specs`.
        on_error (`str`, defaults to ``"raise"``): policy of every guard, ``"raise"`` or ``"none"`` (see
            :mod:`~trl_grpo_ext.rewards.guard`).

    Returns:
        `(reward_funcs, reward_weights)`: one guarded, picklable callable per spec (``__name__`` = the canonical
        reward name, TRL's metric name) and the weights as floats.

    Raises:
        ValueError: unknown ``on_error``, unknown reward or bad parameters (naming the reward).
    """
    check_choice("on_error", on_error, REWARD_ERROR_POLICIES, error=ValueError)
    funcs, weights = [], []
    for spec in specs:
        name = check_reward_name(spec.name)
        funcs.append(guard_reward(get_reward(spec.name, **spec.kwargs), name=name, on_error=on_error))
        weights.append(float(spec.weight))
    return funcs, weights


def format_reward_specs(specs: Sequence[RewardSpec]) -> str:
    """One line listing the resolved rewards with their weights and keyword arguments, for the printed plan.

    >>> format_reward_specs([RewardSpec("accuracy", 1.0, {"column": "answer"}), RewardSpec("format", 0.25)])
    "rewards: accuracy × 1 (column='answer') + format × 0.25"
    """
    parts = []
    for spec in specs:
        kwargs = ", ".join(f"{k}={v!r}" for k, v in spec.kwargs.items())
        parts.append(f"{spec.name} × {spec.weight:g}" + (f" ({kwargs})" if kwargs else ""))
    return "rewards: " + (" + ".join(parts) if parts else "none")


def with_run_defaults(specs: Sequence[RewardSpec], max_completion_length: int) -> list[RewardSpec]:
    """Fill the keyword arguments a reward takes from the run: a registered reward with a ``max_completion_len``
    parameter (``soft_overlong``) gets the run's ``max_completion_length`` [tokens] unless it was given.

    Import paths (``pkg.module:fn``) are returned unchanged: their parameters are not known before import.
    """
    from .registry import get_reward_info

    out = []
    for spec in specs:
        registered = not is_import_path(spec.name)
        parameters = (get_reward_info(spec.name).parameters or ()) if registered else ()
        if any(p.name == "max_completion_len" for p in parameters) and "max_completion_len" not in spec.kwargs:
            spec = RewardSpec(spec.name, spec.weight, {**spec.kwargs, "max_completion_len": max_completion_length})
        out.append(spec)
    return out
