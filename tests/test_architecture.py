"""The package's shape, checked: every module small enough to read in one sitting, and no import cycle.

The import graph counts every ``import`` of a package module, at module level or inside a function (a lazy import
that closes a circle still ties two modules together: neither can be read, moved or tested without the other).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "trl_grpo_ext"
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks (never executed: not an import at run time)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            skipped.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return skipped


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``name`` imports (absolute or relative, anywhere in the file, ``importlib.import_module``
    of a literal name included; ``if TYPE_CHECKING:`` blocks excluded). ``from pkg import x`` counts as an import of
    ``pkg.x`` when that is a module, else of ``pkg``."""
    is_package = path.name == "__init__.py"
    base = name.split(".") if is_package else name.split(".")[:-1]
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_nodes(tree)
    importers = {"import_module", "__import__"} | {  # and their aliases (`from importlib import import_module as im`)
        alias.asname for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        for alias in node.names if alias.name == "import_module" and alias.asname}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - node.level + 1]
                module = ".".join(anchor + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                targets.append(f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module)
        elif (isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in importers and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            literal = node.args[0].value
            targets = [".".join(base) + literal if literal.startswith(".") else literal]
        for target in targets:
            # the longest known module that is the target or contains it
            parts = target.split(".")
            for i in range(len(parts), 0, -1):
                candidate = ".".join(parts[:i])
                if candidate in known:
                    if candidate != name:
                        found.add(candidate)
                    break
    return found


def _lazy_targets(path: Path, known: set[str]) -> set[str]:
    """The modules a package ``__init__`` loads on first use of a name (the string values of its ``_LAZY`` table):
    edges like any import, since ``trl_grpo_ext.GRPOExtConfig`` imports them."""
    tree = ast.parse(path.read_text(), str(path))
    return {value.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets) and isinstance(node.value, ast.Dict)
            for value in node.value.values if isinstance(value, ast.Constant) and value.value in known}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {name: _imports(name, path, known) for name, path in modules.items()}
    graph["trl_grpo_ext"] |= _lazy_targets(modules["trl_grpo_ext"], known)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_over_400_lines():
    long = {name: len(path.read_text().splitlines()) for name, path in _modules().items()}
    long = {name: n for name, n in long.items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concern): {long}"


def test_no_import_cycle():
    cycles = _cycles(_graph())
    assert not cycles, f"import cycles (move the shared part into a module both can import): {cycles}"


def test_the_cycle_finder_finds_a_known_cycle():
    """The checker itself, on a graph worked out by hand: a -> b -> c -> a is one cycle, d -> a is not in it."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


#: The layers of docs/architecture.md: a module may import from its own layer or the layers above (lower numbers).
LAYERS = {
    0: ["_version", "_lazy", "training", "cli", "models.embedded", "config.checks", "models.cache", "config.data_sizes",
        "data.local_columns", "config.secrets", "hub.card_template", "training.host_memory", "training.finished"],
    1: ["_trl_compat", "plan", "plan.resolve", "plan.run_plan", "plan.advice", "plan.evaluation", "plan.memory",
        "config.advantage_settings", "training.checkpoints", "evaluation.stats", "rewards",
        "rewards.registry", "rewards.parameters", "rewards.spec", "rewards.guard", "rewards.builtin", "rewards.math",
        "rewards.text", "rewards.trl_rewards", "zero_variance.settings", "zero_variance.report",
        "config.keymap", "config.loss_settings", "models.source", "config.engines"],
    2: ["advantages", "zero_variance", "zero_variance.groups", "zero_variance.merge", "zero_variance.resample",
        "zero_variance.metrics", "zero_variance.filter", "zero_variance.history", "zero_variance.causes", "zero_variance.budget", "training.sampling",
        "training.engine_step"],
    3: ["models", "data", "models.settings", "models.loading", "models.memory_shape", "data.load", "data.checks", "data.golds", "models.embedded.tiny",
        "models.embedded.smollm2", "data.arithmetic"],
    4: ["config", "config.ext_config", "config.recipe_args", "config.frontdoor", "config.recipe_parse",
        "config.push_settings", "validation", "validation.tables", "validation.user_values",
        "validation.rules", "validation.rewards", "validation.lora", "validation.problems", "validation.engines",
        "validation.dataset_stage", "validation.packages", "validation.trainer_settings",
        "validation.mappings", "validation.generation"],
    5: ["training.adapter_precision", "training.generation", "training.merged_generation", "training.memory_probe",
        "evaluation",
        "evaluation.evaluate", "evaluation.generation", "hub.plot", "hub", "hub.card", "hub.card_facts", "hub.merge",
        "hub.push"],
    6: ["trainer", "training.interrupt", "training.console", "training.callbacks", "training.trainer_args",
        "training.rollout_budget"],
    7: ["cli.main", "cli.__main__", "cli.plan", "cli.train", "cli.eval", "rewards.cli", "hub.cli", "quantifiers"],
}
#: The settings layer (read, check, resolve), which runs below the features that use it.
SETTINGS = ("config", "validation")
#: What the settings layer never imports: what runs a training, evaluates or publishes it, and the commands.
ABOVE_SETTINGS = ("training", "trainer", "evaluation", "hub", "cli")


def test_the_settings_layer_imports_no_training_evaluation_hub_or_command():
    def top(module: str) -> str:
        return module.split(".")[1] if "." in module else ""

    graph = _graph()
    settings = [m for m in graph if top(m) in SETTINGS or m.rsplit(".", 1)[-1].endswith("settings")]
    assert "trl_grpo_ext.validation.rules" in settings and "trl_grpo_ext.zero_variance.settings" in settings
    upward = sorted(f"{m} imports {t}" for m in settings for t in graph[m] if top(t) in ABOVE_SETTINGS)
    assert not upward, "the settings layer reaches up: " + "; ".join(upward)


def test_every_subpackage_and_module_imports_alone(tmp_path):
    """Each module imported first, in a package loaded afresh (third-party packages stay loaded, so this is quick):
    an import cycle that only bites when a module is the first one imported fails here."""
    import subprocess
    import sys

    script = tmp_path / "each.py"
    script.write_text(
        "import importlib, sys, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "failed = []\n"
        "for name in sys.argv[1:]:\n"
        "    for loaded in [m for m in sys.modules if m == 'trl_grpo_ext' or m.startswith('trl_grpo_ext.')]:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as err:\n"
        "        failed.append(f'{name}: {type(err).__name__}: {err}')\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n")
    names = sorted(name for name in _modules() if not name.endswith("__main__"))  # __main__ runs the command
    assert "trl_grpo_ext.hub.merge" in names and "trl_grpo_ext.validation.rules" in names
    result = subprocess.run([sys.executable, str(script), *names], capture_output=True, text=True, timeout=600,
                            cwd=PACKAGE.parent)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]


def test_every_import_goes_to_the_same_or_a_higher_layer():
    layer = {f"trl_grpo_ext.{name}": n for n, names in LAYERS.items() for name in names}
    # the package's __init__ lends the classes of every layer (on first use): it sits on top, and no module imports it
    layer["trl_grpo_ext"] = max(LAYERS)
    graph = _graph()
    unplaced = sorted(set(graph) - set(layer))
    assert not unplaced, f"modules missing from LAYERS (and docs/architecture.md): {unplaced}"
    upward = [
        f"{module} (layer {layer[module]}) imports {target} (layer {layer[target]})"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if layer[target] > layer[module]
    ]
    assert not upward, "imports against the layering of docs/architecture.md: " + "; ".join(upward)


def test_the_old_quantifiers_module_still_imports_with_a_future_warning():
    """The names of the split quantifiers.py keep working for a release, each with a FutureWarning naming its home."""
    import warnings

    import pytest

    from trl_grpo_ext import plan, quantifiers
    from trl_grpo_ext.training import checkpoints

    with pytest.warns(FutureWarning, match="import resolve_plan from trl_grpo_ext.plan"):
        assert quantifiers.resolve_plan is plan.resolve_plan
    with pytest.warns(FutureWarning, match="trl_grpo_ext.training.checkpoints"):
        assert quantifiers.check_resume_compatible is checkpoints.check_resume_compatible
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
            quantifiers.nonexistent  # noqa: B018


def test_the_import_finder_sees_every_form_of_import(tmp_path):
    """Plain, relative, lazy, `import_module` (aliased too) and `__import__` imports count; TYPE_CHECKING-only not."""
    sample = tmp_path / "trl_grpo_ext" / "sample.py"
    sample.parent.mkdir()
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "from importlib import import_module as im\n"
        "from . import tiny\n"
        "if TYPE_CHECKING:\n    from .trainer import GRPOExtTrainer\n"
        "if not TYPE_CHECKING:\n    from . import cli\n"
        "def f():\n    import trl_grpo_ext.plan\n    im('trl_grpo_ext.train')\n    __import__('trl_grpo_ext.hub')\n"
    )
    known = {"trl_grpo_ext", "trl_grpo_ext.tiny", "trl_grpo_ext.trainer", "trl_grpo_ext.cli", "trl_grpo_ext.plan",
             "trl_grpo_ext.train", "trl_grpo_ext.hub", "trl_grpo_ext.sample"}
    assert _imports("trl_grpo_ext.sample", sample, known) == {
        "trl_grpo_ext.tiny", "trl_grpo_ext.cli", "trl_grpo_ext.plan", "trl_grpo_ext.train", "trl_grpo_ext.hub"}
