"""Contract tests: the private TRL (and transformers / accelerate) behaviour that `trl_grpo_ext` relies on.

`trl_grpo_ext.trainer.GRPOExtTrainer` overrides private `GRPOTrainer` methods and calls `super()`; the zero-variance
filter, the adapter precision fix and the interrupt handler assume how TRL and transformers behave around them. A TRL
release may change any of that without notice. Every private name we touch is listed in `trl_grpo_ext._trl_compat`
(`SURFACE`): the first tests below check each entry against the installed TRL, and a scan of the package and the
recipes checks that no private TRL name is used outside `_trl_compat` (the overrides' definitions aside). The other
tests pin one behaviour each, on TRL 1.16 (the pin in pyproject.toml), and each failure message names what changed and
which file of ours depends on it.

Behaviour is checked on a real tiny `GRPOTrainer` (the embedded tiny Qwen2 model, on the CPU) wherever that is cheap;
source inspection pins the exact lines besides (tool_mask, loss normalisers) and is the only check where the
behaviour cannot be reached on one CPU process (gathers across processes, accelerate's fp16 path). Expected numbers
are worked out by hand in the comments.

These tests import no `trl_grpo_ext` module that imports TRL (config, trainer, launch): only `tiny`, `_trl_compat` (the
table), and the pure `zero_variance` / `adapter_precision` helpers whose assumptions are checked here.

Upgrading TRL: run this file against the new version, adapt the file named in each failure, then update the pin in
pyproject.toml and `PINNED_TRL_MINOR` below.
"""

import ast
import copy
import importlib
import inspect
import math
import os
import re
from collections import defaultdict
from pathlib import Path

import accelerate.optimizer
import pytest
import torch
import trl
from transformers import AutoModelForCausalLM, Trainer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import RepeatSampler, shuffle_sequence_dict, split_tensor_dict

from trl_grpo_ext import _trl_compat
from trl_grpo_ext._trl_compat import OVERRIDDEN_PRIVATE_METHODS, PRIVATE_NAMES, SURFACE
from trl_grpo_ext.models.embedded import tiny
from trl_grpo_ext.training.adapter_precision import cast_trainable_to
from trl_grpo_ext.zero_variance import ROW_NORMALISED_LOSSES, TOKEN_NORMALISED_LOSSES, masked_loss_scale

#: The TRL minor version whose behaviour this file pins; keep in step with the `trl` pin in pyproject.toml.
PINNED_TRL_MINOR = "1.16"
PINNED_TRL_REQUIREMENT = "trl>=1.16,<1.17"

NUM_GENERATIONS = 4
PER_DEVICE_BATCH = 4
GRAD_ACCUM = 2  # steps_per_generation defaults to it: a generation batch of 8 completions = 2 prompts
MAX_COMPLETION_LENGTH = 8
DATASET_ROWS = 8


def _broken(what_changed: str, our_dependency: str) -> str:
    return (
        f"TRL/transformers contract broken: {what_changed}. Depends on it: {our_dependency}. Adapt that code, then "
        f"update tests/test_trl_contract.py and the pin {PINNED_TRL_REQUIREMENT!r} in pyproject.toml."
    )


def _source(obj) -> str:
    return inspect.getsource(inspect.unwrap(obj))


# -- reward functions of the shared trainer: value i for the i-th completion of a call ---------------------------------
_REWARD_KWARGS = {}


def reward_index_or_none(completions, **kwargs):
    """None for the first completion of every call, else its position: [None, 1.0, 2.0, ...]."""
    _REWARD_KWARGS.clear()
    _REWARD_KWARGS.update(kwargs, completions=completions)
    return [None if i == 0 else float(i) for i in range(len(completions))]


def reward_index(completions, **kwargs):
    """The position of the completion in the call: [0.0, 1.0, 2.0, ...]."""
    return [float(i) for i in range(len(completions))]


