"""Tests of trl_grpo_ext.rewards.registry: every registered reward, lookup, errors, entry points, import paths."""

from __future__ import annotations

import copy
import importlib
import math
import pickle
import sys
import textwrap

import pytest
import yaml

from trl_grpo_ext.rewards import (
    DuplicateRewardError,
    UnknownRewardError,
    build_reward_funcs,
    get_reward,
    get_reward_info,
    list_rewards,
    parse_reward_specs,
    register_reward,
    reload_entry_points,
)
from trl_grpo_ext.rewards import registry as reg
from trl_grpo_ext.rewards.builtin import ExactMatch

BUILTINS = {
    "accuracy", "exact_match", "numeric_match", "format", "tag_count", "length", "soft_overlong",
    "repetition_penalty", "char_fraction", "think_format_reward", "accuracy_reward", "reasoning_accuracy_reward",
    "cosine_scaled_reward", "repetition_penalty_reward",
}  # fmt: skip


@pytest.fixture
def registry_state(monkeypatch):
    """Snapshot the registry and restore it after the test (tests register throw-away rewards)."""
    reg._ensure_loaded()
    saved = (copy.copy(reg._STATE.entries), dict(reg._STATE.names), reg._STATE.entry_points_loaded)
    yield reg._STATE
    reg._STATE.entries, reg._STATE.names, reg._STATE.entry_points_loaded = saved


# ------------------------------------------------------------------ every registered reward, tested for free
TEXTS = ["<think>so</think><answer>72</answer>", "The answer is \\boxed{72}", "a a a a a a a"]


def _batch(conversational: bool) -> dict:
    prompts = ["What is 70 + 2?"] * 3
    completions = list(TEXTS)
    if conversational:
        prompts = [[{"role": "user", "content": p}] for p in prompts]
        completions = [[{"role": "assistant", "content": c}] for c in completions]
    logged = []
    return dict(
        prompts=prompts,
        completions=completions,
        completion_ids=[[1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11, 12], [7] * 7],
        solution=["72", "#### 72", "\\frac{1}{2}"],
        answer=["#### 72", "#### 72", "#### 3"],
        target=["a", "a", "a"],
        trainer_state=None,
        log_extra=lambda name, values: logged.append((name, values)),
        log_metric=lambda name, value: logged.append((name, value)),
    )


REGISTERED = [info.name for info in list_rewards()]


def test_builtins_are_registered():
    assert BUILTINS <= set(REGISTERED)


@pytest.mark.parametrize("name", REGISTERED)
def test_every_reward_is_picklable_documented_and_scores_both_formats(name):
    info = get_reward_info(name)
    assert info.description and info.parameters is not None
    fn = get_reward(name, **info.example_kwargs)
    obj = type(fn) if not hasattr(fn, "func") else fn.func
    doc = (obj.__doc__ or "").lower()
    assert "range" in doc and "source" in doc, f"{name}: docstring must give the formula's range and source"
    assert getattr(fn, "__name__", None) == name
    clone = pickle.loads(pickle.dumps(fn))
    for conversational in (False, True):
        for reward in (fn, clone):
            values = reward(**_batch(conversational))
            assert isinstance(values, list) and len(values) == 3
            assert all(v is None or (isinstance(v, float) and math.isfinite(v)) for v in values), values
    plain, conv = fn(**_batch(False)), fn(**_batch(True))
    assert plain == conv
    guarded, weights = build_reward_funcs(parse_reward_specs([{"name": name, "kwargs": info.example_kwargs}]))
    assert guarded[0].__name__ == name and weights == [1.0]
    assert pickle.loads(pickle.dumps(guarded[0]))(**_batch(True)) == conv


# ------------------------------------------------------------------ lookup
def test_alias_selects_the_canonical_reward():
    assert get_reward_info("math_accuracy").name == "accuracy"
    assert get_reward("math_accuracy").__name__ == "accuracy"
    assert get_reward_info("soft_overlong_punishment_reward").name == "soft_overlong"


