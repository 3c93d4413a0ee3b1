"""zero_variance_filter: skip — prompts predicted uniform are skipped before rollout (GRESO, arXiv 2506.02177).

Expected values are worked out by hand: a prompt with streak k is kept with probability p^k; the sampler keeps TRL's
structure (each row G times in a row, each chunk repeated), only the skipped rows change.
"""

import json

import pytest
import torch
from factories import count_char_mix, tiny_trainer
from trl.trainer.utils import RepeatSampler

from trl_grpo_ext.training.sampling import SkippingRepeatSampler
from trl_grpo_ext.zero_variance.history import PromptHistory, prompt_key, skip_substitutes

G = 4


def test_keep_frequency_is_p_to_the_streak():
    # rows 0-999 streak 1 (kept with p = 0.5), rows 1000-1999 streak 2 (0.25); the dataset also holds 2000 rows of
    # streak 0 that may take the skipped slots
    keys = [1000 + i for i in range(4000)]
    streaks = {1000 + i: (1 if i < 1000 else 2) for i in range(2000)}
    rows = list(range(2000))
    kept_1 = kept_2 = 0
    for epoch in range(10):
        substitutes = skip_substitutes(rows, keys, streaks, 0.5, seed=3, epoch=epoch, batch=0)
        kept_1 += sum(1 for i in range(1000) if i not in substitutes)
        kept_2 += sum(1 for i in range(1000, 2000) if i not in substitutes)
        # every skipped slot is filled by a row outside the batch, each once (1,375 skipped on average, 2,000 rows of
        # streak 0 outside it, each passing its draw)
        assert all(sub >= 2000 for sub in substitutes.values())
        assert len(set(substitutes.values())) == len(substitutes)
    assert abs(kept_1 / 10000 - 0.5) < 0.02 and abs(kept_2 / 10000 - 0.25) < 0.02
    # deterministic in (seed, epoch, batch)
    decide = lambda epoch, batch: skip_substitutes(rows, keys, streaks, 0.5, 3, epoch, batch)  # noqa: E731
    assert decide(1, 0) == decide(1, 0) and decide(1, 0) != decide(2, 0) and decide(1, 0) != decide(1, 1)


def test_a_slot_goes_to_a_row_that_passes_the_same_draw():
    # batch rows 0, 1 (streak 99: always skipped); outside it, rows 2, 3 are streak 99 too and row 4 is streak 0:
    # only row 4 can take a slot, so one skipped row keeps its own
    keys = [10, 11, 12, 13, 14]
    streaks = {10: 99, 11: 99, 12: 99, 13: 99}
    substitutes = skip_substitutes([0, 1], keys, streaks, 0.1, seed=0, epoch=0, batch=0)
    assert list(substitutes.values()) == [4] and len(substitutes) == 1
    # a prompt already in the batch (row 4 duplicates row 0's text) never fills a slot of it
    assert skip_substitutes([0, 1], [10, 11, 12, 13, 10], {10: 99, 11: 99, 12: 99, 13: 99}, 0.1, 0, 0, 0) == {}


def test_never_skips_without_history():
    assert skip_substitutes([0, 1, 2], [5, 6, 7], {}, 0.1, 0, 0, 0) == {}
    with pytest.raises(ValueError, match="skip_exploration_probability"):
        skip_substitutes([0], [5], {}, 0.0, 0, 0, 0)


def test_history_counts_consecutive_uniform_rollouts_and_round_trips():
    history = PromptHistory()
    history.observe([1, 2, 1], [True, True, True])
    assert history.streaks == {1: 2, 2: 1}
    history.observe([1], [False])
    assert history.streaks == {1: 0, 2: 1}
    decisions = history.epoch_decisions(3)
    decisions.append({4: 5})
    assert history.epoch_decisions(3) == [{4: 5}]  # the epoch keeps its decisions
    assert history.observed == 2 and history.observed_in_epoch() == 0  # two batches observed, both before epoch 3
    history.observe([2], [True])
    assert history.observed_in_epoch() == 1
    restored = PromptHistory()
    restored.load_state_dict(json.loads(json.dumps(history.state_dict())))
    assert restored.streaks == history.streaks and restored.decisions == (3, 2, [{4: 5}])
    assert restored.observed_in_epoch() == 1
    assert history.epoch_decisions(4) == []  # a new epoch starts a new record
    old = PromptHistory()  # a checkpoint of the earlier version: epoch-start streaks, no decisions
    old.load_state_dict({"streaks": {"1": 2}, "epoch_start": {"epoch": 1, "streaks": {"1": 1}}})
    assert old.streaks == {1: 2} and old.decisions is None