def _config(output_dir, **overrides) -> GRPOConfig:
    fields = dict(
        output_dir=str(output_dir),
        bf16=False,
        use_cpu=True,
        per_device_train_batch_size=PER_DEVICE_BATCH,
        num_generations=NUM_GENERATIONS,
        gradient_accumulation_steps=GRAD_ACCUM,
        max_completion_length=MAX_COMPLETION_LENGTH,
        max_steps=1,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    fields.update(overrides)
    return GRPOConfig(**fields)


@pytest.fixture(scope="module")
def trainer(tiny_model_dir, tiny_tokenizer, tmp_path_factory):
    """A plain TRL `GRPOTrainer` on the tiny model, in train mode, with the two reward functions above."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    grpo = GRPOTrainer(
        model=model,
        reward_funcs=[reward_index_or_none, reward_index],
        args=_config(tmp_path_factory.mktemp("contract")),
        train_dataset=tiny.count_char_dataset(DATASET_ROWS),
        processing_class=tiny_tokenizer,
    )
    grpo.model.train()
    return grpo


# -- version pin ------------------------------------------------------------------------------------------------------
def test_trl_version_is_the_pinned_minor():
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert f'"{PINNED_TRL_REQUIREMENT}"' in pyproject, (
        f"pyproject.toml no longer pins {PINNED_TRL_REQUIREMENT!r}: update PINNED_TRL_MINOR / PINNED_TRL_REQUIREMENT "
        "in tests/test_trl_contract.py to the pin, after this file passes on that version."
    )
    assert trl.__version__.startswith(PINNED_TRL_MINOR + "."), (
        f"Installed trl {trl.__version__}, but this file pins the private behaviour of trl {PINNED_TRL_MINOR}.x "
        f"(pyproject.toml: {PINNED_TRL_REQUIREMENT!r}). Run the rest of this file on the new version, adapt the files "
        "named in its failures, then update the pin in pyproject.toml and PINNED_TRL_MINOR here."
    )


def test_python_floor_is_trl_s_and_accelerate_is_not_capped():
    """pip answers an older Python with "requires a different Python" rather than a resolver error about TRL, and
    installing the add-on never downgrades accelerate (1.16's launcher is handled: training.interrupt)."""
    import re
    from importlib.metadata import metadata

    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    floor = metadata("trl")["Requires-Python"]
    assert f'requires-python = "{floor}"' in pyproject
    assert f'target-version = "py{floor.removeprefix(">=").replace(".", "")}"' in pyproject
    accelerate = re.search(r'"accelerate([^"]*)"', pyproject).group(1)
    assert "<" not in accelerate, accelerate


# -- the table of private names (trl_grpo_ext/_trl_compat.py SURFACE) --------------------------------------------------
def _owner(path: str):
    """``"trl.GRPOTrainer"`` -> the class; ``"trl.trainer.utils"`` -> the module."""
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)


CALLABLES = [p for p in SURFACE if p.kind in ("override", "function", "class")]


@pytest.mark.parametrize("point", CALLABLES, ids=[p.name for p in CALLABLES])
def test_surface_callables_exist_with_their_parameters(point):
    owner = _owner(point.owner)
    found = getattr(owner, point.name, None)
    assert found is not None, _broken(f"{point.owner}.{point.name} no longer exists", point.used_by)
    signature = inspect.signature(found.__init__ if point.kind == "class" else found)
    params = list(signature.parameters)
    assert params == list(point.params), _broken(
        f"{point.owner}.{point.name} parameters are now {params}, were {list(point.params)}", point.used_by)


# What each instance attribute of the table must be on a real GRPOTrainer (the shared fixture below, fresh).
ATTRIBUTE_CHECKS = {
    "_metrics": lambda value: isinstance(value, dict) and isinstance(value["train"], defaultdict)
    and value["train"].default_factory is list,
    "_step": lambda value: isinstance(value, int),
    "_tokenizer": lambda value: isinstance(getattr(value, "pad_token_id", None), int),
}


def test_surface_attributes_exist_with_their_types(trainer, tiny_tokenizer):
    attributes = {p.name: p for p in SURFACE if p.kind == "attribute"}
    assert set(attributes) == set(ATTRIBUTE_CHECKS), "every attribute of _trl_compat.SURFACE needs a check here"
    for name, point in attributes.items():
        assert hasattr(trainer, name), _broken(f"GRPOTrainer instances no longer have {name}", point.used_by)
        assert ATTRIBUTE_CHECKS[name](getattr(trainer, name)), _broken(
            f"GRPOTrainer.{name} is now {type(getattr(trainer, name)).__name__}", point.used_by)
    assert _trl_compat.eos_and_pad_ids(trainer) == {*trainer.eos_token_ids, tiny_tokenizer.pad_token_id}


def test_surface_modules_exist():
    for point in (p for p in SURFACE if p.kind == "module"):
        importlib.import_module(f"{point.owner}.{point.name}")
    assert _trl_compat.hf_argparser_path().is_file(), _broken("trl/scripts/_hf_argparser.py is gone",
                                                              "_trl_compat.hf_argparser_path")


def test_reward_func_name_is_trls(trainer, tiny_model_dir):
    # GRPOTrainer.__init__ names a function by __name__ (get_callable_name) and a reward model by the last part of the
    # path or id it was loaded from (get_config_model_id)
    assert trainer.reward_func_names == ["reward_index_or_none", "reward_index"]
    assert [_trl_compat.reward_func_name(f) for f in trainer.reward_funcs] == trainer.reward_func_names
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert _trl_compat.reward_func_name(model) == Path(tiny_model_dir).name


# -- no private TRL name outside _trl_compat ----------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]
_PRIVATE_PATH = re.compile(r"\b(?:trl|transformers|accelerate)(?:\.\w+)*\._(?!_)\w+")  # dunders are public
_LIBRARIES = ("trl", "transformers", "accelerate")
#: Files outside this part of the refactor that still touch a private name; each must move into _trl_compat.
PENDING: dict[str, str] = {}


def _is_super_call(node) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _private_uses(path: Path) -> list[str]:
    """Every use of a private TRL / transformers name in ``path``, as "line: what" (docstrings and comments aside)."""
    tree = ast.parse(path.read_text())
    is_trainer = path == ROOT / "trl_grpo_ext" / "trainer.py"
    overrides = set()
    if is_trainer:
        trainer_class = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GRPOExtTrainer")
        overrides = {id(n) for n in trainer_class.body
                     if isinstance(n, ast.FunctionDef) and n.name in OVERRIDDEN_PRIVATE_METHODS}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_NAMES:
            if not (is_trainer and _is_super_call(node.value)):
                found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.FunctionDef) and node.name in PRIVATE_NAMES and id(node) not in overrides:
            found.append(f"{node.lineno}: def {node.name}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in PRIVATE_NAMES or (len(node.value) < 200 and _PRIVATE_PATH.search(node.value)):
                found.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            names = [module + "." + a.name if module else a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] in _LIBRARIES and (any(p.startswith("_") for p in parts) or name.startswith("trl.trainer.utils")):
                    found.append(f"{node.lineno}: import {name}")
    return found


def test_private_trl_names_appear_only_in_trl_compat():
    files = sorted((ROOT / "trl_grpo_ext").rglob("*.py")) + sorted((ROOT / "recipes").glob("*.py"))
    offenders = {}
    for path in files:
        relative = path.relative_to(ROOT).as_posix()
        if relative in ("trl_grpo_ext/_trl_compat.py", *PENDING):
            continue
        uses = _private_uses(path)
        if uses:
            offenders[relative] = uses
    assert not offenders, (
        f"private TRL/transformers names used outside trl_grpo_ext/_trl_compat.py: {offenders}. Add the name to "
        "_trl_compat.SURFACE and go through a function there (a method overriding a private TRL method is defined on "
        "GRPOExtTrainer and listed in SURFACE as an override)."
    )
    for relative in PENDING:  # still touching, or the entry is stale
        assert _private_uses(ROOT / relative), f"{relative} no longer touches a private name: remove it from PENDING"


def test_every_private_override_of_the_trainer_is_listed():
    tree = ast.parse((ROOT / "trl_grpo_ext" / "trainer.py").read_text())
    trainer_class = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GRPOExtTrainer")
    defined = {n.name for n in trainer_class.body if isinstance(n, ast.FunctionDef)}
    shadowing = {name for name in defined if name.startswith("_") and not name.startswith("__")
                 and hasattr(GRPOTrainer, name)}
    assert shadowing == set(OVERRIDDEN_PRIVATE_METHODS), (
        f"GRPOExtTrainer overrides the private TRL methods {sorted(shadowing)}; _trl_compat.SURFACE lists "
        f"{sorted(OVERRIDDEN_PRIVATE_METHODS)}"
    )


def test_train_takes_resume_from_checkpoint_first():
    found = list(inspect.signature(Trainer.train).parameters)
    assert found[:2] == ["self", "resume_from_checkpoint"], _broken(
        f"Trainer.train parameters are now {found}", "trainer.py GRPOExtTrainer.train (checks the saved plan)"
    )


# -- rewards ------------------------------------------------------------------------------------------------------------
def test_calculate_rewards_returns_rewards_per_function_with_nan_for_none(trainer):
    rows = [trainer.train_dataset[0]] * 4
    prompts = [row["prompt"] for row in rows]
    completions = [[{"role": "assistant", "content": "aaa"}]] * 4
    completion_ids = [[5, 5, 5]] * 4
    rewards = trainer._calculate_rewards(rows, prompts, completions, completion_ids)
    # column 0: reward_index_or_none -> [None, 1, 2, 3] with None as NaN; column 1: reward_index -> [0, 1, 2, 3]
    expected = torch.tensor([[math.nan, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    assert rewards.shape == (4, 2), _broken(
        f"_calculate_rewards returns shape {tuple(rewards.shape)}, not (completions, reward functions) = (4, 2)",
        "trainer.py (self._last_rewards_per_func) and zero_variance/groups.py weighted_total",
    )
    torch.testing.assert_close(
        rewards.cpu(),
        expected,
        equal_nan=True,
        msg=lambda m: _broken(
            f"_calculate_rewards no longer returns the raw rewards with NaN for None ({m})",
            "zero_variance.weighted_total / advantages.compute_advantages (NaN = unscorable)",
        ),
    )
    # Reward functions get every dataset column and trainer_state / log_metric as keyword arguments.
    for key in ("prompts", "completion_ids", "target", "trainer_state", "log_extra", "log_metric"):
        assert key in _REWARD_KWARGS, _broken(
            f"reward functions are no longer called with the keyword {key!r}", "rewards (registry functions)"
        )
    assert _REWARD_KWARGS["target"] == [rows[0]["target"]] * 4
    # One process here, so the gather cannot be observed: pin it in the source (gathered = same tensor on all ranks).
    assert "rewards_per_func = gather(rewards_per_func)\n        return rewards_per_func" in _source(
        GRPOTrainer._calculate_rewards
    ), _broken(
        "_calculate_rewards no longer returns the gathered (N_global, F) tensor",
        "zero_variance/filter.py ZeroVarianceFilter (local slice [rank*B:(rank+1)*B] of the rewards; resample decisions on "
        "gathered data)",
    )


# -- the generation batch ---------------------------------------------------------------------------------------------
def test_generate_and_score_completions_plain_output(trainer):
    rows = [trainer.train_dataset[i] for i in (0, 1) for _ in range(NUM_GENERATIONS)]
    output = trainer._generate_and_score_completions(rows)
    expected_keys = {
        "prompt_ids",
        "prompt_mask",
        "completion_ids",
        "completion_mask",
        "advantages",
        "num_items_in_batch",
    }
    assert set(output) == expected_keys, _broken(
        f"_generate_and_score_completions now returns keys {sorted(output)} for the plain configuration "
        f"(was {sorted(expected_keys)})",
        "zero_variance/merge.py PROMPT_KEYS / COMPLETION_KEYS / ROW_KEYS / SCALAR_KEYS (fill_zero_variance_groups refuses "
        "unknown keys) and trainer.py _mask_uniform_rows",
    )
    n = len(rows)
    completion_len = output["completion_ids"].shape[1]
    assert output["completion_mask"].shape == (n, completion_len)
    assert output["prompt_ids"].shape == output["prompt_mask"].shape and output["prompt_ids"].shape[0] == n
    assert output["advantages"].shape == (n,), _broken(
        f"advantages have shape {tuple(output['advantages'].shape)}, not (B,) = ({n},)",
        "trainer.py (output['advantages'] = advantages[local])",
    )
    items = output["num_items_in_batch"]
    assert items.ndim == 0 and int(items) == int(output["completion_mask"].sum()), _broken(
        "num_items_in_batch is no longer the 0-dim gathered count of completion tokens",
        "zero_variance/filter.py ZeroVarianceFilter.mask (recomputes it from kept tokens; dapo/cispo/vespo)",
    )
    # Padding sides: prompts left-padded (last column all real tokens), completions right-padded (1…1 0…0 rows).
    assert bool(output["prompt_mask"][:, -1].all()), _broken(
        "prompts are no longer left-padded", "zero_variance.fill_uniform_groups (re-padding)"
    )
    mask = output["completion_mask"]
    assert bool((mask[:, 1:] <= mask[:, :-1]).all()), _broken(
        "completions are no longer right-padded", "zero_variance.fill_uniform_groups (re-padding)"
    )
    # Advantages follow the row order of the _calculate_rewards tensor. Totals (nansum of both functions):
    # [0, 2, 4, 6] and [8, 10, 12, 14]; each group: mean 3 (11), deviations (-3, -1, 1, 3), unbiased std
    # sqrt(20/3) = 2.5820 -> advantages (-3, -1, 1, 3) / (2.5820 + 1e-4).
    std = math.sqrt(20 / 3)
    expected = torch.tensor([-3.0, -1.0, 1.0, 3.0] * 2) / (std + 1e-4)
    torch.testing.assert_close(
        output["advantages"].cpu(),
        expected,
        msg=lambda m: _broken(
            f"TRL's advantages are no longer (r - group mean) / (group std + 1e-4) in _calculate_rewards row order ({m})",
            "trainer.py (overwrites advantages with advantages[local] from the same rewards) and the TRL-parity "
            "presets of advantage_settings.py",
        ),
    )


# -- the loss: tool_mask and the normaliser of each loss type ---------------------------------------------------------
def _loss_types_in_compute_loss() -> set:
    source = _source(GRPOTrainer._compute_loss)
    found = set(re.findall(r'self\.loss_type == "(\w+)"', source))
    for group in re.findall(r"self\.loss_type in \[([^\]]*)\]", source):
        found |= set(re.findall(r'"(\w+)"', group))
    return found


def test_loss_types_trl_accepts_are_all_classified():
    classified = ROW_NORMALISED_LOSSES | TOKEN_NORMALISED_LOSSES
    assert not ROW_NORMALISED_LOSSES & TOKEN_NORMALISED_LOSSES
    help_text = GRPOConfig.__dataclass_fields__["loss_type"].metadata["help"]
    listed = re.search(r"Supported values are (.*?)\. ", help_text)
    assert listed, _broken(
        "GRPOConfig.loss_type help no longer lists 'Supported values are ...'",
        "zero_variance/groups.py ROW_NORMALISED_LOSSES / TOKEN_NORMALISED_LOSSES",
    )
    documented = set(re.findall(r"'(\w+)'", listed.group(1)))
    implemented = _loss_types_in_compute_loss()
    for name, found in (("GRPOConfig.loss_type help", documented), ("GRPOTrainer._compute_loss", implemented)):
        assert found == classified, _broken(
            f"{name} now knows the loss types {sorted(found)}; zero_variance/groups.py classifies {sorted(classified)} "
            f"(new: {sorted(found - classified)}, gone: {sorted(classified - found)})",
            "zero_variance/groups.py ROW_NORMALISED_LOSSES / TOKEN_NORMALISED_LOSSES / masked_loss_scale: classify each "
            "new loss type by how its normaliser counts masked rows",
        )


# The lines of `_compute_loss` that form each loss type's normaliser, as zero_variance/groups.py reads them.
NORMALISER_LINES = {
    ("grpo", "sapo"): "loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()",
    ("bnpo",): "loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)",
    ("dr_grpo",): "loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length)",
    (
        "cispo",
        "dapo",
        "vespo",
    ): 'normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes',
    ("luspo",): "loss = (per_token_loss * mask).sum(-1).mean()",
}


def test_compute_loss_source_pins_tool_mask_and_normalisers():
    source = _source(GRPOTrainer._compute_loss)
    tool_mask_line = 'mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]'
    assert tool_mask_line in source, _broken(
        "_compute_loss no longer multiplies inputs['tool_mask'] into the loss mask",
        "zero_variance/filter.py ZeroVarianceFilter.mask (masks zero-variance groups through tool_mask)",
    )
    for loss_types, line in NORMALISER_LINES.items():
        assert line in source, _broken(
            f"the normaliser of loss_type {'/'.join(loss_types)} changed (line {line!r} is gone)",
            "zero_variance/groups.py ROW_NORMALISED_LOSSES / TOKEN_NORMALISED_LOSSES / masked_loss_scale",
        )


# A micro-batch of 4 completions with known lengths and advantages; rows 2 and 3 masked through tool_mask.
ADVANTAGES = [1.0, -2.0, 0.5, 3.0]
LENGTHS = [5, 3, 4, 2]  # completion tokens per row (width 6)
KEPT_TOKENS = 5 + 3  # rows 0 and 1


def _loss_batch(tokenizer, rows, tool_mask: bool, num_items: int) -> dict:
    generator = torch.Generator().manual_seed(0)
    vocab = len(tokenizer)
    prompt_ids = torch.randint(3, vocab, (4, 5), generator=generator)
    completion_ids = torch.randint(3, vocab, (4, 6), generator=generator)
    completion_mask = torch.tensor([[1] * n + [0] * (6 - n) for n in LENGTHS])
    batch = {
        "prompt_ids": prompt_ids[rows],
        "prompt_mask": torch.ones_like(prompt_ids)[rows],
        "completion_ids": completion_ids[rows],
        "completion_mask": completion_mask[rows],
        "advantages": torch.tensor(ADVANTAGES)[rows],
        "num_items_in_batch": torch.tensor(num_items),
    }
    if tool_mask:
        batch["tool_mask"] = torch.tensor([[1] * 6, [1] * 6, [0] * 6, [0] * 6])[rows]
    return batch


def _hand_loss(loss_type: str, temperature_pos: float, temperature_neg: float) -> float | None:
    """The loss of the masked 4-row batch, by hand, with the policy ratio = 1 (no old log-probs, beta = 0).

    Each token's loss is then -A (clipped losses; sapo: -A · sigmoid(0) · 4/τ = -2A/τ); the kept rows 0 and 1 have
    A = (1, -2) and lengths (5, 3); B = 4 rows; gradient_accumulation_steps = steps_per_generation = 2. cispo / vespo
    multiply by the log-probabilities, so they have no hand value (their normaliser is checked by scaling).
    """
    kept = [(1.0, 5), (-2.0, 3)]
    rows, accumulation, max_len = 4, GRAD_ACCUM, MAX_COMPLETION_LENGTH
    if loss_type == "grpo":  # mean over rows of the per-row token mean: (-1 + 2 + 0 + 0) / 4
        return sum(-a for a, _ in kept) / rows / accumulation
    if loss_type == "sapo":
        return sum(-2 * a / (temperature_pos if a > 0 else temperature_neg) for a, _ in kept) / rows / accumulation
    if loss_type == "luspo":  # mean over rows of the per-row token sum: (-5 + 6) / 4
        return sum(-a * n for a, n in kept) / rows / accumulation
    if loss_type == "dr_grpo":  # token sum / (B · max_completion_length)
        return sum(-a * n for a, n in kept) / (rows * max_len) / accumulation
    if loss_type == "bnpo":  # token sum / kept tokens of the micro-batch
        return sum(-a * n for a, n in kept) / KEPT_TOKENS / accumulation
    if loss_type == "dapo":  # token sum / (num_items_in_batch / processes · accumulation / steps_per_generation)
        return sum(-a * n for a, n in kept) / (KEPT_TOKENS * GRAD_ACCUM / GRAD_ACCUM)
    return None


@pytest.mark.parametrize("loss_type", sorted(ROW_NORMALISED_LOSSES | TOKEN_NORMALISED_LOSSES))
def test_compute_loss_normaliser_matches_zero_variance_classification(trainer, tiny_tokenizer, monkeypatch, loss_type):
    monkeypatch.setattr(trainer, "loss_type", loss_type)
    monkeypatch.setattr(trainer, "importance_sampling_level", "sequence" if loss_type == "luspo" else "token")
    monkeypatch.setattr(trainer, "current_gradient_accumulation_steps", GRAD_ACCUM, raising=False)
    assert trainer.beta == 0.0 and trainer.args.steps_per_generation == GRAD_ACCUM

    def loss(rows, tool_mask, num_items=KEPT_TOKENS):
        with torch.no_grad():
            return trainer._compute_loss(trainer.model, _loss_batch(tiny_tokenizer, rows, tool_mask, num_items)).item()

    masked = loss([0, 1, 2, 3], tool_mask=True)
    kept_only = loss([0, 1], tool_mask=False)
    ours = "zero_variance/groups.py masked_loss_scale / ROW_NORMALISED_LOSSES / TOKEN_NORMALISED_LOSSES"
    hand = _hand_loss(loss_type, trainer.args.sapo_temperature_pos, trainer.args.sapo_temperature_neg)
    if hand is not None:
        assert masked == pytest.approx(hand, rel=1e-5), _broken(
            f"loss_type={loss_type!r}: _compute_loss on a batch whose rows 2-3 are zeroed by tool_mask gives "
            f"{masked}, not the hand value {hand} (tool_mask or the normaliser changed)",
            ours,
        )
    # The assumption itself: masked loss x masked_loss_scale == the loss of the kept rows alone.
    scale = masked_loss_scale(loss_type, num_rows=4, kept_rows=2)
    assert masked * scale == pytest.approx(kept_only, rel=1e-4), _broken(
        f"loss_type={loss_type!r}: masked loss {masked} x scale {scale} != loss of the kept rows alone {kept_only}, "
        f"so its normaliser no longer counts masked rows the way zero_variance/groups.py classifies it "
        f"({'row' if loss_type in ROW_NORMALISED_LOSSES else 'token'}-normalised)",
        ours,
    )
    if loss_type in {"dapo", "cispo", "vespo"}:  # normaliser = num_items_in_batch: doubling it halves the loss
        halved = loss([0, 1, 2, 3], tool_mask=True, num_items=2 * KEPT_TOKENS)
        assert masked != 0.0 and halved == pytest.approx(masked / 2, rel=1e-5), _broken(
            f"loss_type={loss_type!r} is no longer normalised by num_items_in_batch",
            "zero_variance/filter.py ZeroVarianceFilter.mask (recomputes num_items_in_batch from the kept tokens)",
        )


# -- metrics, buffering utilities, sampler ----------------------------------------------------------------------------
class _LogCapture(TrainerCallback):
    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs))


def test_metrics_are_lists_averaged_by_log(trainer):
    assert isinstance(trainer._metrics["train"]["contract/new_key"], list), _broken(
        "self._metrics[mode] is no longer a defaultdict(list)", "_trl_compat.train_metrics / record_metric"
    )
    trainer._metrics["train"].clear()
    trainer._metrics["train"]["contract/x"].extend([1.0, 3.0, math.nan])
    capture = _LogCapture()
    trainer.add_callback(capture)
    try:
        trainer.log({})
    finally:
        trainer.remove_callback(capture)
    # NaN dropped, then mean: (1 + 3) / 2
    assert capture.logs and capture.logs[-1].get("contract/x") == 2.0, _broken(
        "GRPOTrainer.log no longer logs the NaN-skipping mean of self._metrics['train'][name]",
        "_trl_compat.record_metric (zero_variance/*, adapter/lost_update_frac, advantage metrics)",
    )
    assert not trainer._metrics["train"], _broken("GRPOTrainer.log no longer clears self._metrics", "_trl_compat.train_metrics")


def test_split_and_shuffle_carry_row_and_scalar_keys():
    batch = {
        "completion_mask": torch.arange(6).view(6, 1),
        "zero_variance_keep": torch.arange(6).float(),  # (B,)
        "zero_variance_loss_scale": torch.tensor(2.5),  # 0-dim
        "num_items_in_batch": torch.tensor(7),
        "old_per_token_logps": None,
    }
    ours = "zero_variance/filter.py (zero_variance_keep / zero_variance_loss_scale go through TRL's buffering)"
    chunks = split_tensor_dict(batch, 3)
    assert [c["zero_variance_keep"].tolist() for c in chunks] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], _broken(
        "split_tensor_dict no longer splits (B,) tensors in order", ours
    )
    for chunk in chunks:
        assert chunk["zero_variance_loss_scale"].ndim == 0 and float(chunk["zero_variance_loss_scale"]) == 2.5, (
            _broken("split_tensor_dict no longer passes 0-dim tensors through", ours)
        )
        assert int(chunk["num_items_in_batch"]) == 7 and chunk["old_per_token_logps"] is None
    torch.manual_seed(0)
    shuffled = shuffle_sequence_dict(batch)
    keep = shuffled["zero_variance_keep"]
    assert sorted(keep.tolist()) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and keep.tolist() == [
        float(v) for v in shuffled["completion_mask"].flatten()
    ], _broken("shuffle_sequence_dict no longer permutes (B,) tensors in unison with (B, T) tensors", ours)
    assert shuffled["zero_variance_loss_scale"].ndim == 0 and float(shuffled["zero_variance_loss_scale"]) == 2.5, (
        _broken("shuffle_sequence_dict no longer passes 0-dim tensors through", ours)
    )


def test_repeat_sampler_order():
    # 5 prompts, 2 per generation batch: chunks [0, 1], [2, 3]; the partial chunk [4] is dropped. Each chunk is
    # yielded repeat_count = 3 times, each index mini_repeat_count = 2 times in a row. Length (5 // 2)·2·2·3 = 24.
    sampler = RepeatSampler(list("abcde"), mini_repeat_count=2, batch_size=2, repeat_count=3, shuffle=False)
    expected = [0, 0, 1, 1] * 3 + [2, 2, 3, 3] * 3
    ours = "plan/run_plan.py (prompts per epoch, steps per epoch) and the plan's epoch count"
    assert list(sampler) == expected and len(sampler) == 24, _broken(
        f"RepeatSampler order changed: {list(sampler)}", ours
    )


def test_repeat_sampler_draws_one_permutation_per_iteration_from_one_seeded_generator():
    # sampling.EpochRepeatSampler reseeds `generator` and advances it by `epoch` permutations before TRL's __iter__
    # draws the epoch's: that reproduces TRL's order only if TRL draws exactly one randperm(num_samples) per __iter__
    # from `self.generator`, seeded once with `seed`.
    sampler = RepeatSampler(list(range(6)), mini_repeat_count=1, batch_size=6, repeat_count=1, seed=3)
    generator = torch.Generator().manual_seed(3)
    expected = [torch.randperm(6, generator=generator).tolist() for _ in range(3)]
    ours = "sampling.py EpochRepeatSampler (resume in any epoch)"
    assert [list(sampler) for _ in range(3)] == expected, _broken("RepeatSampler's shuffled order changed", ours)
    assert isinstance(sampler.generator, torch.Generator) and sampler.num_samples == 6, _broken(
        "RepeatSampler no longer keeps `generator` / `num_samples`", ours
    )


def test_train_sampler_is_a_repeat_sampler_with_its_settings_as_attributes(trainer):
    sampler = trainer._get_train_sampler()
    ours = "trainer.py GRPOExtTrainer._get_train_sampler (EpochRepeatSampler.like copies these attributes)"
    assert type(sampler) is RepeatSampler, _broken(f"_get_train_sampler returns {type(sampler).__name__}", ours)
    settings = {k: getattr(sampler, k, None) for k in ("mini_repeat_count", "batch_size", "repeat_count", "shuffle",
                                                        "seed")}
    assert settings == dict(mini_repeat_count=NUM_GENERATIONS, batch_size=2, repeat_count=2, shuffle=True, seed=0), (
        _broken(f"RepeatSampler attributes are now {settings}", ours)
    )
    assert len(sampler.data_source) == DATASET_ROWS, _broken("RepeatSampler.data_source changed", ours)


def test_resume_epoch_and_epoch_begin_hook():
    # transformers computes the resumed epoch as global_step // num_update_steps_per_epoch, and calls on_epoch_begin
    # before running each epoch; the sampler's epoch is set there (training/callbacks.py SamplerEpochCallback), because accelerate
    # does not forward set_epoch through SkipBatchSampler around BatchSamplerShard (several processes, resumed epoch).
    ours = "training/callbacks.py SamplerEpochCallback (sampler epoch on resume)"
    init_state = _source(Trainer._init_training_state)
    assert "epochs_trained = int(self.state.global_step // num_update_steps_per_epoch)" in init_state, _broken(
        "Trainer._init_training_state computes the resumed epoch differently", ours
    )
    loop = _source(Trainer._inner_training_loop)
    assert 0 <= loop.index("on_epoch_begin") < loop.index("self._run_epoch("), _broken(
        "on_epoch_begin is no longer called before each epoch runs", ours
    )


def test_eos_token_ids_and_tokenizer_attributes(trainer, tiny_tokenizer):
    # _trl_compat.eos_and_pad_ids (zero_variance/filter.py _row_stats) marks a completion truncated as TRL does (`_generate`): its last token is
    # not in [*self.eos_token_ids, self._tokenizer.pad_token_id]
    ours = "_trl_compat.eos_and_pad_ids -> zero_variance/filter.py (completions/clipped_ratio of the trained batch)"
    source = _source(GRPOTrainer._generate)
    assert "eos_and_pad = [*self.eos_token_ids, self._tokenizer.pad_token_id]" in source, _broken(
        "_generate no longer defines truncation by eos_token_ids and the pad token", ours
    )
    assert "ids[-1] not in eos_and_pad for ids in completion_ids" in source, _broken(
        "_generate no longer marks a completion truncated by its last token", ours
    )
    assert tiny_tokenizer.eos_token_id in trainer.eos_token_ids, _broken("eos_token_ids changed", ours)
    assert trainer._tokenizer.pad_token_id == tiny_tokenizer.pad_token_id, _broken("_tokenizer changed", ours)


def test_train_sampler_and_dataloader_length(trainer):
    sampler = trainer._get_train_sampler()
    assert (sampler.mini_repeat_count, sampler.batch_size, sampler.repeat_count) == (NUM_GENERATIONS, 2, 2), _broken(
        "_get_train_sampler no longer builds RepeatSampler(mini_repeat_count=num_generations, batch_size="
        "generation_batch_size // num_generations, repeat_count=num_iterations * steps_per_generation)",
        "plan/run_plan.py (steps per epoch)",
    )
    # 8 prompts / 2 per generation batch = 4 generation batches, each drawn steps_per_generation = 2 times
    # (batches of per_device 4 x steps_per_generation 2 = 8 completions): 8 batches, 8 / 2 = 4 optimizer steps.
    assert len(trainer.get_train_dataloader()) == 8, _broken(
        "the GRPO train dataloader length per epoch changed", "plan/run_plan.py (steps per epoch)"
    )


def test_set_initial_training_values(trainer):
    dataloader = trainer.get_train_dataloader()  # 8 batches, see above
    args = copy.copy(trainer.args)
    args.gradient_accumulation_steps, args.max_steps = 3, 5
    values = trainer.set_initial_training_values(args, dataloader)
    ours = "trainer.py set_initial_training_values (stop rule) and plan/run_plan.py (steps per epoch)"
    assert len(values) == 7, _broken(f"set_initial_training_values returns {len(values)} values, not 7", ours)
    epochs, updates_per_epoch, max_steps = values[0], values[1], values[6]
    # ceil(8 / 3) = 3 updates per epoch; max_steps 5 kept; ceil(5 / 3) = 2 epochs
    assert (updates_per_epoch, max_steps, epochs) == (3, 5, 2), _broken(
        f"with max_steps > 0: (updates per epoch, max_steps, epochs) = {(updates_per_epoch, max_steps, epochs)}, "
        "expected (ceil(8 / 3), 5, 2)",
        ours,
    )
    args.gradient_accumulation_steps, args.max_steps, args.num_train_epochs = 3, -1, 2
    values = trainer.set_initial_training_values(args, dataloader)
    assert values[6] == 6, _broken(f"epoch-based max_steps = {values[6]}, expected 2 · ceil(8 / 3) = 6", ours)


# -- one real training step through every hook we override ------------------------------------------------------------
class _ProbeTrainer(GRPOTrainer):
    """Records when TRL calls the hooks GRPOExtTrainer overrides, and adds row keys the way it does."""

    def __init__(self, *args, **kwargs):
        self.events, self.loss_inputs, self.step_counters = [], [], []
        super().__init__(*args, **kwargs)

    def set_initial_training_values(self, args, dataloader):
        values = super().set_initial_training_values(args, dataloader)
        self.events.append(("set_initial_training_values", values[6]))
        return values

    def create_optimizer(self, *args, **kwargs):
        optimizer = super().create_optimizer(*args, **kwargs)
        step = optimizer.step

        def counted_step(*a, **kw):
            self.events.append("optimizer.step")
            return step(*a, **kw)

        optimizer.step = counted_step
        return optimizer

    def _calculate_rewards(self, *args):
        rewards = super()._calculate_rewards(*args)
        self.events.append("_calculate_rewards")
        return rewards

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        keep = (torch.arange(len(output["advantages"])) % 2).float()  # rows 1, 3, 5, 7 kept
        output["tool_mask"] = torch.ones_like(output["completion_mask"]) * keep.unsqueeze(1).long()
        output["zero_variance_keep"] = keep
        output["zero_variance_loss_scale"] = torch.tensor(2.0)
        self.events.append("_generate_and_score_completions")
        return output

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        self.loss_inputs.append(
            {k: inputs[k].clone() for k in ("zero_variance_keep", "zero_variance_loss_scale", "tool_mask")}
        )
        self.events.append("_compute_loss")
        return loss

    def training_step(self, model, inputs, num_items_in_batch):
        loss = super().training_step(model, inputs, num_items_in_batch)
        self.step_counters.append((self._step, self.current_gradient_accumulation_steps))
        self.events.append("training_step")
        return loss


class _SaveAndStop(TrainerCallback):
    """Requests a save and a stop in on_step_end, as interrupt.GracefulInterrupt does."""

    def __init__(self, events):
        self.events = events

    def on_step_end(self, args, state, control, **kwargs):
        self.events.append(("on_step_end", state.global_step))
        control.should_save = True
        control.should_training_stop = True
        return control

    def on_save(self, args, state, control, **kwargs):
        checkpoint = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        self.events.append(("on_save", state.global_step, os.path.isdir(checkpoint)))


def test_training_step_calls_every_hook_in_order(tiny_model_dir, tiny_tokenizer, tmp_path):
    probe = _ProbeTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        reward_funcs=reward_index,
        args=_config(tmp_path, max_steps=2, loss_type="grpo"),
        train_dataset=tiny.count_char_dataset(DATASET_ROWS),
        processing_class=tiny_tokenizer,
    )
    probe.add_callback(_SaveAndStop(probe.events))
    probe.train()
    expected = [
        ("set_initial_training_values", 2),  # max_steps > 0 is returned unchanged
        "_calculate_rewards",
        "_generate_and_score_completions",  # one generation batch for steps_per_generation = 2 micro-batches
        "_compute_loss",
        "training_step",
        "_compute_loss",
        "training_step",
        "optimizer.step",  # the instance attribute set in create_optimizer, called through AcceleratedOptimizer
        ("on_step_end", 1),  # after the optimizer step, global_step already counts it
        ("on_save", 1, True),  # should_save set in on_step_end is honoured at once; checkpoint-1 exists in on_save
    ]
    assert probe.events == expected, _broken(
        f"the training loop calls our hooks as {probe.events}, expected {expected}",
        "trainer.py (every override, the guarded optimizer.step, the stop rule) and interrupt.py / _PlanCallback "
        "(should_save in on_step_end, checkpoint-{global_step} present in on_save)",
    )
    assert probe.state.global_step == 1, _broken(
        "should_training_stop set in on_step_end no longer stops training",
        "interrupt.py GracefulInterrupt.on_step_end",
    )
    assert probe.step_counters == [(1, GRAD_ACCUM), (2, GRAD_ACCUM)], _broken(
        f"(self._step, current_gradient_accumulation_steps) after each micro-batch = {probe.step_counters}, expected "
        "[(1, 2), (2, 2)]: _step must count micro-batches",
        "interrupt.py via _trl_compat.micro_batches_done (_step counts micro-batches)",
    )
    ours = ("zero_variance/filter.py (zero_variance_keep / zero_variance_loss_scale / tool_mask through TRL's shuffle "
            "and split)")
    kept = []
    for carried in probe.loss_inputs:
        keep, scale, tool_mask = (
            carried["zero_variance_keep"],
            carried["zero_variance_loss_scale"],
            carried["tool_mask"],
        )
        assert keep.shape == (PER_DEVICE_BATCH,) and scale.ndim == 0 and float(scale) == 2.0, _broken(
            f"keys added in _generate_and_score_completions reach _compute_loss as keep {tuple(keep.shape)}, "
            f"scale {tuple(scale.shape)}",
            ours,
        )
        assert torch.equal(tool_mask[:, 0].float(), keep), _broken(
            "a (B,) key is no longer permuted in unison with the (B, T) keys", ours
        )
        kept += keep.tolist()
    assert sorted(kept) == [0.0] * 4 + [1.0] * 4, _broken("rows of the generation batch were lost or duplicated", ours)