def test_unknown_name_suggests_and_lists():
    with pytest.raises(UnknownRewardError) as err:
        get_reward("acurracy")
    msg = str(err.value)
    assert msg.startswith("Unknown reward 'acurracy'. Did you mean 'accuracy'? Available: accuracy, ")
    assert "exact_match" in msg and "soft_overlong" in msg
    assert isinstance(err.value, ValueError)
    with pytest.raises(UnknownRewardError, match=r"^Unknown reward 'zzzz'\. Available: "):
        get_reward("zzzz")


def test_parameters_are_checked_with_suggestions():
    with pytest.raises(
        ValueError, match=r"Reward 'repetition_penalty' has no parameter 'ngram'\. Did you mean 'ngram_size'\?"
    ):
        get_reward("repetition_penalty", ngram=2)
    with pytest.raises(ValueError, match=r"Reward 'length' needs the parameter\(s\) max_length"):
        get_reward("length")
    assert get_reward("repetition_penalty", ngram_size=1)(completions=["x x x x"]) == [-0.75]  # 1 - 1/4 unique


def test_parameters_listed_from_signature():
    params = {p.name: p for p in get_reward_info("length").parameters}
    assert params["max_length"].required and not params["min_length"].required
    assert params["min_length"].default == 0 and params["unit"].default == "tokens"


def test_dotted_import_paths(registry_state):
    for path in ("trl_grpo_ext.rewards.builtin:ExactMatch", "trl_grpo_ext.rewards.builtin.ExactMatch"):
        fn = get_reward(path, case_sensitive=True)
        assert isinstance(fn, ExactMatch) and fn.case_sensitive
    with pytest.raises(
        UnknownRewardError, match=r"cannot import module 'no_such_pkg.mod' \(No module named 'no_such_pkg'\)"
    ):
        get_reward("no_such_pkg.mod:fn")
    with pytest.raises(UnknownRewardError, match="has no attribute 'Nope'"):
        get_reward("trl_grpo_ext.rewards.builtin:Nope")


def _keyword_reward(completions, solution=None, *, bonus: float = 0.0, **kwargs):
    """Test reward: 1 + bonus per completion. Range any. Source: this test."""
    return [1.0 + bonus for _ in completions]


def test_function_parameters_are_keyword_only_and_bound(registry_state):
    register_reward("kw_test")(_keyword_reward)
    info = get_reward_info("kw_test")
    assert [p.name for p in info.parameters] == ["bonus"]  # `solution` is a dataset column, not a parameter
    fn = get_reward("kw_test", bonus=2.0)
    assert fn(completions=["x", "y"]) == [3.0, 3.0]
    assert pickle.loads(pickle.dumps(fn))(completions=["x"]) == [3.0]
    with pytest.raises(ValueError, match="has no parameter 'solution'"):
        get_reward("kw_test", solution="x")


def test_duplicates_are_fatal_but_re_registration_is_not(registry_state):
    register_reward("dup_test", "dup_alias")(_keyword_reward)
    register_reward("dup_test", "dup_alias")(_keyword_reward)  # same object again (a module reload): accepted

    def other(completions, **kwargs):
        return [0.0] * len(completions)

    with pytest.raises(
        DuplicateRewardError, match=r"Reward name 'dup_test' is already registered by .*_keyword_reward"
    ):
        register_reward("dup_test")(other)
    with pytest.raises(DuplicateRewardError, match="'dup_alias' is already registered"):
        register_reward("new_name", "dup_alias")(other)
    with pytest.raises(DuplicateRewardError, match="'accuracy' is already registered"):
        register_reward("accuracy")(other)
    with pytest.raises(ValueError, match="not valid"):
        register_reward("has.dot")(other)


# ------------------------------------------------------------------ third-party entry points
def _make_distribution(root, dist_name: str, module: str, entry_points: str) -> None:
    (root / f"{module}.py").write_text(
        textwrap.dedent(
            '''
            class Shout:
                """1.0 per exclamation mark, capped at `cap`. Range [0, cap]. Source: test."""

                def __init__(self, cap: float = 3.0):
                    self.cap = cap
                    self.__name__ = "shout"

                def __call__(self, completions, **kwargs):
                    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
                    return [min(self.cap, float(t.count("!"))) for t in texts]
            '''
        )
    )
    info = root / f"{dist_name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[trl_grpo_ext.rewards]\n{entry_points}\n")


