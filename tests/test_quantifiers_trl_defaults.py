"""TRL_DEFAULTS must equal trl.GRPOConfig's dataclass defaults, so "set" detection cannot drift with TRL."""

import dataclasses

from trl_grpo_ext.plan import TRL_DEFAULTS


def test_trl_defaults_match_grpo_config():
    from trl import GRPOConfig

    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig) if f.name in TRL_DEFAULTS}
    assert set(defaults) == set(TRL_DEFAULTS)
    for name, value in TRL_DEFAULTS.items():
        assert defaults[name] == value and type(defaults[name]) is type(value), name
