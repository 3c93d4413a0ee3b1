"""The model card (trl_grpo_ext.hub.card) carries the run's real values, read from the files of a finished run."""

import json
import os
import shutil
from importlib import metadata

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from hub_testing import FAKE_TOKEN, make_finished_run  # noqa: E402

from trl_grpo_ext.hub.card import build_model_card, format_value, is_hub_id  # noqa: E402
from trl_grpo_ext.zero_variance.report import summary_line  # noqa: E402

REPO = "someone/tiny-grpo"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    output_dir, _, base_path = make_finished_run(tmp_path_factory.mktemp("run") / "output")
    return output_dir, base_path


@pytest.fixture(scope="module")
def card(run):
    return build_model_card(run[0], repo_id=REPO)


def test_metadata_tags_library_and_pipeline(card):
    assert {"trl", "grpo", "qlora", "trl-grpo-ext"} <= set(card.data.tags)
    assert card.data.library_name == "peft"
    assert card.data.pipeline_tag == "text-generation"
    assert card.data.model_name == "tiny-grpo"


def test_base_model_and_dataset_named_in_text_but_local_ones_kept_out_of_metadata(run, card):
    _, base_path = run
    assert card.data.base_model is None and card.data.datasets is None
    assert f"`{base_path}` (a local folder, not on the Hub)" in card.text
    assert "`embedded:count-char` (not on the Hub)" in card.text


def test_hub_ids_go_into_metadata(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run[0], copy)
    config = json.loads((copy / "run_config.json").read_text())
    config["script_args"].update(model_name_or_path="Qwen/Qwen2.5-0.5B-Instruct", dataset_name="openai/gsm8k")
    config["model_args"]["model_name_or_path"] = "Qwen/Qwen2.5-0.5B-Instruct"
    (copy / "run_config.json").write_text(json.dumps(config))
    card = build_model_card(copy, repo_id=REPO)
    assert card.data.base_model == "Qwen/Qwen2.5-0.5B-Instruct"
    assert card.data.datasets == ["openai/gsm8k"]
    assert "[openai/gsm8k](https://huggingface.co/datasets/openai/gsm8k)" in card.text


def test_reward_functions_and_weights(card):
    assert "| char_fraction | 1 | `{}` |" in card.text
    assert '| format_bonus | 0.5 | `{"pattern": "^a+$"}` |' in card.text


def test_full_quantity_plan(run, card):
    """The plan a run wrote (tests/hub_testing.real_run_plan_json) is read back as a `RunPlan` and shown as the run
    printed it, with units and arithmetic; the values worked out by hand from 64 prompts, 4 per step, G 8,
    micro-batch 8 and a 40-step limit."""
    from trl_grpo_ext.plan import RunPlan

    plan = RunPlan.read(run[0] / "run_plan.json")  # a valid plan: the card does not take its fallback branch
    section = card.text.split("### Quantity plan")[1].split("###")[0]
    assert "```text\n" + plan.format_table() + "\n```" in section
    assert "| quantity | value |" not in section  # the fallback table of an unreadable plan
    lines = {line.split("  ")[0]: " ".join(line.split()) for line in section.splitlines() if "  " in line}
    for label, shown in [
        ("prompts / step", "prompts / step 4 prompts = 32 / 8"),  # 4 prompts x G 8 = 32 completions
        ("gradient accumulation", "gradient accumulation 4 micro-batches = 32 / (8 × 1 process)"),
        ("steps / epoch", "steps / epoch 16 steps = floor(64 / 4) × 1 = 16"),
        ("total steps", "total steps 40 steps stopped by the step limit (whichever limit is reached first)"),
        ("epochs covered", "epochs covered 2.5 epochs = 40 / 16"),
        ("token budget / step", "token budget / step 768 tokens = 32 × 24 (max_completion_length)"),
        ("token budget total", "token budget total 30,720 tokens = 768 × 40"),
    ]:
        assert lines[label] == shown, (label, lines.get(label))
    assert (plan.total_steps, plan.stop_reason, plan.epochs_covered) == (40, "step_limit", 2.5)


def test_filter_advantage_and_optimisation_settings(card):
    for row in [
        "| zero_variance_filter | mask |",
        "| scale_rewards | group |",
        "| advantage_baseline | group_mean |",
        "| advantage_std_scaling | group |",
        "| learning_rate | 1e-05 |",
        "| loss_type | dapo |",
        "| beta | 0.04 |",
        "| seed | 42 |",
    ]:
        assert row in card.text


