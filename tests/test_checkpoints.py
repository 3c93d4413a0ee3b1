"""Choosing the checkpoint to resume from: the newest complete one; the saved plan must match."""

import json

import pytest

from trl_grpo_ext.plan import QuantityError, resolve_plan, resolve_trl_fields
from trl_grpo_ext.training.checkpoints import (
    PLAN_FILE,
    check_checkpoint_plan,
    last_complete_checkpoint,
    resolve_resume_checkpoint,
)


def _checkpoint(root, step, complete=True):
    path = root / f"checkpoint-{step}"
    path.mkdir()
    if complete:
        (path / "trainer_state.json").write_text("{}")
    return path


def test_newest_complete_checkpoint_wins_over_a_half_written_newer_one(tmp_path):
    _checkpoint(tmp_path, 4)
    _checkpoint(tmp_path, 12)
    _checkpoint(tmp_path, 16, complete=False)  # killed while saving: no trainer_state.json
    (tmp_path / "checkpoint-x").mkdir()  # not a checkpoint name
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-12")  # 12 > 4 numerically
    assert resolve_resume_checkpoint("last", str(tmp_path)) == str(tmp_path / "checkpoint-12")
    assert resolve_resume_checkpoint(True, str(tmp_path)) == str(tmp_path / "checkpoint-12")
    assert resolve_resume_checkpoint(None, str(tmp_path)) is None


def test_resume_errors_say_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="holds no complete checkpoint"):
        resolve_resume_checkpoint("last", str(tmp_path))
    half = _checkpoint(tmp_path, 3, complete=False)
    with pytest.raises(ValueError, match="resume_from_checkpoint: last"):
        resolve_resume_checkpoint(str(half), str(tmp_path))


def _plan(prompts_per_step):
    fields = resolve_trl_fields({"prompts_per_step": prompts_per_step, "num_generations": 4, "micro_batch_size": 8,
                                 "total_training_steps": 10}, world_size=1)
    return resolve_plan(fields, dataset_size=100, world_size=1, max_completion_length=16)


def test_saved_plan_must_match(tmp_path):
    checkpoint = _checkpoint(tmp_path, 5)
    (checkpoint / PLAN_FILE).write_text(json.dumps(_plan(2).to_dict()))
    checked = check_checkpoint_plan(str(checkpoint), _plan(2))  # same plan: accepted
    assert checked == str(checkpoint) and checked.plan == _plan(2)  # marked, so the trainer does not check again
    assert check_checkpoint_plan(None, _plan(2)) is None
    with pytest.raises(QuantityError, match="prompts_per_step: 2 in the checkpoint, 4 now"):
        check_checkpoint_plan(str(checkpoint), _plan(4))


def test_a_new_run_never_overwrites_an_old_one(tmp_path):
    from trl_grpo_ext.training.checkpoints import check_output_dir

    check_output_dir(tmp_path / "new", resuming=False)  # missing or empty: fine
    _checkpoint(tmp_path, 2)
    with pytest.raises(ValueError, match="--resume_from_checkpoint last, choose another --output_dir"):
        check_output_dir(tmp_path, resuming=False)
    check_output_dir(tmp_path, resuming=True)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        check_output_dir(tmp_path / "afile", resuming=False)


def test_a_finished_run_is_not_offered_a_resume(tmp_path):
    """A run at its last step cannot be resumed (`check_checkpoint_unfinished`): the refusal of a new run there offers
    continuing its adapter, starting over or another folder, never --resume_from_checkpoint."""
    import json

    from trl_grpo_ext.training.checkpoints import check_output_dir

    for step, last in ((3, 4), (4, 4)):
        root = tmp_path / f"run{step}"
        root.mkdir()
        _checkpoint(root, step).joinpath("trainer_state.json").write_text(
            json.dumps({"global_step": step, "max_steps": last}))
        with pytest.raises(ValueError) as caught:
            check_output_dir(root, resuming=False)
        message = str(caught.value)
        if step < last:
            assert f"already holds a run (checkpoint-{step})" in message and "--resume_from_checkpoint last" in message
        else:
            assert "already holds a finished run (checkpoint-4: step 4 of 4)" in message
            assert "resume" not in message.lower()
            assert f"--model_name_or_path {root} to continue its adapter" in message
            assert "--overwrite_output_dir true" in message


