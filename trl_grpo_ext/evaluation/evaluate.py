"""Evaluate a policy on held-out prompts with the run's own chat template, system prompt and rewards.

What is measured, per model (the base, or the base with a trained adapter):

* **accuracy**: greedy pass@1 (temperature 0), the fraction of prompts whose greedy completion is correct, with its
  95% Wilson interval. A completion is correct when the *correctness reward* (the run's first reward unless
  ``correctness_reward`` names another) reaches ``correct_threshold`` (1.0: the maximum of the built-in answer
  rewards).
* **mean_reward**: the mean of every configured reward over the greedy completions, per reward function.
* with ``num_samples`` = K > 0 samples per prompt at the training temperature: each prompt's **pass rate**
  q_i = c_i / K, the unbiased **pass@k** for k = 1, 2, 4, ... <= K (Chen et al. 2021, arXiv 2107.03374), and the
  **uniform-group forecast** mean_i(q_i^G + (1 − q_i)^G) for G = 2, 4, 8, 16: the share of GRPO groups expected to
  have σ = 0 and so no learning signal (:mod:`trl_grpo_ext.evaluation.stats`).

:func:`compare` pairs two results on the same prompts: the accuracy difference and its 95% interval
(Newcombe 1998b, method 10).

Completions are generated and scored as TRL's ``GRPOTrainer`` does (:mod:`trl_grpo_ext.evaluation.generation`): the
run's chat template, left padding, every dataset column passed to the rewards.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..config.checks import check_choice
from .generation import generate_completions, score_completions
from .stats import (
    FORECAST_GROUP_SIZES,
    forecast,
    paired_difference_interval,
    pass_at_k,
    wilson_interval,
    zero_variance_subset_fraction,
)

#: File the recipe and ``make demo-real`` write the final evaluation to, in ``output_dir``.
EVAL_RESULTS_FILE = "eval_results.json"


@dataclass
class EvalResult:
    """One model's evaluation (see the module docstring for each quantity).

    Attributes:
        num_prompts (`int`): prompts evaluated [prompts].
        accuracy (`float`): greedy pass@1 in [0, 1].
        accuracy_ci (`list[float]`): its 95% Wilson interval ``[low, high]``.
        mean_reward (`dict[str, float]`): mean of each reward over the greedy completions (``None`` rewards skipped).
        correct (`list[int]`): 1/0 per prompt, greedy (the pairing of :func:`compare`).
        num_samples (`int`): K, sampled completions per prompt (0: none drawn).
        temperature (`float | None`): sampling temperature of the K samples.
        pass_at_k (`dict[int, float]`): unbiased pass@k, k = 1, 2, 4, ... <= K (empty when K = 0).
        pass_rates (`list[float]`): per-prompt pass rate c_i / K (empty when K = 0).
        uniform_group_forecast (`dict[int, float]`): expected fraction of uniform groups for G = 2, 4, 8, 16, from
            the pass rates of the correctness reward read as pass/fail: ``mean_i(q_i^G + (1 − q_i)^G)`` (empty when
            K = 0). Exact for a binary reward; for a graded one it forecasts the pass/fail signal only.
        uniform_group_forecast_weighted (`dict[int, float]`): the same judged on the run's weighted total reward
            (what TRL's ``frac_reward_zero_std`` measures), estimated without a model of the reward from the K
            samples: the share of size-G subsets of a prompt's samples whose totals are all equal
            (:func:`~trl_grpo_ext.evaluation.stats.zero_variance_subset_fraction`), for G <= K only.
        prompt_keys (`list[int]`): each prompt's `zero_variance.history.prompt_key` (empty when K = 0).
        sample_totals (`list[list[float | None]]`): each prompt's K weighted total rewards (None: every reward
            None), what ``skip_history_file`` reads (empty when K = 0).
        correctness_reward (`str`): the reward that decides correctness.
        rewards (`list[dict]`): the run's rewards (`RewardSpec.to_dict`) whose weighted totals ``sample_totals``
            holds, model (`str`): the model evaluated (the adapter's folder, else ``model_name_or_path``; a folder as
            its absolute path) and max_completion_length (`int`) [tokens]; set by ``eval`` so that
            ``skip_history_file`` can refuse a file of another run (None / empty otherwise).
        mean_completion_tokens (`float`): mean greedy completion length [tokens].
        examples (`list[dict]`): the first few prompts with their greedy completion and rewards.
    """

    num_prompts: int
    accuracy: float
    accuracy_ci: list[float]
    mean_reward: dict[str, float]
    correct: list[int]
    correctness_reward: str
    mean_completion_tokens: float
    num_samples: int = 0
    temperature: float | None = None
    pass_at_k: dict[int, float] = field(default_factory=dict)
    pass_rates: list[float] = field(default_factory=list)
    uniform_group_forecast: dict[int, float] = field(default_factory=dict)
    uniform_group_forecast_weighted: dict[int, float] = field(default_factory=dict)
    prompt_keys: list[int] = field(default_factory=list)
    sample_totals: list[list[float | None]] = field(default_factory=list)
    rewards: list[dict] = field(default_factory=list)
    model: str | None = None
    max_completion_length: int | None = None
    examples: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-ready dict (integer keys of ``pass_at_k`` / ``uniform_group_forecast`` kept as ints)."""
        return asdict(self)


