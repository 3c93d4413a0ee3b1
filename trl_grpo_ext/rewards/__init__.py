"""Reward functions for GRPO, selectable by name: a registry, built-in rewards, a guard and the YAML/CLI spec parser.

>>> from trl_grpo_ext.rewards import get_reward, list_rewards
>>> reward = get_reward("exact_match")
>>> reward(completions=["The answer is <answer>72</answer>"], solution=["#### 72"])
[1.0]

Importing this package imports neither torch, trl nor math_verify: TRL's rewards and math-verify are imported when a
reward that needs them is first called. See ``docs/rewards.md``.
"""

from . import builtin, math, trl_rewards  # noqa: F401  (register the built-ins)
from .builtin import CharFraction, ExactMatch, Format, Length, NumericMatch, RepetitionPenalty, TagCount
from .guard import AsyncRewardGuard, RewardFunctionError, RewardGuard, guard_reward
from .math import Accuracy
from .parameters import RewardParameter
from .registry import (
    DISABLE_ENTRY_POINTS_ENV,
    ENTRY_POINT_GROUP,
    DuplicateRewardError,
    RewardInfo,
    UnknownRewardError,
    check_reward_name,
    get_reward,
    get_reward_info,
    list_rewards,
    register_reward,
    reload_entry_points,
)
from .spec import RewardSpec, build_reward_funcs, parse_reward_specs
from .trl_rewards import SoftOverlong, TrlReward

__all__ = [
    "DISABLE_ENTRY_POINTS_ENV",
    "ENTRY_POINT_GROUP",
    "Accuracy",
    "AsyncRewardGuard",
    "CharFraction",
    "DuplicateRewardError",
    "ExactMatch",
    "Format",
    "Length",
    "NumericMatch",
    "RepetitionPenalty",
    "RewardFunctionError",
    "RewardGuard",
    "RewardInfo",
    "RewardParameter",
    "RewardSpec",
    "SoftOverlong",
    "TagCount",
    "TrlReward",
    "UnknownRewardError",
    "build_reward_funcs",
    "check_reward_name",
    "get_reward",
    "get_reward_info",
    "guard_reward",
    "list_rewards",
    "parse_reward_specs",
    "register_reward",
    "reload_entry_points",
]