# -- accelerate: the optimizer step goes through the torch optimizer's (instance) step ---------------------------------
def test_accelerated_optimizer_calls_inner_step_attribute():
    source = _source(accelerate.optimizer.AcceleratedOptimizer)
    for line in ("self.optimizer.step(closure)", "self._optimizer_original_step_method = self.optimizer.step"):
        assert line in source, _broken(
            f"accelerate's AcceleratedOptimizer no longer contains {line!r}",
            "trainer.py create_optimizer (optimizer.step replaced by ZeroVarianceFilter.guard_step, which skips "
            "the steps that kept nothing)",
        )


# -- QLoRA: TRL casts trainable adapter weights of a quantized model to bf16 in __init__ -------------------------------
def test_quantized_model_adapters_cast_to_bf16_in_init(tiny_model_dir, tiny_tokenizer, tmp_path):
    source = _source(GRPOTrainer.__init__)
    ours = "trainer.py __init__ (cast_trainable_to(model, 'float32') after super().__init__) and adapter_precision.py"
    flag = '_is_quantized_model = getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False)'
    assert flag in source, _broken("GRPOTrainer.__init__ detects quantized models differently", ours)
    cast = re.search(
        r"if _is_quantized_model:\s+for name, param in model\.named_parameters\(\):\s+"
        r"if param\.requires_grad[^\n]*:\s+param\.data = param\.data\.to\(torch\.bfloat16\)",
        source,
    )
    assert cast, _broken(
        "GRPOTrainer.__init__ no longer casts the trainable parameters of a quantized model to bf16",
        ours + " (the float32 fix may be unnecessary now)",
    )
    # Behaviour: flag a LoRA model as 4-bit; after __init__ its adapters are bf16, and cast_trainable_to undoes it.
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir), LoraConfig(r=2, target_modules=["q_proj"])
    )
    model.get_base_model().is_loaded_in_4bit = True
    grpo = GRPOTrainer(
        model=model,
        reward_funcs=reward_index,
        args=_config(tmp_path),
        train_dataset=tiny.count_char_dataset(DATASET_ROWS),
        processing_class=tiny_tokenizer,
    )
    trainable = {p.dtype for p in grpo.model.parameters() if p.requires_grad}
    assert trainable == {torch.bfloat16}, _broken(f"trainable dtypes after GRPOTrainer.__init__: {trainable}", ours)
    cast_trainable_to(grpo.model, "float32")
    assert {p.dtype for p in grpo.model.parameters() if p.requires_grad} == {torch.float32}


