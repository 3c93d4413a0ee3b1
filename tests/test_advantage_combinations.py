"""Every accepted combination of advantage settings × multi_objective_aggregation × zero_variance_filter × loss_type
takes effect: a real training step's advantages equal the configured formula, computed here independently.

The combinations are judged by `validation.validate_run_args` on the keys set (what `plan` and the recipe do), and
the accepted set must be exactly the one `_accepted` states:

- a preset sets loss_type, so a preset with a different loss_type is refused;
- `normalize_then_sum` is TRL's fixed formula (per-reward group normalisation, weighted sum, batch normalisation):
  a zero-variance filter or an advantage setting next to it has no effect (a warning, and those combinations are not
  trained here).

The expected advantages are recomputed from the final batch itself: each row's prompt and completion are decoded,
the two reward functions re-applied, and the formula evaluated in plain Python (no `trl_grpo_ext.advantages`, no TRL):
A_i = (R_i − b_i) / (σ + ε) with b_i the group mean (GRPO) or the mean of the other G − 1 rewards (RLOO), σ the
sample or population std of the group or of the whole batch, no division for "none", and 0 for every row of a group
whose total rewards are all equal. With the filter on, the rows kept in the loss are exactly the non-uniform ones.

The default suite runs one real step for every (advantage setting, aggregation, filter) combination, cycling the
loss types so each appears several times; `-m slow` runs every accepted 4-way combination (411 steps).
"""

from __future__ import annotations

import gc
import itertools
import math
import warnings

import pytest
from factories import count_char_mix, record_generation_outputs, tiny_trainer

from trl_grpo_ext.validation import RunArgumentError, validate_run_args

G = 4
WEIGHTS = (1.0, 0.5)
PRESET_LOSS = {"grpo": "grpo", "dr_grpo": "dr_grpo", "rloo": "dr_grpo", "dapo": "dapo"}
PRESET_SETTINGS = {  # (baseline, std scaling, std kind, ε) of each preset (Shao 2024; Liu 2025; Ahmadian 2024; Yu 2025)
    "grpo": ("group_mean", "group", "sample", 1e-4),
    "dr_grpo": ("group_mean", "none", "sample", 1e-4),
    "rloo": ("leave_one_out", "none", "sample", 1e-4),
    "dapo": ("group_mean", "group", "sample", 1e-4),
}
LOSS_TYPES = (None, "grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
ADVANTAGE_SETTINGS = (
    [{}]
    + [{"advantage_preset": p} for p in PRESET_LOSS]
    + [
        {"advantage_baseline": b, "advantage_std_scaling": s, "advantage_std_kind": k}
        for b in ("group_mean", "leave_one_out")
        for s in ("group", "batch", "none")
        for k in ("sample", "population")
    ]
    + [{"advantage_baseline": "group_mean", "advantage_std_scaling": "group", "advantage_epsilon": 0.5}]
)
AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
FILTERS = ("off", "mask", "resample")


def _user_values(adv, aggregation, zero_variance_filter, loss_type) -> dict:
    values = dict(adv)
    if aggregation != "sum_then_normalize":
        values["multi_objective_aggregation"] = aggregation
    if zero_variance_filter != "off":
        values["zero_variance_filter"] = zero_variance_filter
    if loss_type is not None:
        values["loss_type"] = loss_type
    return values


def _accepted(adv, aggregation, zero_variance_filter, loss_type) -> bool:
    preset = adv.get("advantage_preset")
    return not (preset and loss_type is not None and loss_type != PRESET_LOSS[preset])


def _trained(adv, aggregation, zero_variance_filter, loss_type) -> bool:
    """Accepted, and each setting takes effect (TRL's normalize_then_sum ignores the advantage settings and the
    filter: a warning)."""
    return _accepted(adv, aggregation, zero_variance_filter, loss_type) and not (
        aggregation == "normalize_then_sum" and (adv or zero_variance_filter != "off"))


def _validated(values) -> bool:
    values = {"rewards": ["char_fraction"], **values}  # a run needs a reward (the `rewards_set` rule)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            validate_run_args(None, values, None, None, user_values=values, check_model=False)
    except RunArgumentError:
        return False
    return True


ALL = list(itertools.product(range(len(ADVANTAGE_SETTINGS)), AGGREGATIONS, FILTERS, LOSS_TYPES))


def test_the_accepted_combinations_are_exactly_the_stated_ones():
    accepted = 0
    for a, aggregation, zvf, loss in ALL:
        adv = ADVANTAGE_SETTINGS[a]
        expected = _accepted(adv, aggregation, zvf, loss)
        assert _validated(_user_values(adv, aggregation, zvf, loss)) == expected, (adv, aggregation, zvf, loss)
        accepted += expected
    # 14 settings without a preset (the default, 12 explicit, one ε) × 9 loss options + 4 presets × 2 loss options
    # (unset or the preset's), × 3 filters × 2 aggregations (beside TRL's normalize_then_sum the advantage settings
    # and the filter have no effect: warned)
    assert accepted == (14 * 9 + 4 * 2) * 3 * 2 == 804


def _fast_combinations():
    """Every accepted (advantage setting, aggregation, filter), each with one accepted loss type, cycling them."""
    out, turn = [], 0
    for a, adv in enumerate(ADVANTAGE_SETTINGS):
        for aggregation, zvf in itertools.product(AGGREGATIONS, FILTERS):
            losses = [loss for loss in LOSS_TYPES if _trained(adv, aggregation, zvf, loss)]
            if losses:
                out.append((a, aggregation, zvf, losses[turn % len(losses)]))
                turn += 1
    return out


FAST = _fast_combinations()
SLOW = [c for c in ALL if _trained(ADVANTAGE_SETTINGS[c[0]], *c[1:])]


def _id(combo):
    a, aggregation, zvf, loss = combo
    adv = ",".join(f"{k.replace('advantage_', '')}={v}" for k, v in ADVANTAGE_SETTINGS[a].items()) or "default"
    return f"{adv}|{aggregation}|{zvf}|{loss}"


# --- the independent formula ----------------------------------------------------------------------------------------
def _mean(xs):
    return sum(xs) / len(xs)


def _std(xs, kind="sample"):
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - (1 if kind == "sample" else 0)))