@pytest.fixture
def third_party(tmp_path, monkeypatch, registry_state):
    _make_distribution(tmp_path, "tiny-reward-pkg", "tiny_reward_mod", "shout = tiny_reward_mod:Shout")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(reg.DISABLE_ENTRY_POINTS_ENV, raising=False)
    importlib.invalidate_caches()
    reload_entry_points()
    yield tmp_path
    sys.modules.pop("tiny_reward_mod", None)
    reload_entry_points()


def test_entry_point_is_listed_lazily_and_selected_from_yaml(third_party):
    info = {i.name: i for i in list_rewards()}["shout"]
    assert info.source == "entry point tiny-reward-pkg (tiny_reward_mod:Shout)"
    assert info.parameters is None and "tiny_reward_mod" not in sys.modules  # listed without importing it
    config = yaml.safe_load("rewards:\n  - {name: shout, weight: 2.0, kwargs: {cap: 1.5}}\n  - exact_match\n")
    specs = parse_reward_specs(config["rewards"])
    funcs, weights = build_reward_funcs(specs)
    assert weights == [2.0, 1.0] and [f.__name__ for f in funcs] == ["shout", "exact_match"]
    assert funcs[0](prompts=["p", "p"], completions=["hey!", "wow!!!"]) == [1.0, 1.5]
    assert get_reward_info("shout").parameters[0].name == "cap"  # known once loaded


def test_entry_point_clashing_with_a_builtin_is_fatal(tmp_path, monkeypatch, registry_state):
    _make_distribution(tmp_path, "clash-pkg", "clash_mod", "accuracy = clash_mod:Shout")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    reload_entry_points()
    with pytest.raises(
        DuplicateRewardError, match=r"'accuracy' is already registered .* entry point clash-pkg"
    ) as err:
        get_reward("exact_match")
    assert "TRL_GRPO_EXT_DISABLE_ENTRY_POINTS=1" in str(err.value)
    monkeypatch.setenv("TRL_GRPO_EXT_DISABLE_ENTRY_POINTS", "1")
    reload_entry_points()
    assert get_reward("accuracy").__name__ == "accuracy"  # the off switch skips the scan
    reload_entry_points()
    monkeypatch.delenv("TRL_GRPO_EXT_DISABLE_ENTRY_POINTS")


def test_off_switch_hides_entry_points(third_party, monkeypatch):
    monkeypatch.setenv("TRL_GRPO_EXT_DISABLE_ENTRY_POINTS", "1")
    reload_entry_points()
    with pytest.raises(UnknownRewardError, match="Unknown reward 'shout'"):
        get_reward("shout")


def test_entry_point_module_that_registers_itself(tmp_path, monkeypatch, registry_state):
    (tmp_path / "self_reg_mod.py").write_text(
        textwrap.dedent(
            '''
            from trl_grpo_ext.rewards import register_reward

            @register_reward("self_reg", "self_reg_alias")
            def self_reg(completions, **kwargs):
                """0.5 per completion. Range {0.5}. Source: test."""
                return [0.5] * len(completions)
            '''
        )
    )
    info = tmp_path / "self_reg_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: self-reg-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[trl_grpo_ext.rewards]\nself_reg = self_reg_mod:self_reg\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    reload_entry_points()
    try:
        assert get_reward("self_reg")(completions=["x"]) == [0.5]  # the module's own registration is no duplicate
        assert get_reward_info("self_reg_alias").source == "entry point self-reg-pkg (self_reg_mod:self_reg)"
    finally:
        sys.modules.pop("self_reg_mod", None)


def test_a_reward_model_id_is_refused_with_what_to_do_instead():
    # TRL's reward_funcs accept a reward model's Hub id; the registry selects functions only
    from trl_grpo_ext.rewards import UnknownRewardError, check_reward_name

    with pytest.raises(UnknownRewardError, match=r"'Qwen/Qwen2.5-0.5B-reward' looks like a model id or path: reward "
                                                 r"models .* not selectable here.*@register_reward"):
        check_reward_name("Qwen/Qwen2.5-0.5B-reward")
