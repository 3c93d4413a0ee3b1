"""The training plot: reward mean ± std and the share of uniform (zero-std) groups per optimizer step."""

from __future__ import annotations

from pathlib import Path

from ..zero_variance.report import no_update_steps, uniform_share


def plot_training(log_history: list[dict], path: str | Path, title: str | None = None) -> Path:
    """Write a PNG with two panels from a trainer's ``state.log_history``.

    Top: ``reward`` (mean over the step's completions) with a ±``reward_std`` band, and ``eval_reward`` (TRL's eval
    loop on the held-out split, when ``eval_strategy`` is set) as green points. Bottom: ``frac_reward_zero_std``
    (fraction of groups whose G rewards are all equal: no learning signal). x: optimizer step.

    Args:
        log_history (`list[dict]`): `TrainerState.log_history`; entries without ``reward`` are skipped.
        path (`str` or `Path`): the PNG to write (parent directories are created).
        title (`str`, *optional*): figure title.

    Returns:
        The path written.

    Raises:
        ValueError: no entry holds a ``reward`` (nothing was logged; set ``logging_steps``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [h for h in log_history if isinstance(h.get("reward"), (int, float)) and "step" in h]
    if not rows:
        raise ValueError("log_history has no 'reward' entry to plot; set logging_steps to 1 or a small number.")
    steps = [h["step"] for h in rows]
    mean = [h["reward"] for h in rows]
    std = [h.get("reward_std") or 0.0 for h in rows]
    zero = [uniform_share(h) for h in rows]
    zero = [float("nan") if z is None else z for z in zero]
    no_update = [(h["step"], z) for h, z in zip(rows, zero) if no_update_steps(h)]

    fig, (ax_r, ax_z) = plt.subplots(2, 1, figsize=(7, 5), sharex=True, height_ratios=(2, 1))
    ax_r.plot(steps, mean, color="tab:blue", label="reward (mean)")
    ax_r.fill_between(steps, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                      color="tab:blue", alpha=0.2, label="± std")
    evals = [h for h in log_history if "eval_reward" in h and "step" in h]
    if evals:  # TRL's eval loop on the held-out split (eval_strategy): the reward of its sampled completions
        ax_r.plot([h["step"] for h in evals], [h["eval_reward"] for h in evals], "o-", color="tab:green",
                  label="eval reward (held-out)")
    ax_r.set_ylabel("reward")
    ax_r.legend(loc="lower right")
    ax_z.plot(steps, zero, color="tab:red")
    if no_update:
        ax_z.plot([s for s, _ in no_update], [z for _, z in no_update], "x", color="black", label="no update")
        ax_z.legend(loc="upper left")
    ax_z.set_ylabel("uniform groups")
    ax_z.set_ylim(-0.05, 1.05)
    ax_z.set_xlabel("optimizer step")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def reward_trend(log_history: list[dict], fraction: float = 0.1) -> tuple[float, float]:
    """Mean logged ``reward`` over the first and the last ``fraction`` of the logged steps (at least one each).

    Returns:
        ``(first, last)``; raises ValueError when nothing was logged.
    """
    rewards = [h["reward"] for h in log_history if isinstance(h.get("reward"), (int, float))]  # None: no reward
    if not rewards:
        raise ValueError("log_history has no 'reward' entry with a value; set logging_steps to 1 or a small number, "
                         "and check that the rewards score some completions.")
    n = max(1, round(len(rewards) * fraction))
    return sum(rewards[:n]) / n, sum(rewards[-n:]) / n