# -- generation: TRL's vLLM weight sync merges the adapter into the base; continuous batching casts the model ----------
def test_vllm_sync_merges_and_unmerges_a_peft_model():
    """`generation.py` (the refusal, `BaseDriftMonitor`) and `tests/vllm_standin.py` rely on these lines."""
    from trl.generation.vllm_generation import VLLMGeneration

    ours = "generation.py (vLLM-on-4-bit refusal and the vllm/base_drift metric) and tests/vllm_standin.py"
    iterate = _source(VLLMGeneration._iter_named_params)
    merge, unmerge = iterate.find("model.merge_adapter()"), iterate.find("model.unmerge_adapter()")
    assert "if is_peft_model(model):" in iterate and 0 < merge < unmerge, _broken(
        "VLLMGeneration._iter_named_params no longer merges then unmerges the PEFT adapter", ours
        + " (the drift may be gone: check whether the 4-bit refusal is still needed)")
    sync = _source(VLLMGeneration.sync_weights)
    for line in ("for name, param in self._iter_named_params():",
                 "self.llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights([(name, param)])",
                 "self.llm.reset_prefix_cache()"):
        assert line in sync, _broken(f"VLLMGeneration.sync_weights no longer contains {line!r}", ours)
    assert "self._init_vllm()" in _source(VLLMGeneration.__init__), _broken(
        "VLLMGeneration.__init__ no longer builds the engine in _init_vllm", "tests/vllm_standin.py")
    found = list(inspect.signature(VLLMGeneration.generate).parameters)
    assert found == ["self", "prompts", "images", "num_generations", "profiler"], _broken(
        f"VLLMGeneration.generate parameters are now {found}", "tests/vllm_standin.py")
    trainer_init = _source(GRPOTrainer.__init__)
    assert "self.vllm_generation = VLLMGeneration(" in trainer_init, _broken(
        "GRPOTrainer.__init__ no longer builds trl.trainer.grpo_trainer.VLLMGeneration", "tests/test_generation.py")
    turn = _source(GRPOTrainer._generate_single_turn)
    assert "self.vllm_generation.sync_weights()" in turn and "self._last_loaded_step = self.state.global_step" in turn, (
        _broken("GRPOTrainer._generate_single_turn no longer syncs the weights once per optimizer step", ours))


