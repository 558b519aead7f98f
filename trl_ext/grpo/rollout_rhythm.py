"""How often a rollout happens, in optimizer steps and in logged rows, and the warning that tells a Python user.

DAPO trains 16 optimizer steps per rollout (section 4.1), GSPO 4 (section 5.1); TRL's default is 1. The reward
figures are computed per rollout, so only logged rows whose window holds one carry them: the trainers warn once
(``rhythm_warning``) and log ``rollout`` on every training row, so that rows of one rollout read as such, not as
missing data.
"""

from __future__ import annotations

import math
from typing import Any


def generate_every(args: Any) -> int:
    """Micro-steps between two rollouts: TRL's ``steps_per_generation * num_iterations``."""
    return args.steps_per_generation * args.num_iterations


def steps_per_rollout(args: Any) -> float:
    """Optimizer steps trained on one rollout (1 with TRL's default rhythm; DAPOConfig: ``num_minibatches``, 16)."""
    return generate_every(args) / args.gradient_accumulation_steps


def logging_interval(args: Any) -> int | None:
    """Optimizer steps between logged rows (a fractional ``logging_steps`` is a share of ``max_steps``, as in
    transformers' ``Trainer``); None when rows are not logged by steps."""
    if str(getattr(args, "logging_strategy", "steps")).split(".")[-1].lower() != "steps":
        return None
    steps = args.logging_steps
    if steps < 1:
        return math.ceil(args.max_steps * steps) if args.max_steps > 0 else None
    return int(steps)


def rows_with_rollout(args: Any, logging_steps: int) -> tuple[int, int]:
    """``(k, n)``: ``k`` of every ``n`` logged rows hold a rollout (and so the reward figures); a run shorter than one
    period counts its own ``max_steps // logging_steps`` rows. Row ``r`` covers micro-steps ``[r w, (r + 1) w)``,
    ``w = logging_steps * gradient_accumulation_steps``; rollouts fall on multiples of ``g = generate_every(args)``,
    so the pattern repeats every ``lcm(w, g) / w`` rows."""
    window = logging_steps * args.gradient_accumulation_steps
    every = generate_every(args)
    rows = math.lcm(window, every) // window
    if args.max_steps > 0:
        rows = min(rows, max(1, args.max_steps // logging_steps))
    with_rollout = sum(1 for r in range(rows) if (-(r * window) % every) < window)  # next multiple of g in the row
    return with_rollout, rows


def rollout_index(micro_steps_done: int, every: int) -> int:
    """1-based index of the rollout the latest micro-step trained on (0 before the first)."""
    return 0 if micro_steps_done <= 0 else (micro_steps_done - 1) // every + 1


def rhythm_warning(args: Any) -> str | None:
    """The construction-time warning when the config trains several optimizer steps per rollout (a rhythm other than
    TRL's default) and some logged rows will therefore carry no reward figures; None otherwise."""
    per_rollout = steps_per_rollout(args)
    interval = logging_interval(args)
    if per_rollout <= 1 or args.steps_per_generation == args.gradient_accumulation_steps or interval is None:
        return None
    with_rollout, rows = rows_with_rollout(args, interval)
    if with_rollout == rows:
        return None
    source = f"steps_per_generation={args.steps_per_generation}"
    if getattr(args, "num_minibatches", None) is not None:
        source = f"num_minibatches={args.num_minibatches}, so {source}"
    if args.num_iterations > 1:
        source += f" x num_iterations={args.num_iterations}"
    runs = ""
    if args.max_steps > 0:
        rollouts = math.ceil(args.max_steps * args.gradient_accumulation_steps / generate_every(args))
        runs = f" With max_steps={args.max_steps} the run generates {rollouts} rollout(s)."
    one_per_step = "steps_per_generation=gradient_accumulation_steps"
    if getattr(args, "num_minibatches", None) is not None:
        one_per_step = f"num_minibatches=1 (or {one_per_step})"
    return (
        f"{type(args).__name__} trains {per_rollout:g} optimizer steps per rollout ({source}); TRL's default is 1. "
        f"The reward, rewards/*, completions/* and dynamic_sampling/* figures are computed once per rollout, so with "
        f"logging_steps={args.logging_steps} they appear on {with_rollout} of every {rows} logged rows; the others "
        "carry the loss, clip ratios and entropy of the updates on that rollout, and 'rollout' (the index of the "
        f"rollout they trained on).{runs} For the figures on every row set logging_steps to a multiple of "
        f"{per_rollout:g}; for one rollout per optimizer step set {one_per_step}."
    )
