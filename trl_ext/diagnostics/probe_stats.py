"""The probe's numbers and advice, on plain tensors (hand-checkable; the tests pin them): pass@k, the group mix, the
expected dynamic-sampling cost under the trainer's refill policy, how the mix would change with the group size (a
beta-binomial fit beyond the sampled size), reward and length distributions, and the recommendations."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trl_ext.diagnostics.eval_metrics import default_ks, pass_at_k
from trl_ext.diagnostics.probe_args import ProbeArguments
from trl_ext.grpo.dynamic_sampling.groups import expected_rounds, group_stats
from trl_ext.grpo.dynamic_sampling.sizing import expected_refill_rounds

_UNCAPPED_ROUNDS = 1000  # "no cap" for the simulated refill policy: a budget no realistic rate reaches


@dataclass
class Recommendation:
    """One piece of advice: a stable ``code`` for programs, a ``message`` for people, the ``numbers`` behind it."""

    code: str
    message: str
    numbers: dict[str, float] = field(default_factory=dict)


def fit_beta_prior(successes: Sequence[int], num_samples: int) -> tuple[float, float] | None:
    """Empirical-Bayes prior over per-prompt success probabilities: the Beta(alpha, beta) whose beta-binomial moments
    (``mu = mean(c) / n``, ``Var(c) = n mu (1 - mu) (1 + (n - 1) rho)``, ``rho = 1 / (alpha + beta + 1)`` clamped to
    [1e-6, 1 - 1e-6]) match the success counts. ``None`` when no prompt or every prompt was solved."""
    n, count = num_samples, len(successes)
    if count == 0 or n < 2:
        return None
    mu = sum(successes) / (count * n)
    if mu <= 0.0 or mu >= 1.0:
        return None
    mean_c = mu * n
    var_c = sum((c - mean_c) ** 2 for c in successes) / count
    rho = (var_c / (n * mu * (1.0 - mu)) - 1.0) / (n - 1)
    rho = min(max(rho, 1e-6), 1.0 - 1e-6)
    total = 1.0 / rho - 1.0
    return mu * total, (1.0 - mu) * total


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def mixed_group_prob(num_samples: int, num_correct: int, k: int, prior: tuple[float, float] | None = None) -> float:
    """Probability that a fresh group of ``k`` completions of this prompt is mixed (some pass, some fail).

    For ``k <= n`` it is the unbiased estimate ``1 - [C(n - c, k) + C(c, k)] / C(n, k)``. No unbiased estimate exists
    for ``k > n`` (a prompt never solved in ``n`` samples may be solved in ``k``): there ``p`` gets the posterior
    ``Beta(alpha + c, beta + n - c)`` under the dataset-wide ``prior`` and the result is ``1 - E[p^k] - E[(1 - p)^k]``;
    without a prior, 0.
    """
    n, c = num_samples, num_correct
    if k <= n:
        return 1.0 - (math.comb(n - c, k) + math.comb(c, k)) / math.comb(n, k)
    if prior is None:
        return 0.0
    a, b = prior[0] + c, prior[1] + n - c
    base = _log_beta(a, b)
    return 1.0 - math.exp(_log_beta(a + k, b) - base) - math.exp(_log_beta(a, b + k) - base)


def _quantile(values: torch.Tensor, q: float) -> float:
    return float(torch.quantile(values.double(), q)) if values.numel() else float("nan")


def _expected_cost(
    p: float,
    max_generation_batches: int | None,
    groups: int,
    margin: float | None,
    max_round_size: float = 2.0,
) -> dict[str, float]:
    """Expected rounds and generation batches per step under the trainer's refill policy (``max_generation_batches``
    None: uncapped), and the bound of whole-batch rounds."""
    if p <= 0.0:  # nothing is ever informative: every step spends its whole budget
        cap = float(max_generation_batches) if max_generation_batches else float("inf")
        return {"expected_rounds": cap, "expected_generation_batches": cap, "expected_rounds_whole_batch": cap}
    budget = max_generation_batches if max_generation_batches else _UNCAPPED_ROUNDS
    cost = expected_refill_rounds(p, groups, budget, margin=margin, max_round_size=max_round_size)
    return {
        "expected_rounds": cost["rounds"],
        "expected_generation_batches": cost["generation_batches"],
        "expected_rounds_whole_batch": expected_rounds(p, max_generation_batches, groups),
    }


def summarize(
    rewards: torch.Tensor,
    lengths: torch.Tensor,
    truncated: torch.Tensor,
    success_threshold: float = 1.0,
    max_generation_batches: int | None = None,
    reward_bins: int = 10,
    groups_per_batch: int = 1,
    refill_margin: float | None = None,
    max_round_size: float = 2.0,
) -> dict[str, Any]:
    """The probe's JSON-ready sections and per-prompt success counts from ``[num_prompts, G]`` tensors of rewards (NaN:
    unscorable), lengths and truncation flags; the refill policy is ``probe_args.dynamic_sampling_policy``'s."""
    if rewards.dim() != 2 or rewards.shape != lengths.shape or rewards.shape != truncated.shape:
        raise ValueError(
            f"rewards, lengths and truncated must share one [num_prompts, num_generations] shape, got "
            f"{tuple(rewards.shape)}, {tuple(lengths.shape)}, {tuple(truncated.shape)}."
        )
    num_prompts, group_size = rewards.shape
    rewards = rewards.double()
    passed = rewards >= success_threshold  # NaN compares False: an unscorable completion fails
    successes = passed.sum(dim=1).tolist()

    pass_at = {k: sum(pass_at_k(group_size, c, k) for c in successes) / num_prompts for k in default_ks(group_size)}

    all_correct = sum(c == group_size for c in successes) / num_prompts
    all_wrong = sum(c == 0 for c in successes) / num_prompts
    flat = rewards.flatten()
    policy = (max_generation_batches, groups_per_batch, refill_margin, max_round_size)
    stats = group_stats(flat, group_size)
    groups = {
        "all_correct_frac": all_correct,
        "all_wrong_frac": all_wrong,
        "mixed_frac": 1.0 - all_correct - all_wrong,
        # What dynamic sampling keeps (rewards not all equal) and, among the rest, groups at the top / bottom of the
        # observed reward range: the same quantities as the trainer's dynamic_sampling/* metrics.
        "informative_frac": stats.informative_frac,
        "all_max_frac": stats.all_max_frac,
        "all_min_frac": stats.all_min_frac,
        **_expected_cost(stats.informative_frac, *policy),
    }

    prior = fit_beta_prior(successes, group_size)
    projection = []
    for k in sorted({max(2, group_size // 4), max(2, group_size // 2), group_size, 2 * group_size, 4 * group_size}):
        mixed = sum(mixed_group_prob(group_size, c, k, prior) for c in successes) / num_prompts
        projection.append(
            {
                "num_generations": k,
                "mixed_frac": mixed,
                "expected_rounds": _expected_cost(mixed, *policy)["expected_rounds"],
                "estimate": "unbiased" if k <= group_size else "beta-binomial model",
            }
        )

    finite = flat[torch.isfinite(flat)]
    if finite.numel():
        low, high = float(finite.min()), float(finite.max())
        top = high if high > low else low + 1.0  # one value: a bin of width 1 from it
        counts = torch.histc(finite, bins=reward_bins, min=low, max=top)
        edges = torch.linspace(low, top, reward_bins + 1)
        reward_section = {
            "mean": float(finite.mean()),
            "std": float(finite.std(unbiased=False)),
            "min": low,
            "p10": _quantile(finite, 0.1),
            "p50": _quantile(finite, 0.5),
            "p90": _quantile(finite, 0.9),
            "max": high,
            "unscorable_frac": 1.0 - finite.numel() / flat.numel(),
            "histogram": {"edges": [round(e, 6) for e in edges.tolist()], "counts": [int(c) for c in counts.tolist()]},
        }
    else:
        reward_section = {"mean": float("nan"), "unscorable_frac": 1.0, "histogram": {"edges": [], "counts": []}}

    lengths_f = lengths.double().flatten()
    top = int(lengths_f.max()) if lengths_f.numel() else 1
    width = max(1, math.ceil(top / 50))  # integer-width bins, at most about 50 of them
    length_edges = [edge - 0.5 for edge in range(0, top + width + 1, width)]  # integer lengths sit mid-bin
    length_counts = torch.histogram(lengths_f.float(), bins=torch.tensor(length_edges, dtype=torch.float)).hist
    length_section = {
        "mean": float(lengths_f.mean()),
        "p50": _quantile(lengths_f, 0.5),
        "p90": _quantile(lengths_f, 0.9),
        "max": float(lengths_f.max()),
        "truncated_frac": float(truncated.double().mean()),
        "histogram": {"edges": length_edges, "counts": [int(c) for c in length_counts.tolist()]},
    }
    return {
        "pass_at": pass_at,
        "groups": groups,
        "group_size_projection": projection,
        "rewards": reward_section,
        "lengths": length_section,
        "successes": successes,
    }


def recommend(summary: dict[str, Any], args: ProbeArguments, max_completion_length: int) -> list[Recommendation]:
    """The advice; each rule states its trigger in its message. ``sft_first`` (pass@G below ``sft_pass_at_g``: the
    cold-start rule of DeepSeek-R1 and DAPO) folds the truncation advice in, since an untrained model's lengths say
    little; ``raise_group_size`` fires only for groups too hard (too easy is ``filter_easy``'s case)."""
    group_size = args.num_generations
    pass_g = summary["pass_at"][group_size]
    groups, lengths = summary["groups"], summary["lengths"]
    trunc = lengths["truncated_frac"]
    solved = sum(c > 0 for c in summary["successes"])
    num_prompts = len(summary["successes"])
    advice: list[Recommendation] = []

    cold = pass_g < args.sft_pass_at_g
    if cold:
        advice.append(
            Recommendation(
                "sft_first",
                f"SFT first: pass@{group_size} = {pass_g:.3f} < {args.sft_pass_at_g} ({solved} of {num_prompts} "
                f"prompts solved at least once in {group_size} samples; dynamic sampling would need "
                f"{format_rounds(groups['expected_rounds'])} rounds per step). A group with no success has zero advantage, "
                f"so RL has almost nothing to learn from; warm-start with supervised fine-tuning (recipes/sft.py) or "
                f"use easier prompts, then probe again ({trunc:.0%} of completions were truncated at "
                f"{max_completion_length} tokens; re-check after SFT).",
                {"pass_at_g": pass_g, "solved_prompts": solved, "truncated_frac": trunc},
            )
        )
    if groups["all_correct_frac"] >= args.easy_group_frac:
        advice.append(
            Recommendation(
                "filter_easy",
                f"Filter or down-weight always-solved prompts: {groups['all_correct_frac']:.0%} of groups were "
                f"all-correct (>= {args.easy_group_frac:.0%}); they have zero advantage and only cost generation. "
                "Drop prompts whose per-prompt successes equal num_generations (report.json, per_prompt) or keep "
                "dynamic sampling on.",
                {"all_correct_frac": groups["all_correct_frac"]},
            )
        )
    projection = {row["num_generations"]: row for row in summary["group_size_projection"]}
    mixed, larger = groups["mixed_frac"], projection.get(2 * group_size)
    too_hard = groups["all_wrong_frac"] >= groups["all_correct_frac"]  # too easy is filter_easy's case
    if not cold and too_hard and mixed < args.mixed_group_frac and larger and larger["mixed_frac"] > mixed + 0.02:
        advice.append(
            Recommendation(
                "raise_group_size",
                f"Raise the group size: only {mixed:.0%} of groups are mixed at num_generations={group_size} "
                f"(< {args.mixed_group_frac:.0%}; {groups['all_wrong_frac']:.0%} all-wrong, "
                f"{groups['all_correct_frac']:.0%} all-correct). At num_generations={2 * group_size} an estimated "
                f"{larger['mixed_frac']:.0%} would be (beta-binomial fit), and dynamic sampling would need "
                f"{larger['expected_rounds']:.2f} instead of {groups['expected_rounds']:.2f} rounds per step. "
                "A curriculum (easier prompts first) helps the all-wrong ones too.",
                {
                    "mixed_frac": mixed,
                    "projected_mixed_frac": larger["mixed_frac"],
                    "projected_group_size": 2 * group_size,
                },
            )
        )
    if not cold and trunc > args.truncated_frac:
        advice.append(
            Recommendation(
                "raise_max_completion_length",
                f"Raise max_completion_length: {trunc:.0%} of completions hit the limit of {max_completion_length} "
                f"tokens without EOS (> {args.truncated_frac:.0%}; mean length {lengths['mean']:.1f}). Try "
                f"{2 * max_completion_length}, or keep the limit and use overlong reward shaping / "
                "mask_truncated_completions=True (DAPO).",
                {"truncated_frac": trunc, "max_completion_length": max_completion_length},
            )
        )
    if not advice:
        advice.append(
            Recommendation(
                "ready",
                f"Ready for RL: {mixed:.0%} of groups are mixed, pass@1 = {summary['pass_at'][1]:.3f}, "
                f"pass@{group_size} = {pass_g:.3f}; dynamic sampling needs about {groups['expected_rounds']:.2f} "
                "rounds per step.",
                {"mixed_frac": mixed, "expected_rounds": groups["expected_rounds"]},
            )
        )
    return advice


def format_rounds(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2f}"


def reward_model_spread(scores: Sequence[float], group_size: int) -> dict[str, float]:
    """How a reward model's scores spread on the probed groups: the mean within-group standard deviation (near 0: it
    cannot tell a group's completions apart, so its advantages are noise), the overall deviation and the range."""
    values = torch.tensor(list(scores), dtype=torch.float64)
    groups = values.view(-1, group_size)
    return {
        "within_group_std": float(groups.std(dim=1, unbiased=False).mean()),
        "std": float(values.std(unbiased=False)),
        "min": float(values.min()),
        "max": float(values.max()),
    }
