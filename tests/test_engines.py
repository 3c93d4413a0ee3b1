"""Engines read before any model loads (engines.py), the refusals of engine settings the run cannot honour
(validation/engines.py, exit 2 from plan and the recipe), and the accelerate configs the docs name."""

import importlib.util
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


def test_deepspeed_with_use_cpu_refused():
    with pytest.raises(RunArgumentError, match=r"use_cpu=True with DeepSpeed ZeRO-2.*Fix: set use_cpu: false"):
        engine_checks.check_engine_settings(Engine("deepspeed", zero_stage=2), {"use_cpu": True})


def test_fsdp_4bit_needs_quant_storage_equal_to_compute_dtype():
    fsdp = Engine("fsdp", fsdp_version=2)
    with pytest.raises(RunArgumentError, match=r"bnb_4bit_quant_storage='uint8'.*'bfloat16'.*bnb_4bit_quant_storage: "
                                               r"bfloat16"):
        engine_checks.check_engine_settings(fsdp, QLORA_BF16)
    with pytest.raises(RunArgumentError, match=r"bnb_4bit_quant_storage='bfloat16'.*'float32'"):
        engine_checks.check_engine_settings(fsdp, {**QLORA_BF16, "bf16": False, "bnb_4bit_quant_storage": "bfloat16"})
    engine_checks.check_engine_settings(fsdp, {**QLORA_BF16, "bnb_4bit_quant_storage": "bfloat16"})
    engine_checks.check_engine_settings(fsdp, {**QLORA_BF16, "load_in_4bit": False})


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


def test_the_zero_stage_is_read_from_a_deepspeed_json(tmp_path):
    """From the accelerate config's deepspeed_config_file, or the deepspeed field (a file, JSON text or a dict); a file
    that does not read leaves the stage unknown: transformers refuses it when the config is built (below)."""
    ds_json = tmp_path / "ds.json"
    ds_json.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    accelerate = {"distributed_type": "DEEPSPEED", "deepspeed_config": {"deepspeed_config_file": str(ds_json)}}
    assert engine_from_accelerate_config(accelerate).zero_stage == 3
    for config in (str(ds_json), ds_json.read_text(), {"zero_optimization": {"stage": 3}}):
        assert resolve_engine({"deepspeed": config}, {}).zero_stage == 3
    assert engine_from_env({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_CONFIG_FILE": "none",
                            "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}).zero_stage == 3
    as_yaml = tmp_path / "ds.yaml"
    as_yaml.write_text("zero_optimization:\n  stage: 2\n")
    assert resolve_engine({"deepspeed": str(as_yaml)}, {}).zero_stage is None


@pytest.mark.parametrize("name", ["ds.yaml", "missing.json"])
def test_a_deepspeed_config_that_does_not_read_is_refused_when_the_config_is_built(tmp_path, name):
    """transformers' HfDeepSpeedConfig reads it in TrainingArguments.__post_init__, before any model loads (without
    deepspeed installed, as in `make test` before `make install-dist`, it refuses the field itself: ImportError)."""
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    from trl_grpo_ext import GRPOExtConfig

    (tmp_path / "ds.yaml").write_text("zero_optimization:\n  stage: 2\n")
    try:
        with pytest.raises(ValueError if importlib.util.find_spec("deepspeed") else ImportError):
            GRPOExtConfig(output_dir=str(tmp_path / "out"), use_cpu=False, bf16=False, report_to=[],
                          deepspeed=str(tmp_path / name))
    finally:  # the half-built config stays registered in transformers' global: every later model would read it
        unset_hf_deepspeed_config()


def test_an_accelerate_config_that_is_not_yaml_is_named_as_the_accelerate_config(capsys, tmp_path):
    accelerate = tmp_path / "accelerate.yaml"
    accelerate.write_text("distributed_type: [DEEPSPEED\n")
    code, _, err = _plan(capsys, "--config", tiny_cpu_yaml(tmp_path), "--accelerate-config", str(accelerate))
    assert code == 2 and f"--accelerate-config {accelerate}: not valid YAML" in err and "--config " + str(accelerate) \
        not in err
