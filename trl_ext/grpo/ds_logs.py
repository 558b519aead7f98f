"""Logs that describe what was trained, when dynamic sampling generated more than it trains.

TRL logs once per ``_generate_and_score_completions`` call: ``reward``, ``reward_std``, ``frac_reward_zero_std``,
``rewards/<f>/*``, ``completions/*`` and a completions table. While a step's rounds run, those go to scratch buffers
(``scratch_logs``); ``merge_round_logs`` then writes one entry per step into TRL's buffers, computed with TRL's
definitions (``describe``) over the assembled batch (fillers included, with zero weight), and logs what was
generated as ``dynamic_sampling/generated_<metric>``. Other per-call metrics (e.g. the reward guard's counts) are
kept per round.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from trl_ext.grpo.ds_sampler import Round
from trl_ext.grpo.group_filter import nanstd


def scratch_logs(logs: dict[str, Any]) -> dict[str, Any]:
    """Unbounded buffers with the keys of TRL's completions table (its deques keep only one generation batch)."""
    return {key: defaultdict(list) if isinstance(value, dict) else [] for key, value in logs.items()}


def pick(entries: list, index: list[int] | None, total: int) -> list:
    """The entries of the selected rows when ``entries`` holds one per generated row; otherwise all of them."""
    if index is None or len(entries) != total:
        return list(entries)
    return [entries[i] for i in index]


def describe(
    per_func: torch.Tensor,
    lengths: torch.Tensor,
    truncated: torch.Tensor,
    names: list[str],
    weights: torch.Tensor,
    num_generations: int,
) -> dict[str, float]:
    """TRL's per-batch metrics (``reward``, ``reward_std``, ``frac_reward_zero_std``, ``rewards/<f>/*``,
    ``completions/*``) for the given rows, with TRL's definitions. ``frac_reward_zero_std`` is the fraction of
    rows whose group's rewards have zero std."""
    out: dict[str, float] = {}
    for i, name in enumerate(names):
        out[f"rewards/{name}/mean"] = torch.nanmean(per_func[:, i]).item()
        out[f"rewards/{name}/std"] = nanstd(per_func[:, i]).item()
    rewards = (per_func * weights.to(per_func.dtype).unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
    out["reward"] = torch.nanmean(rewards).item()
    out["reward_std"] = nanstd(rewards).item()
    group_std = nanstd(rewards.view(-1, num_generations), dim=1)
    out["frac_reward_zero_std"] = torch.isclose(group_std, torch.zeros_like(group_std)).float().mean().item()
    lengths = lengths.float()
    out["completions/mean_length"] = lengths.mean().item()
    out["completions/min_length"] = lengths.min().item()
    out["completions/max_length"] = lengths.max().item()
    out["completions/clipped_ratio"] = truncated.float().mean().item()
    terminated = lengths[~truncated.bool()]
    if terminated.numel() == 0:
        terminated = torch.zeros(1)
    out["completions/mean_terminated_length"] = terminated.mean().item()
    out["completions/min_terminated_length"] = terminated.min().item()
    out["completions/max_terminated_length"] = terminated.max().item()
    return out


def carried_log_entries(rounds: list[Round], selected: list[tuple[int, int]], round_logs: dict) -> dict[str, Any]:
    """The completions-table entries of the ``selected`` (round, global row) pairs of the fresh rounds (TRL logged
    one per fresh row, in round order): kept with carried groups, logged with the step that trains them."""
    offsets = [sum(r.num_rows for r in rounds[:i]) for i in range(len(rounds))]
    base = sum(r.num_rows for r in rounds if r.replicated)
    picked = [offsets[r] + i - base for r, i in selected]
    total = sum(r.num_rows for r in rounds if not r.replicated)
    entries: dict[str, Any] = {}
    for key, value in round_logs.items():
        if isinstance(value, dict):
            entries[key] = {c: pick(v, picked, total) for c, v in value.items() if len(v) == total}
        elif len(value) == total and key != "advantages":
            entries[key] = pick(value, picked, total)
    return entries


def merge_round_logs(
    metrics: dict[str, list],
    logs: dict[str, Any],
    scratch: tuple[dict[str, list], dict[str, Any]],
    rounds: list[Round],
    rows: torch.Tensor | None,
    advantages: torch.Tensor | None,
    names: list[str],
    weights: torch.Tensor,
    num_generations: int,
) -> None:
    """Move what TRL logged during the rounds (``scratch``) into TRL's buffers ``metrics`` / ``logs``: the per-batch
    metrics and the completions table describe the trained batch (global ``rows`` of the concatenated rounds;
    ``None``: the one round as is); what was generated is logged as ``dynamic_sampling/generated_<metric>``."""
    round_metrics, round_logs = scratch

    def summary(selected: list[Round], index: torch.Tensor | None = None) -> dict[str, float]:
        per_func, lengths, truncated = (
            torch.cat([getattr(r, name) for r in selected]) for name in ("rewards_per_func", "lengths", "truncated")
        )
        if index is not None:
            per_func, lengths, truncated = per_func[index], lengths[index], truncated[index]
        return describe(per_func, lengths, truncated, names, weights, num_generations)

    carried = [r for r in rounds if r.replicated and r.log_entries is not None]
    if carried:  # the carried rows' table entries first, as their rows come first
        entries = carried[0].log_entries
        round_logs = {
            key: (
                {c: list(entries.get(key, {}).get(c, [])) + list(v) for c, v in value.items()}
                if isinstance(value, dict)
                else list(entries.get(key, [])) + list(value)
            )
            for key, value in round_logs.items()
        }
    for key, value in summary([r for r in rounds if not r.replicated]).items():
        metrics[f"dynamic_sampling/generated_{key}"].append(value)
    trained = None if rows is None else summary(rounds, rows.cpu())
    for key, values in round_metrics.items():
        if key == "num_tokens":  # TRL assigns the running total
            metrics[key] = list(values[-1:])
        elif trained is not None and key in trained:
            metrics[key].append(trained[key])
        else:
            metrics[key].extend(values)

    total = sum(r.num_rows for r in rounds)
    index = None if rows is None else rows.cpu().tolist()
    for key, value in round_logs.items():
        if isinstance(value, dict):
            for column, entries in value.items():
                logs[key][column].extend(pick(entries, index, total))
        elif key == "advantages" and advantages is not None:
            logs[key].extend(advantages.tolist())
        else:
            logs[key].extend(pick(value, index, total))


def merge_plain_logs(
    metrics: dict[str, list], logs: dict[str, Any], scratch: tuple[dict[str, list], dict[str, Any]]
) -> None:
    """Move one round's logs, as TRL wrote them, from ``scratch`` into TRL's buffers."""
    round_metrics, round_logs = scratch
    for key, values in round_metrics.items():
        if key == "num_tokens":
            metrics[key] = list(values[-1:])
        else:
            metrics[key].extend(values)
    for key, value in round_logs.items():
        if isinstance(value, dict):
            for column, entries in value.items():
                logs[key][column].extend(entries)
        else:
            logs[key].extend(value)