def test_a_skip_checkpoint_resumed_on_other_prompts_is_refused(tmp_path):
    # a breaker's finding: resumed with --embedded_seed 3 (8 other prompts of the same count), the run went on without
    # a word, its history holding 8 stale prompts next to 8 new ones; the resume check compared the dataset's size only
    from trl_grpo_ext.plan import QuantityError
    from trl_grpo_ext.training.checkpoints import ZERO_VARIANCE_STATE_FILE, check_history_prompts

    (tmp_path / ZERO_VARIANCE_STATE_FILE).write_text(json.dumps(
        {"prompt_history": {"streaks": {"11": 0, "22": 2}, "decisions": None}, "settings": {}}))
    check_history_prompts(str(tmp_path), lambda: [11, 22, 33])  # the same training set: every recorded one in it
    with pytest.raises(QuantityError, match=r"1 of the 2 prompts its skip history recorded are not among this run's "
                                            r"training prompts, so the dataset differs .* Fix: resume with the "
                                            r"checkpoint's dataset settings"):
        check_history_prompts(str(tmp_path), lambda: [11, 33])
    (tmp_path / ZERO_VARIANCE_STATE_FILE).write_text(json.dumps({"resample_cursor": 3}))
    check_history_prompts(str(tmp_path), lambda: [])  # not a skip checkpoint: nothing to compare


def test_a_checkpoint_resumed_with_another_seed_is_refused(tmp_path):
    # a breaker's finding: `--seed 1` on a resume was dropped without a word (the checkpoint's random state is
    # restored), while the seed also orders every epoch's prompts
    from types import SimpleNamespace

    from trl_grpo_ext.training.checkpoints import ZERO_VARIANCE_STATE_FILE, check_filter_unchanged, filter_settings

    mask = SimpleNamespace(zero_variance_filter="mask", skip_exploration_probability=0.25, zero_variance_tolerance=0.1,
                           zero_variance_reward=None)
    saved = filter_settings(mask, seed=0)
    assert saved == {"zero_variance_filter": "mask", "skip_exploration_probability": None,
                     "zero_variance_tolerance": None, "zero_variance_reward": None, "seed": 0}
    (tmp_path / ZERO_VARIANCE_STATE_FILE).write_text(json.dumps({"settings": saved}))
    check_filter_unchanged(str(tmp_path), filter_settings(mask, seed=0))
    with pytest.raises(QuantityError, match=r"cannot resume .*: seed: 0 in the checkpoint, 1 now\. These settings "
                                            r"decide which prompts each step trains \(the sampler's order"):
        check_filter_unchanged(str(tmp_path), filter_settings(mask, seed=1))
    (tmp_path / ZERO_VARIANCE_STATE_FILE).write_text(json.dumps({"settings": filter_settings(mask)}))  # saved before
    check_filter_unchanged(str(tmp_path), filter_settings(mask, seed=1))  # the seed was not saved: not compared


def test_a_checkpoint_resumed_with_other_optimizer_engine_or_adapter_settings_is_refused(tmp_path, monkeypatch):
    # a breaker's finding: `--learning_rate 1e-5` on a resume was dropped without a word (transformers restores the
    # optimizer's groups and the scheduler's base rate: the log showed lr 2.0e-03, the card 1e-05); a ZeRO-2
    # checkpoint resumed under DDP lost its optimizer state; `--lora_r 4` failed after the model loaded
    from types import SimpleNamespace

    from trl_grpo_ext.training.checkpoints import SETTINGS_FILE, check_settings_unchanged, resume_settings

    for name in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP"):
        monkeypatch.delenv(name, raising=False)
    args = dict(learning_rate=2e-3, lr_scheduler_type="linear", lr_scheduler_kwargs={}, warmup_steps=0.0,
                weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, optim="adamw_torch",
                optim_args=None, deepspeed=None, fsdp=None)
    lora = {"lora_r": 8, "lora_alpha": 16, "use_dora": False, "use_rslora": False}
    saved = resume_settings(SimpleNamespace(**args), lora)
    assert saved["engine"] == "ddp" and saved["learning_rate"] == 2e-3 and saved["lora"] == lora
    (tmp_path / SETTINGS_FILE).write_text(json.dumps(saved))
    (tmp_path / "optimizer.pt").write_bytes(b"")  # the optimizer state a resume restores
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16, "use_dora": False}))
    check_settings_unchanged(str(tmp_path), resume_settings(SimpleNamespace(**args), lora))  # the same run
    changed = resume_settings(SimpleNamespace(**{**args, "learning_rate": 1e-5, "adam_beta1": 0.5}), {**lora, "lora_r": 4})
    with pytest.raises(QuantityError, match=r"cannot resume .*: learning_rate: 0.002 in the checkpoint, 1e-05 now; "
                                            r"adam_beta1: 0.9 in the checkpoint, 0.5 now; lora_r: 8 in the "
                                            r"checkpoint, 4 now\. .* Fix: resume with the checkpoint's values"):
        check_settings_unchanged(str(tmp_path), changed)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")  # what `accelerate launch` with a ZeRO-2 config sets
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    with pytest.raises(QuantityError, match=r"engine: 'ddp' in the checkpoint, 'deepspeed ZeRO-2' now"):
        check_settings_unchanged(str(tmp_path), resume_settings(SimpleNamespace(**args), lora))
    (tmp_path / SETTINGS_FILE).unlink()  # a checkpoint of an earlier version: only its adapter is compared
    check_settings_unchanged(str(tmp_path), resume_settings(SimpleNamespace(**args), lora))