def test_sampler_keeps_trl_structure_and_replaces_only_skipped_rows():
    data = [{"prompt": f"p{i}"} for i in range(8)]
    keys = [prompt_key(row["prompt"]) for row in data]
    history = PromptHistory()
    trl = RepeatSampler(data, mini_repeat_count=G, batch_size=4, repeat_count=2, seed=7)
    ours = SkippingRepeatSampler(data, mini_repeat_count=G, batch_size=4, repeat_count=2, seed=7, history=history,
                                 exploration_probability=0.5, prompt_keys=keys)
    assert list(ours) == list(trl)  # epoch 0: no history, TRL's order
    history.observe([keys[1], keys[3]], [True, True])
    history.streaks[keys[1]] = history.streaks[keys[3]] = 200  # p^200: never kept
    reference = list(trl)  # TRL's epoch 1
    drawn, skipped, size = iter(ours), [], 4 * G * 2  # one generation batch: 4 rows, each G times, twice
    for _ in range(2):  # as in training: a batch is rolled out (here: informative) before the next one is drawn
        skipped += [next(drawn) for _ in range(size)]
        history.observe([keys[row] for row in dict.fromkeys(skipped[-size:])], [False] * 4)
    assert next(drawn, None) is None
    assert len(skipped) == len(reference) and ours.skipped_fraction == 2 / 8
    assert 1 not in skipped and 3 not in skipped
    for a, b in zip(reference, skipped):
        assert a == b or a in (1, 3)
    mapping = {a: b for a, b in zip(reference, skipped) if a != b}
    assert set(mapping) == {1, 3} and all(b not in (1, 3) for b in mapping.values())
    for batch in (skipped[:size], skipped[size:]):
        assert len(set(batch)) == 4  # still 4 distinct prompts in each batch


def test_each_batch_is_decided_from_the_streaks_of_its_time():
    # 8 prompts in 2 batches of 4. After the first batch is drawn, its row that would fill a slot comes out uniform
    # many times: it no longer fills the second batch's slots, which a decision taken at the epoch's start would have
    data = [{"prompt": f"p{i}"} for i in range(8)]
    keys = [prompt_key(row["prompt"]) for row in data]
    trl = RepeatSampler(data, mini_repeat_count=1, batch_size=4, repeat_count=1, seed=7)
    list(trl)
    second_batch = list(trl)[4:]  # TRL's epoch 1, its second generation batch
    history = PromptHistory()
    history.streaks = {keys[i]: 200 for i in second_batch[:2]}  # two rows of the second batch are always skipped
    sampler = SkippingRepeatSampler(data, mini_repeat_count=1, batch_size=4, repeat_count=1, seed=7, history=history,
                                    exploration_probability=0.5, prompt_keys=keys)
    sampler.set_epoch(1)
    drawn = iter(sampler)
    first = [next(drawn) for _ in range(4)]
    assert sampler.skipped_fraction == 0.0  # the first batch had no streaks
    history.observe([keys[i] for i in first], [True] * 4)
    for row in first:  # every row of the first batch is now uniform 200 times in a row: it cannot take a slot
        history.streaks[keys[row]] = 200
    second = list(drawn)
    assert sampler.skipped_fraction == 0.0 and second == second_batch  # no row passes the draw: nothing replaced
    # the same run, but the first batch came out informative: its rows then fill the two skipped slots
    start = {keys[i]: 200 for i in second_batch[:2]}
    replay = SkippingRepeatSampler(data, mini_repeat_count=1, batch_size=4, repeat_count=1, seed=7,
                                   history=PromptHistory(), exploration_probability=0.5, prompt_keys=keys)
    replay.history.streaks = dict(start)
    replay.set_epoch(1)
    drawn = iter(replay)
    assert [next(drawn) for _ in range(4)] == first
    replay.history.observe([keys[i] for i in first], [False] * 4)
    second = list(drawn)
    assert set(second[:2]) <= set(first) and second[2:] == second_batch[2:] and replay.skipped_fraction == 2 / 8


