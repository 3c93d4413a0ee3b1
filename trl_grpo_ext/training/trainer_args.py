"""The arguments of `GRPOExtTrainer` as TRL's `GRPOTrainer` takes them: ``args`` left out or a plain `trl.GRPOConfig`,
the reward sources (``reward_funcs``, the config's ``rewards``, an environment that owns its reward) and a missing
``train_dataset``, each answered as TRL answers it, before any model loads."""

from __future__ import annotations

import logging
from dataclasses import fields

import torch
from trl import GRPOConfig

from .. import _trl_compat
from ..config.ext_config import GRPOExtConfig

logger = logging.getLogger(__name__)

#: TRL's own words (`GRPOTrainer.__init__`), kept so that a user's ``except`` clause or test that matches them still does.
NO_DATASET = "`train_dataset` is required unless an `environment_factory` is provided."
NO_REWARD_SOURCE = "No reward source provided."


def ext_config(args, model) -> GRPOExtConfig:
    """``args`` as a `GRPOExtConfig`.

    Args:
        args (`GRPOExtConfig`, `trl.GRPOConfig` or `None`): the trainer's ``args``. `None` gives the defaults with
            ``output_dir`` ``<model name>-GRPO``, as TRL does; a plain `GRPOConfig` gives a `GRPOExtConfig` of the
            same field values (every trl-grpo-ext feature at its default), with one info line saying so.
        model (`str` or `PreTrainedModel`): the trainer's ``model`` (for the default ``output_dir``).

    Raises:
        TypeError: ``args`` is none of these.
    """
    if isinstance(args, GRPOExtConfig):
        return args
    if args is None:
        return GRPOExtConfig(_trl_compat.default_output_dir(model))
    if not isinstance(args, GRPOConfig):
        raise TypeError(f"args must be a GRPOConfig (or a GRPOExtConfig), got {type(args).__name__}.")
    values = {f.name: getattr(args, f.name) for f in fields(GRPOConfig) if f.init}
    if values["generation_batch_size"] is not None:  # TRL wrote both (one from the other): one gives the same pair
        values["steps_per_generation"] = None
    config = GRPOExtConfig(**values)
    logger.info("args is a plain trl.GRPOConfig: trained as a GRPOExtConfig of the same values, every trl-grpo-ext "
                "setting at its default (zero_variance_filter off, TRL's advantages, full-precision adapters).")
    return config


def named(more: tuple, kwargs: dict) -> dict:
    """``kwargs`` with the arguments given by position after ``train_dataset`` named as `GRPOTrainer.__init__` names
    them (``eval_dataset``, ``processing_class``, ...), so that the trainer's signature behaves as TRL's."""
    import inspect

    from trl import GRPOTrainer

    if not more:
        return kwargs
    names = list(inspect.signature(GRPOTrainer.__init__).parameters)
    after = names[names.index("train_dataset") + 1:]
    if len(more) > len(after):
        raise TypeError(f"GRPOExtTrainer takes at most {len(after) + 4} positional arguments ({len(more) + 4} given)")
    given = dict(zip(after, more, strict=False))
    twice = sorted(set(given) & set(kwargs))
    if twice:
        raise TypeError(f"GRPOExtTrainer got multiple values for argument(s) {twice}")
    return {**given, **kwargs}


def check_train_dataset(train_dataset, environment_factory) -> None:
    """TRL's refusal of a run with no data, in TRL's words (the plan would otherwise ask for a step limit)."""
    if train_dataset is None and environment_factory is None:
        raise ValueError(f"{NO_DATASET} Pass train_dataset=, or an environment_factory whose environment returns the "
                         "prompt from reset() (with max_steps).")


def reward_funcs_from_args(reward_funcs, args: GRPOExtConfig, environment_factory=None) -> list:
    """The reward functions TRL receives, every Python callable wrapped by `guard_reward` (args.reward_error_policy).

    Registry names come from ``args.rewards``; callables passed as ``reward_funcs=`` are guarded too (a NaN, a wrong
    length or an exception is reported with the reward's name). Reward models (``nn.Module``) and Hub ids (``str``)
    go to TRL unchanged. With neither, an ``environment_factory`` may own the reward (its environment's
    ``get_reward``): the list is empty and TRL adds it; without one, TRL's ``No reward source provided`` is raised here,
    before the model loads.
    """
    from ..rewards.guard import AsyncRewardGuard, RewardGuard, guard_reward
    from ..rewards.spec import build_reward_funcs, with_run_defaults

    if args.rewards and reward_funcs is not None:
        raise ValueError(
            "Rewards were given twice: as reward_funcs= to the trainer and as `rewards` in the config. Keep one."
        )
    if reward_funcs is not None:
        funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
        return [
            guard_reward(f, _trl_compat.reward_func_name(f), on_error=args.reward_error_policy)
            if callable(f) and not isinstance(f, (str, torch.nn.Module, RewardGuard, AsyncRewardGuard))
            else f
            for f in funcs
        ]
    if not args.rewards:
        if environment_factory is not None:
            return []  # TRL checks that an environment defines get_reward ("No reward source provided" otherwise)
        raise ValueError(f"{NO_REWARD_SOURCE} Pass reward_funcs=, set `rewards: [name, ...]` in the config, or pass an "
                         "`environment_factory` whose environment defines a `get_reward` method.")
    specs = with_run_defaults(list(args.resolved.rewards), args.max_completion_length)
    funcs, _weights = build_reward_funcs(specs, on_error=args.reward_error_policy)
    return funcs