def test_an_adapter_is_compared_by_module_names_and_unresolved_targets_are_left_to_the_trainer(tmp_path):
    # a second breaker's findings: PEFT saves all-linear as full paths, so the same 7 modules listed by name were
    # refused; a target list left to PEFT (null, all-linear) is known only once the model loads: the trainer compares
    # the adapter it built (peft_lora_settings), and modules_to_save null against [lm_head] is a change
    from trl_grpo_ext.training.checkpoints import check_settings_unchanged

    names = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    saved = {"r": 8, "lora_alpha": 16, "modules_to_save": ["lm_head"],
             "target_modules": [f"model.layers.{i}.{kind}.{n}" for i in range(2) for kind, n in
                                [("self_attn", n) for n in names[:4]] + [("mlp", n) for n in names[4:]]]}
    (tmp_path / "adapter_config.json").write_text(json.dumps(saved))
    lora = {"lora_r": 8, "lora_alpha": 16, "lora_modules_to_save": ["lm_head"]}
    for targets in (list(reversed(names)), "all-linear", None):
        check_settings_unchanged(str(tmp_path), {"lora": {**lora, "lora_target_modules": targets}})
    with pytest.raises(QuantityError, match=r"lora_target_modules: '14 modules \(model.layers.0.mlp.down_proj, .*, "
                                            r"\.\.\.\)' in the checkpoint, \['q_proj', 'v_proj'\] now"):
        check_settings_unchanged(str(tmp_path), {"lora": {**lora, "lora_target_modules": ["v_proj", "q_proj"]}})
    with pytest.raises(QuantityError, match=r"lora_modules_to_save: \['lm_head'\] in the checkpoint, \[\] now"):
        check_settings_unchanged(str(tmp_path), {"lora": {**lora, "lora_modules_to_save": None}})


def test_module_paths_are_compared_exactly_and_a_checkpoint_without_optimizer_state_keeps_no_optimizer(tmp_path):
    # a reviewer's findings: last names alone let q_proj of layer 0 pass for q_proj of every layer; a save_only_model
    # checkpoint restores no optimizer, so a new learning rate does take effect
    from trl_grpo_ext.training.checkpoints import SETTINGS_FILE, check_settings_unchanged

    (tmp_path / "adapter_config.json").write_text(json.dumps({"target_modules": [
        "model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj"]}))
    check_settings_unchanged(str(tmp_path), {"lora": {"lora_target_modules": ["q_proj"]}})
    with pytest.raises(QuantityError, match="lora_target_modules"):
        check_settings_unchanged(str(tmp_path), {"lora": {"lora_target_modules": ["model.layers.0.self_attn.q_proj"]}})
    (tmp_path / SETTINGS_FILE).write_text(json.dumps({"learning_rate": 0.002}))
    check_settings_unchanged(str(tmp_path), {"learning_rate": 1e-5})  # no optimizer.pt: nothing is restored
    (tmp_path / "optimizer.pt").write_bytes(b"")
    with pytest.raises(QuantityError, match="learning_rate: 0.002 in the checkpoint, 1e-05 now"):
        check_settings_unchanged(str(tmp_path), {"learning_rate": 1e-5})