def test_a_prompt_not_yet_rolled_out_fills_a_slot_only_when_no_other_can():
    # accelerate's DataLoaderShard draws one batch ahead: batch m+1 is decided before batch m is rolled out, so the
    # streaks of batch m's prompts are stale then. 64 prompts; 12 are informative at every rollout, the other 52 have
    # streak 60 (never kept with p = 0.01) and stay uniform. Each batch of 4 has at most 4 prompts of batch m pending
    # and 4 of its own, so at least 4 informative prompts remain to fill its slots: no prompt of batch m may fill a
    # slot of batch m+1 (it may hold its own). Before pending prompts were set aside, some did (a breaker's finding).
    # With every rollout uniform, the informative prompts run out, and pending ones take the slots before a skipped
    # prompt would.
    from accelerate.data_loader import DataLoaderShard

    data = [{"prompt": f"p{i}"} for i in range(64)]
    keys = [prompt_key(row["prompt"]) for row in data]
    own_rows = list(RepeatSampler(data, mini_repeat_count=1, batch_size=4, repeat_count=1, seed=5))  # TRL's epoch 0

    def run(informative_stay_informative: bool) -> tuple[int, int]:
        history = PromptHistory()
        history.streaks = {keys[i]: 60 for i in range(12, 64)}
        sampler = SkippingRepeatSampler(data, mini_repeat_count=1, batch_size=4, repeat_count=1, seed=5,
                                        history=history, exploration_probability=0.01, prompt_keys=keys)
        loader = DataLoaderShard(data, batch_size=4, sampler=sampler,  # its first iteration sets epoch 0
                                 collate_fn=lambda rows: [r["prompt"] for r in rows])
        previous, repeats, informative = set(), 0, 0
        for batch, own in zip(loader, [own_rows[i:i + 4] for i in range(0, 64, 4)]):
            repeats += len(previous & {p for p, row in zip(batch, own) if p != f"p{row}"})  # slots it fills
            informative += sum(int(p[1:]) < 12 for p in batch)
            history.observe([prompt_key(p) for p in batch],
                            [not (informative_stay_informative and int(p[1:]) < 12) for p in batch])
            previous = set(batch)
        return repeats, informative

    repeats, informative = run(informative_stay_informative=True)
    assert repeats == 0 and informative == 64  # every slot of the epoch went to an informative prompt
    repeats, informative = run(informative_stay_informative=False)
    assert repeats > 0 and 12 < informative < 64


def test_a_resumed_epoch_replays_the_decisions_it_took():
    # a checkpoint written mid-epoch holds the decisions taken so far (here: both batches drawn, then every prompt
    # uniform 50 more times); a resumed epoch replays them, and a new epoch decides from the streaks of its time
    data = [{"prompt": f"p{i}"} for i in range(8)]
    keys = [prompt_key(row["prompt"]) for row in data]

    def sampler(history):
        return SkippingRepeatSampler(data, mini_repeat_count=G, batch_size=4, repeat_count=1, seed=7,
                                     history=history, exploration_probability=0.5, prompt_keys=keys)

    history = PromptHistory()
    history.streaks = {keys[i]: 3 for i in (0, 2, 4, 6)}
    original = sampler(history)
    original.set_epoch(1)
    epoch_1 = list(original)
    assert original.skipped_fraction > 0
    for _ in range(50):
        history.observe(keys, [True] * 8)
    restored = PromptHistory()
    restored.load_state_dict(json.loads(json.dumps(history.state_dict())))  # the checkpoint's state
    resumed = sampler(restored)
    resumed.set_epoch(1)
    assert list(resumed) == epoch_1
    resumed.set_epoch(2)  # a new epoch decides from the current history: no row passes a draw, so none is replaced
    trl = RepeatSampler(data, mini_repeat_count=G, batch_size=4, repeat_count=1, seed=7)
    list(trl), list(trl)
    assert list(resumed) == list(trl)


