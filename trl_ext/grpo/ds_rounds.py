"""Right-sized refill rounds for DAPO dynamic sampling (arXiv 2503.14476, section 3.2) and the vLLM importance-sampling
ratio of the rows that are trained.

- ``InformativeRate``: a running estimate of the fraction of generated groups that are informative (reward range
  above ``dynamic_sampling_atol``), exponentially weighted over steps and combined with what the current step has
  generated so far. Checkpointed with the dynamic-sampling state.
- ``refill_groups``: how many groups the next refill round generates. GRESO (arXiv 2506.02177, its trainer's
  adaptive batch size) asks for ``missing / rate x 1.25`` groups; we round that up to a multiple of the number of
  processes (every process generates the same whole number of groups, as TRL's collectives need) and cap it at
  ``dynamic_sampling_max_round_size`` generation batches (the memory one generate call may use) and at what is left
  of the step's generation budget (``dynamic_sampling_max_generation_batches`` whole generation batches).
- ``refill_margin``: the margin in force. A surplus informative group is trained at the next step when carry-over
  applies, and then a margin costs nothing but saves rounds: GRESO's 1.25. Otherwise every surplus group is thrown
  away, and a margin ``m`` wastes up to ``(m - 1) x missing`` groups (``1 + (1 - rate)(m - 1)`` times the ideal
  ``1 / rate`` groups per kept group on a large batch: 1.19x at rate 0.25 for 1.25): 1.05 keeps that within 5%, at
  a few more small rounds than 1.1 (simulated with ``expected_refill_rounds``: 16 groups per batch, at most 1.08x the
  ideal at any rate; 512 groups, at most 1.03x).
- ``first_round_groups``: the first round oversampled, ``(groups - carried) / rate x margin``, once the running
  estimate says groups are being dropped, and only where the surplus is carried (otherwise oversampling trades
  discarded groups for rounds: 1.27x the ideal at rate 0.75 on 16 groups, simulated). ``None``: TRL's own batch.
- ``expected_refill_rounds``: what this policy costs at a given informative rate (rounds and generated groups per
  step, surplus carried over or not), simulated with ``first_round_groups`` and ``refill_groups`` themselves: the
  probe's prediction of what the trainer will log as ``dynamic_sampling/rounds``.
- ``importance_sampling_ratio``: TRL's vLLM importance-sampling correction (``GRPOTrainer._generate_and_score_completions``,
  the ``vllm_importance_sampling_mode`` branches), as a function, so that it can be applied to the trained rows
  once their old-policy log-probs are known (dynamic sampling computes them only for those rows).
"""

from __future__ import annotations

import math
from typing import Any

import torch

#: A rate estimate below this is treated as this (one informative group in 20): a round is then capped anyway.
RATE_FLOOR = 0.05
_MAX_SIMULATED_ROUNDS = 40_000  # bounds expected_refill_rounds' cost (a few seconds) when successes are rare


class InformativeRate:
    """Exponentially weighted counts of informative / generated groups (decay per step)."""

    def __init__(self, decay: float = 0.9) -> None:
        self.decay = decay
        self.informative = 0.0
        self.generated = 0.0

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
        return {"decay": self.decay, "informative": self.informative, "generated": self.generated}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.decay, self.informative, self.generated = state["decay"], state["informative"], state["generated"]


#: GRESO's margin, used when surplus informative groups are carried to the next step (they cost nothing then).
CARRY_MARGIN = 1.25
#: The margin when surplus groups would be discarded: at most ~10% of the groups generated are wasted on surplus.
DISCARD_MARGIN = 1.05


def carries_surplus(args: Any, vllm_correction: bool = False) -> bool:
    """Whether surplus informative groups are carried to the next step (``dynamic_sampling_carry_over`` > 0): the one
    rule of the trainer and the probe. Carry-over needs the old-policy log-probs TRL keeps for off-policy minibatches
    (``gradient_accumulation_steps`` not a multiple of ``steps_per_generation x num_iterations``) or for vLLM's
    importance-sampling correction (``vllm_correction``): without them TRL's ratio is 1 by construction and a carried
    group's age would go uncorrected. Off for a sequence-level ratio, GSPO-token's included (``gspo_token``: TRL's
    token level turned into sg[s_i] pi_t / sg[pi_t]): GSPO's 3e-4 clipping band would clip a one-step-old group."""
    share = float(getattr(args, "dynamic_sampling_carry_over", 0.0) or 0.0)
    sequence_ratio = getattr(args, "importance_sampling_level", "token") != "token" or getattr(
        args, "gspo_token", False
    )
    if share <= 0 or sequence_ratio:
        return False
    generate_every = args.steps_per_generation * args.num_iterations
    return args.gradient_accumulation_steps % generate_every != 0 or vllm_correction


def refill_margin(margin: float | None, carrying: bool) -> float:
    """The refill margin in force: ``margin`` when set, else ``CARRY_MARGIN`` when the surplus is carried over and
    ``DISCARD_MARGIN`` when it is discarded."""
    if margin is not None:
        return float(margin)
    return CARRY_MARGIN if carrying else DISCARD_MARGIN


