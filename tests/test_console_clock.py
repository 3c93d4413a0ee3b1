"""The console's s/step is the time of training steps: an evaluation or a checkpoint save between two step lines is
left out (a new user's finding: `make demo`'s step 41 read 2.28 s/step where metrics.jsonl's step_time was 0.437,
the evaluation at step 40 counted into it)."""

from __future__ import annotations

from types import SimpleNamespace

from trl_grpo_ext.training import console


def test_evaluation_and_save_time_is_not_counted_into_the_next_step(monkeypatch, capsys):
    clock = iter([0.0,   # train begins at step 0
                  2.0,   # step 4's line: 4 steps in 2.0 s
                  2.5,   # the evaluation's line, at step 4 (0.5 s after)
                  9.0,   # the checkpoint of step 4 saved: 6.5 s of save
                  10.0])  # step 6's line: 2 steps in 1.0 s since the save, not 8.0 s since step 4's line
    monkeypatch.setattr(console.time, "perf_counter", lambda: next(clock))
    callback = console.StepLineCallback(bar=False)
    state = SimpleNamespace(global_step=0, max_steps=10, is_world_process_zero=True)
    callback.on_train_begin(None, state, None)
    state.global_step = 4
    callback.on_log(None, state, None, logs={"reward": 0.5, "reward_std": 0.1, "learning_rate": 1e-3})
    callback.on_log(None, state, None, logs={"eval_reward": 0.4})
    callback.on_save(None, state, None)
    state.global_step = 6
    callback.on_log(None, state, None, logs={"reward": 0.6, "reward_std": 0.1, "learning_rate": 1e-3})
    lines = capsys.readouterr().out.splitlines()
    step_lines = [line for line in lines if line.startswith("step ") and "s/step" in line]
    assert [line.split()[-2] for line in step_lines] == ["0.50", "0.50"]  # 2.0 / 4 and 1.0 / 2


def test_a_save_between_two_step_lines_leaves_the_no_update_interval_whole(monkeypatch, capsys):
    # logging_steps 3, save_steps 4 (a breaker's run): step 6's line averages steps 4 to 6 and logged no_update 1/3 (1
    # of 3 steps), but the save at step 4 had restarted the interval: "1 of 2 steps", and at step 9 "no update: 2 of 2
    # groups uniform" on a step that did update (steps 7 and 8 did not)
    clock = iter([0.0, 3.0, 3.5, 6.0, 6.5, 9.0])
    monkeypatch.setattr(console.time, "perf_counter", lambda: next(clock))
    callback = console.StepLineCallback(bar=False, groups_per_step=2)
    state = SimpleNamespace(global_step=0, max_steps=12, is_world_process_zero=True)
    callback.on_train_begin(None, state, None)
    logs = {"reward": 0.5, "reward_std": 0.1, "learning_rate": 1e-3}
    for step, no_update, save in ((3, 0.0, False), (4, None, True), (6, 1 / 3, False), (8, None, True),
                                  (9, 2 / 3, False)):
        state.global_step = step
        if save:
            callback.on_save(None, state, None)
        else:
            callback.on_log(None, state, None, logs={**logs, "zero_variance/no_update": no_update})
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert "no update on 1 of 3 steps (all groups uniform)" in lines[1]
    assert "no update on 2 of 3 steps (all groups uniform)" in lines[2]
    assert [line.split("s/step")[0].split()[-1] for line in lines] == ["1.00", "1.25", "2.50"]  # 3/3, 2.5/2, 2.5/1


def test_the_metrics_file_holds_each_step_once_after_an_overwrite_or_a_resume(tmp_path):
    # it was only ever appended to: after --overwrite_output_dir the old run's steps 1-12 and summary came first, and
    # a run killed at step 6 and resumed from checkpoint-4 logged steps 1..6, 5, 6, 7..12 (a breaker's finding)
    import json

    path = tmp_path / console.METRICS_FILE
    rows = [{"step": step, "reward": step / 10} for step in range(1, 7)] + [{"step": 4, "eval_reward": 0.2}]
    text = "".join(json.dumps(row) + "\n" for row in rows) + json.dumps({"step": 6, "train_runtime": 9.0}) + "\n"
    args, callback = SimpleNamespace(output_dir=str(tmp_path)), console.MetricsFileCallback()

    path.write_text(text + '{"step": 7, "rew')  # the last line cut short by the kill
    callback.on_train_begin(args, SimpleNamespace(global_step=4, is_world_process_zero=True), None)
    assert [json.loads(line) for line in path.read_text().splitlines()] == rows[:4] + [rows[6]]
    callback.on_log(args, SimpleNamespace(global_step=5, is_world_process_zero=True), None, logs={"reward": 0.7})
    assert json.loads(path.read_text().splitlines()[-1]) == {"step": 5, "reward": 0.7}

    path.write_text(text)
    callback.on_train_begin(args, SimpleNamespace(global_step=0, is_world_process_zero=True), None)  # a new run
    assert path.read_text() == ""


def test_the_last_partial_logging_interval_gets_its_line(tmp_path, capsys):
    # a new user's finding: 3 steps at logging_steps 2 printed "step 2/3" only; TRL folds step 3's metrics into the
    # log that holds train_runtime, which the console skipped whole (the card and trainer_state.json had step 3)
    import re

    from factories import count_char_mix, tiny_trainer

    def reward(completions, target, **kwargs):
        return [float(i % 2) for i in range(len(completions))]  # every group informative: 0, 1, 0, 1

    trainer = tiny_trainer(tmp_path, reward, count_char_mix(4), prompts_per_step=2, num_generations=4,
                           micro_batch_size=8, total_training_steps=3, max_completion_length=4, logging_steps=2,
                           seed=0)
    trainer.train()
    last = [entry for entry in trainer.state.log_history if "reward" in entry][-1]
    assert last["step"] == 3 and "train_runtime" in last  # TRL's fold, as the console sees it
    lines = [line for line in capsys.readouterr().out.splitlines() if re.match(r"step \d+/3 ", line)]
    assert [line.split()[1] for line in lines] == ["2/3", "3/3"], lines
    assert f"reward {last['reward']:.3f} ± {last['reward_std']:.3f}" in lines[1]