def _b_constant_reward(completions, target, **kwargs):
    """"b" prompts: 1.0 for every completion (uniform); "a" prompts: the position in the group (informative)."""
    return [1.0 if t == "b" else float(i % G) for i, t in enumerate(target)]


SKIP_RUN = dict(prompts_per_step=4, num_generations=G, micro_batch_size=16, total_epochs=3, max_completion_length=8,
                learning_rate=1e-3, seed=0, zero_variance_filter="skip", skip_exploration_probability=0.001)


def test_skip_stops_rolling_out_uniform_prompts_after_the_first_epoch(tmp_path):
    # 8 prompts, 4 "b": epoch 0 rolls every prompt out (half the groups uniform over the epoch); from epoch 1 each "b"
    # prompt has streak >= 1 and is kept with probability 0.001, so its slot goes to an "a" prompt.
    trainer = tiny_trainer(tmp_path, _b_constant_reward, count_char_mix(8), **SKIP_RUN)
    assert trainer.plan.steps_per_epoch == 2 and trainer.plan.total_steps == 6
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    shares = [h["zero_variance/frac_uniform_before"] for h in logs]
    assert len(shares) == 6 and trainer.state.global_step == trainer.plan.total_steps == 6
    assert sum(shares[:2]) / 2 == 0.5  # epoch 0: all 8 prompts once, 4 of them uniform
    assert shares[2:] == [0.0] * 4
    assert [h["zero_variance/frac_prompts_skipped"] for h in logs] == [0.0, 0.0] + [0.5] * 4
    assert trainer.plan.stop_reason == "epoch_limit"


def test_skip_refuses_a_run_of_one_epoch(tmp_path):
    with pytest.raises(ValueError, match="zero_variance_filter='skip' would act as mask: this run covers 1 epoch.*earlier epochs.*Fix"):
        tiny_trainer(tmp_path, _b_constant_reward, count_char_mix(8), **{**SKIP_RUN, "total_epochs": 1})


