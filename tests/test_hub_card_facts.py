"""Every statement of the model card comes from what the run did (issue 22, item 5).

- A relative local base (``model_name_or_path: mdl/tiny``) stays local when the card is built from another directory
  (``trl-grpo-ext push`` run elsewhere): never ``base_model: mdl/tiny`` in the metadata, never a Hub link.
- A run on an unquantized base (``load_in_4bit: false``, as recipes/configs/smollm2_arithmetic_cpu.yaml) is not called
  QLoRA: no ``qlora`` tag, no QLoRA citation, no 4-bit snippet; it cites LoRA and names the float32 base.
- A metric that was not measured (``total_flos: 0``) is left out.
"""

import json
import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import yaml  # noqa: E402
from factories import ROOT  # noqa: E402
from hub_testing import make_finished_run  # noqa: E402

from trl_grpo_ext.hub import card_facts  # noqa: E402
from trl_grpo_ext.hub.card import build_model_card  # noqa: E402

SMOLLM2_CPU = yaml.safe_load((ROOT / "recipes/configs/smollm2_arithmetic_cpu.yaml").read_text())


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    output_dir, _, base_path = make_finished_run(tmp_path_factory.mktemp("facts") / "output")
    return output_dir, base_path


def _edit(run_dir, edit):
    config = json.loads((run_dir / "run_config.json").read_text())
    edit(config)
    (run_dir / "run_config.json").write_text(json.dumps(config))


def _relative_base_run(finished, work):
    """The finished run moved to ``work/outputs/run``, its base copied to ``work/mdl/tiny`` and named relatively, as
    `cd work && accelerate launch ... --model_name_or_path mdl/tiny --output_dir outputs/run` records it."""
    run_dir = work / "outputs" / "run"
    shutil.copytree(finished[0], run_dir)
    shutil.copytree(finished[1], work / "mdl" / "tiny")

    def relative(config):
        config["model_args"]["model_name_or_path"] = config["script_args"]["model_name_or_path"] = "mdl/tiny"
        config["training_args"]["output_dir"] = "outputs/run"

    _edit(run_dir, relative)
    adapter = json.loads((run_dir / "adapter_config.json").read_text())
    adapter["base_model_name_or_path"] = "mdl/tiny"  # what PEFT writes: the name the model was loaded with
    (run_dir / "adapter_config.json").write_text(json.dumps(adapter))
    return run_dir


def test_a_relative_local_base_stays_local_when_the_card_is_built_elsewhere(finished, tmp_path, monkeypatch):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    run_dir = _relative_base_run(finished, work)
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # `trl-grpo-ext push work/outputs/run ...` from another directory
    card = build_model_card(run_dir, repo_id="someone/tiny-grpo")
    local = (work / "mdl" / "tiny").resolve()
    assert card.data.base_model is None
    assert "base_model" not in str(card).split("---")[1]  # not in the YAML metadata at all
    assert "huggingface.co/mdl/tiny" not in card.text
    assert f"A LoRA adapter (r=8, alpha=16, on k_proj, o_proj, q_proj, v_proj, with trained copies of lm_head) for " \
           f"`{local}` (a local folder, not on the Hub) trained with GRPO" in card.text
    assert f'AutoModelForCausalLM.from_pretrained("{local}", quantization_config=bnb)' in card.text


def test_the_recorded_model_source_keeps_a_base_local_after_it_was_moved(finished, tmp_path, monkeypatch):
    """The recipe records the resolved base (`write_run_config`); the card trusts the record, not the folder."""
    from factories import tiny_config
    from trl import ModelConfig

    from trl_grpo_ext.config.recipe_args import RecipeArguments
    from trl_grpo_ext.config.recipe_parse import write_run_config
    from trl_grpo_ext.hub.push import HubPushArguments
    from trl_grpo_ext.models.source import resolve_model_source

    work = tmp_path / "work"
    run_dir = _relative_base_run(finished, work)
    monkeypatch.chdir(work)
    written = write_run_config(str(tmp_path / "record"), RecipeArguments(dataset_name="embedded:count-char"),
                               tiny_config(tmp_path / "record"), ModelConfig(model_name_or_path="mdl/tiny"),
                               HubPushArguments(), resolve_model_source("mdl/tiny"))
    recorded = json.loads(written.read_text())["model_source"]
    assert recorded == {"name": "mdl/tiny", "kind": "local", "base": str((work / "mdl/tiny").resolve()),
                        "base_is_local": True, "adapter": None}
    _edit(run_dir, lambda config: config.update(model_source=recorded))
    shutil.rmtree(work / "mdl")  # the base is gone (or the card is built on another machine)
    monkeypatch.chdir(tmp_path)
    card = build_model_card(run_dir)
    assert card.data.base_model is None
    assert f"`{recorded['base']}` (a local folder, not on the Hub)" in card.text


