"""Shared test factories: the tiny CPU run's config and trainer, its datasets, the NF4 + LoRA setup, a recipe YAML,
the 2-process torchrun launch and the accelerate launch of a CPU twin config.

Plain functions, not fixtures: the torchrun workers (tests/*_worker.py) run in their own processes and cannot import
conftest. The defaults here are only what every tiny run shares and no result depends on (the CPU, no reporting, no
saving, a log line per optimizer step, no progress bar); every number a test trains with (prompts per step, G,
micro-batch, steps, completion length, learning rate, seed) is passed at its call site. Heavy imports (torch, TRL,
peft, transformers) happen on first use, so a config-file test that imports this module stays light.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TINY_CPU_YAML = ROOT / "recipes" / "configs" / "tiny_cpu.yaml"

# GRPOExtConfig fields shared by every tiny run (bf16=False is also what use_cpu=True resolves to).
TINY_CPU = dict(use_cpu=True, bf16=False, report_to=[], save_strategy="no", logging_steps=1, disable_tqdm=True)

# The projections of the tiny Qwen2 model that the QLoRA recipe adapts.
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def unset_env(monkeypatch, *names: str) -> None:
    """Unset the environment variables ``names`` for one test, and unset them again when it ends, whatever it set.

    ``monkeypatch.delenv`` of a variable that is not set records nothing, so a value the code under test sets later
    (``read_run_args`` turns ``wandb_project`` into ``WANDB_PROJECT``) would outlive the test. Setting each first
    makes monkeypatch record "unset" as the state to restore.
    """
    for name in names:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def tiny_config(output_dir, **fields):
    """A `GRPOExtConfig` for a CPU run: `TINY_CPU` updated with `fields`, writing to `output_dir`.

    Args:
        output_dir (`str` or `os.PathLike`): the run directory (`output_dir` of the config, as a string).
        **fields: any GRPOExtConfig / GRPOConfig field; overrides `TINY_CPU` (e.g. `save_strategy="steps"`).

    Returns:
        `GRPOExtConfig`. Raises whatever the config raises for invalid fields (tests of refusals rely on that).
    """
    from trl_grpo_ext import GRPOExtConfig

    return GRPOExtConfig(output_dir=str(output_dir), **{**TINY_CPU, **fields})


def tiny_trainer(output_dir, reward_funcs, dataset, *, model=None, processing_class=None, quantization_config=None,
                 peft_config=None, **fields):
    """A `GRPOExtTrainer` on the embedded tiny model with `tiny_config(output_dir, **fields)`.

    Args:
        output_dir (`str` or `os.PathLike`): the run directory.
        reward_funcs: callable(s) passed to the trainer, or `None` for the config's `rewards`.
        dataset (`datasets.Dataset`): the train dataset.
        model: a loaded model or a path; defaults to the embedded tiny model's directory (built on first use).
        processing_class: defaults to the tiny tokenizer.
        quantization_config, peft_config: passed to the trainer when given (see `nf4` and `lora`).
        **fields: config fields, see `tiny_config`.

    Returns:
        `GRPOExtTrainer`, not yet trained.
    """
    from trl_grpo_ext import GRPOExtTrainer
    from trl_grpo_ext.models.embedded import tiny

    path = tiny.ensure_tiny_model()
    extra = {name: value for name, value in (("quantization_config", quantization_config),
                                             ("peft_config", peft_config)) if value is not None}
    return GRPOExtTrainer(
        str(path) if model is None else model,
        reward_funcs=reward_funcs,
        args=tiny_config(output_dir, **fields),
        train_dataset=dataset,
        processing_class=tiny.load_tokenizer(path) if processing_class is None else processing_class,
        **extra,
    )


def count_char_mix(num_prompts: int, other: str = "b", every: int = 2):
    """count-char prompts asking for "a", except every `every`-th one (the 2nd, 4th, ... for 2), which asks for `other`.

    The "a" rows are `tiny.count_char_rows(num_prompts, target="a")`, the `other` rows the same call with `seed=1`;
    row i is the `other` row i when `i % every == every - 1`. Returns a `datasets.Dataset` of `num_prompts` rows.
    """
    from datasets import Dataset

    from trl_grpo_ext.models.embedded import tiny

    rows = tiny.count_char_rows(num_prompts, target="a")
    other_rows = tiny.count_char_rows(num_prompts, target=other, seed=1)
    return Dataset.from_list([other_rows[i] if i % every == every - 1 else row for i, row in enumerate(rows)])


def nf4(compute_dtype=None, double_quant: bool = True, quant_storage=None):
    """`BitsAndBytesConfig` of a 4-bit NF4 base computing in `compute_dtype` (default `torch.float32`), its packed
    weights stored as `quant_storage` (default bitsandbytes' `torch.uint8`; FSDP needs the compute dtype)."""
    import torch
    from transformers import BitsAndBytesConfig

    storage = {} if quant_storage is None else {"bnb_4bit_quant_storage": quant_storage}
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=double_quant,
                              bnb_4bit_compute_dtype=torch.float32 if compute_dtype is None else compute_dtype,
                              **storage)


def lora(modules_to_save: list[str] | None = None):
    """`LoraConfig` of the QLoRA recipe on the tiny model: r 8, alpha 16 on `LORA_TARGETS`, causal LM."""
    from peft import LoraConfig

    return LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS, modules_to_save=modules_to_save,
                      task_type="CAUSAL_LM")


