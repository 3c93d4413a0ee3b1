"""Tests of trl_grpo_ext.rewards.guard: every failure kind, both policies, and TRL's calling convention."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import pathlib
import pickle
import re

import numpy as np
import pytest

from trl_grpo_ext.rewards import AsyncRewardGuard, RewardFunctionError, RewardGuard, guard_reward
from trl_grpo_ext.rewards.parameters import TRAINER_KWARGS

PROMPTS = ["Add 1 and 1.", "Add 2 and 2.", "Add 3 and 3."]
COMPLETIONS = ["2", "bad answer", "6"]


class Metrics:
    """Stands in for TRL's `log_metric`."""

    def __init__(self):
        self.logged = []

    def __call__(self, name, value):
        self.logged.append((name, value))


def call(guard, completions=COMPLETIONS, **kwargs):
    metrics = Metrics()
    out = guard(prompts=PROMPTS[: len(completions)], completions=completions, completion_ids=None,
                log_metric=metrics, **kwargs)  # fmt: skip
    return out, metrics.logged


# module-level rewards so that they pickle
def fails_on_bad(completions, **kwargs):
    return [1.0 / (0 if "bad" in c else 1) for c in completions]


def fails_on_batches(completions, **kwargs):
    if len(completions) > 1:
        raise RuntimeError("batch too large")
    return [1.0]


def returns(values):
    def reward(completions, **kwargs):
        return values

    return reward


def test_passes_valid_values_and_converts_scalars():
    guard = guard_reward(returns([True, np.float32(0.5), np.int64(2)]), "ok")
    assert guard.__name__ == "ok" and isinstance(guard, RewardGuard)
    out, logged = call(guard)
    assert out == [1.0, 0.5, 2.0] and all(type(v) is float for v in out)
    assert logged == []  # nothing to count under on_error="raise"
    assert call(guard_reward(returns(np.array([0.0, None, 1.0], dtype=object)), "arr"))[0] == [0.0, None, 1.0]
    assert call(guard_reward(returns(np.array([0.25, 0.5, 1.0])), "np"))[0] == [0.25, 0.5, 1.0]


def test_torch_scalars_accepted():
    torch = pytest.importorskip("torch")
    out, _ = call(guard_reward(returns([torch.tensor(0.5), torch.tensor(1), None]), "t"))
    assert out == [0.5, 1.0, None]
    assert call(guard_reward(returns(torch.tensor([0.0, 1.0, 2.0])), "t1d"))[0] == [0.0, 1.0, 2.0]


def test_exception_raise_names_reward_index_and_excerpt():
    guard = guard_reward(fails_on_bad, "div")
    with pytest.raises(RewardFunctionError) as err:
        call(guard)
    msg = str(err.value)
    assert msg.startswith("Reward 'div' at completion 1: raised ZeroDivisionError: float division by zero.")
    assert "Prompt 1: 'Add 2 and 2.'" in msg and "Completion 1: 'bad answer'" in msg
    assert "on_error to 'none'" in msg
    assert err.value.reward_name == "div" and err.value.index == 1
    assert isinstance(err.value.__cause__, ZeroDivisionError)


def test_exception_of_the_whole_batch_has_no_index():
    with pytest.raises(
        RewardFunctionError,
        match=r"^Reward 'batchy': raised RuntimeError: batch too large; it failed on the batch of 3 but on no single "
        r"completion \(each of the 3 retried alone succeeded\)\. The failure depends on the batch",
    ) as err:
        call(guard_reward(fails_on_batches, "batchy"))
    assert err.value.index is None


def fails_on_eight(completions, **kwargs):
    """Fails only when called with exactly 8 completions (a batch-position fault)."""
    if len(completions) == 8:
        raise IndexError("list index out of range")
    return [1.0] * len(completions)