def test_continuous_batching_casts_the_model_and_takes_the_generation_config():
    ours = "trainer.py _generate_and_score_keeping_dtypes (generation.preserved_dtypes around it)"
    turn = _source(GRPOTrainer._generate_single_turn)
    branch = turn[turn.index("elif self.use_transformers_continuous_batching:"):turn.index("else:\n            # Regular")]
    for line in ("unwrapped_model.to(torch.bfloat16)", "unwrapped_model.generate_batch(",
                 "generation_config=self.generation_config", "continuous_batching_config=self.continuous_batching_config"):
        assert line in branch, _broken(f"the continuous-batching branch no longer contains {line!r}", ours)
    init = _source(GRPOTrainer.__init__)
    assert '"cache_implementation": args.cache_implementation,' in init and "if args.generation_kwargs is not None:\n" \
        "                generation_kwargs.update(args.generation_kwargs)" in init, _broken(
            "GRPOTrainer.__init__ no longer passes cache_implementation / generation_kwargs to the GenerationConfig",
            "validation.generation.check_generation_settings and docs/generation.md (cache_implementation: static)")


def test_continuous_batching_drops_the_processors_we_document_and_runs_in_eval_mode():
    from transformers.generation import continuous_batching, logits_process

    for name in ("RepetitionPenaltyLogitsProcessor", "MinNewTokensLengthLogitsProcessor", "MinLengthLogitsProcessor"):
        assert getattr(logits_process, name).supports_continuous_batching is False, _broken(
            f"transformers now supports {name} under continuous batching",
            "docs/generation.md (the processors continuous batching drops)")
    source = inspect.getsource(continuous_batching.continuous_api)
    assert "self.model = model.eval()" in source, _broken(
        "continuous batching no longer puts the model in eval mode",
        "models.keep_4bit_training_layout (may be unnecessary now)")


