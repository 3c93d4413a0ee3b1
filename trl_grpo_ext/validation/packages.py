"""The optional packages a run's settings need (flash-attn, vLLM, Liger, the trackers), checked
before any model loads with `importlib.util.find_spec` (nothing imported), and the ``report_to`` names transformers
knows."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from .tables import enum_value

#: field -> (what fails without the package, the setting that needs none; None: report_to without the tracker).
FAILS = {
    "attn_implementation": ("transformers would fail when it loads the model", "attn_implementation: sdpa"),
    "use_vllm": ("TRL would fail after loading the model", "use_vllm: false"),
    "use_liger_kernel": ("the trainer would fail after loading the model", "use_liger_kernel: false"),
    "report_to": ("the trainer would fail when it starts", None),
}
#: (field, value that needs the package, import names any of which will do, pip requirement). The trackers'
#: modules are those transformers' availability checks look for.
PACKAGES = (
    ("attn_implementation", "flash_attention_2", ("flash_attn",), "flash-attn --no-build-isolation (a CUDA GPU)"),
    ("use_vllm", True, ("vllm",), "vllm (a CUDA GPU)"),
    ("use_liger_kernel", True, ("liger_kernel",), "liger-kernel"),
    ("report_to", "wandb", ("wandb",), "wandb"), ("report_to", "mlflow", ("mlflow",), "mlflow"),
    ("report_to", "tensorboard", ("tensorboard", "tensorboardX"), "tensorboard"),
    ("report_to", "trackio", ("trackio",), "trackio"), ("report_to", "comet_ml", ("comet_ml",), "comet_ml"),
    ("report_to", "azure_ml", ("azureml",), "azureml-core"), ("report_to", "neptune", ("neptune",), "neptune"),
    ("report_to", "codecarbon", ("codecarbon",), "codecarbon"), ("report_to", "clearml", ("clearml",), "clearml"),
    ("report_to", "dagshub", ("dagshub",), "dagshub"), ("report_to", "flyte", ("flytekit",), "flytekit"),
    ("report_to", "dvclive", ("dvclive",), "dvclive"), ("report_to", "swanlab", ("swanlab",), "swanlab"),
)


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (found on the path; not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _report_to(value: Any) -> list:
    """``report_to`` as the list of names transformers makes of it (entries as given, not all strings)."""
    return list(value) if isinstance(value, (list, tuple)) else [] if value is None else [value]


def package_problems(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field, problem)`` for each :data:`PACKAGES` row a setting of ``values`` needs and this environment lacks,
    and each ``attn_implementation`` / ``report_to`` value transformers does not know."""
    out = []
    attn = enum_value(values.get("attn_implementation"))
    if isinstance(attn, str) and "/" not in attn:  # "org/repo": a kernel from the Hub, which transformers fetches
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        known = ["eager", *ALL_ATTENTION_FUNCTIONS.valid_keys()]
        if attn.removeprefix("paged|") not in [k.removeprefix("paged|") for k in known]:
            out.append(("attn_implementation", f"attn_implementation={attn!r} is not an attention transformers knows "
                        "(it would fail when it loads the model). Fix: use one of "
                        f"{', '.join(map(repr, known))}, or a Hub kernel 'org/repo'."))
    out += _report_to_problems(values.get("report_to"))
    for field, wanted, modules, requirement in PACKAGES:
        value = enum_value(values.get(field))
        needed = wanted in _report_to(value) if field == "report_to" else \
            value is True if wanted is True else value == wanted  # YAML's 1 is not true
        if not needed or any(installed(m) for m in modules):
            continue
        fails, other = FAILS[field]
        if other is None:
            others = [t for t in _report_to(value) if t not in (wanted, "all", "none")]
            other = f"report_to: {others}" if others else "report_to: none"
        out.append((field, f"{field}={value!r} needs the {requirement.split()[0]} package, which is not installed "
                    f"({fails}). Fix: pip install {requirement}, or set {other}."))
    return out


def _report_to_problems(report_to: Any) -> list[tuple[str, str]]:
    """``report_to`` names transformers does not know (`get_reporting_integration_callbacks` raises on them when the
    trainer is built, after the model loads)."""
    import difflib

    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    known = [*INTEGRATION_TO_CALLBACK, "all", "none"]
    found = []
    for name in _report_to(report_to):
        if name not in known:  # a typo, YAML's false, a number
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.7) if isinstance(name, str) else []
            found.append(("report_to", f"report_to={report_to!r}: {name!r} is no integration transformers knows "
                          f"({', '.join(known)}). Fix: report_to: {close[0] if close else 'none'}."))
    return found


def check_run_packages(values: Mapping[str, Any], problems) -> None:
    """Record each of :func:`package_problems` in ``problems`` under its field (a refused value not restated)."""
    refused = set(problems.fields)  # a value already refused: not restated
    for field_name, problem in package_problems(values):
        if field_name not in refused:
            problems.add(problem, (field_name,))