def test_skip_resumes_exactly_inside_an_epoch(tmp_path):
    run = {**SKIP_RUN, "skip_exploration_probability": 0.5, "save_strategy": "steps", "save_steps": 1}
    full = tiny_trainer(tmp_path / "full", _b_constant_reward, count_char_mix(8), **run)
    full.train()
    checkpoint = tmp_path / "full" / "checkpoint-3"  # epoch 1 (0-based), after its first step
    state = json.loads((checkpoint / "zero_variance_state.json").read_text())
    assert state["prompt_history"]["decisions"]["epoch"] == 1
    resumed = tiny_trainer(tmp_path / "resumed", _b_constant_reward, count_char_mix(8), **run)
    resumed.train(resume_from_checkpoint=str(checkpoint))

    def steps(trainer):
        return {h["step"]: (h["reward"], h["zero_variance/frac_uniform_before"],
                            h["zero_variance/frac_prompts_skipped"])
                for h in trainer.state.log_history if "reward" in h}

    expected, got = steps(full), steps(resumed)
    assert sorted(got) == [1, 2, 3, 4, 5, 6]  # 1-3 restored from the checkpoint's trainer state, 4-6 run again
    assert got == expected
    assert any(skipped > 0 for _, _, skipped in got.values())  # the resumed epochs did skip
    for (name, a), (_, b) in zip(full.model.named_parameters(), resumed.model.named_parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def test_plan_states_what_an_epoch_is_with_skip_and_refuses_one_epoch(tmp_path, capsys):
    from factories import tiny_cpu_yaml

    from trl_grpo_ext.cli import plan as plan_cli

    # tiny_cpu.yaml: 240 prompts, 2 per step -> 120 steps per epoch; 3 epochs = 360 steps
    path = tiny_cpu_yaml(tmp_path, zero_variance_filter="skip", total_epochs=3, total_training_steps=400,
                         eval_strategy="no", drop=("eval_steps", "num_generations_eval"))
    assert plan_cli.main(["--config", path]) == 0
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "zero_variance_filter=skip: an epoch is still 120 steps × 2 prompt slots (240)" in out
    assert "The 360 steps, 3 epochs and stop reason above stay exact" in out
    one_epoch = tiny_cpu_yaml(tmp_path, name="one.yaml", zero_variance_filter="skip")
    assert plan_cli.main(["--config", one_epoch]) == 2
    err = capsys.readouterr().err
    assert "zero_variance_filter='skip'" in err and "covers 1 epoch(s) of 240 prompts" in err and "Fix:" in err
    # μ = 2 with 4 prompts a generation batch (micro_batch_size 8 = 2 prompts × G 4 a step): each batch serves 2
    # steps, so an epoch of 240 prompts is 60 generation batches × 4 slots over 120 steps (a breaker's finding: the
    # note said 120 steps × 2 slots, 240, twice the slots rolled out)
    reused = tiny_cpu_yaml(tmp_path, name="mu2.yaml", zero_variance_filter="skip", total_epochs=3,
                           total_training_steps=400, num_iterations=2, eval_strategy="no",
                           drop=("eval_steps", "num_generations_eval"))
    assert plan_cli.main(["--config", reused, "--micro_batch_size", "16", "--prompts_per_step", "4"]) == 0
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "an epoch is still 120 steps, fed by 60 generation batches × 4 prompt slots (240)" in out, out
    # every prompt in every generation batch: no prompt can take a skipped one's slot
    whole = tiny_cpu_yaml(tmp_path, name="whole.yaml", zero_variance_filter="skip", total_epochs=3,
                          embedded_num_prompts=2, eval_strategy="no", drop=("eval_steps", "num_generations_eval"))
    assert plan_cli.main(["--config", whole]) == 2
    err = capsys.readouterr().err
    assert "the dataset's 2 prompts all fit in one generation batch of 2 prompts" in err and "Fix:" in err


def test_recipe_refuses_a_one_epoch_skip_run_before_loading(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "recipes/grpo_qlora.py"), "--config",
                           str(root / "recipes/configs/tiny_cpu.yaml"), "--zero_variance_filter", "skip",
                           "--output_dir", str(tmp_path / "run")],
                          capture_output=True, text=True, cwd=root, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                          timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().startswith("error: zero_variance_filter='skip'") and "Fix:" in done.stderr
    assert not (tmp_path / "run").exists()  # nothing was written: refused before anything ran


def _checkpoint(path, state=None):
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text("{}")
    if state is not None:
        (path / "zero_variance_state.json").write_text(json.dumps(state))
    return str(path)