def test_final_metrics(card):
    assert "| train_loss | 0.0123 |" in card.text
    assert "| train_runtime | 123.4 |" in card.text
    assert "| global_step (optimizer steps run) | 40 |" in card.text
    assert "| reward (last logged, step 40) | 0.625 |" in card.text
    assert "| frac_reward_zero_std (last logged, step 40) | 0.125 |" in card.text


def test_reward_plot_is_a_relative_image_link(card):
    assert "![Mean reward per optimizer step](reward_plot.png)" in card.text


def test_framework_versions(card):
    assert "- trl-grpo-ext: 0.1.0" in card.text
    for package in ("trl", "peft", "transformers"):
        assert f"- {package}: {metadata.version(package)}" in card.text


def test_how_to_load_the_adapter(run, card):
    assert f'model_id = "{REPO}"' in card.text and "AutoPeftModelForCausalLM.from_pretrained(model_id)" in card.text
    assert f'PeftModel.from_pretrained(base, "{REPO}")' in card.text
    assert f'AutoModelForCausalLM.from_pretrained("{run[1]}", quantization_config=bnb)' in card.text


def test_the_snippet_asks_the_run_s_own_first_held_out_prompt(run, tmp_path):
    """The loading snippet's input is the first prompt the final evaluation answered (the run's task, with its
    system prompt), written as a Python literal that compiles; without eval_results.json, a generic question."""
    import re

    out = tmp_path / "with_eval"
    shutil.copytree(run[0], out)
    prompt = [{"role": "system", "content": "Solve it. End with: The answer is N."},
              {"role": "user", "content": "Tom has 3 \"red\" apples and buys 4 more. How many?"}]
    trained = {"num_prompts": 4, "accuracy": 0.5, "accuracy_ci": [0.15, 0.85], "mean_reward": {"format": 0.5},
               "correct": [1, 0, 1, 0], "correctness_reward": "format", "mean_completion_tokens": 3.0,
               "examples": [{"prompt": prompt, "completion": "The answer is 7.", "rewards": {"format": 1.0}}]}
    (out / "eval_results.json").write_text(json.dumps({"trained": trained}))
    text = build_model_card(out, repo_id=REPO).text
    (line,) = [x for x in text.splitlines() if x.startswith("messages = ")]
    namespace: dict = {}
    exec(line, namespace)  # noqa: S102 (the card's own snippet line)
    assert namespace["messages"] == prompt
    (out / "eval_results.json").unlink()
    assert re.search(r'messages = \[\{"role": "user", "content": "What is 7 \+ 5\?"\}\]',
                     build_model_card(out, repo_id=REPO).text)


def test_merged_card_loads_with_plain_transformers(run):
    card = build_model_card(run[0], mode="merged", repo_id=REPO)
    assert card.data.library_name == "transformers"
    assert f'model_id = "{REPO}"' in card.text
    assert 'AutoModelForCausalLM.from_pretrained(model_id, dtype="auto")' in card.text
    assert "Peft" not in card.text.split("## How to load")[1].split("## Training procedure")[0]


def test_no_secret_reaches_the_card(card):
    assert FAKE_TOKEN not in str(card)
    assert '"hub_token": "<redacted>"' in card.text


def test_a_token_of_any_shape_is_removed_when_given(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run[0], copy)
    config = json.loads((copy / "run_config.json").read_text())
    config["training_args"]["run_name"] = "grpo-plainS3cretValue"  # not under a secret key, not hf_-shaped
    (copy / "run_config.json").write_text(json.dumps(config))
    card = build_model_card(copy, token="plainS3cretValue")
    assert "plainS3cretValue" not in str(card)
    assert '"run_name": "grpo-<redacted>"' in card.text


def test_card_round_trips_through_huggingface_hub(card, tmp_path):
    from huggingface_hub import ModelCard

    card.save(tmp_path / "README.md")
    loaded = ModelCard.load(tmp_path / "README.md")
    assert loaded.data.tags == card.data.tags
    assert loaded.text == card.text


def test_missing_files_say_not_recorded(run, tmp_path):
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy(run[0] / name, tmp_path / name)
    card = build_model_card(tmp_path)
    assert card.text.count("Not recorded for this run.") == 5  # rewards, plan, filter, optimisation, metrics
    assert "reward_plot.png" not in card.text


def test_unknown_mode_is_rejected(run):
    with pytest.raises(ValueError, match="mode='gguf'"):
        build_model_card(run[0], mode="gguf")


