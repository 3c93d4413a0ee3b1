"""Prompts and rewards agree in every shipped config: the completion its system prompt asks for earns every
configured reward's maximum, and a wrong one earns less (issue: a GSM8K config whose `accuracy` scored the asked
`<answer>72</answer>` as 0)."""

from pathlib import Path

import pytest
import yaml

from trl_grpo_ext.data.load import ARITHMETIC_SYSTEM_PROMPT, GSM8K_SYSTEM_PROMPT, gsm8k_to_prompt
from trl_grpo_ext.evaluation.generation import score_completions
from trl_grpo_ext.rewards.spec import RewardSpec, build_reward_funcs, with_run_defaults

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "recipes" / "configs").glob("*.yaml"))
GSM8K_ROW = {"question": "Natalia sold 48 clips in April and 24 in May. How many in all?",
             "answer": "Natalia sold 48 + 24 = <<48+24=72>>72 clips.\n#### 72"}


def _row_and_completions(config: dict) -> tuple[dict, str, str]:
    """One dataset row of the config's task, the completion its prompt asks for, and a wrong one."""
    dataset = config.get("dataset_name")
    if dataset == "embedded:count-char":
        target = config.get("embedded_target", "a")
        row = {"prompt": [{"role": "user", "content": f"xyz: write {target} {target} {target}"}], "target": target}
        return row, target * 12, "bbbb cccc"
    system = config.get("system_prompt") or (
        ARITHMETIC_SYSTEM_PROMPT if dataset == "embedded:arithmetic" else GSM8K_SYSTEM_PROMPT)
    row = gsm8k_to_prompt(GSM8K_ROW, system)
    if "<answer>" in system:  # R1-style: reasoning in <think>, the number in <answer>
        return row, "<think>48 + 24 = 72</think>\n<answer>72</answer>", "I think it is 71 clips."
    if "The answer is N" in system:
        return row, "48 + 24 = 72 clips. The answer is 72.", "48 + 24 = 71, so 71 clips"
    raise AssertionError(f"the test does not know the format this system prompt asks for: {system!r}")


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_reward_gives_the_asked_format_its_maximum_and_a_wrong_completion_less(path):
    config = yaml.safe_load(path.read_text())
    specs = with_run_defaults([RewardSpec(**r) if isinstance(r, dict) else RewardSpec(r) for r in config["rewards"]],
                              config.get("max_completion_length", 256))
    funcs, _ = build_reward_funcs(specs)
    row, ideal, wrong = _row_and_completions(config)
    columns = {k: [v, v] for k, v in row.items() if k != "prompt"}
    scores = score_completions(funcs, [row["prompt"]] * 2, [ideal, wrong], [[1] * 8, [1] * 8], columns)
    for spec, (ideal_score, wrong_score) in zip(specs, scores):
        assert ideal_score == 1.0, f"{path.name}: {spec.name} scores the asked format {ideal!r} {ideal_score}"
        assert wrong_score < ideal_score, f"{path.name}: {spec.name} scores {wrong!r} {wrong_score}"


@pytest.mark.parametrize(
    "completion, gold",
    [("<answer>72</answer>", "#### 72"), ("<think>x</think>\n<answer>72</answer>", "#### 72"),
     ("<answer>1,200</answer>", "1200")],
)
def test_accuracy_reads_the_answer_tag_the_gsm8k_prompt_asks_for(completion, gold):
    from trl_grpo_ext.rewards.math import Accuracy

    assert Accuracy()(completions=[completion], answer=[gold]) == [1.0]
    assert Accuracy()(completions=[completion.replace("72", "73").replace("1,200", "1,300")], answer=[gold]) == [0.0]