def _rewards(target: str, text: str) -> tuple[float, float]:
    """The two reward functions below, on one completion: 0 for an "a" prompt (its groups are uniform)."""
    if target == "a":
        return 0.0, 0.0
    return float(text.count("b")), float(len(text) % 3)


def reward_count_b(completions, target, **kwargs):
    return [_rewards(t, c[0]["content"])[0] for c, t in zip(completions, target)]


def reward_length_mod_3(completions, target, **kwargs):
    return [_rewards(t, c[0]["content"])[1] for c, t in zip(completions, target)]


def _expected(per_func, aggregation, baseline, scaling, kind, eps):
    n = len(per_func)
    groups = [list(range(i, i + G)) for i in range(0, n, G)]
    if aggregation == "normalize_then_sum":  # TRL 1.16 GRPOTrainer._generate_and_score_completions
        summed = [0.0] * n
        for k, w in enumerate(WEIGHTS):
            for rows in groups:
                vals = [per_func[i][k] for i in rows]
                m, s = _mean(vals), _std(vals)
                for i in rows:
                    summed[i] += w * (per_func[i][k] - m) / (s + 1e-4)
        m, s = _mean(summed), _std(summed)
        return [(x - m) / (s + 1e-4) for x in summed]
    totals = [sum(w * r for w, r in zip(WEIGHTS, row)) for row in per_func]
    out = [0.0] * n
    for rows in groups:
        vals = [totals[i] for i in rows]
        if max(vals) == min(vals):
            continue  # a uniform group: exactly 0
        for j, i in enumerate(rows):
            b = _mean(vals) if baseline == "group_mean" else _mean(vals[:j] + vals[j + 1:])
            a = totals[i] - b
            if scaling != "none":
                sd = _std(vals, kind) if scaling == "group" else _std(totals, kind)
                a = a / (sd + eps)
            out[i] = a
    return out


