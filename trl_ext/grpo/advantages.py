"""GRPO's advantages over the groups dynamic sampling keeps, as TRL's ``GRPOTrainer`` computes them over one round.

Dynamic sampling (DAPO, arXiv 2503.14476, section 3.2) trains a batch joined from the kept groups of several rounds.
TRL computes advantages inline in ``_generate_and_score_completions`` (the block is the same in trl 1.12 and 1.16;
TRL has no function for it), so this module mirrors that block once, calling TRL's ``nanstd``:

- ``multi_objective_aggregation="sum_then_normalize"`` (TRL's default; GRPO, arXiv 2402.03300,
  section 4.1.2): r_i = sum_k w_k r_{i,k} over the functions that scored completion i (``combine_rewards``),
  A_i = (r_i - mean(group)) / (std + 1e-4), the std that of the group (``scale_rewards="group"``), of the whole batch
  (``"batch"``), or no division (``"none"``; Dr. GRPO, arXiv 2503.20783);
- ``"normalize_then_sum"`` (GDPO, arXiv 2601.05242): each function's rewards normalized within the group,
  z_{i,k} = (r_{i,k} - mean_k) / (std_k + 1e-4), summed with the weights, r_i = sum_k w_k z_{i,k}, then
  A_i = (r_i - mean(batch)) / (std(batch) + 1e-4); ``scale_rewards`` is not read.

Means and stds skip NaN (a function's None); a completion no function scored has advantage 0. Zero-weight filler
rows (``fillers``) are left out of every mean and std and get advantage 0. Under ``"group"`` / ``"none"`` with
``sum_then_normalize`` a group's advantages depend on that group alone, so TRL's per-round values are already those of
the trained batch (``needs_recompute``).
"""

from __future__ import annotations

import torch
from trl.trainer.utils import nanstd

from trl_ext.scoring import combine_rewards

SCALE_REWARDS = ("group", "batch", "none")
AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
EPSILON = 1e-4  # TRL's: std + 1e-4 in every division


def needs_recompute(scale_rewards: str, multi_objective_aggregation: str) -> bool:
    """Whether a batch joined from several rounds needs ``kept_group_advantages``: its statistics span the batch
    (``scale_rewards="batch"``, or ``normalize_then_sum``); otherwise each group's advantages are its own."""
    _check(scale_rewards, multi_objective_aggregation)
    return scale_rewards == "batch" or multi_objective_aggregation == "normalize_then_sum"


def kept_group_advantages(
    rewards_per_func: torch.Tensor,
    weights: torch.Tensor,
    num_generations: int,
    scale_rewards: str,
    multi_objective_aggregation: str,
    fillers: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[rows]`` advantages of the trained batch, TRL's on an all-informative round bit for bit (module docstring).

    ``rewards_per_func``: ``[rows, functions]`` (NaN where a function returned None), whole groups of
    ``num_generations`` rows in order; ``weights``: TRL's ``reward_weights``; ``fillers``: ``[rows]`` bool, the
    zero-weight filler rows, kept out of the statistics (advantage 0)."""
    _check(scale_rewards, multi_objective_aggregation)
    rows, num_funcs = rewards_per_func.shape
    if rows % num_generations:
        raise ValueError(f"{rows} rows are not whole groups of num_generations={num_generations}.")
    values = rewards_per_func.detach().cpu()
    weights = weights.detach().cpu()
    if fillers is not None:
        values = values.masked_fill(fillers.cpu().view(-1, 1), torch.nan)  # NaN: out of every mean and std
    unscorable = torch.isnan(values).all(dim=1)
    if multi_objective_aggregation == "sum_then_normalize":
        rewards = combine_rewards(values, weights)
        grouped = rewards.view(-1, num_generations)
        mean = torch.nanmean(grouped, dim=1).repeat_interleave(num_generations, dim=0)
        if scale_rewards == "batch":
            std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        elif num_generations > 1:
            std = nanstd(grouped, dim=1).repeat_interleave(num_generations, dim=0)
        else:
            std = torch.zeros_like(rewards)
        advantages = rewards - mean
        if scale_rewards != "none":
            advantages = advantages / (std + EPSILON)
    else:
        grouped = values.view(-1, num_generations, num_funcs)
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = nanstd(grouped, dim=1, keepdim=True) if num_generations > 1 else torch.zeros_like(mean_k)
        normalized = ((grouped - mean_k) / (std_k + EPSILON)).view(-1, num_funcs)
        rewards = combine_rewards(normalized, weights)
        # TRL's nansum: a scored completion whose z-scores are all NaN (alone in its group to be scored) sums to 0
        rewards[torch.isnan(rewards)] = 0.0
        rewards[unscorable] = torch.nan
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        advantages = (rewards - torch.nanmean(rewards)) / (std + EPSILON)
    return torch.nan_to_num(advantages, nan=0.0)


def _check(scale_rewards: str, multi_objective_aggregation: str) -> None:
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards={scale_rewards!r}: must be one of {SCALE_REWARDS} (TRL's values).")
    if multi_objective_aggregation not in AGGREGATIONS:
        raise ValueError(
            f"multi_objective_aggregation={multi_objective_aggregation!r}: must be one of {AGGREGATIONS} (TRL's values)."
        )
