"""The optional packages a run's settings need (flash-attn, vLLM, Liger, the trackers), checked before any model
loads with `importlib.util.find_spec` (nothing imported), and the ``report_to`` names transformers knows."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from .tables import enum_value

#: report_to integration -> (import names, any of which will do; pip requirement). transformers' own availability
#: checks (``transformers.integrations``) look for the same modules; kubeflow needs no package (an environment).
TRACKERS = {
    "wandb": (("wandb",), "wandb"),
    "tensorboard": (("tensorboard", "tensorboardX"), "tensorboard"),
    "mlflow": (("mlflow",), "mlflow"),
    "trackio": (("trackio",), "trackio"),
    "comet_ml": (("comet_ml",), "comet_ml"),
    "azure_ml": (("azureml",), "azureml-core"),
    "neptune": (("neptune",), "neptune"),
    "codecarbon": (("codecarbon",), "codecarbon"),
    "clearml": (("clearml",), "clearml"),
    "dagshub": (("dagshub",), "dagshub"),
    "flyte": (("flytekit",), "flytekit"),
    "dvclive": (("dvclive",), "dvclive"),
    "swanlab": (("swanlab",), "swanlab"),
}


#: ``optim`` name prefix -> (import name, pip requirement): transformers' ``trainer_optimizer`` raises ImportError for
#: these when it builds the optimizer, after the model loads (the bitsandbytes ones need bitsandbytes, a dependency).
OPTIMIZERS = {
    "galore_": ("galore_torch", "galore-torch"), "apollo_": ("apollo_torch", "apollo-torch"),
    "lomo": ("lomo_optim", "lomo-optim"), "adalomo": ("lomo_optim", "lomo-optim"),
    "grokadamw": ("grokadamw", "grokadamw"), "adamw_torch_4bit": ("torchao", "torchao"),
    "adamw_torch_8bit": ("torchao", "torchao"), "schedule_free_": ("schedulefree", "schedulefree"),
    "stable_adamw": ("optimi", "torch-optimi"), "adamw_anyprecision": ("torchdistx", "torchdistx"),
}


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
    """``(field, problem)`` for each package a setting of ``values`` (``attn_implementation``, ``use_vllm``,
    ``use_liger_kernel``, ``optim``, ``report_to``) needs and this environment lacks: the pip command and the setting
    without it."""
    out = []
    attn = enum_value(values.get("attn_implementation"))
    if isinstance(attn, str) and "/" not in attn:  # "org/repo": a kernel from the Hub, which transformers fetches
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        known = ["eager", *ALL_ATTENTION_FUNCTIONS.valid_keys()]
        if attn.removeprefix("paged|") not in [k.removeprefix("paged|") for k in known]:
            out.append(("attn_implementation", f"attn_implementation={attn!r} is not an attention transformers knows "
                        "(it would fail when it loads the model). Fix: use one of "
                        f"{', '.join(map(repr, known))}, or a Hub kernel 'org/repo'."))
    if attn in ("flash_attention_3", "flash_attention_4"):  # transformers' own test of the package it loads
        import transformers.utils as hf_utils

        if not getattr(hf_utils, f"is_flash_attn_{attn[-1]}_available")():
            out.append(("attn_implementation", f"attn_implementation={attn!r} needs FlashAttention {attn[-1]}, which "
                        "is not installed (transformers would fail when it loads the model). Fix: install it (a "
                        "recent NVIDIA GPU), or set attn_implementation: sdpa."))
    if attn == "flash_attention_2" and not installed("flash_attn"):
        out.append(("attn_implementation", "attn_implementation='flash_attention_2' needs the flash-attn package, "
                    "which is not installed (transformers would fail when it loads the model). Fix: pip install "
                    "flash-attn --no-build-isolation (a CUDA GPU), or set attn_implementation: sdpa."))
    if values.get("use_vllm") is True and not installed("vllm"):
        out.append(("use_vllm", "use_vllm=True needs the vllm package, which is not installed (TRL would fail after "
                    "loading the model). Fix: pip install vllm (a CUDA GPU), or set use_vllm: false."))
    if values.get("use_liger_kernel") is True and not installed("liger_kernel"):
        out.append(("use_liger_kernel", "use_liger_kernel=True needs the liger-kernel package, which is not installed "
                    "(the trainer would fail after loading the model). Fix: pip install liger-kernel, or set "
                    "use_liger_kernel: false."))
    optim = str(enum_value(values.get("optim")) or "")
    module, requirement = next(
        (v for k, v in OPTIMIZERS.items() if optim == k or k.endswith("_") and optim.startswith(k)), (None, None))
    if module and not installed(module):
        out.append(("optim", f"optim={optim!r} needs the {requirement} package, which is not installed (transformers "
                    f"would fail building the optimizer, after loading the model). Fix: pip install {requirement}, or "
                    "set optim: adamw_torch."))
    out += _report_to_problems(values.get("report_to"))
    report_to = _report_to(values.get("report_to"))
    for tracker in report_to:
        modules, requirement = TRACKERS.get(tracker, ((), "")) if isinstance(tracker, str) else ((), "")
        if modules and not any(installed(m) for m in modules):
            others = [t for t in report_to if t not in (tracker, "all", "none")]
            keep = f"report_to: {others}" if others else "report_to: none"
            out.append(("report_to", f"report_to={values.get('report_to')!r} needs the {requirement} package, which "
                        "is not installed (the trainer would fail when it starts). Fix: pip install "
                        f"{requirement}, or set {keep}."))
    return out


def _report_to_problems(report_to: Any) -> list[tuple[str, str]]:
    """``report_to`` names transformers does not know (`integration_utils.get_reporting_integration_callbacks` raises
    on them when the trainer is built, after the model loads)."""
    import difflib

    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    names = _report_to(report_to)
    if names in (["all"], ["none"]):
        return []
    known = list(INTEGRATION_TO_CALLBACK)
    found = []
    for name in names:
        if not isinstance(name, str) or name.lower() in ("false", "no", "off", "0"):  # YAML's false, a number
            found.append(("report_to", f"report_to={report_to!r}: {name!r} is no integration name. Fix: report_to: "
                          "none (no tracker), or name them, e.g. report_to: [tensorboard]."))
        elif name in ("all", "none"):
            found.append(("report_to", f"report_to={report_to!r}: {name!r} is a value of its own, not an entry of a "
                          f"list (transformers raises on it). Fix: report_to: {name}, or list integrations only."))
        elif name not in known:
            close = difflib.get_close_matches(str(name), known, n=1)
            found.append(("report_to", f"report_to={report_to!r}: {name!r} is no integration transformers knows "
                          f"({', '.join(known)}, or all / none). Fix: report_to: {close[0] if close else 'none'}."))
    return found


def check_run_packages(values: Mapping[str, Any], problems) -> None:
    """Record each of :func:`package_problems` in ``problems`` under its field (a refused value not restated)."""
    found = package_problems(values)
    refused = {name for name, _ in found if problems.blocked((name,))}  # a value already refused: not restated
    for field_name, problem in found:
        if field_name not in refused:
            problems.add(problem, (field_name,))