def _settings(adv):
    if "advantage_preset" in adv:
        return PRESET_SETTINGS[adv["advantage_preset"]]
    return (adv.get("advantage_baseline", "group_mean"), adv.get("advantage_std_scaling", "group"),
            adv.get("advantage_std_kind", "sample"), adv.get("advantage_epsilon", 1e-4))


# --- shared setup ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def setup(tiny_model_dir, tiny_tokenizer):
    import torch
    from transformers import AutoModelForCausalLM

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 64-wide model: one thread is fastest, and the machine is shared

    dataset = count_char_mix(6)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    # accelerate's free_memory() runs gc.collect() at every train(); freezing the objects alive now (torch,
    # transformers, the model) keeps that collection to what each step creates
    gc.collect()
    gc.freeze()
    yield model, tiny_tokenizer, dataset
    gc.unfreeze()
    torch.set_num_threads(threads)


def _run_step(setup, combo, tmp_path):
    import torch

    model, tokenizer, dataset = setup
    a, aggregation, zvf, loss = combo
    adv = ADVANTAGE_SETTINGS[a]
    values = _user_values(adv, aggregation, zvf, loss)
    if zvf == "resample":
        values["max_resample_rounds"] = 1
    assert _validated(values)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = tiny_trainer(tmp_path, [reward_count_b, reward_length_mod_3], dataset, model=model,
                               processing_class=tokenizer, prompts_per_step=4, num_generations=G, micro_batch_size=16,
                               total_training_steps=1, max_completion_length=6, learning_rate=1e-3,
                               gradient_checkpointing=False, seed=a, reward_weights=list(WEIGHTS), **values)
    outputs = record_generation_outputs(trainer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    assert trainer.state.global_step == 1 and len(outputs) == 1
    expected_loss = PRESET_LOSS.get(adv.get("advantage_preset"), loss or "dapo")
    assert trainer.loss_type == expected_loss  # the loss type takes effect

    output = outputs[0]
    prompts = tokenizer.batch_decode(output["prompt_ids"], skip_special_tokens=True)
    per_func = []
    for prompt, ids, mask in zip(prompts, output["completion_ids"], output["completion_mask"]):
        text = tokenizer.decode(ids[mask.bool()], skip_special_tokens=True)
        per_func.append(_rewards("b" if "write b b b" in prompt else "a", text))
    expected = _expected(per_func, aggregation, *_settings(adv))
    torch.testing.assert_close(output["advantages"], torch.tensor(expected, dtype=torch.float32), rtol=1e-5, atol=1e-6)

    totals = [sum(w * r for w, r in zip(WEIGHTS, row)) for row in per_func]
    uniform = [max(totals[i // G * G:i // G * G + G]) == min(totals[i // G * G:i // G * G + G]) for i in range(16)]
    assert any(uniform) or zvf == "resample"  # the "a" groups are uniform (resample may have replaced them)
    if zvf == "off":
        assert "zero_variance_keep" not in output
    else:  # the filter takes effect: exactly the non-uniform rows stay in the loss
        assert output["zero_variance_keep"].tolist() == [0.0 if u else 1.0 for u in uniform]
    if zvf == "resample":
        logged = next(e for e in trainer.state.log_history if "zero_variance/resample_rounds" in e)
        assert logged["zero_variance/resample_rounds"] == 1.0  # the uniform groups of the first draw were redrawn


@pytest.mark.parametrize("combo", FAST, ids=[_id(c) for c in FAST])
def test_advantages_of_a_real_step_equal_the_configured_formula(setup, combo, tmp_path):
    _run_step(setup, combo, tmp_path)


def test_the_fast_set_covers_every_setting_aggregation_filter_and_loss_type():
    assert {(a, agg, zvf) for a, agg, zvf, _ in FAST} == {(a, agg, zvf) for a, agg, zvf, _ in SLOW}
    assert {loss for *_, loss in FAST} == set(LOSS_TYPES)


@pytest.mark.slow
@pytest.mark.parametrize("combo", SLOW, ids=[_id(c) for c in SLOW])
def test_every_accepted_combination_in_a_real_step(setup, combo, tmp_path):
    _run_step(setup, combo, tmp_path)