@pytest.mark.parametrize(
    ("name", "expected"),
    [("Qwen/Qwen2.5-0.5B-Instruct", True), ("gpt2", True), ("embedded:tiny-qwen2", False), ("/tmp/model", False)],
)
def test_is_hub_id(name, expected):
    assert is_hub_id(name) is expected


@pytest.mark.parametrize(
    ("value", "cell"),
    [(1e-05, "1e-05"), (0.4375, "0.4375"), (True, "true"), ("a|b", "a\\|b"), ({"k": 1}, '`{"k": 1}`')],
)
def test_format_value(value, cell):
    assert format_value(value) == cell


def _first_snippet(text: str) -> str:
    section = text.split("## How to load")[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_local_card_snippet_loads_and_generates_from_another_directory(run, tmp_path):
    """Without a repo id the snippet names the run's own folder; run as written, it loads the adapter and generates."""
    import subprocess
    import sys

    card = build_model_card(run[0])
    snippet = _first_snippet(card.text)
    assert f'model_id = "{run[0].resolve()}"' in snippet and "model.generate(" in snippet
    result = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    # the decoded completion was printed: up to 64 new tokens (empty when the sampled first token is EOS)
    assert result.stdout.endswith("\n") and "Traceback" not in result.stderr


def test_pushed_card_snippet_differs_only_by_the_repo_id(run):
    local = _first_snippet(build_model_card(run[0]).text)
    pushed = _first_snippet(build_model_card(run[0], repo_id=REPO).text)
    assert pushed == local.replace(str(run[0].resolve()), REPO)


def test_a_full_fine_tune_is_not_called_an_adapter(run, tmp_path):
    copy = tmp_path / "run"  # use_peft false: the folder holds the model (config.json), no adapter_config.json
    shutil.copytree(run[0], copy)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (copy / name).unlink()
    (copy / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    config = json.loads((copy / "run_config.json").read_text())
    config["model_args"].update(use_peft=False, load_in_4bit=False)
    (copy / "run_config.json").write_text(json.dumps(config))
    card = build_model_card(copy, repo_id=REPO)
    assert card.data.library_name == "transformers" and card.data.tags == ["trl", "grpo", "trl-grpo-ext"]
    assert "fully fine-tuned (every weight, no adapter)" in card.text and "LoRA adapter" not in card.text
    assert "a full fine-tune, no adapter." in card.text
    assert 'AutoModelForCausalLM.from_pretrained(model_id, dtype="auto")' in card.text and "Peft" not in card.text
    assert "hu2022lora" not in card.text and "dettmers2023qlora" not in card.text


def test_card_has_license_and_citations(run, card, tmp_path):
    assert card.data.license == "apache-2.0" and "## License" in card.text
    for key in ("shao2024deepseekmath", "dettmers2023qlora", "vonwerra2020trl", "yu2025dapo"):  # the run masked
        assert f"{{{key}," in card.text
    copy = tmp_path / "run"
    shutil.copytree(run[0], copy)
    config = json.loads((copy / "run_config.json").read_text())
    config.setdefault("push_args", {})["hub_license"] = "llama3.1"
    config["training_args"]["zero_variance_filter"] = "off"
    (copy / "run_config.json").write_text(json.dumps(config))
    other = build_model_card(copy, repo_id=REPO)
    assert other.data.license == "llama3.1" and "yu2025dapo" not in other.text and "dettmers2023qlora" in other.text


def test_final_metrics_show_the_uniform_share_and_the_updates_it_cost(card, run, tmp_path):
    # the fixture logged frac_reward_zero_std 0.5 at step 10 (a mean over steps 1-10) and 0.125 at step 40 (steps
    # 11-40): (0.5 × 10 + 0.125 × 30) / 40 = 0.21875 of the groups, no skipped update
    assert "| uniform (σ = 0) share of generated groups (40 steps, 2 logs) | 0.2188 |" in card.text
    # only TRL's figure logged (no filter): all-uniform steps are counted, but they still stepped the optimizer
    assert ("| at least: optimizer steps with zero advantages (every group uniform; the filter was off, so the "
            "optimizer still stepped) | 0 |") in card.text  # two logs averaging 10 and 30 steps at shares in (0, 1)
    copy = tmp_path / "run"
    shutil.copytree(run[0], copy)
    state = json.loads((copy / "trainer_state.json").read_text())
    state["log_history"][1].update({"zero_variance/frac_uniform_before": 1.0, "zero_variance/no_update": 1 / 30})
    assert "seconds generating uniform groups" not in card.text  # not logged: no row
    state["log_history"][0].update({"zero_variance/generation_seconds": 2.0, "step_time": 4.0})  # steps 1-10: 20 s
    state["log_history"][1].update({"zero_variance/generation_seconds": 3.0, "step_time": 5.0})  # 11-40: 90 s
    (copy / "trainer_state.json").write_text(json.dumps(state))
    text = build_model_card(copy, repo_id=REPO).text
    assert "| uniform (σ = 0) share of generated groups (40 steps, 2 logs) | 0.875 |" in text  # (5 + 30) / 40
    assert "| optimizer steps that made no update (every group uniform) | 1 |" in text  # 1/30 of the 30 steps 11-40
    # half of 20 s + all of 90 s, of 4 s × 10 + 5 s × 30 of training steps
    assert "| seconds generating uniform groups, of the training steps' (step_time) | 100 of 190 |" in text
    # a short run, 50 times faster: the card prints the closing line's decimals (it read "2 of 4" beside the line's
    # "2.0 s of the 3.8 s": a breaker's finding)
    state["log_history"][0].update({"zero_variance/generation_seconds": 0.04, "step_time": 0.08})
    state["log_history"][1].update({"zero_variance/generation_seconds": 0.06, "step_time": 0.1})
    (copy / "trainer_state.json").write_text(json.dumps(state))
    text = build_model_card(copy, repo_id=REPO).text
    assert "| seconds generating uniform groups, of the training steps' (step_time) | 2.0 of 3.8 |" in text
    assert "2.0 s of the 3.8 s of the training steps" in summary_line(state["log_history"])


def test_skip_runs_cite_greso_and_show_their_settings(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run[0], copy)
    config = json.loads((copy / "run_config.json").read_text())
    config["training_args"].update(zero_variance_filter="skip", skip_exploration_probability=0.25)
    (copy / "run_config.json").write_text(json.dumps(config))
    text = build_model_card(copy, repo_id=REPO).text
    assert "| skip_exploration_probability | 0.25 |" in text and "| zero_variance_filter | skip |" in text
    assert "arXiv:2506.02177" in text
    assert "arXiv:2506.02177" not in build_model_card(run[0], repo_id=REPO).text  # a mask run does not cite it


#: Every field of the zero-variance and advantage field lists, set to a value other than its default, over two runs
#: (resample and skip are exclusive modes), with the value the card must show (the resolved one).
FEATURE_RUNS = [
    ({"zero_variance_filter": "resample", "zero_variance_tolerance": 0.01, "zero_variance_reward": "char_fraction",
      "max_resample_rounds": 2, "advantage_baseline": "leave_one_out", "advantage_std_scaling": "batch",
      "scale_rewards": "batch", "advantage_epsilon": 0.001, "advantage_std_kind": "population", "warmup_steps": 0.1},
     {}),
    ({"zero_variance_filter": "skip", "skip_exploration_probability": 0.5, "advantage_preset": "dr_grpo"},
     {"advantage_std_scaling": "none", "scale_rewards": "none"}),
]


@pytest.mark.parametrize("fields, resolved", FEATURE_RUNS)
def test_every_feature_field_a_run_sets_is_on_its_card(run, tmp_path, fields, resolved):
    """A run's `run_config.json` (written by the recipe's `write_run_config` from a real `GRPOExtConfig`) shows each
    field of each feature's own list on the card (before: `warmup_ratio` and `max_prompt_length` never matched)."""
    from types import SimpleNamespace

    from factories import tiny_config

    from trl_grpo_ext.config.advantage_settings import FIELDS as ADVANTAGE_FIELDS
    from trl_grpo_ext.config.recipe_parse import write_run_config
    from trl_grpo_ext.zero_variance.settings import FIELDS as ZERO_VARIANCE_FIELDS

    copy = tmp_path / "run"
    shutil.copytree(run[0], copy)
    old = json.loads((copy / "run_config.json").read_text())
    config = tiny_config(copy, rewards=["char_fraction"], prompts_per_step=2, num_generations=4, micro_batch_size=8,
                         **fields)
    write_run_config(str(copy), SimpleNamespace(**old["script_args"], max_prompt_length=64), config,
                     SimpleNamespace(**old["model_args"]), SimpleNamespace(**old.get("push_args", {})))
    text = build_model_card(copy, repo_id=REPO).text
    for name, value in {**fields, **resolved}.items():
        assert f"| {name} | {format_value(value)} |" in text, name
    for name in (*ZERO_VARIANCE_FIELDS, *ADVANTAGE_FIELDS):
        assert f"| {name} | " in text, name
    assert "| max_prompt_length | 64 |" in text