def pass_at_k_values(correct_counts: list[int], num_samples: int) -> dict[int, float]:
    """Mean unbiased pass@k over prompts for k = 1, 2, 4, ... up to and including ``num_samples``.

    Args:
        correct_counts (`list[int]`): correct samples per prompt, each in ``[0, num_samples]``.
        num_samples (`int`): K, samples per prompt, >= 1.
    """
    ks = sorted({k for k in (1, 2, 4, 8, 16, 32, 64) if k <= num_samples} | {num_samples})
    return {k: sum(pass_at_k(num_samples, c, k) for c in correct_counts) / len(correct_counts) for k in ks}


def compare(base: EvalResult, adapter: EvalResult) -> dict:
    """The paired comparison of two evaluations of the same prompts.

    Returns:
        `dict` with ``difference`` (adapter accuracy − base accuracy) and ``difference_ci`` ([low, high], 95%,
        Newcombe 1998b method 10), and the discordant pair counts ``only_base_correct`` / ``only_adapter_correct``.

    Raises:
        ValueError: the two results cover different numbers of prompts.
    """
    if base.num_prompts != adapter.num_prompts:
        raise ValueError(f"cannot pair {base.num_prompts} base results with {adapter.num_prompts} adapter results.")
    diff, (low, high) = paired_difference_interval(base.correct, adapter.correct)
    return {
        "difference": diff,
        "difference_ci": [low, high],
        "only_base_correct": sum(1 for b, a in zip(base.correct, adapter.correct) if b and not a),
        "only_adapter_correct": sum(1 for b, a in zip(base.correct, adapter.correct) if a and not b),
    }


