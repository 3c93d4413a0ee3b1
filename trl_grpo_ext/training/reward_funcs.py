"""The reward functions `GRPOExtTrainer` hands TRL: the config's registry rewards or the caller's, each guarded."""

from __future__ import annotations

import torch

from .. import _trl_compat


def reward_funcs_from_args(reward_funcs, args):
    """The reward functions TRL receives, every Python callable wrapped by `guard_reward` (args.reward_error_policy).

    Registry names come from ``args.rewards``; callables passed as ``reward_funcs=`` are guarded too (a NaN, a wrong
    length or an exception is reported with the reward's name). Reward models (``nn.Module``) and Hub ids (``str``)
    go to TRL unchanged.
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
        raise ValueError("No reward function: set `rewards: [name, ...]` in the config or pass reward_funcs=.")
    specs = with_run_defaults(list(args.resolved.rewards), args.max_completion_length)
    funcs, _weights = build_reward_funcs(specs, on_error=args.reward_error_policy)
    return funcs