def test_bnb_4bit_repacks_for_cpu_inference_only_when_allowed():
    import bitsandbytes as bnb

    forward = _source(bnb.nn.Linear4bit.forward)
    assert "self.support_avx512bf16_for_cpu" in forward and "not self.training" in forward, _broken(
        "bitsandbytes' Linear4bit.forward no longer gates its CPU inference repacking on support_avx512bf16_for_cpu",
        "models.keep_4bit_training_layout")



def test_trl_vendored_argument_parser_is_what_trl_parser_builds_on():
    """`frontdoor.hf_argument_parser` loads TRL's private `trl/scripts/_hf_argparser.py` by file path (so `plan` skips
    TRL's import-time package scan) and relies on it importing only the standard library and on `TrlParser` being a
    subclass of its `HfArgumentParser`."""
    import ast
    import importlib.util
    import sys as _sys
    from pathlib import Path as _Path

    from trl import TrlParser

    ours = "frontdoor.hf_argument_parser (plan's torch-free parsing)"
    path = _Path(list(importlib.util.find_spec("trl").submodule_search_locations)[0]) / "scripts" / "_hf_argparser.py"
    assert path.is_file(), _broken(f"{path} is gone", ours)
    tree = ast.parse(path.read_text())
    top = {alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    top |= {node.module.split(".")[0] for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
    assert top <= set(_sys.stdlib_module_names), _broken(f"_hf_argparser.py imports {top - set(_sys.stdlib_module_names)}",
                                                         ours)
    parent = TrlParser.__mro__[1]
    assert parent.__module__ == "trl.scripts._hf_argparser" and parent.__name__ == "HfArgumentParser", _broken(
        f"TrlParser's base is {parent.__module__}.{parent.__name__}", ours)
    for method in ("parse_args_into_dataclasses", "set_defaults"):
        assert hasattr(parent, method), _broken(f"HfArgumentParser.{method} is gone", ours)


#: Private attributes of other libraries that the package touches on purpose, with the reason (not TRL's or
#: transformers': those go through _trl_compat).
OTHER_PRIVATE_ATTRIBUTES = {
    "_actions": "argparse.ArgumentParser._actions: the standard library has no public list of a parser's options "
                "(validation/user_values.py reads the destinations the user set)",
    "_exit": "os._exit: the second Ctrl-C exits at once, without running cleanup that may hang (interrupt.py)",
    "_run_exitfuncs": "atexit._run_exitfuncs: the exit of a run of several processes runs the atexit handlers, then "
                      "os._exit skips the interpreter teardown that can abort after gloo (interrupt.exit_run); the "
                      "atexit module has no public way to run them",
    "_is_mkldnn_bf16_supported": "torch.ops.mkldnn._is_mkldnn_bf16_supported: torch has no public test of a CPU's "
                                 "bf16 instructions (models/settings.cpu_bf16_warning; guarded, False if absent)",
    **{name: "collections.namedtuple's public API (the underscore only avoids clashes with field names)"
       for name in ("_asdict", "_fields", "_replace", "_make", "_field_defaults")},
}


def _defined_names(files: list[Path]) -> set[str]:
    """Every name the package itself defines: functions, classes, module- and class-level names, assigned
    attributes, parameters, keyword arguments (``set_defaults(_module=...)``) and import aliases."""
    names = set()
    for path in files:
        tree = ast.parse(path.read_text())
        bodies = [tree.body] + [node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
        # module-level and class-level names only (a local variable does not make `x._name` ours)
        for statement in (statement for body in bodies for statement in body):
            targets = statement.targets if isinstance(statement, ast.Assign) else (
                [statement.target] if isinstance(statement, (ast.AnnAssign, ast.AugAssign)) else [])
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[-1])
    return names


def _private_attribute_reads(path: Path) -> list[tuple[str, int]]:
    """``(name, line)`` of every ``x._name`` and ``getattr(x, "_name")`` (also set/has/delattr) in ``path``."""
    def private(value) -> bool:
        return isinstance(value, str) and value.startswith("_") and not value.startswith("__")

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        name = None
        if isinstance(node, ast.Attribute) and private(node.attr):
            name = node.attr
        elif isinstance(node, ast.Call) and node.args:
            function = ast.unparse(node.func).split(".")[-1]
            literal = [a.value for a in node.args if isinstance(a, ast.Constant)]
            if function in ("getattr", "setattr", "hasattr", "delattr", "attrgetter", "methodcaller"):
                name = next((v for v in literal if private(v)), None)
        elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call)
              and ast.unparse(node.value.func) in ("vars", "getattr")  # vars(x)["_name"]
              and isinstance(node.slice, ast.Constant) and private(node.slice.value)):
            name = node.slice.value
        if name:
            found.append((name, node.lineno))
    return found