def round_cap(num_groups: int, max_round_size: float) -> int:
    """The most groups one round generates: ``max_round_size`` generation batches of ``num_groups`` groups."""
    return max(math.ceil(num_groups * max_round_size - 1e-9), 1)


def first_round_groups(
    num_groups: int,
    carried: int,
    rate: float,
    margin: float,
    world_size: int,
    cap: int,
    remaining: int,
    carrying: bool,
) -> int | None:
    """Groups of a step's first round when it is oversampled: ``refill_groups(num_groups - carried, ...)``, sized
    like a refill from the running informative-rate estimate. ``None`` (TRL's own generation batch) while nothing
    has been dropped (``rate`` 1: the step stays TRL's), or when the surplus would not be carried (``carrying``
    False: oversampling would then discard groups to save rounds), or when it would not generate more than TRL's
    batch."""
    if not carrying or rate >= 1.0:
        return None
    size = refill_groups(num_groups - carried, rate, margin, world_size, cap=cap, remaining=remaining)
    return size if size > num_groups else None


def refill_groups(missing: int, rate: float, margin: float, world_size: int, cap: int, remaining: int) -> int:
    """Groups the next refill round generates: ``ceil(missing / rate x margin)``, rounded up to a multiple of
    ``world_size``, at most ``cap`` (rounded up the same way) and at most ``remaining`` (rounded down). 0: stop."""
    if missing <= 0:
        return 0
    want = math.ceil(missing / max(rate, RATE_FLOOR) * margin - 1e-9)
    cap = -(-cap // world_size) * world_size
    groups = min(-(-max(want, 1) // world_size) * world_size, cap)
    limit = remaining // world_size * world_size
    return max(min(groups, limit), 0)


def expected_refill_rounds(
    informative_frac: float,
    num_groups: int,
    max_rounds: int,
    margin: float | None = None,
    carry_share: float = 0.0,
    world_size: int = 1,
    max_round_size: float = 2.0,
    steps: int = 4000,
    seed: int = 0,
) -> dict[str, float]:
    """Mean rounds and generated groups per step (and per trained group) of the trainer's refill policy when each
    group is informative with probability ``informative_frac``, over ``steps`` consecutive simulated steps (seeded:
    the same answer every call). Each step: the carried surplus of the last step (at most ``carry_share`` x
    ``num_groups``, used once; ``carry_share`` 0: the trainer does not carry), a first round (``first_round_groups``:
    oversampled where the surplus is carried, else ``num_groups``), then ``refill_groups`` rounds sized from the rate
    (taken as known: the trainer's running estimate converges to it) until ``num_groups`` informative groups are in
    hand or the budget of ``max_rounds`` generation batches is spent. ``margin`` None: ``refill_margin``'s default."""
    p = min(max(float(informative_frac), 0.0), 1.0)
    generator = torch.Generator().manual_seed(seed)
    carrying = carry_share > 0
    margin = refill_margin(margin, carrying)
    cap = round_cap(num_groups, max_round_size)
    budget = max_rounds * num_groups
    carry_limit = int(carry_share * num_groups)

    def informative(n: int) -> int:
        return int(torch.binomial(torch.tensor(float(n)), torch.tensor(p), generator=generator))

    rounds_total, generated_total, trained_total, carried, done = 0, 0, 0, 0, 0
    while done < steps and rounds_total < _MAX_SIMULATED_ROUNDS:  # a rare-success rate stops early, on whole steps
        done += 1
        first = first_round_groups(num_groups, carried, p, margin, world_size, cap, budget, carrying) or num_groups
        kept = carried + informative(first)
        rounds, generated = 1, first
        while kept < num_groups:
            size = refill_groups(num_groups - kept, p, margin, world_size, cap=cap, remaining=budget - generated)
            if size == 0:
                break
            kept += informative(size)
            rounds, generated = rounds + 1, generated + size
        carried = min(max(kept - num_groups, 0), carry_limit)
        rounds_total, generated_total = rounds_total + rounds, generated_total + generated
        trained_total += min(kept, num_groups)
    return {
        "rounds": rounds_total / done,
        "generation_batches": generated_total / (done * num_groups),
        "generated_per_trained_group": generated_total / max(trained_total, 1),
    }


def importance_sampling_ratio(
    old_logps: torch.Tensor,
    sampling_logps: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    clip_min: float | None,
    clip_max: float | None,
) -> torch.Tensor:
    """TRL's vLLM importance-sampling ratio pi_old / pi_vllm (``token_*``: per token, ``sequence_*``: per sequence,
    ``*_truncate``: clamped to [clip_min, clip_max], ``*_mask``: zeroed outside it). NaN sampling log-probs count as
    no correction (difference 0), as in TRL."""
    diff = torch.nan_to_num((old_logps - sampling_logps) * mask, nan=0.0)
    if mode in ("sequence_mask", "sequence_truncate"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode in ("sequence_truncate", "token_truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    if mode in ("sequence_mask", "token_mask"):
        low = clip_min if clip_min is not None else -math.inf
        high = clip_max if clip_max is not None else math.inf
        return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)
    raise ValueError(
        f"Unknown vllm_importance_sampling_mode={mode!r}: use 'token_truncate', 'token_mask', 'sequence_truncate' or "
        "'sequence_mask'."
    )
