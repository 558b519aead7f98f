"""The figures papers report from k samples per problem, from per-sample verdicts (a sample is correct when its reward
is at least 1.0, full marks; None, unscorable, is wrong).

* **pass@k**: the unbiased estimator of Chen et al. 2021 (arXiv 2107.03374, Eq. 1), ``1 - C(n - c, k) / C(n, k)`` for
  ``c`` correct of ``n`` samples, in the paper's numerically stable product form.
* **avg@k** (DAPO's AIME avg@32, DeepSeek-R1's "pass@1 averaged over k samples"): ``c / k``.
* **maj@k** (DeepSeek-R1's cons@64, self-consistency of Wang et al. 2022, arXiv 2203.11171): solved when the answer
  most samples agree on (the reward's own extraction, compared as text; no answer, no vote; ties to the answer voted
  first) is correct.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

CORRECT_AT = 1.0  # a sample is correct when its reward is at least this (the rule-based rewards give 1.0 when right)


def check_k(k: int, n: int) -> None:
    """``k`` must be a whole number from 1 to ``n`` (the samples drawn per problem)."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"pass@k needs k >= 1 (a whole number of samples), got k={k!r}.")
    if k > n:
        raise ValueError(
            f"pass@{k} needs at least {k} samples per problem (k={k}), but only {n} were drawn: draw {k} or more "
            f"(trl-ext eval --num_samples), or ask for k <= {n}."
        )


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem from ``n`` samples with ``c`` correct (Chen et al. 2021, Eq. 1)."""
    check_k(k, n)
    if not 0 <= c <= n:
        raise ValueError(f"pass@k: the number of correct samples must be between 0 and n={n}, got c={c}.")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def default_ks(num_samples: int) -> list[int]:
    """The k of the report: 1, 2, 4, ... up to ``num_samples``, and ``num_samples`` itself."""
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}.")
    ks = [2**i for i in range(num_samples.bit_length())]
    return ks if ks[-1] == num_samples else [*ks, num_samples]


def majority_vote(answers: Sequence[str | None]) -> int | None:
    """Index of the first sample carrying the winning answer (module docstring); None when no sample has one."""
    votes = Counter(answer for answer in answers if answer is not None)  # in the order first voted
    if not votes:
        return None
    return answers.index(max(votes, key=votes.__getitem__))  # max keeps the first of equal counts


def is_correct(reward: float | None, threshold: float = CORRECT_AT) -> bool:
    """A sample's verdict: its reward reached ``threshold`` (None, unscorable, is wrong)."""
    return reward is not None and reward >= threshold


def problem_figures(
    rewards: Sequence[float | None],
    answers: Sequence[str | None] | None,
    ks: Sequence[int],
    threshold: float = CORRECT_AT,
) -> dict[str, float | None]:
    """One problem's ``avg@K``, ``pass@k`` for each k and ``maj@K`` from its K samples' rewards (``maj@K`` None when
    ``answers`` is: a reward with no answer to vote on, e.g. code)."""
    n = len(rewards)
    verdicts = [is_correct(r, threshold) for r in rewards]
    figures: dict[str, float | None] = {f"avg@{n}": sum(verdicts) / n if n else 0.0}
    for k in ks:
        figures[f"pass@{k}"] = pass_at_k(n, sum(verdicts), k)
    if answers is None:
        figures[f"maj@{n}"] = None
    else:
        winner = majority_vote(answers)
        figures[f"maj@{n}"] = float(winner is not None and verdicts[winner])
    return figures


def mean_figures(per_problem: Sequence[dict[str, float | None]]) -> dict[str, float | None]:
    """The mean over problems of each figure (None stays None: a figure the reward cannot give)."""
    if not per_problem:
        return {}
    means: dict[str, float | None] = {}
    for key in per_problem[0]:
        values = [figures[key] for figures in per_problem]
        means[key] = None if any(v is None for v in values) else sum(values) / len(values)
    return means