def test_a_float32_base_run_is_not_called_qlora(finished, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(finished[0], run_dir)

    def like_smollm2_cpu(config):
        for key in ("load_in_4bit", "use_peft", "lora_r", "lora_alpha"):
            config["model_args"][key] = SMOLLM2_CPU[key]
        config["model_args"].pop("dtype")
        config["training_args"]["bf16"] = SMOLLM2_CPU["bf16"]

    _edit(run_dir, like_smollm2_cpu)
    assert SMOLLM2_CPU["load_in_4bit"] is False
    card = build_model_card(run_dir)
    text = str(card)
    assert "qlora" not in card.data.tags and card.data.tags == ["trl", "grpo", "trl-grpo-ext", "lora"]
    assert "QLoRA" not in text and "dettmers2023qlora" not in text and "4-bit" not in text and "NF4" not in text
    assert "BitsAndBytesConfig" not in text
    assert "{hu2022lora," in text
    assert "trained with GRPO on `embedded:count-char` (not on the Hub) with trl-grpo-ext on a float32 base " \
           "(not quantized)." in text
    assert "with a LoRA adapter ([Hu et al., 2021](https://huggingface.co/papers/2106.09685)) on a float32 base " \
           "(not quantized)." in text

    qlora = build_model_card(finished[0])  # the 4-bit NF4 run keeps every QLoRA statement
    assert "qlora" in qlora.data.tags and "{dettmers2023qlora," in qlora.text and "hu2022lora" not in qlora.text
    assert "with trl-grpo-ext on a 4-bit NF4 base (QLoRA)." in qlora.text
    assert ('bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,\n'
            "                         bnb_4bit_compute_dtype=torch.float32)") in qlora.text


def test_a_metric_that_was_not_measured_is_left_out(finished, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(finished[0], run_dir)
    results = json.loads((run_dir / "train_results.json").read_text())
    (run_dir / "train_results.json").write_text(json.dumps({**results, "total_flos": 0}))
    metrics = build_model_card(run_dir).text.split("### Final metrics")[1].split("##")[0]
    assert "total_flos" not in metrics and "| train_loss | 0.0123 |" in metrics
    (run_dir / "train_results.json").write_text(json.dumps({**results, "total_flos": 1.5e12}))
    assert "| total_flos | 1.5e+12 |" in build_model_card(run_dir).text


def test_a_resumed_runs_transformers_figures_say_they_cover_the_steps_after_the_checkpoint():
    """transformers 5 divides train_loss by the steps of this train() call and times that call alone, so on a run
    resumed from checkpoint-6 of 10 they are the figures of steps 7-10: the card says so."""
    results = {"train_runtime": 30.0, "train_loss": 0.5, "train_steps_per_second": 0.133, "epoch": 1.0,
               "resumed_from_step": 6}
    assert card_facts.measured(results) == [
        ("train_runtime (the steps after 6 alone: the run resumed from checkpoint-6)", 30.0),
        ("train_loss (the steps after 6 alone: the run resumed from checkpoint-6)", 0.5),
        ("train_steps_per_second (the steps after 6 alone: the run resumed from checkpoint-6)", 0.133),
        ("epoch", 1.0)]
    for not_resumed in (None, "absent"):  # a fresh run writes None (transformers merges all_results.json)
        results["resumed_from_step"] = not_resumed
        if not_resumed == "absent":
            del results["resumed_from_step"]
        assert card_facts.measured(results)[0] == ("train_runtime", 30.0)
        assert "resumed_from_step" not in dict(card_facts.measured(results))