def evaluate_model(
    model, tokenizer, dataset, reward_funcs: list, *, max_new_tokens: int, correctness_reward: str | None = None,
    correct_threshold: float = 1.0, num_samples: int = 0, temperature: float = 1.0, top_p: float = 1.0,
    top_k: int = 0, batch_size: int = 32, num_examples: int = 3, reward_weights: list[float] | None = None,
    seed: int | None = None,
) -> EvalResult:
    """Evaluate one model on ``dataset`` (see the module docstring).

    Args:
        model: causal LM (plain or PEFT) — put in eval mode here.
        tokenizer: its tokenizer.
        dataset: a `datasets.Dataset` (or list of dicts) with a ``prompt`` column and the columns the rewards read.
        reward_funcs (`list`): the run's reward callables (``__name__`` = reward name).
        max_new_tokens (`int`): ``max_completion_length`` of the run [tokens].
        correctness_reward (`str`, *optional*): name of the reward deciding correctness; defaults to the first.
        correct_threshold (`float`, defaults to `1.0`): a completion is correct when that reward is >= this.
        num_samples (`int`, defaults to `0`): K sampled completions per prompt for pass@k and the forecast.
        temperature (`float`, defaults to `1.0`), top_p, top_k: sampling settings of the K samples (the run's).
        batch_size (`int`, defaults to `32`): completions per ``generate`` call.
        num_examples (`int`, defaults to `3`): prompts kept with their completion in ``examples``.
        reward_weights (`list[float]`, *optional*): the run's reward weights (default 1 each), for the weighted
            forecast.
        seed (`int`, *optional*): seeds every generator (`transformers.set_seed`) before the K samples are drawn, so
            that the same model, prompts and seed give the same pass rates (the run's ``seed``); None: not seeded.

    Raises:
        ValueError: an empty dataset, or a ``correctness_reward`` that is not one of the rewards.
    """
    rows = [dict(r) for r in dataset]
    if not rows:
        raise ValueError("the evaluation split is empty: set dataset_test_split to a split with rows.")
    names = [getattr(f, "__name__", f"reward_{i}") for i, f in enumerate(reward_funcs)]
    target = correctness_reward or names[0]
    check_choice("correctness_reward", target, names, error=ValueError, fix="(the run's rewards)")
    index = names.index(target)
    model.eval()
    prompts = [r["prompt"] for r in rows]
    columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}

    texts, ids = generate_completions(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size)
    greedy = [t[0] for t in texts]
    greedy_ids = [i[0] for i in ids]
    scores = score_completions(reward_funcs, prompts, greedy, greedy_ids, columns)
    correct = [int(s is not None and s >= correct_threshold) for s in scores[index]]
    mean_reward = {}
    for name, values in zip(names, scores):
        valid = [v for v in values if v is not None]
        mean_reward[name] = sum(valid) / len(valid) if valid else float("nan")
    n = len(rows)
    low, high = wilson_interval(sum(correct), n)
    examples = [
        {"prompt": prompts[i], "completion": greedy[i], "rewards": {nm: scores[f][i] for f, nm in enumerate(names)}}
        for i in range(min(num_examples, n))
    ]
    result = EvalResult(
        num_prompts=n, accuracy=sum(correct) / n, accuracy_ci=[low, high], mean_reward=mean_reward, correct=correct,
        correctness_reward=target, mean_completion_tokens=sum(len(i) for i in greedy_ids) / n, examples=examples,
    )
    if num_samples > 0:
        if seed is not None:
            from transformers import set_seed

            set_seed(seed)
        sampled, sampled_ids = generate_completions(
            model, tokenizer, prompts, max_new_tokens=max_new_tokens, num_return_sequences=num_samples,
            temperature=temperature, top_p=top_p, top_k=top_k, batch_size=batch_size,
        )
        flat_prompts = [p for p in prompts for _ in range(num_samples)]
        flat_columns = {k: [v for v in vals for _ in range(num_samples)] for k, vals in columns.items()}
        flat = [t for group in sampled for t in group]
        flat_ids = [t for group in sampled_ids for t in group]
        sample_scores = score_completions(reward_funcs, flat_prompts, flat, flat_ids, flat_columns)
        target_scores = sample_scores[index]
        weights = list(reward_weights) if reward_weights is not None else [1.0] * len(reward_funcs)
        totals = [sum(w * v for w, v in zip(weights, column) if v is not None)  # TRL's nansum of weighted rewards
                  for column in zip(*sample_scores)]
        counts = [
            sum(1 for s in target_scores[i * num_samples : (i + 1) * num_samples] if s is not None and s >= correct_threshold)
            for i in range(n)
        ]
        result.num_samples = num_samples
        result.temperature = temperature
        result.pass_rates = [c / num_samples for c in counts]
        result.pass_at_k = pass_at_k_values(counts, num_samples)
        result.uniform_group_forecast = forecast(result.pass_rates, FORECAST_GROUP_SIZES)
        from ..zero_variance.history import prompt_key

        result.prompt_keys = [prompt_key(prompt) for prompt in prompts]
        scored = [total if any(v is not None for v in column) else None  # None: unscorable, as the filter reads it
                  for total, column in zip(totals, zip(*sample_scores))]
        result.sample_totals = [scored[i * num_samples : (i + 1) * num_samples] for i in range(n)]
        result.uniform_group_forecast_weighted = {
            g: sum(zero_variance_subset_fraction(totals[i * num_samples : (i + 1) * num_samples], g) for i in range(n)) / n
            for g in FORECAST_GROUP_SIZES if g <= num_samples
        }
    return result


def format_result(result: EvalResult, title: str) -> str:
    """A short text report of one evaluation (what ``trl-grpo-ext eval`` prints)."""
    low, high = result.accuracy_ci
    lines = [
        f"{title}: greedy accuracy {result.accuracy:.3f} [95% CI {low:.3f}, {high:.3f}] on {result.num_prompts} prompts "
        f"({result.correctness_reward} >= 1; mean completion {result.mean_completion_tokens:.1f} tokens)",
        "  mean reward: " + ", ".join(f"{k} {v:.3f}" for k, v in result.mean_reward.items()),
    ]
    if result.num_samples:
        lines.append(
            f"  pass@k ({result.num_samples} samples/prompt, temperature {result.temperature:g}): "
            + ", ".join(f"pass@{k} {v:.3f}" for k, v in result.pass_at_k.items())
        )
        lines.append(
            f"  σ = 0 forecast, {result.correctness_reward} as pass/fail (share of groups with no learning signal): "
            + ", ".join(f"G={g}: {v:.2f}" for g, v in result.uniform_group_forecast.items())
        )
        if result.uniform_group_forecast_weighted:
            lines.append(
                "  σ = 0 forecast, the run's weighted reward (what frac_reward_zero_std measures): "
                + ", ".join(f"G={g}: {v:.2f}" for g, v in result.uniform_group_forecast_weighted.items())
            )
    return "\n".join(lines)