def test_no_private_attribute_of_another_library_is_touched_outside_trl_compat():
    """Catches what the scan above cannot: a private name of TRL, transformers, peft or torch that is not in
    `_trl_compat.SURFACE` yet (``trainer._buffered_inputs``, ``getattr(config, "_name_or_path")``). Every private
    attribute read outside _trl_compat must be one the package defines itself, or listed with its reason."""
    files = sorted((ROOT / "trl_grpo_ext").rglob("*.py")) + sorted((ROOT / "recipes").glob("*.py"))
    ours = _defined_names(files)
    offenders = [
        f"{path.relative_to(ROOT).as_posix()}:{line} .{name}"
        for path in files if path.name != "_trl_compat.py"
        for name, line in _private_attribute_reads(path)
        if name not in ours and name not in OTHER_PRIVATE_ATTRIBUTES
    ]
    assert not offenders, (
        f"private attributes of other libraries: {offenders}. Use a public API, or add the name to "
        "_trl_compat.SURFACE (TRL / transformers) or to OTHER_PRIVATE_ATTRIBUTES with the reason."
    )


def test_the_private_attribute_scan_sees_an_unlisted_name(tmp_path):
    """The scan itself, on code written for it: an unknown private attribute, read directly and through getattr."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import builtins, operator\n"
        "def f(trainer):\n"
        "    trainer._buffered_inputs\n"
        "    getattr(trainer, '_last_loaded_step')\n"
        "    builtins.getattr(trainer, '_textual_logs')\n"
        "    operator.attrgetter('_signature_columns')(trainer)\n"
        "    return vars(trainer)['_total_train_tokens']\n"
    )
    assert sorted(_private_attribute_reads(sample)) == [
        ("_buffered_inputs", 3), ("_last_loaded_step", 4), ("_signature_columns", 6), ("_textual_logs", 5),
        ("_total_train_tokens", 7)]
    assert "_buffered_inputs" not in _defined_names(sorted((ROOT / "trl_grpo_ext").rglob("*.py")))


def test_generation_reads_num_generations_from_the_trainer_for_its_group_reshape():
    # training/rollout_budget.py sets trainer.num_generations to a round's own group size so that TRL's reshape of the
    # round's rewards divides (rollout_budget: adaptive)
    source = _source(GRPOTrainer._generate_and_score_completions)
    assert 'num_generations = self.num_generations if mode == "train" else self.num_generations_eval' in source, _broken(
        "_generate_and_score_completions no longer reads self.num_generations for its group reshape",
        "training/rollout_budget.py _group_size")
