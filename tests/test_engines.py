"""Engines read before any model loads (engines.py), the refusals of engine settings the run cannot honour
(validation/engines.py, exit 2 from plan and the recipe), and the accelerate configs the docs name."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from factories import tiny_cpu_yaml

from trl_grpo_ext.cli import plan as plan_cli
from trl_grpo_ext.config.checks import RunArgumentError
from trl_grpo_ext.config.engines import Engine, engine_from_accelerate_config, engine_from_env, resolve_engine
from trl_grpo_ext.validation import engines as engine_checks

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "recipes" / "accelerate_configs"
QLORA_BF16 = {"load_in_4bit": True, "use_peft": True, "adapter_dtype": "float32", "bf16": True, "dtype": None}


@pytest.mark.parametrize(("name", "kind", "stage", "version"), [
    ("multi_gpu.yaml", "ddp", None, None), ("zero2.yaml", "deepspeed", 2, None), ("zero3.yaml", "deepspeed", 3, None),
    ("fsdp2.yaml", "fsdp", None, 2), ("zero2_cpu.yaml", "deepspeed", 2, None), ("zero3_cpu.yaml", "deepspeed", 3, None),
    ("fsdp2_cpu.yaml", "fsdp", None, 2), ("cpu.yaml", "single", None, None),
])
def test_shipped_accelerate_configs(name, kind, stage, version):
    config = yaml.safe_load((CONFIGS / name).read_text())
    engine = engine_from_accelerate_config(config)
    assert (engine.kind, engine.zero_stage, engine.fsdp_version) == (kind, stage, version)
    assert engine.num_processes == (1 if name == "cpu.yaml" else 2) and engine.num_machines == 1
    if name.endswith("_cpu.yaml") and kind in ("deepspeed", "fsdp"):
        assert config["use_cpu"] is False and config["mixed_precision"] == "no"  # use_cpu would drop DeepSpeed
    if name == "fsdp2_cpu.yaml":  # the GPU config's sharding, but no rank-0-only loading (not run on a CPU)
        gpu = yaml.safe_load((CONFIGS / "fsdp2.yaml").read_text())["fsdp_config"]
        assert config["fsdp_config"] == {**gpu, "fsdp_cpu_ram_efficient_loading": False}
    if name == "zero3.yaml" or name == "zero3_cpu.yaml":
        assert config["deepspeed_config"]["zero3_save_16bit_model"] is True  # save_model gathers the shards


def test_engine_from_the_launch_environment_and_the_run_fields(tmp_path):
    assert engine_from_env({}) is None
    assert engine_from_env({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}) == Engine(
        "deepspeed", zero_stage=3, source="ACCELERATE_USE_DEEPSPEED")
    ds_json = tmp_path / "ds.json"
    ds_json.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    assert engine_from_env({"ACCELERATE_USE_DEEPSPEED": "True", "ACCELERATE_DEEPSPEED_CONFIG_FILE": str(ds_json)}
                           ).zero_stage == 2
    assert engine_from_env({"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}).fsdp_version == 2
    # the run's own fields come first, then the environment, then an accelerate config, then WORLD_SIZE
    env = {"ACCELERATE_USE_FSDP": "true", "WORLD_SIZE": "4"}
    assert resolve_engine({"deepspeed": str(ds_json)}, env).describe() == "DeepSpeed ZeRO-2 (from deepspeed)"
    assert resolve_engine({"fsdp": "full_shard", "fsdp_config": {"version": 2}}, {}).describe() == "FSDP2 (from fsdp)"
    assert resolve_engine({}, env).kind == "fsdp"
    assert resolve_engine({}, {"WORLD_SIZE": "4"}).kind == "ddp" and resolve_engine({}, {}).kind == "single"
    # read as world_size_from_env reads it: " 2" planned 2 processes but resolved a single-process engine
    assert resolve_engine({}, {"WORLD_SIZE": " 2"}).kind == "ddp" and resolve_engine({}, {"WORLD_SIZE": "x"}).kind \
        == "single"


def test_multi_node_config_counts_all_processes():
    engine = engine_from_accelerate_config({"distributed_type": "MULTI_GPU", "num_machines": 2, "num_processes": 16})
    assert (engine.kind, engine.num_processes, engine.num_machines) == ("ddp", 16, 2)


def test_zero3_float32_adapters_refused_on_a_deepspeed_without_the_fix():
    zero3 = Engine("deepspeed", zero_stage=3, source="test")
    with pytest.raises(RunArgumentError, match=r"adapter_dtype='float32'.*deepspeed 0\.19\.2.*#8072.*"
                                               r"deepspeed>=0\.19\.3.*adapter_dtype: bfloat16"):
        engine_checks.check_engine_settings(zero3, QLORA_BF16, deepspeed_version="0.19.2")
    for fine in ({"deepspeed_version": "0.19.3"}, {"deepspeed_version": "0.19.8"}):
        engine_checks.check_engine_settings(zero3, QLORA_BF16, **fine)
    for values in ({**QLORA_BF16, "adapter_dtype": "bfloat16"}, {**QLORA_BF16, "bf16": False}):  # no mixed dtypes
        engine_checks.check_engine_settings(zero3, values, deepspeed_version="0.19.2")
    engine_checks.check_engine_settings(Engine("deepspeed", zero_stage=2), QLORA_BF16, deepspeed_version="0.19.2")


def test_installed_deepspeed_version_is_read_from_metadata():
    from importlib import metadata

    try:
        expected = metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        expected = None
    assert engine_checks.installed_deepspeed() == expected
    with pytest.raises(RunArgumentError, match=r"deepspeed is not installed.*trl-grpo-ext\[deepspeed\]"):
        engine_checks.check_engine_settings(Engine("deepspeed", zero_stage=2), {}, deepspeed_version=None)


def test_deepspeed_with_use_cpu_refused():
    with pytest.raises(RunArgumentError, match=r"use_cpu=True with DeepSpeed ZeRO-2.*Fix: set use_cpu: false"):
        engine_checks.check_engine_settings(Engine("deepspeed", zero_stage=2), {"use_cpu": True}, "0.19.8")


def test_fsdp_4bit_needs_quant_storage_equal_to_compute_dtype():
    fsdp = Engine("fsdp", fsdp_version=2)
    with pytest.raises(RunArgumentError, match=r"bnb_4bit_quant_storage='uint8'.*'bfloat16'.*bnb_4bit_quant_storage: "
                                               r"bfloat16"):
        engine_checks.check_engine_settings(fsdp, QLORA_BF16)
    with pytest.raises(RunArgumentError, match=r"bnb_4bit_quant_storage='bfloat16'.*'float32'"):
        engine_checks.check_engine_settings(fsdp, {**QLORA_BF16, "bf16": False, "bnb_4bit_quant_storage": "bfloat16"})
    engine_checks.check_engine_settings(fsdp, {**QLORA_BF16, "bnb_4bit_quant_storage": "bfloat16"})
    engine_checks.check_engine_settings(fsdp, {**QLORA_BF16, "load_in_4bit": False})


@pytest.mark.parametrize("engine", [Engine("single"), Engine("ddp"), Engine("deepspeed", zero_stage=2),
                                    Engine("fsdp", fsdp_version=2)], ids=lambda e: e.describe())
def test_ds3_gather_for_generation_false_outside_zero3_is_a_warning(engine):
    """TRL passes ds3_gather_for_generation to unwrap_model_for_generation, which reads it under ZeRO-3 alone: False
    anywhere else has no effect (a warning). True (TRL's default) and ZeRO-3 (or a DeepSpeed stage not known) say
    nothing."""
    (line,) = engine_checks.engine_warnings(engine, {"ds3_gather_for_generation": False})
    assert line.startswith(f"ds3_gather_for_generation=False with {engine.describe()}: TRL reads it only under")
    engine_checks.check_engine_settings(engine, {"ds3_gather_for_generation": False}, "0.19.8")  # not refused
    assert engine_checks.engine_warnings(engine, {"ds3_gather_for_generation": True}) == []
    for accepted in (Engine("deepspeed", zero_stage=3), Engine("deepspeed")):
        assert engine_checks.engine_warnings(accepted, {"ds3_gather_for_generation": False}) == []


def test_accelerate_mixed_precision_against_an_unset_bf16_reads_what_the_machine_resolves(monkeypatch):
    """bf16 left unset resolves to the machine's support (GRPOExtConfig._check_bf16): on a bf16 GPU it agrees with
    `accelerate launch --mixed_precision bf16`; on a CPU (or with use_cpu) it is false, and refused as such."""
    from trl_grpo_ext.models import settings

    engine = Engine("single", source="ACCELERATE_MIXED_PRECISION", mixed_precision="bf16")
    monkeypatch.setattr(settings, "bf16_available", lambda: True)
    engine_checks.check_engine_settings(engine, {})
    with pytest.raises(RunArgumentError, match=r"bf16 and fp16 are both false \(bf16 unset: false on this machine\), "
                                               r"but accelerate's mixed_precision='bf16'"):
        engine_checks.check_engine_settings(engine, {"use_cpu": True})
    monkeypatch.setattr(settings, "bf16_available", lambda: False)
    with pytest.raises(RunArgumentError, match=r"\(bf16 unset: false on this machine\)"):
        engine_checks.check_engine_settings(engine, {})


def test_zero3_peft_non_reentrant_checkpointing_is_a_warning():
    values = {"use_peft": True, "gradient_checkpointing_kwargs": {"use_reentrant": False}}
    zero3 = Engine("deepspeed", zero_stage=3)
    (line,) = engine_checks.engine_warnings(zero3, values)
    assert "gradient_checkpointing_kwargs={'use_reentrant': False}" in line and "TRL forces use_reentrant=True" in line
    engine_checks.check_engine_settings(zero3, values, "0.19.8")  # not refused: TRL overrides it
    assert engine_checks.engine_warnings(Engine("deepspeed", zero_stage=2), values) == []
    # the command line's JSON string (a breaker's finding: only the YAML mapping was read, and the run trained)
    as_json = {"use_peft": True, "gradient_checkpointing_kwargs": '{"use_reentrant": false}'}
    assert len(engine_checks.engine_warnings(zero3, as_json)) == 1


def test_accelerate_s_mixed_precision_from_the_environment_is_judged(capsys, monkeypatch, tmp_path):
    # a second breaker's findings: the fix named only the accelerate config, and BF16 (accelerate lower-cases it) passed
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "BF16")
    code, _, err = _plan(capsys, "--config", tiny_cpu_yaml(tmp_path))
    assert code == 2 and "mixed_precision='bf16' (from ACCELERATE_MIXED_PRECISION)" in err
    assert "(or unset ACCELERATE_MIXED_PRECISION)" in err
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")  # what cpu.yaml sets
    assert _plan(capsys, "--config", tiny_cpu_yaml(tmp_path))[0] == 0


def test_fsdp_without_a_gpu_refused():
    with pytest.raises(RunArgumentError, match=r"FSDP2 \(from test\) on a machine without a GPU"):
        engine_checks.check_engine_device(Engine("fsdp", fsdp_version=2, source="test"), accelerator_available=False)
    engine_checks.check_engine_device(Engine("fsdp", fsdp_version=2), accelerator_available=True)
    engine_checks.check_engine_device(Engine("deepspeed", zero_stage=3), accelerator_available=False)


def _plan(capsys, *argv):
    code = plan_cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_counts_the_accelerate_configs_processes(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(engine_checks, "installed_deepspeed", lambda: "0.19.8")  # installed or not
    config = tiny_cpu_yaml(tmp_path, use_cpu=False, micro_batch_size=8, bf16=True)  # zero2.yaml: mixed_precision bf16
    code, out, err = _plan(capsys, "--config", config, "--accelerate-config", "zero2", "--json")
    assert code == 0, err
    assert json.loads(out)["world_size"] == 2 and json.loads(out)["gradient_accumulation_steps"] == 1
    # --num-processes overrides the file's count, as accelerate launch --num_processes does (e.g. 2 machines × 2)
    code, out, err = _plan(capsys, "--config", config, "--accelerate-config", "zero2", "--num-processes", "4", "--json",
                           "--micro_batch_size", "4")
    assert code == 0, err
    assert json.loads(out)["world_size"] == 4 and json.loads(out)["completions_per_step"] == 16


@pytest.mark.parametrize(("argv", "named"), [
    (["--accelerate-config", "zero3"], "use_cpu=True with DeepSpeed ZeRO-3"),
    (["--accelerate-config", "fsdp2", "--use_cpu", "false", "--bf16", "true"], "bnb_4bit_quant_storage='uint8'"),
    # a breaker's findings: accelerate skips FSDP on a CPU run (plain DDP, the whole model in every process), and
    # its mixed_precision wins over bf16: false (or fails under DeepSpeed after the model loads)
    (["--accelerate-config", "fsdp2_cpu"], "use_cpu=True with FSDP"),
    (["--accelerate-config", "multi_gpu", "--use_cpu", "false"],
     "bf16 and fp16 are both false, but accelerate's mixed_precision='bf16' (from --accelerate-config"),
    (["--accelerate-config", "multi_gpu", "--use_cpu", "false", "--fp16", "true"],
     "fp16=True, but accelerate's mixed_precision='bf16'"),
])
def test_plan_refuses_engine_combinations(capsys, monkeypatch, tmp_path, argv, named):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code, _, err = _plan(capsys, "--config", tiny_cpu_yaml(tmp_path, micro_batch_size=8), *argv)
    assert code == 2 and named in err and err.count("\n") == 1


def test_plan_refuses_zero3_float32_adapters_on_an_old_deepspeed(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(engine_checks, "installed_deepspeed", lambda: "0.19.2")
    argv = ["--config", tiny_cpu_yaml(tmp_path, micro_batch_size=8, use_cpu=False, dtype="bfloat16", bf16=True),
            "--accelerate-config", "zero3"]
    code, _, err = _plan(capsys, *argv)
    assert code == 2 and "adapter_dtype='float32'" in err and "deepspeed 0.19.2" in err
    monkeypatch.setattr(engine_checks, "installed_deepspeed", lambda: "0.19.3")
    assert _plan(capsys, *argv)[0] == 0


@pytest.mark.parametrize(("env", "named"), [
    ({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"}, "use_cpu=True with DeepSpeed ZeRO-2"),
    ({"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}, "on a machine without a GPU"),
])
def test_recipe_refuses_engine_combinations_before_loading(tmp_path, env, named):
    if named.startswith("on a machine") and _gpu():
        pytest.skip("this machine has a GPU: FSDP is allowed")
    result = subprocess.run(
        # the FSDP case sets the quant storage FSDP + 4-bit needs, so that the machine is what is refused
        [sys.executable, str(ROOT / "recipes" / "grpo_qlora.py"), "--config",
         tiny_cpu_yaml(tmp_path, **({"bnb_4bit_quant_storage": "float32", "use_cpu": False}
                                    if "ACCELERATE_USE_FSDP" in env else {}))],
        capture_output=True, text=True, cwd=ROOT, timeout=180, env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert named in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()  # nothing written: refused before the model or the run directory


def _gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def test_quant_storage_reaches_bitsandbytes():
    from types import SimpleNamespace

    import torch

    from trl_grpo_ext.models.loading import quantization_config

    model_args = SimpleNamespace(load_in_8bit=False, load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                 use_bnb_nested_quant=True, dtype=None, bnb_4bit_quant_storage="bfloat16")
    config = quantization_config(model_args, SimpleNamespace(bf16=True))
    assert config.bnb_4bit_quant_storage == torch.bfloat16 and config.bnb_4bit_compute_dtype == torch.bfloat16
    model_args.bnb_4bit_quant_storage = None
    assert quantization_config(model_args, SimpleNamespace(bf16=True)).bnb_4bit_quant_storage == torch.uint8


def test_deepspeed_config_with_its_own_optimizer_refused_with_the_filter_or_the_lost_update_hooks(tmp_path):
    """transformers' deepspeed_optim_sched builds a DummyOptim for a config with an `optimizer` section and never calls
    the trainer's create_optimizer, where the guard and the hooks are attached."""
    ds_json = tmp_path / "ds.json"
    ds_json.write_text(json.dumps({"zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW"}}))
    engine = resolve_engine({"deepspeed": str(ds_json)}, {})
    assert (engine.zero_stage, engine.optimizer_section) == (2, True)
    for values, named in (({"zero_variance_filter": "mask"}, "zero_variance_filter='mask'"),
                          ({"zero_variance_filter": "off", "lost_update_steps": 10}, "lost_update_steps=10")):
        with pytest.raises(RunArgumentError, match=rf"{named}.*`optimizer` section.*Fix: remove the `optimizer`"):
            engine_checks.check_engine_settings(engine, values, "0.19.8")
    engine_checks.check_engine_settings(engine, {"zero_variance_filter": "off", "lost_update_steps": 0}, "0.19.8")
    ds_json.write_text(json.dumps({"zero_optimization": {"stage": 2}}))  # the trainer's optimizer: allowed
    engine_checks.check_engine_settings(resolve_engine({"deepspeed": str(ds_json)}, {}), {"zero_variance_filter": "mask"},
                                        "0.19.8")


