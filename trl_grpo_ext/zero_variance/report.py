"""The run's uniform-group figures as a reader of its logs sees them: one definition for the console, the plot, the
card and the benchmarks (pure functions over log dicts; no torch).

A logged step holds TRL's ``frac_reward_zero_std`` (recomputed by the trainer with the float32-safe definition of
`groups.zero_variance_group_mask`) and, with the filter on, ``zero_variance/frac_uniform_before`` (the filter's own
judgement of the generated groups) and ``zero_variance/no_update`` (1.0 on a step whose optimizer update was
skipped because every group was uniform). See docs/zero_variance.md.
"""

from __future__ import annotations

import math

#: The filter's share of generated rows in uniform groups (first generation round), when the filter is on.
FILTER_SHARE_KEY = "zero_variance/frac_uniform_before"
#: TRL's name for the same share of the generated batch (recomputed right by the trainer).
TRL_SHARE_KEY = "frac_reward_zero_std"
#: 1.0 for a step that made no optimizer update (every group uniform), else 0.0; averaged over a logging interval.
NO_UPDATE_KEY = "zero_variance/no_update"
#: Share of the epoch's prompt slots whose prompt was skipped before rollout and replaced (skip mode).
SKIPPED_PROMPTS_KEY = "zero_variance/frac_prompts_skipped"


def _finite(value) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def uniform_share(logs: dict) -> float | None:
    """Share of the generated groups that were uniform (σ = 0) at a logged step, in [0, 1]; None if not logged.

    The filter's judgement when the filter is on (it may judge one chosen reward), else TRL's metric.

    >>> uniform_share({"frac_reward_zero_std": 0.5, "zero_variance/frac_uniform_before": 1.0})
    1.0
    >>> uniform_share({"frac_reward_zero_std": 0.25})
    0.25
    """
    share = _finite(logs.get(FILTER_SHARE_KEY))
    return share if share is not None else _finite(logs.get(TRL_SHARE_KEY))


def no_update_steps(logs: dict, steps_in_interval: int = 1) -> int:
    """Optimizer steps of a logging interval of ``steps_in_interval`` steps that made no update (all groups uniform).

    >>> no_update_steps({"zero_variance/no_update": 0.5}, 4)
    2
    """
    share = _finite(logs.get(NO_UPDATE_KEY))
    return 0 if share is None else round(share * steps_in_interval)


def run_summary(log_history: list[dict]) -> dict[str, float | int]:
    """The run's uniform-group figures from ``TrainerState.log_history`` (training logs only).

    Each training log covers the optimizer steps since the previous one (``logging_steps``); its figures are means
    over them, so they are weighted by that count.

    Returns:
        ``{"uniform_share": the share of generated groups that were uniform over the logged steps, "no_update_steps":
        steps that made no update, "all_uniform_steps": steps whose every group was uniform (a lower bound when a log
        covers several steps: only a log whose share is 1 counts its steps), "filter_on": whether the filter logged
        (without it an all-uniform step still steps the optimizer), "steps": optimizer steps the logs cover,
        "logged_steps": training logs counted}``; ``{}`` when no training log holds a share.

    >>> run_summary([{"step": 1, "frac_reward_zero_std": 0.0}, {"step": 3, "frac_reward_zero_std": 0.75,
    ...               "zero_variance/no_update": 0.5}])
    {'uniform_share': 0.5, 'no_update_steps': 1, 'all_uniform_steps': 0, 'filter_on': True, 'steps': 3, 'logged_steps': 2}
    """
    previous, skipped, everything, covered, weighted, logs, filter_on = 0, 0, 0, 0, 0.0, 0, False
    for row in log_history:
        share = uniform_share(row) if "step" in row else None
        if share is None:
            continue
        interval = max(1, row["step"] - previous)
        skipped += no_update_steps(row, interval)
        everything += interval if share == 1.0 else 0
        filter_on = filter_on or NO_UPDATE_KEY in row or FILTER_SHARE_KEY in row
        weighted += share * interval
        covered += interval
        previous, logs = row["step"], logs + 1
    if not logs:
        return {}
    return {"uniform_share": weighted / covered, "no_update_steps": skipped, "all_uniform_steps": everything,
            "filter_on": filter_on, "steps": covered, "logged_steps": logs}


