r"""Predictive prompt selection for dynamic sampling: generate groups for the prompts likely to be informative.

Dynamic sampling (DAPO, arXiv 2503.14476, Eq. 11) pays for every group it drops: 1/(1-p) groups generated per kept
group when a fraction p is uninformative. Dynamics-predictive sampling (DPS) and GRESO (arXiv 2506.02177) predict a
prompt's outcome from its history instead. Here each training-set index keeps a Beta posterior of its solve rate,

    p_i ~ Beta(a_i, b_i),   a_i <- a0 + lam^(t - t_i) (a_i - a0) + sum_j s_ij,   (b_i likewise with 1 - s_ij)

updated from every group the prompt gets (``s_ij`` in [0, 1]: completion j's metric on the reward range; t counts
generation batches and t_i is the prompt's last update). ``lam`` ages the evidence with the policy, visited or not: a
prompt set aside as too hard or too easy drifts back to the prior and is tried again. A group of G is informative
unless all G completions agree:

    q_i = P(informative) = 1 - E[p^G] - E[(1-p)^G] = 1 - B(a+G, b)/B(a, b) - B(a, b+G)/B(a, b).

A round of n prompts looks at ``pool`` x n candidates from the prompt stream and takes the n with the highest q_i
(ties in stream order); a share ``floor`` of the prompts taken are explorations instead (each candidate is taken
first, whatever its q, with probability floor / pool; explored candidates in stream order), so that no
prompt starves and a prompt the policy has since learned (or forgotten) is re-tested. Candidates not taken are
passed over for this epoch of the stream. The draws are a hash of the seed, the index and a counter: identical on
every process (which all see the same gathered rewards) and exact on resume.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import torch


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def informative_probability(alpha: float, beta: float, group_size: int) -> float:
    """q = 1 - E[p^G] - E[(1-p)^G] for p ~ Beta(alpha, beta): the chance that G Bernoulli(p) draws do not all agree."""
    log_b = _log_beta(alpha, beta)
    all_right = math.exp(_log_beta(alpha + group_size, beta) - log_b)
    all_wrong = math.exp(_log_beta(alpha, beta + group_size) - log_b)
    return max(0.0, 1.0 - all_right - all_wrong)


@dataclass
class PromptSelector:
    """Per-prompt Beta posteriors of the solve rate and the choice of each round's prompts (module docstring)."""

    seed: int
    group_size: int
    pool: float = 4.0
    floor: float = 0.05
    decay: float = 0.95
    prior: tuple[float, float] = (1.0, 1.0)
    posteriors: dict[int, list[float]] = field(default_factory=dict)  # index -> [a, b, t of the last update]
    draws: int = 0
    batches: int = 0  # generation batches finished (t)

    def posterior(self, index: int) -> tuple[float, float]:
        """(a, b) of ``index`` now: its evidence aged by ``decay`` per generation batch since its last update."""
        if index not in self.posteriors:
            return self.prior
        alpha, beta, updated = self.posteriors[index]
        (a0, b0), weight = self.prior, self.decay ** (self.batches - updated)
        return a0 + weight * (alpha - a0), b0 + weight * (beta - b0)

    def probability(self, index: int) -> float:
        """q of ``index``: the posterior probability that its next group is informative."""
        return informative_probability(*self.posterior(index), self.group_size)

    def tick(self) -> None:
        """One generation batch finished: the evidence ages."""
        self.batches += 1

    def _uniform(self, index: int) -> float:
        self.draws += 1
        digest = hashlib.sha256(f"{self.seed}:{index}:{self.draws}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def choose(self, stream: Any, n: int) -> tuple[list[int], int]:
        """``n`` indices for one round, from ``pool`` x n candidates of ``stream`` (a ``PromptStream``), and how many
        candidates were passed over."""
        candidates = stream.take(max(n, math.ceil(self.pool * n)))
        # a candidate is explored with probability floor / (candidates per prompt): about floor x n of the taken
        explored = [self._uniform(index) < self.floor * n / len(candidates) for index in candidates]
        # explored candidates first, in stream order; then the rest by their prediction
        order = sorted(
            range(len(candidates)),
            key=lambda k: (0, 0.0, k) if explored[k] else (1, -self.probability(candidates[k]), k),
        )
        taken = sorted(order[:n])  # stream order within the round
        return [candidates[k] for k in taken], len(candidates) - n

    def observe(self, indices: list[int], metric: torch.Tensor, low: float, high: float) -> None:
        """Fold one round into the posteriors: ``metric`` holds the G completions of each index in turn (every
        process's rows), ``[low, high]`` the reward range that maps it to successes in [0, 1]; NaN is not counted."""
        scores = metric.view(len(indices), self.group_size).double()
        span = high - low
        if not math.isfinite(span) or span <= 0:
            return  # one reward value seen so far: nothing to learn a solve rate from
        success = ((scores - low) / span).clamp(0.0, 1.0)
        scored = ~torch.isnan(scores)
        wins = torch.where(scored, success, 0.0).sum(1).tolist()
        losses = torch.where(scored, 1.0 - success, 0.0).sum(1).tolist()
        for index, win, loss in zip(indices, wins, losses, strict=True):
            alpha, beta = self.posterior(index)
            self.posteriors[index] = [alpha + win, beta + loss, self.batches]

    def state_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "draws": self.draws,
            "batches": self.batches,
            "posteriors": {str(k): v for k, v in self.posteriors.items()},  # JSON keys are strings
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed, self.draws, self.batches = state["seed"], state["draws"], state["batches"]
        self.posteriors = {int(k): list(v) for k, v in state["posteriors"].items()}