def test_plan_reads_the_deepspeed_config_file_of_an_accelerate_config(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(engine_checks, "installed_deepspeed", lambda: "0.19.8")
    ds_json = tmp_path / "ds.json"
    ds_json.write_text(json.dumps({"zero_optimization": {"stage": 3}, "optimizer": {"type": "AdamW"}}))
    accelerate = tmp_path / "accelerate.yaml"
    accelerate.write_text(yaml.safe_dump({"distributed_type": "DEEPSPEED", "num_processes": 2,
                                          "deepspeed_config": {"deepspeed_config_file": str(ds_json)}}))
    config = tiny_cpu_yaml(tmp_path, use_cpu=False, micro_batch_size=8, zero_variance_filter="mask")
    code, _, err = _plan(capsys, "--config", config, "--accelerate-config", str(accelerate))
    assert code == 2 and "DeepSpeed ZeRO-3" in err and "zero_variance_filter='mask'" in err


def test_a_deepspeed_config_that_does_not_read_as_json_is_refused_before_loading(tmp_path):
    """accelerate's deepspeed_config_file written as YAML, or a path that does not exist: transformers'
    HfDeepSpeedConfig would raise a JSONDecodeError (or a ValueError) after the model loads."""
    as_yaml = tmp_path / "ds.yaml"
    as_yaml.write_text("zero_optimization:\n  stage: 2\n")
    good = tmp_path / "ds.json"
    good.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    for env, named in (({"ACCELERATE_DEEPSPEED_CONFIG_FILE": str(as_yaml)}, "is not JSON"),
                       ({"ACCELERATE_DEEPSPEED_CONFIG_FILE": str(tmp_path / "missing.json")}, "is no such file")):
        engine = engine_from_env({"ACCELERATE_USE_DEEPSPEED": "true", **env})
        assert engine.kind == "deepspeed" and engine.zero_stage is None
        with pytest.raises(RunArgumentError, match=rf"DeepSpeed \(from ACCELERATE_USE_DEEPSPEED\): the DeepSpeed "
                                                   rf"config '.*' {named}.*Fix: point deepspeed_config_file"):
            engine_checks.check_engine_settings(engine, {}, "0.19.8")
    # what transformers reads: a JSON file, a JSON string, base64 of one, a dict; accelerate's "none" is no file
    import base64

    for config in (str(good), json.dumps({"zero_optimization": {"stage": 2}}),
                   base64.urlsafe_b64encode(b'{"zero_optimization": {"stage": 2}}').decode(),
                   {"zero_optimization": {"stage": 2}}):
        engine = resolve_engine({"deepspeed": config}, {})
        assert (engine.zero_stage, engine.config_problem) == (2, None)
        engine_checks.check_engine_settings(engine, {}, "0.19.8")
    assert engine_from_env({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_CONFIG_FILE": "none",
                            "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}).config_problem is None


def test_plan_refuses_an_accelerate_config_whose_deepspeed_file_is_yaml(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(engine_checks, "installed_deepspeed", lambda: "0.19.8")
    ds_yaml = tmp_path / "ds_config.yaml"
    ds_yaml.write_text("zero_optimization:\n  stage: 3\n")
    accelerate = tmp_path / "accelerate.yaml"
    accelerate.write_text(yaml.safe_dump({"distributed_type": "DEEPSPEED", "num_processes": 2,
                                          "deepspeed_config": {"deepspeed_config_file": str(ds_yaml)}}))
    config = tiny_cpu_yaml(tmp_path, use_cpu=False, micro_batch_size=8)
    code, _, err = _plan(capsys, "--config", config, "--accelerate-config", str(accelerate))
    assert code == 2 and f"the DeepSpeed config '{ds_yaml}' is not JSON" in err and "Traceback" not in err


@pytest.mark.parametrize(("config", "named"), [
    ({"distributed_type": "DEEPSPEED", "num_processes": 2, "deepspeed_config": "zero2"},
     "deepspeed_config='zero2' is not a mapping"),
    ({"distributed_type": "FSDP", "fsdp_config": "fsdp2"}, "fsdp_config='fsdp2' is not a mapping"),
    ({"distributed_type": "FSDP", "fsdp_config": {"fsdp_version": None}}, "fsdp_config.fsdp_version=None is not a whole"),
    ({"distributed_type": "MULTI_GPU", "num_processes": "two"}, "num_processes='two' is not a whole number >= 1"),
    ({"distributed_type": "MULTI_GPU", "num_processes": 2.5}, "num_processes=2.5 is not a whole number >= 1"),
])
def test_an_accelerate_config_accelerate_would_fail_on_is_refused_naming_the_key(capsys, tmp_path, config, named):
    accelerate = tmp_path / "accelerate.yaml"
    accelerate.write_text(yaml.safe_dump(config))
    code, _, err = _plan(capsys, "--config", tiny_cpu_yaml(tmp_path), "--accelerate-config", str(accelerate))
    assert code == 2 and f"--accelerate-config {accelerate}: {named}" in err and "Traceback" not in err


def test_an_accelerate_config_that_is_not_yaml_is_named_as_the_accelerate_config(capsys, tmp_path):
    accelerate = tmp_path / "accelerate.yaml"
    accelerate.write_text("distributed_type: [DEEPSPEED\n")
    code, _, err = _plan(capsys, "--config", tiny_cpu_yaml(tmp_path), "--accelerate-config", str(accelerate))
    assert code == 2 and f"--accelerate-config {accelerate}: not valid YAML" in err and "--config " + str(accelerate) \
        not in err