def tiny_cpu_yaml(tmp_path, drop=(), name: str = "config.yaml", **changes) -> str:
    """recipes/configs/tiny_cpu.yaml without the keys `drop`, updated with `changes`, written to `tmp_path / name`.

    The run's `output_dir` is `tmp_path / "out"` (it overrides any `output_dir` in `changes`). Returns the path as
    `str`.
    """
    values = yaml.safe_load(TINY_CPU_YAML.read_text())
    for key in drop:
        values.pop(key)
    values.update(changes)
    values["output_dir"] = str(tmp_path / "out")
    path = tmp_path / name
    path.write_text(yaml.safe_dump(values))
    return str(path)


# torchrun with 2 local processes; `--standalone` takes a free rendezvous port (other runs may hold 29500).
# `accelerate launch --cpu --num_processes 2` would silently start one process (docs/recipes.md).
TORCHRUN_2 = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def worker_launch(config: str | None, worker: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment that start `tests/<worker> *args` on 2 CPU processes: `TORCHRUN_2` (DDP, gloo)
    when `config` is None, else `accelerate launch --config_file recipes/accelerate_configs/<config>` (the user's own
    command; DeepSpeed's and FSDP's CPU twins start their 2 processes through torchrun's agent too).

    The tiny model is built here first, so the ranks only read it (not both build it at once). The workers get
    PYTHONPATH = the repository root, OMP_NUM_THREADS=1, HF_HUB_OFFLINE=1 and no inherited WORLD_SIZE; under accelerate
    also ``DS_ACCELERATOR=cpu`` (DeepSpeed's CPU accelerator; it builds its shared-memory communication op with ninja
    on first use), and ``--main_process_port 0`` takes a free port. Run it in the repository root.
    """
    from trl_grpo_ext.models.embedded import tiny

    tiny.ensure_tiny_model()
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env.pop("WORLD_SIZE", None)
    if config is None:
        return [*TORCHRUN_2, str(ROOT / "tests" / worker), *args], env
    env["DS_ACCELERATOR"] = "cpu"
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
            str(ROOT / "recipes" / "accelerate_configs" / config), "--main_process_port", "0",
            str(ROOT / "tests" / worker), *args], env


def run_worker_on_2_processes(worker: str, *args: str, timeout: int) -> subprocess.CompletedProcess:
    """Run `tests/<worker> *args` under `TORCHRUN_2` on the CPU (gloo) and return the finished process (`worker_launch`;
    stdout and stderr captured as text). Raises `subprocess.TimeoutExpired` after `timeout` seconds."""
    command, env = worker_launch(None, worker, *args)
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def record_loss_batches(trainer, record) -> list:
    """Wrap ``trainer._compute_loss`` so that every micro-batch the loss sees is first passed to
    ``record(trainer, inputs)``; returns the list the results are appended to (one per micro-batch, in order)."""
    recorded = []
    ours = trainer._compute_loss

    def compute_loss(model, inputs):
        recorded.append(record(trainer, inputs))
        return ours(model, inputs)

    trainer._compute_loss = compute_loss
    return recorded


def record_generation_outputs(trainer) -> list:
    """Wrap ``trainer._generate_and_score_completions`` (ours, the filter and advantages applied) so that every
    generation batch it returns is also appended to the returned list."""
    recorded = []
    ours = trainer._generate_and_score_completions

    def generate_and_score(inputs):
        output = ours(inputs)
        recorded.append(output)
        return output

    trainer._generate_and_score_completions = generate_and_score
    return recorded


def run_worker_under_accelerate(config: str, worker: str, *args: str, timeout: int) -> subprocess.CompletedProcess:
    """Run `tests/<worker> *args` with `accelerate launch --config_file recipes/accelerate_configs/<config>` and return
    the finished process (`worker_launch`; stdout and stderr captured as text). Raises `subprocess.TimeoutExpired`
    after `timeout` seconds."""
    command, env = worker_launch(config, worker, *args)
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def end_worker(trainer) -> None:
    """End a torchrun worker once its results are written: destroy the process group, flush, and leave at once.

    Interpreter teardown after a gloo run can abort in a C++ destructor ("terminate called without an active
    exception", SIGABRT; seen in 1 of 5 full-suite runs on a fresh clone, after the results were written), which
    torchrun reports as a failed worker. Nothing of the test's is left to run then, so the worker skips that teardown.
    """
    import sys

    trainer.end()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def recipe_without_models(monkeypatch):
    """recipes/grpo_qlora.py loaded as a module, with every way to load a model or tokenizer made to fail the test
    (an `AssertionError`, which the recipe never turns into an exit status): for checks that must refuse before any
    model loads."""
    import importlib.machinery

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_grpo_ext.models.embedded import tiny

    def fail(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", fail)
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", fail)
    monkeypatch.setattr(tiny, "ensure_tiny_model", fail)
    recipe = importlib.machinery.SourceFileLoader("grpo_qlora_recipe", str(ROOT / "recipes/grpo_qlora.py")).load_module()
    monkeypatch.setattr(recipe.tiny, "ensure_tiny_model", fail)
    return recipe


def recipe_stages(argv: list[str], monkeypatch, capsys) -> tuple[int, list[str], str]:
    """The recipe's argument stage (`parse_recipe_args`, which checks the config and the dataset's rows once, before
    any model loads; it may load the run's tokenizer to count prompt tokens) on ``argv``.

    Returns ``(code, errors, err)``: its exit status (2, or 0 when it accepts), its ``error:`` lines, all of stderr."""
    import logging

    from trl_grpo_ext.config.recipe_parse import RecipeArgumentError, parse_recipe_args

    monkeypatch.setattr(logging, "raiseExceptions", False)  # datasets' handler may hold a closed capture stream
    code = 0
    try:
        parse_recipe_args(argv)
    except RecipeArgumentError as refused:
        code = refused.code
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if line.startswith("error:")], err
