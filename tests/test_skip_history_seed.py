"""skip_history_file: skip's streaks start from an `eval --split train --k K` result, so skipping acts in epoch 1.

Expected values are worked out by hand: a prompt whose K sampled weighted totals are all equal (or, with a tolerance,
have a sample std at most it; or are all None) starts with streak 1, as after one uniform rollout; any other prompt
with none.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from factories import count_char_mix, tiny_trainer
from trl.trainer.utils import RepeatSampler

from trl_grpo_ext.zero_variance.history import PromptHistory, prompt_key, read_history_seed

ROOT = Path(__file__).resolve().parents[1]
G = 4


def _write(path, **result):
    path.write_text(json.dumps(result))
    return str(path)


def test_a_prompt_whose_samples_were_uniform_starts_as_after_one_uniform_rollout(tmp_path):
    totals = [[0.0] * 8,                    # all failed: uniform
              [0.2] * 8,                    # a saturated 0.2 format reward (std 1.6e-8 in float32): uniform
              [0.0] * 7 + [1.0],            # one success: informative
              [None] * 8,                   # nothing scorable: uniform, as the filter reads it
              [0.0, 0.05] * 4]              # sample std 0.0267: uniform only with a tolerance >= that
    path = _write(tmp_path / "seed.json", num_samples=8, prompt_keys=[11, 22, 33, 44, 55], sample_totals=totals)
    seed = read_history_seed(path, num_generations=8)
    assert seed.num_samples == 8 and seed.prompts == {11, 22, 33, 44, 55}
    assert seed.uniform == {11, 22, 44}
    assert read_history_seed(path, num_generations=4).uniform == {11, 22, 44}  # K > G: still one rollout's worth
    assert read_history_seed(path, num_generations=8, tolerance=0.03).uniform == {11, 22, 44, 55}
    history = PromptHistory()
    assert history.seed(seed, [11, 22, 33, 44, 55], 8) == (5, 3) and history.streaks == {11: 1, 22: 1, 44: 1}


@pytest.mark.parametrize("result, says", [
    (None, "cannot be read (No such file or directory)"),
    ("{not json", "is not JSON"),
    ({"base": {}, "adapter": {}}, "holds two models' results (eval --compare-base)"),
    ({"num_samples": 0, "prompt_keys": [], "sample_totals": []}, "holds no sampled rewards per prompt"),
    ({"num_samples": 2, "prompt_keys": [1], "sample_totals": [[0, 0]]}, "has 2 samples per prompt, fewer than "
                                                                        "num_generations=8"),
    ({"num_samples": True, "prompt_keys": [1], "sample_totals": [[0]]}, "holds no sampled rewards per prompt"),
    ({"num_samples": 8, "prompt_keys": [1, 2], "sample_totals": [[0] * 8, [0] * 7]}, "needs an integer key and its 8"),
    ({"num_samples": 8, "prompt_keys": [1], "sample_totals": [[[0]] * 8]}, "needs an integer key and its 8"),
    ({"num_samples": 8, "prompt_keys": [1], "sample_totals": [["x"] * 8]}, "needs an integer key and its 8"),
    ({"num_samples": 8, "prompt_keys": ["abc"], "sample_totals": [[0] * 8]}, "needs an integer key and its 8"),
    ({"num_samples": 8, "prompt_keys": ["123"], "sample_totals": [[0] * 8]}, "needs an integer key and its 8"),
    ({"num_samples": 8, "prompt_keys": [1.5], "sample_totals": [[0] * 8]}, "needs an integer key and its 8"),
    ({"num_samples": 8, "prompt_keys": [1], "sample_totals": [[True] * 8]}, "needs an integer key and its 8"),
    ({"num_samples": 8, "prompt_keys": [1], "sample_totals": [["0.5"] * 8]}, "needs an integer key and its 8"),
    ({"num_samples": 8, "prompt_keys": [1, 1], "sample_totals": [[0] * 8, [0, 1] * 4]}, "lists a prompt key more than "
                                                                                      "once"),
    # a breaker's findings: NaN (JSON's NaN) read as a reward made every prompt uniform; a cut file was called no eval
    ({"num_samples": 8, "prompt_keys": [1], "sample_totals": [[float("nan")] * 8]}, "as finite numbers (or null)"),
    ({"num_samples": 8, "prompt_keys": [1], "sample_totals": [[0] * 8, [1] * 8]}, "lists 1 prompt_keys but 2 rows of "
                                                                                  "sample_totals"),
])
def test_a_file_that_is_no_training_split_evaluation_is_refused_with_the_command_that_writes_one(tmp_path, result,
                                                                                                 says):
    path = tmp_path / "seed.json"
    if result is not None:
        path.write_text(result if isinstance(result, str) else json.dumps(result))
    with pytest.raises(ValueError) as info:
        read_history_seed(str(path), num_generations=8)
    message = str(info.value)
    assert message.startswith(f"skip_history_file={str(path)!r}") and says in message
    assert f"trl-grpo-ext eval --config <this config> --split train --k 8 --output {path} (with this run's" in message


def test_a_file_sampled_under_other_rewards_another_model_or_temperature_is_refused(tmp_path, monkeypatch):
    # a breaker's finding: a file written with a format reward that is 0 everywhere started every prompt uniform, and
    # one written by `eval --adapter checkpoint-6` (not the model trained) was accepted too
    from trl_grpo_ext.rewards.spec import RewardSpec
    from trl_grpo_ext.zero_variance.history import run_expectations

    run = run_expectations([RewardSpec("exact_match", 1.0, {"column": "answer"}), RewardSpec("soft_overlong", 0.5)],
                           64, "embedded:tiny-qwen2", 0.7)
    recorded = dict(num_samples=8, prompt_keys=[1], sample_totals=[[0.0] * 8], model="embedded:tiny-qwen2",
                    temperature=0.7, max_completion_length=64,
                    rewards=[{"name": "exact_match", "weight": 1, "kwargs": {"column": "answer"}},
                             {"name": "soft_overlong", "weight": 0.5, "kwargs": {"max_completion_len": 64}}])
    assert read_history_seed(_write(tmp_path / "same.json", **recorded), 8, expect=run).uniform == {1}
    # a second breaker's findings, accepted: the rewards in another order (the same weighted total), a reward under
    # an alias, a parameter written out at its default
    same = [{"name": "soft_overlong_punishment_reward", "weight": 0.5, "kwargs": {"max_completion_len": 64}},
            {"name": "exact_match", "weight": 1.0, "kwargs": {"column": "answer", "case_sensitive": False}}]
    assert read_history_seed(_write(tmp_path / "alias.json", **{**recorded, "rewards": same}), 8,
                             expect=run).uniform == {1}
    unrecorded = {k: v for k, v in recorded.items() if k not in ("model", "temperature", "rewards",
                                                                 "max_completion_length")}
    assert read_history_seed(_write(tmp_path / "by_hand.json", **unrecorded), 8, expect=run).uniform == {1}
    (tmp_path / "ckpt").mkdir()
    monkeypatch.chdir(tmp_path)  # the model as a folder: eval records its absolute path, the run's is resolved too
    folder = run_expectations([], 64, "ckpt", 0.7)
    assert read_history_seed(_write(tmp_path / "f.json", **{**recorded, "model": str(tmp_path / "ckpt")}), 8,
                             expect=folder).uniform == {1}
    for change, says in (
            ({"rewards": [recorded["rewards"][1]]}, "rewards (soft_overlong x 0.5; the run: exact_match x 1, "
                                                    "soft_overlong x 0.5)"),
            ({"rewards": [recorded["rewards"][1], {"name": "exact_match", "weight": 1, "kwargs": {"column": "sol"}}]},
             'rewards (kwargs exact_match {"answer_tag": "answer", "case_sensitive": false, "column": "sol"}; '
             'soft_overlong {"max_completion_len": 64'),
            ({"model": "out/checkpoint-6"}, "model 'out/checkpoint-6' (the run: 'embedded:tiny-qwen2')"),
            ({"temperature": 1.0}, "temperature 1.0 (the run: 0.7)"),
            ({"max_completion_length": 16}, "max_completion_length 16 (the run: 64)")):
        with pytest.raises(ValueError) as info:
            read_history_seed(_write(tmp_path / "other.json", **{**recorded, **change}), 8, expect=run)
        assert f"was sampled under other settings than this run's: {says}" in str(info.value)
        assert "so its uniform groups predict nothing about this run's. Fix: write it with trl-grpo-ext eval" in \
            str(info.value)


def test_the_history_starts_from_the_seed_for_the_training_prompts_only():
    from trl_grpo_ext.zero_variance.history import HistorySeed

    seed = HistorySeed(path="s.json", config=None, num_samples=8, prompts=frozenset({1, 2, 3}), uniform=frozenset({1, 3}))
    history = PromptHistory()
    assert history.seed(seed, [1, 2, 9], 8) == (2, 1)  # 1 and 2 evaluated, 1 of them uniform; 3 is not trained on
    assert history.streaks == {1: 1}
    with pytest.raises(ValueError, match=r"skip_history_file='s.json' evaluated none of the 2 training prompts.*Fix: "
                                         r"write it with .* --k 8 --output s.json"):
        PromptHistory().seed(seed, [7, 8, 8], 8)
    with pytest.raises(ValueError, match=r"starts none of the 1 training prompts it evaluated uniform.*would change "
                                         r"nothing. Fix: remove skip_history_file"):
        PromptHistory().seed(seed, [2], 8)  # a seed that starts nothing uniform is refused, not silently accepted


def _b_constant_reward(completions, target, **kwargs):
    """"b" prompts: 1.0 for every completion (uniform); "a" prompts: the position in the group (informative)."""
    return [1.0 if t == "b" else float(i % G) for i, t in enumerate(target)]


def test_a_seeded_run_skips_the_prompts_evaluated_uniform_from_its_first_step(tmp_path):
    # 8 prompts, 4 "b"; the seed says the "b" prompts' 4 samples were uniform and the "a" prompts' were not, so every
    # "b" prompt starts with streak 1, is kept with probability 0.001, and its slot goes to an "a" prompt: one epoch
    # of 2 steps x 4 slots skips 4 of 8 slots and trains no uniform group (unseeded, skip would refuse one epoch).
    dataset = count_char_mix(8)
    seed = _write(tmp_path / "seed.json", num_samples=G, prompt_keys=[prompt_key(row["prompt"]) for row in dataset],
                  sample_totals=[[1.0] * G if row["target"] == "b" else [0.0, 1.0, 2.0, 3.0] for row in dataset])
    trainer = tiny_trainer(tmp_path / "run", _b_constant_reward, dataset, prompts_per_step=4, num_generations=G,
                           micro_batch_size=16, total_epochs=1, max_completion_length=8, learning_rate=1e-3, seed=0,
                           zero_variance_filter="skip", skip_exploration_probability=0.001, skip_history_file=seed)
    assert trainer.history_seeded == (8, 4)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert [h["zero_variance/frac_prompts_skipped"] for h in logs] == [0.5, 0.5]
    assert [h["zero_variance/frac_uniform_before"] for h in logs] == [0.0, 0.0]


def test_eval_of_the_training_split_seeds_the_recipe_s_prompts(tmp_path):
    """The keys `eval --split train` writes are the recipe's training prompts (the same system prompt and chat form):
    with p = 1e-9 every prompt the file shows uniform is skipped at every step of the first epoch. The config already
    names the file it is about to write (a breaker's finding: eval refused to write it)."""
    from factories import tiny_cpu_yaml

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    seed = tmp_path / "seed.json"
    config = tiny_cpu_yaml(tmp_path, zero_variance_filter="skip", skip_history_file=str(seed))
    done = subprocess.run([sys.executable, "-m", "trl_grpo_ext.cli", "eval", "--config", config, "--split", "train",
                           "--k", "8", "--output", str(seed)], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == f"Evaluation: {seed}"  # a new user's finding: the file went unannounced
    result = json.loads(seed.read_text())
    assert result["num_samples"] == 8 and len(result["prompt_keys"]) == len(result["sample_totals"]) == 240
    uniform = sum(1 for totals in result["sample_totals"] if max(totals) == min(totals))  # no None: char_fraction
    assert 0 < uniform < 240
    assert result["model"] == "embedded:tiny-qwen2" and [r["name"] for r in result["rewards"]] == ["char_fraction"]
    other = subprocess.run([sys.executable, "-m", "trl_grpo_ext.cli", "plan", "--config", config, "--rewards",
                            "exact_match"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert other.returncode == 2 and "was sampled under other settings than this run's: rewards (char_fraction x " \
        "1; the run: exact_match x 1)" in other.stderr, other.stderr[-2000:]
    # A generation batch's slots are decided when the dataloader draws it, one micro-batch (here one step) ahead of
    # training: after step t,
    # batches 1..t+1 of TRL's order (2 prompts each, seed 0), and with p = 1e-9 exactly their seeded-uniform rows
    # (none rolled out yet in the first epoch) are replaced. The eval lists the training prompts in the dataset's
    # order. The run is just long enough for a seeded-uniform row to come up.
    order = list(RepeatSampler(range(240), mini_repeat_count=1, batch_size=2, repeat_count=1, seed=0))
    starts_uniform = [max(totals) == min(totals) for totals in result["sample_totals"]]
    steps = max(3, min(i for i, row in enumerate(order) if starts_uniform[row]) // 2)
    done = subprocess.run([sys.executable, str(ROOT / "recipes/grpo_qlora.py"), "--config", config,
                           "--skip_exploration_probability", "1e-9", "--total_training_steps", str(steps),
                           "--final_eval", "none", "--eval_strategy", "no",
                           "--output_dir", str(tmp_path / "run")],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{uniform} of the 240 training prompts it evaluated start uniform" in done.stdout
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    skipped = [row["zero_variance/frac_prompts_skipped"] for row in rows if "zero_variance/frac_prompts_skipped" in row]
    expected = [sum(starts_uniform[row] for row in order[:2 * (t + 1)]) / (2 * (t + 1)) for t in range(1, steps + 1)]
    assert skipped == expected and expected[-1] > 0, (skipped, expected)


def test_a_resumed_seeded_run_continues_the_checkpoint_s_history_without_the_file(tmp_path, capsys):
    """The resumed run neither needs the file (a second breaker's finding: it was read again and refused when gone)
    nor prints its figures (a first breaker's finding)."""
    dataset = count_char_mix(8)
    keys = [prompt_key(row["prompt"]) for row in dataset]
    seed = _write(tmp_path / "seed.json", num_samples=G, prompt_keys=keys,
                  sample_totals=[[1.0] * G if row["target"] == "b" else [0.0, 1.0, 2.0, 3.0] for row in dataset])
    run = dict(prompts_per_step=4, num_generations=G, micro_batch_size=16, total_epochs=2, max_completion_length=8,
               learning_rate=1e-3, seed=0, zero_variance_filter="skip", skip_history_file=seed,
               save_strategy="steps", save_steps=1)
    tiny_trainer(tmp_path / "run", _b_constant_reward, dataset, **run).train()
    capsys.readouterr()
    (tmp_path / "seed.json").unlink()
    resumed = tiny_trainer(tmp_path / "run", _b_constant_reward, dataset, **run,
                           resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-3"))
    assert resumed.history_seeded is None
    resumed.train()
    out = capsys.readouterr().out
    assert "continuing the prompt history saved in the checkpoint (not skip_history_file's)" in out
    assert "streaks from skip_history_file" not in out