def format_comparison(comparison: dict) -> str:
    """One line: the paired accuracy difference and its 95% interval."""
    low, high = comparison["difference_ci"]
    verdict = "better" if low > 0 else "worse" if high < 0 else "no significant difference"
    return (
        f"difference (adapter − base): {comparison['difference']:+.3f} [95% paired CI {low:+.3f}, {high:+.3f}] — "
        f"{verdict} ({comparison['only_adapter_correct']} prompts fixed, {comparison['only_base_correct']} broken)"
    )


@dataclass
class FinalEvaluation:
    """The recipe's evaluation after training: the adapter's result, the base's (optional) and their comparison."""

    trained: EvalResult
    base: EvalResult | None = None
    comparison: dict | None = None

    def to_json(self) -> dict:
        """The ``eval_results.json`` object: ``trained``, and with the base ``base``, ``difference`` and
        ``difference_ci``."""
        out = {"trained": self.trained.to_dict()}
        if self.base is not None:
            out["base"] = self.base.to_dict()
        if self.comparison is not None:
            out.update(self.comparison)
        return out

    @property
    def report(self) -> str:
        """Accuracy before -> after with the intervals, the paired difference and the mean rewards (printed by the
        recipe; three lines)."""
        t = self.trained
        if self.base is None or self.comparison is None:
            return format_result(t, "trained")
        b = self.base
        rewards = ", ".join(f"{name} {b.mean_reward[name]:.3f} -> {t.mean_reward[name]:.3f}" for name in t.mean_reward)
        return "\n".join([
            f"Greedy accuracy on {t.num_prompts} held-out prompts: {b.accuracy:.3f} [{b.accuracy_ci[0]:.3f}, "
            f"{b.accuracy_ci[1]:.3f}] (base model, no adapter) -> {t.accuracy:.3f} [{t.accuracy_ci[0]:.3f}, "
            f"{t.accuracy_ci[1]:.3f}] (trained)",
            format_comparison(self.comparison).replace("adapter − base", "trained − base"),
            f"Mean reward (greedy): {rewards}",
        ])

    def write(self, output_dir) -> str:
        """Write :data:`EVAL_RESULTS_FILE` into ``output_dir``; returns its path."""
        import json
        from pathlib import Path

        path = Path(output_dir) / EVAL_RESULTS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2))
        return str(path)


def final_evaluation(trainer, tokenizer, dataset, *, compare_base: bool = True, num_samples: int = 0,
                     batch_size: int = 32) -> FinalEvaluation:
    """Evaluate a trained PEFT policy (and its base, with the adapter disabled) on ``dataset``.

    Args:
        trainer (`GRPOTrainer`): after ``train()``; reads ``trainer.model`` (a PEFT model), ``trainer.reward_funcs``
            and ``trainer.args`` (``max_completion_length``, ``temperature``, ``top_p``, ``top_k``).
        tokenizer: the run's tokenizer.
        dataset: held-out prompts (``prompt`` column plus the columns the rewards read).
        compare_base (`bool`, defaults to `True`): also evaluate the base on the same prompts and pair the results.
        num_samples (`int`, defaults to `0`): K samples per prompt for pass@k and the forecast.
        batch_size (`int`, defaults to `32`): completions per ``generate`` call.

    Raises:
        ValueError: ``compare_base`` on a model without an adapter to disable.
    """
    model = trainer.accelerator.unwrap_model(trainer.model)
    args = trainer.args
    settings = dict(max_new_tokens=args.max_completion_length, num_samples=num_samples, temperature=args.temperature,
                    top_p=args.top_p, top_k=args.top_k or 0, batch_size=batch_size,
                    reward_weights=[float(w) for w in trainer.reward_weights], seed=args.seed)
    was_training = model.training
    trained = evaluate_model(model, tokenizer, dataset, trainer.reward_funcs, **settings)
    base = comparison = None
    if compare_base:
        if not hasattr(model, "disable_adapter"):
            raise ValueError("final_eval: compare_base needs a PEFT adapter (use_peft: true); use final_eval: adapter.")
        with model.disable_adapter():
            base = evaluate_model(model, tokenizer, dataset, trainer.reward_funcs, **settings)
        comparison = compare(base, trained)
    model.train(was_training)
    return FinalEvaluation(trained=trained, base=base, comparison=comparison)