def test_a_resume_keeps_the_filter_and_skips_p_or_is_refused(tmp_path):
    from trl_grpo_ext.plan import QuantityError
    from trl_grpo_ext.training.checkpoints import check_filter_unchanged

    skip = {"zero_variance_filter": "skip", "skip_exploration_probability": 0.25}
    saved = _checkpoint(tmp_path / "skip", {"prompt_history": {"streaks": {}}, "settings": skip})
    check_filter_unchanged(saved, skip)  # the same settings: resumed
    with pytest.raises(QuantityError, match=r"skip_exploration_probability: 0.25 in the checkpoint, 0.5 now.*Fix"):
        check_filter_unchanged(saved, {**skip, "skip_exploration_probability": 0.5})
    # what counts as uniform decides skip's streaks: a breaker's resume with --zero_variance_tolerance 0.5 was accepted
    # and departed from the uninterrupted run at the next step
    current = {**skip, "zero_variance_tolerance": 0.0, "zero_variance_reward": None}
    tolerant = _checkpoint(tmp_path / "tolerance", {"prompt_history": {"streaks": {}}, "settings": current})
    with pytest.raises(QuantityError, match=r"zero_variance_tolerance: 0.0 in the checkpoint, 0.5 now.*Fix"):
        check_filter_unchanged(tolerant, {**current, "zero_variance_tolerance": 0.5})
    with pytest.raises(QuantityError, match=r"zero_variance_reward: None in the checkpoint, 'accuracy' now"):
        check_filter_unchanged(tolerant, {**current, "zero_variance_reward": "accuracy"})
    check_filter_unchanged(saved, current)  # a checkpoint of an earlier version: the keys it lacks are not compared
    with pytest.raises(QuantityError, match=r"zero_variance_filter: 'skip' in the checkpoint, 'mask' now"):
        check_filter_unchanged(saved, {"zero_variance_filter": "mask", "skip_exploration_probability": None})
    # checkpoints of an earlier version hold no settings: the filter is read from the state they hold
    resample = _checkpoint(tmp_path / "resample", {"resample_cursor": 3})
    with pytest.raises(QuantityError, match=r"'resample' in the checkpoint, 'skip' now"):
        check_filter_unchanged(resample, skip)
    old_mask = _checkpoint(tmp_path / "mask")  # no state file: neither skip nor resample
    with pytest.raises(QuantityError, match=r"'mask or off' in the checkpoint, 'skip' now"):
        check_filter_unchanged(old_mask, skip)
    check_filter_unchanged(old_mask, {"zero_variance_filter": "off", "skip_exploration_probability": None})


def test_every_checkpoint_saves_its_filter_and_a_changed_one_is_refused_before_training(tmp_path):
    from trl_grpo_ext.plan import QuantityError

    run = {**SKIP_RUN, "zero_variance_filter": "mask", "save_strategy": "steps", "save_steps": 1}
    run.pop("skip_exploration_probability")  # refused with mask: it would be ignored
    tiny_trainer(tmp_path / "mask", _b_constant_reward, count_char_mix(8), **run).train()
    checkpoint = tmp_path / "mask" / "checkpoint-1"
    assert json.loads((checkpoint / "zero_variance_state.json").read_text()) == {
        "settings": {"zero_variance_filter": "mask", "skip_exploration_probability": None,
                     "zero_variance_tolerance": None, "zero_variance_reward": None, "seed": run["seed"]},
        # the judged reward's range so far, for the causes of uniform groups: the "a" prompts' positions 0 to 3
        "reward_range": {"low": 0.0, "high": 3.0}}
    resumed = tiny_trainer(tmp_path / "skip", _b_constant_reward, count_char_mix(8), **SKIP_RUN)
    with pytest.raises(QuantityError, match=r"zero_variance_filter: 'mask' in the checkpoint, 'skip' now"):
        resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state.global_step == 0


def test_recipe_refuses_resuming_under_another_filter_before_loading(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    _checkpoint(tmp_path / "run" / "checkpoint-4", {"prompt_history": {"streaks": {}}, "settings": {
        "zero_variance_filter": "skip", "skip_exploration_probability": 0.25}})
    done = subprocess.run([sys.executable, str(root / "recipes/grpo_qlora.py"), "--config",
                           str(root / "recipes/configs/tiny_cpu.yaml"), "--zero_variance_filter", "mask",
                           "--resume_from_checkpoint", "last", "--output_dir", str(tmp_path / "run")],
                          capture_output=True, text=True, cwd=root, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                          timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().startswith("error: cannot resume") and "'skip' in the checkpoint, 'mask' now" in done.stderr
    assert "Traceback" not in done.stderr and "Loading weights" not in done.stderr + done.stdout


def test_plan_states_skip_without_a_known_dataset_size(tmp_path, capsys):
    """A Hub dataset plan cannot read offline has no steps per epoch: the skip note says so (a breaker's finding: it
    raised TypeError)."""
    from trl_grpo_ext.cli import plan as plan_cli

    assert plan_cli.main(["--config", "qwen2.5-0.5b-instruct_gsm8k", "--zero_variance_filter", "skip"]) == 0
    err = capsys.readouterr().err
    assert "an epoch is still its steps × 8 prompt slots (the dataset's size is not known here)" in err
