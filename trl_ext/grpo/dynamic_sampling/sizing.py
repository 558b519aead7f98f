"""Right-sized refill rounds for DAPO dynamic sampling (arXiv 2503.14476, section 3.2).

A refill round generates ``missing / rate x margin`` groups (GRESO, arXiv 2506.02177, its trainer's adaptive batch
size), rounded up to whole groups per process and capped by ``dynamic_sampling_max_round_size`` and the step's
generation budget. Surplus informative groups are thrown away, so a margin ``m`` wastes up to ``(m - 1) x missing``
groups: ``DEFAULT_MARGIN`` 1.05 keeps that within 5%.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

#: A rate estimate below this is treated as this (one informative group in 20): a round is then capped anyway.
RATE_FLOOR = 0.05
_MAX_SIMULATED_ROUNDS = 40_000  # bounds expected_refill_rounds' cost (a few seconds) when successes are rare


@dataclass
class InformativeRate:
    """Exponentially weighted counts of informative / generated groups (decay per step)."""

    decay: float = 0.9
    informative: float = 0.0
    generated: float = 0.0

    def estimate(self, informative_now: int = 0, generated_now: int = 0) -> float:
        """The running rate, with the current step's counts so far added; 1.0 before anything was generated."""
        generated = self.generated + generated_now
        if generated <= 0:
            return 1.0
        return (self.informative + informative_now) / generated

    def update(self, informative: int, generated: int) -> None:
        """Fold one finished step's counts into the running estimate."""
        self.informative = self.decay * self.informative + informative
        self.generated = self.decay * self.generated + generated

    def state_dict(self) -> dict[str, float]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.decay, self.informative, self.generated = state["decay"], state["informative"], state["generated"]


#: The refill margin unless ``dynamic_sampling_refill_margin`` sets one: at most ~5% of the groups are surplus.
DEFAULT_MARGIN = 1.05


def round_cap(num_groups: int, max_round_size: float) -> int:
    """The most groups one round generates: ``max_round_size`` generation batches of ``num_groups`` groups."""
    return max(math.ceil(num_groups * max_round_size - 1e-9), 1)


def whole_processes(groups: int, world_size: int) -> int:
    """``groups`` rounded up to a multiple of ``world_size`` (every process generates the same number)."""
    return -(-groups // world_size) * world_size


def refill_groups(missing: int, rate: float, margin: float, world_size: int, cap: int, remaining: int) -> int:
    """Groups the next refill round generates: ``ceil(missing / rate x margin)``, rounded up to a multiple of
    ``world_size``, at most ``cap`` (rounded up the same way) and at most ``remaining`` (rounded down). 0: stop."""
    if missing <= 0:
        return 0
    want = math.ceil(missing / max(rate, RATE_FLOOR) * margin - 1e-9)
    groups = min(whole_processes(max(want, 1), world_size), whole_processes(cap, world_size))
    limit = remaining // world_size * world_size
    return max(min(groups, limit), 0)


def refill_ahead_groups(
    rate: float, first: int, num_groups: int, margin: float, world_size: int, cap: int, budget: int
) -> int:
    """Groups of the refill submitted behind a first round of ``first`` groups: its expected shortfall at ``rate`` plus
    one standard deviation of Binomial(``first``, ``rate``), 0 when the first round is likely enough. One deviation
    balances a surplus round's scoring cost against a synchronous refill's stall of an engine call."""
    shortfall = num_groups - rate * first + math.sqrt(first * rate * (1 - rate))
    return refill_groups(math.ceil(shortfall - 1e-9), rate, margin, world_size, cap, budget - first)


def ahead_round_sizes(
    rate: float, num_groups: int, margin: float, world_size: int, cap: int, budget: int
) -> list[int]:
    """Round sizes (groups) overlapped generation submits for one step: a first round sized from ``rate`` (at least
    TRL's batch) and the refill for its likely shortfall (``refill_ahead_groups``), cut into TRL's batch of
    ``num_groups`` and then rounds of half a batch (a multiple of ``world_size``). The loop stops at the first round
    that fills the batch, so it scores at most half a batch past that point; a large round would cost the trainer
    scoring and old-policy passes for the groups it then drops."""
    first = max(num_groups, refill_groups(num_groups, rate, margin, world_size, cap, budget))
    total = first + refill_ahead_groups(rate, first, num_groups, margin, world_size, cap, budget)
    half = whole_processes(math.ceil(num_groups / 2), world_size)
    head = min(num_groups, total)
    return [head] + [min(half, total - start) for start in range(head, total, half)]


def expected_refill_rounds(
    informative_frac: float,
    num_groups: int,
    max_rounds: int,
    margin: float | None = None,
    world_size: int = 1,
    max_round_size: float = 2.0,
    steps: int = 4000,
    seed: int = 0,
) -> dict[str, float]:
    """Mean rounds and generated groups per step (and per trained group) of the trainer's refill policy, simulated
    over ``steps`` seeded steps with each group informative with probability ``informative_frac`` (taken as known:
    the trainer's running estimate converges to it) and a budget of ``max_rounds`` generation batches."""
    p = min(max(float(informative_frac), 0.0), 1.0)
    generator = torch.Generator().manual_seed(seed)
    margin = DEFAULT_MARGIN if margin is None else float(margin)
    cap = round_cap(num_groups, max_round_size)
    budget = max_rounds * num_groups

    def informative(n: int) -> int:
        return int(torch.binomial(torch.tensor(float(n)), torch.tensor(p), generator=generator))

    rounds_total, generated_total, trained_total, done = 0, 0, 0, 0
    while done < steps and rounds_total < _MAX_SIMULATED_ROUNDS:  # a rare-success rate stops early, on whole steps
        done += 1
        kept, rounds, generated = informative(num_groups), 1, num_groups
        while kept < num_groups:
            size = refill_groups(num_groups - kept, p, margin, world_size, cap=cap, remaining=budget - generated)
            if size == 0:
                break
            kept += informative(size)
            rounds, generated = rounds + 1, generated + size
        rounds_total, generated_total = rounds_total + rounds, generated_total + generated
        trained_total += min(kept, num_groups)
    return {
        "rounds": rounds_total / done,
        "generation_batches": generated_total / (done * num_groups),
        "generated_per_trained_group": generated_total / max(trained_total, 1),
    }