@pytest.mark.parametrize("is_async", [False, True])
def test_failure_no_single_completion_reproduces_says_so(is_async):
    fn = fails_on_eight
    if is_async:
        async def fn(completions, **kwargs):  # noqa: F811 - the async twin
            return fails_on_eight(completions, **kwargs)
    guard = guard_reward(fn, "positional")
    completions = [str(i) for i in range(8)]
    kwargs = dict(prompts=["p"] * 8, completions=completions, completion_ids=None, log_metric=Metrics())
    with pytest.raises(RewardFunctionError) as err:
        asyncio.run(guard(**kwargs)) if is_async else guard(**kwargs)
    msg = str(err.value)
    assert "raised IndexError: list index out of range; it failed on the batch of 8 but on no single completion" in msg
    assert " at completion" not in msg and err.value.index is None
    # a failure one completion reproduces alone is still reported with its index, not as a batch failure
    with pytest.raises(RewardFunctionError) as err:
        call(guard_reward(fails_on_bad, "div"))
    assert "no single completion" not in str(err.value) and err.value.index == 1


def test_exception_none_policy_keeps_what_each_completion_scores_alone(caplog):
    # the batch raises (completion 1 divides by zero); retried alone, completions 0 and 2 score 1/1 = 1.0
    out, logged = call(guard_reward(fails_on_bad, "div", on_error="none"))
    assert out == [1.0, None, 1.0]
    assert logged == [("rewards/div/invalid", 1.0)]
    assert "Reward 'div' at completion 1: raised ZeroDivisionError" in caplog.text
    # a failure of the batch alone: each completion scores alone, nothing is invalid
    out, logged = call(guard_reward(fails_on_batches, "batchy", on_error="none"))
    assert out == [1.0, 1.0, 1.0] and logged == [("rewards/batchy/invalid", 0.0)]
    assert "failed on the batch of 3 but on no single completion" in caplog.text


def needs_assistant(completions, assistant, **kwargs):  # a reward whose argument is a column the dataset lacks
    return [float(a in c) for a, c in zip(assistant, completions)]


@pytest.mark.parametrize("on_error", ["raise", "none"])
@pytest.mark.parametrize(
    ("reward", "reason"),
    [
        (needs_assistant, "raised TypeError: needs_assistant() missing 1 required positional argument: 'assistant'"),
        (returns([float("nan")] * 3), "NaN is not a valid reward"),
        (returns(["a", "b", "c"]), "str 'a' is not a number"),
    ],
)
def test_a_reward_invalid_on_every_completion_stops_whatever_on_error_says(on_error, reward, reason):
    with pytest.raises(RewardFunctionError) as err:
        call(guard_reward(reward, "broken", on_error=on_error))
    msg = str(err.value)
    if on_error == "none":
        assert msg.startswith(f"Reward 'broken': invalid on every one of the 3 completions of this call (completion 0: "
                              f"{reason})")
        assert "whatever on_error says (on_error='none')" in msg and "remove it from `rewards`" in msg
    else:
        assert reason.split(": ")[-1] in msg  # 'raise' fails at the first invalid value, as before


def test_a_reward_that_returns_none_everywhere_is_not_invalid():
    out, logged = call(guard_reward(returns([None, None, None]), "n_a", on_error="none"))
    assert out == [None, None, None] and logged == [("rewards/n_a/invalid", 0.0)]
    assert call(guard_reward(returns([None, None, None]), "n_a"))[0] == [None, None, None]


@pytest.mark.parametrize("on_error", ["raise", "none"])
def test_wrong_length_is_always_an_error(on_error):
    with pytest.raises(RewardFunctionError) as err:
        call(guard_reward(returns([1.0, 0.0]), "short", on_error=on_error))
    msg = str(err.value)
    assert msg.startswith("Reward 'short' at completion 2: returned 2 values for 3 completions.")
    assert "Completion 2: '6'" in msg and "never broadcast" in msg
    with pytest.raises(
        RewardFunctionError,
        match=r"^Reward 'scalar': returned a float \('1\.0'\) for 3 completions\..*never broadcast",
    ):
        call(guard_reward(returns(1.0), "scalar", on_error=on_error))
    with pytest.raises(RewardFunctionError, match=r"returned 4 values for 3 completions"):
        call(guard_reward(returns([1.0] * 4), "long", on_error=on_error))


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ([1.0, "0.5", 0.0], "str '0.5' is not a number"),
        ([1.0, float("nan"), 0.0], "NaN is not a valid reward"),
        ([1.0, float("-inf"), 0.0], "-inf is not a finite reward"),
        ([1.0, np.float64("inf"), 0.0], "inf is not a finite reward"),
        ([1.0, [0.5], 0.0], "list '[0.5]' is not a number"),
    ],
)
def test_invalid_values_under_both_policies(values, reason):
    with pytest.raises(RewardFunctionError) as err:
        call(guard_reward(returns(values), "bad"))
    msg = str(err.value)
    assert msg.startswith(f"Reward 'bad' at completion 1: {reason} (1 of 3 values invalid).")
    assert "Completion 1: 'bad answer'" in msg and "Return a finite float, or None" in msg
    out, logged = call(guard_reward(returns(values), "bad", on_error="none"))
    assert out == [1.0, None, 0.0]
    assert logged == [("rewards/bad/invalid", 1.0)]


