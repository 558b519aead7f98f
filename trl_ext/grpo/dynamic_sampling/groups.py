"""Which groups carry a learning signal: the pure-function core of DAPO's dynamic sampling, shared by the trainer,
the group-mined DPO pair builder and the pre-flight probe.

DAPO (arXiv 2503.14476, Eq. 11) keeps only groups with ``0 < |{o_i : is_equivalent(a, o_i)}| < G``: an all-equal group
has zero advantage everywhere and only dilutes the batch. For general rewards the rule reads "not all equal", within a
tolerance; unscorable completions (NaN) do not count, and fewer than two scorable ones make a group uninformative.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DEFAULT_ATOL = 1e-6


def _check_rewards(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (one scalar per completion), got shape {tuple(rewards.shape)}.")
    if num_generations < 1 or rewards.numel() % num_generations != 0:
        raise ValueError(
            f"{rewards.numel()} rewards cannot be split into groups of num_generations={num_generations}; the "
            "generation batch must hold whole groups."
        )
    return rewards.detach().to(torch.float64).view(-1, num_generations)


def _group_range(rewards: torch.Tensor, num_generations: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per group: the (nan-aware) max and min rewards (-inf / inf when nothing is scorable) and the number of
    scorable completions."""
    grouped = _check_rewards(rewards, num_generations)
    finite = torch.isfinite(grouped)
    return (
        grouped.masked_fill(~finite, -torch.inf).amax(1),
        grouped.masked_fill(~finite, torch.inf).amin(1),
        finite.sum(1),
    )


def informative_groups(rewards: torch.Tensor, num_generations: int, atol: float = DEFAULT_ATOL) -> torch.Tensor:
    """Boolean mask over groups (``rewards`` flat, groups contiguous): True where the scorable rewards span more than
    ``atol``."""
    if atol < 0:
        raise ValueError(f"atol must be >= 0, got {atol}.")
    group_max, group_min, num_scorable = _group_range(rewards, num_generations)
    return (num_scorable >= 2) & ((group_max - group_min) > atol)


@dataclass
class GroupStats:
    """Counts over the groups of one batch (for logging and the probe)."""

    num_groups: int
    num_informative: int
    num_all_max: int  # uninformative groups sitting at the top of the reward scale: too easy
    num_all_min: int  # uninformative groups sitting at the bottom of the reward scale: too hard

    @property
    def informative_frac(self) -> float:
        return self.num_informative / self.num_groups if self.num_groups else 0.0

    @property
    def all_max_frac(self) -> float:
        return self.num_all_max / self.num_groups if self.num_groups else 0.0

    @property
    def all_min_frac(self) -> float:
        return self.num_all_min / self.num_groups if self.num_groups else 0.0


def group_stats(
    rewards: torch.Tensor,
    num_generations: int,
    atol: float = DEFAULT_ATOL,
    reward_max: float | None = None,
    reward_min: float | None = None,
) -> GroupStats:
    """Informative / all-max ("too easy") / all-min ("too hard") group counts.

    ``reward_max`` / ``reward_min``: the reward scale (e.g. 1 and 0 for correctness); by default the extremes observed,
    and when every reward is the same the scale is unknown and such groups count as neither.
    """
    informative = informative_groups(rewards, num_generations, atol)
    group_max, group_min, _ = _group_range(rewards, num_generations)
    finite = rewards[torch.isfinite(rewards)].double()
    top = reward_max if reward_max is not None else (finite.max().item() if finite.numel() else None)
    bottom = reward_min if reward_min is not None else (finite.min().item() if finite.numel() else None)
    uninformative = ~informative & torch.isfinite(group_max)
    if top is None or bottom is None or top - bottom <= atol:
        all_max = torch.zeros_like(uninformative)
        all_min = torch.zeros_like(uninformative)
    else:
        all_max = uninformative & (group_min >= top - atol)
        all_min = uninformative & (group_max <= bottom + atol)
    return GroupStats(
        num_groups=int(informative.numel()),
        num_informative=int(informative.sum()),
        num_all_max=int(all_max.sum()),
        num_all_min=int(all_min.sum()),
    )


def expected_rounds(informative_frac: float, max_rounds: int | None = None, num_groups: int = 1) -> float:
    """Expected generation rounds per step when every round generates a whole batch of ``num_groups`` groups, each
    informative with probability ``p = informative_frac``, until ``num_groups`` informative groups are in hand or
    ``max_rounds`` rounds were made (``None``: until the tail is negligible); an upper bound on the trainer's
    right-sized refills. E[R] = sum_{r < max_rounds} P(R > r), P(R > r) = P(Binomial(r * num_groups, p) < num_groups)
    (1 for r = 0), e.g. p = 0.5, 2 groups, 3 rounds at most: 1 + 3/4 + 5/16 = 2.06.
    """
    if num_groups < 1:
        raise ValueError(f"num_groups={num_groups} must be >= 1 (prompts per generation batch).")
    p = min(max(float(informative_frac), 0.0), 1.0)
    if p <= 0.0:
        return float(max_rounds) if max_rounds else float("inf")
    if p >= 1.0:
        return 1.0
    limit = max_rounds if max_rounds else 100_000
    probs, below = torch.tensor(p, dtype=torch.float64), torch.arange(num_groups, dtype=torch.float64)
    total = 1.0  # P(R > 0)
    for start in range(1, limit, 64):  # rounds r in chunks: P(R > r) = P(Binomial(r * num_groups, p) < num_groups)
        r = torch.arange(start, min(start + 64, limit), dtype=torch.float64).unsqueeze(1)
        tails = torch.distributions.Binomial(r * num_groups, probs=probs).log_prob(below).exp().sum(1)
        total += tails.sum().item()
        if max_rounds is None and tails[-1] < 1e-12:
            break
    return total