def summary_line(log_history: list[dict], groups_per_step: int | None = None) -> str | None:
    """One line for the end of a run: the uniform share of the generated groups and the updates it cost.

    Uniform groups cost their share of the generation (their completions were generated and scored); with the filter
    on, their rows were dropped before the loss forward and backward, and a step whose groups were all uniform made
    no update. None when no training step logged a share.

    >>> summary_line([{"step": 1, "frac_reward_zero_std": 0.5}, {"step": 2, "frac_reward_zero_std": 1.0,
    ...               "zero_variance/frac_uniform_before": 1.0, "zero_variance/no_update": 1.0}], 3)
    'Uniform groups (σ = 0): 75% of the 6 groups generated (their generation: 75% of the completions); 1 of 2 steps made no update'
    >>> summary_line([{"step": 1, "frac_reward_zero_std": 0.5}, {"step": 2, "frac_reward_zero_std": 1.0}], 3)
    'Uniform groups (σ = 0): 75% of the 6 groups generated (their generation: 75% of the completions); 1 of 2 steps had every group uniform (zero gradient; with zero_variance_filter off the optimizer still stepped)'
    """
    summary = run_summary(log_history)
    if not summary:
        return None
    steps, share = summary["steps"], summary["uniform_share"]
    groups = f"the {steps * groups_per_step} groups" if groups_per_step else "the groups"
    head = (f"Uniform groups (σ = 0): {share:.0%} of {groups} generated (their generation: {share:.0%} of the "
            f"completions); ")
    if summary["filter_on"]:
        return head + f"{summary['no_update_steps']} of {steps} steps made no update"
    return head + (f"{summary['all_uniform_steps']} of {steps} steps had every group uniform (zero gradient; with "
                   f"zero_variance_filter off the optimizer still stepped)")


def resample_note(plan, max_resample_rounds: int) -> str:
    """How ``zero_variance_filter: resample`` counts in this plan (printed under the plan table).

    Extra prompts drawn to replace zero-variance groups come from a separate, seeded order of the training prompts
    and do not advance the main sampler: the epochs and total steps above stay exact; the extra generation is at most
    ``max_resample_rounds`` × prompts_per_step prompts (× G completions) per optimizer step.

    Args:
        plan (`RunPlan`): reads ``total_steps``, ``epochs_covered``, ``prompts_per_step`` and ``num_generations``.
        max_resample_rounds (`int`): the config's field [rounds per optimizer step].

    Returns:
        `str`: one paragraph.
    """
    extra_prompts = max_resample_rounds * plan.prompts_per_step
    epochs = plan.epochs_covered
    epochs_text = str(int(epochs)) if isinstance(epochs, float) and epochs.is_integer() else str(epochs)
    return (
        "zero_variance_filter=resample: prompts drawn to replace uniform groups do not advance the epoch count "
        f"(the {plan.total_steps} steps and {epochs_text} epochs above stay exact); each step "
        f"generates for at most {extra_prompts} extra prompts ({max_resample_rounds} rounds × "
        f"{plan.prompts_per_step}), i.e. up to {extra_prompts * plan.num_generations} extra completions, logged as "
        "zero_variance/prompts_drawn."
    )


def skip_note(plan, exploration_probability: float) -> str:
    """How ``zero_variance_filter: skip`` counts in this plan (printed under the plan table).

    Args:
        plan (`RunPlan`): reads ``steps_per_epoch``, ``prompts_per_step``, ``total_steps``, ``epochs_covered``.
        exploration_probability (`float`): ``skip_exploration_probability`` p.

    Returns:
        `str`: one paragraph.
    """
    slots = plan.steps_per_epoch * plan.prompts_per_step
    return (
        f"zero_variance_filter=skip: an epoch is still {plan.steps_per_epoch} steps × {plan.prompts_per_step} prompt "
        f"slots ({slots}); from the second epoch on, a prompt uniform at its last k rollouts keeps its slot with "
        f"probability {exploration_probability:g}^k, and a skipped prompt's slot goes to another prompt of the epoch "
        f"(some prompts train twice in an epoch). The {plan.total_steps} steps, {plan.epochs_covered:.3g} epochs and "
        "stop reason above stay exact; skipped slots are logged as zero_variance/frac_prompts_skipped."
    )