def test_none_policy_logs_zero_when_clean_and_none_is_valid():
    out, logged = call(guard_reward(returns([None, 1, 0.0]), "clean", on_error="none"))
    assert out == [None, 1.0, 0.0] and logged == [("rewards/clean/invalid", 0.0)]


def test_excerpts_are_truncated_to_200_chars():
    long = "x" * 1000
    with pytest.raises(RewardFunctionError) as err:
        call(guard_reward(returns([1.0, None, "?"]), "long"), completions=["a", "b", long])
    quoted = re.search(r"Completion 2: ('x+\.\.\.)", str(err.value)).group(1)
    assert len(quoted) == 200


def test_conversational_excerpt():
    completions = [[{"role": "assistant", "content": "fine"}], [{"role": "assistant", "content": "oops"}]]
    with pytest.raises(RewardFunctionError, match=r"Completion 1: 'assistant: oops'"):
        call(guard_reward(returns([1.0, float("nan")]), "c"), completions=completions)


def test_guard_pickles_and_validates_its_arguments():
    guard = pickle.loads(pickle.dumps(guard_reward(fails_on_bad, "div", on_error="none")))
    assert guard.__name__ == "div" and guard.on_error == "none"
    assert call(guard, completions=["1"])[0] == [1.0]
    with pytest.raises(ValueError, match=r"on_error='skip' is not valid\. Choose one of 'raise', 'none'\. 'raise' fails"):
        guard_reward(fails_on_bad, "div", on_error="skip")
    with pytest.raises(ValueError, match="not callable"):
        guard_reward(3, "x")


async def async_reward(completions, **kwargs):
    await asyncio.sleep(0)
    return [float("nan") if "bad" in c else 1.0 for c in completions]


def test_async_rewards_stay_async():
    guard = guard_reward(async_reward, "judge")
    assert isinstance(guard, AsyncRewardGuard) and inspect.iscoroutinefunction(type(guard).__call__)
    with pytest.raises(RewardFunctionError, match=r"^Reward 'judge' at completion 1: NaN"):
        asyncio.run(guard(prompts=PROMPTS, completions=COMPLETIONS))
    lenient = guard_reward(async_reward, "judge", on_error="none")
    assert asyncio.run(lenient(prompts=PROMPTS, completions=COMPLETIONS)) == [1.0, None, 1.0]


def test_trl_calling_convention_contract():
    """Pin what TRL 1.16's `_calculate_rewards` passes to a reward, read from its source (no torch import)."""
    source = (pathlib.Path(importlib.util.find_spec("trl").origin).parent / "trainer" / "grpo_trainer.py").read_text()
    body = source[source.index("def _calculate_rewards") :]
    body = body[: body.index("\n    def ", 10)]
    assert "prompts=prompts, completions=completions, completion_ids=completion_ids_list, **reward_kwargs" in body
    passed = set(re.findall(r'\breward_kwargs\["(\w+)"\]', body)) | {"prompts", "completions", "completion_ids"}
    assert passed == TRAINER_KWARGS


async def async_fails_on_bad(completions, **kwargs):
    await asyncio.sleep(0)
    return [1.0 / (0 if "bad" in c else 2) for c in completions]


def test_async_none_policy_retries_each_completion_alone_too():
    lenient = guard_reward(async_fails_on_bad, "judge", on_error="none")
    assert asyncio.run(lenient(prompts=PROMPTS, completions=COMPLETIONS)) == [0.5, None, 0.5]  # 1/2, raised, 1/2
    with pytest.raises(RewardFunctionError, match=r"invalid on every one of the 2 completions"):
        asyncio.run(lenient(prompts=PROMPTS[:2], completions=["bad", "bad too"]))
