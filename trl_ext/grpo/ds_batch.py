"""Dynamic sampling's batch assembly: the kept groups of several rounds joined into one generation batch with the
shapes TRL's loss expects, moving only the selected rows between processes.

A group's completions may sit on two processes, so the selected rows are gathered in global order and every process
takes its own slice: shapes are equal on every process. Rows of a carried round (``Round.replicated``) are on every
process already. Log-probs still deferred (placeholders: ``Round.deferred``) are not moved at all; they are computed
for the trained rows afterwards (``trl_ext.grpo.deferred_logps``). Advantages are recomputed on the assembled batch
with TRL's formula (``group_filter.group_advantages``); fillers get a zero loss mask and a zero advantage.
"""

from __future__ import annotations

from typing import Any

import torch
from accelerate.utils import pad_across_processes

from trl_ext.grpo.ds_sampler import Round
from trl_ext.grpo.group_filter import group_advantages

# How each per-row tensor of TRL's generation output is padded when rows of different widths are joined.
LEFT_PADDED = {"prompt_ids", "prompt_mask"}
RIGHT_PADDED = {
    "completion_ids",
    "completion_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
    "tool_mask",
}
PER_ROW = {"advantages"}
SCALARS = {"num_items_in_batch"}


def pad_width(tensor: torch.Tensor, width: int, value: float, left: bool) -> torch.Tensor:
    """``tensor`` padded with ``value`` to ``width`` columns (on the left for prompts)."""
    missing = width - tensor.size(1)
    if missing <= 0:
        return tensor
    pad = tensor.new_full((tensor.size(0), missing, *tensor.shape[2:]), value)
    return torch.cat([pad, tensor] if left else [tensor, pad], dim=1)


def deferred_keys(rounds: list[Round]) -> set[str]:
    """Per-row keys whose values in the fresh rounds are placeholders (deferred log-probs): not moved."""
    deferred = frozenset().union(*(r.deferred for r in rounds if not r.replicated))
    skip = set()
    if "old" in deferred:
        skip |= {"old_per_token_logps", "importance_sampling_ratio"}
    if "ref" in deferred:
        skip.add("ref_per_token_logps")
    return skip


def gather_rows(
    rounds: list[Round], selected: list[tuple[int, int]], skip: set[str], accelerator: Any, pad_id: int
) -> tuple[dict[str, torch.Tensor], int]:
    """The per-row tensors of ``selected`` (round, global row) pairs, in that order, on every process, and the bytes
    this process received.

    Round k's global row i lives on process i // (rows_k / world) at local index i % (rows_k / world); each process
    contributes the selected rows it holds (padded to the same count and width), one all-gather per key. Keys in
    ``skip`` are not moved: zeros for fresh rows, the stored values for carried rows."""
    world, rank = accelerator.num_processes, accelerator.process_index
    fresh = [n for n, (r, _) in enumerate(selected) if not rounds[r].replicated]
    carried = [n for n, (r, _) in enumerate(selected) if rounds[r].replicated]
    owner = [selected[n][1] // (rounds[selected[n][0]].num_rows // world) for n in fresh]
    mine = [
        (selected[n][0], selected[n][1] % (rounds[selected[n][0]].num_rows // world))
        for n, o in zip(fresh, owner, strict=True)
        if o == rank
    ]
    slots = max([owner.count(k) for k in range(world)] + [0])
    seen = [0] * world
    order = []  # position in the gathered tensor of each fresh selected row
    for o in owner:
        order.append(o * slots + seen[o])
        seen[o] += 1
    order_t = torch.tensor(order, device=accelerator.device, dtype=torch.long)
    # position in torch.cat([fresh rows, carried rows]) of each selected row
    perm = torch.empty(len(selected), dtype=torch.long)
    perm[fresh] = torch.arange(len(fresh))
    perm[carried] = torch.arange(len(carried)) + len(fresh)
    perm = perm.to(accelerator.device)
    first_fresh = next(r for r in rounds if not r.replicated)
    out: dict[str, torch.Tensor] = {}
    moved = 0
    for key, template in first_fresh.output.items():
        if key in SCALARS or key in PER_ROW:
            continue
        pad_value = pad_id if key.endswith("_ids") else (1.0 if key == "tool_mask" else 0)
        left = key in LEFT_PADDED
        wide = template.dim() > 1
        width = max(r.output[key].size(1) for r in rounds) if wide else 0

        def pad(t: torch.Tensor, to: int, pad_value=pad_value, left=left, wide=wide) -> torch.Tensor:
            return pad_width(t, to, pad_value, left) if wide else t

        parts = []
        if fresh and key in skip:
            parts.append(torch.zeros(len(fresh), *template.shape[1:], dtype=template.dtype, device=template.device))
        elif fresh:
            rows = [pad(rounds[r].output[key], width)[i : i + 1] for r, i in mine]
            filler = torch.full_like(pad(template[:1], width), pad_value)
            local = torch.cat(rows + [filler] * (slots - len(rows)))
            if world > 1:
                if wide:
                    local = pad_across_processes(local, dim=1, pad_index=pad_value, pad_first=left)
                local = accelerator.gather(local)
            moved += local.numel() * local.element_size()
            parts.append(local.index_select(0, order_t))
        if carried:
            parts.append(
                torch.cat([rounds[selected[n][0]].output[key][selected[n][1] : selected[n][1] + 1] for n in carried])
            )
        if wide:
            full = max(p.size(1) for p in parts)
            parts = [pad(p, full) for p in parts]
        out[key] = torch.cat(parts).index_select(0, perm)
    return out, moved


def global_rows(rounds: list[Round], pairs: list[tuple[int, int]], num_generations: int) -> list[tuple[int, int]]:
    """(round, global row) of every completion of the (round, group) ``pairs``, group by group."""
    return [(r, g * num_generations + j) for r, g in pairs for j in range(num_generations)]


def assemble(
    rounds: list[Round],
    chosen: list[tuple[int, int]],
    fillers: list[tuple[int, int]],
    local_rows: int,
    accelerator: Any,
    pad_id: int,
    reward_weights: torch.Tensor,
    num_generations: int,
    scale_rewards: Any,
    multi_objective_aggregation: str,
) -> tuple[dict, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Join the chosen groups (then the fillers) of all rounds into one generation batch with the first round's
    shapes; advantages are recomputed on that batch. Returns this process's slice, the selected global rows of the
    concatenated rounds, their advantages, which local rows still need their deferred log-probs (the fresh ones; a
    carried row keeps those of the policy that generated it) and the bytes this process received."""
    keys = list(rounds[-1].output.keys())
    unknown = [k for k in keys if k not in LEFT_PADDED | RIGHT_PADDED | PER_ROW | SCALARS]
    if unknown:
        raise NotImplementedError(
            f"Dynamic sampling cannot regroup the generation outputs {unknown} (multimodal or tool inputs). "
            "Set dynamic_sampling=False for this dataset."
        )

    # 1-2. The selected global rows of the concatenated rounds (informative groups in round order, carried ones
    #      first, then fillers), and only those rows moved between processes.
    offsets = [sum(r.num_rows for r in rounds[:i]) for i in range(len(rounds))]
    selected = global_rows(rounds, chosen + fillers, num_generations)
    rows = torch.tensor([offsets[r] + i for r, i in selected], device=accelerator.device)
    batch, moved = gather_rows(rounds, selected, deferred_keys(rounds), accelerator, pad_id)
    fresh = torch.tensor([not rounds[r].replicated for r, _ in selected], dtype=torch.bool)
    width = batch["completion_ids"].size(1)
    for key in RIGHT_PADDED & batch.keys():
        if batch[key].dim() > 1 and batch[key].size(1) > 1:
            batch[key] = pad_width(batch[key], width, 1.0 if key == "tool_mask" else 0, left=False)[:, :width]

    # 3. Advantages of the batch that is trained: TRL's formula (scale_rewards, multi_objective_aggregation)
    #    over the chosen rows' stored rewards, with this batch's group / batch statistics. Fillers: zero.
    num_chosen = len(chosen) * num_generations
    per_func = torch.cat([r.rewards_per_func for r in rounds])[rows.cpu()]
    advantages = torch.zeros(rows.numel(), dtype=per_func.dtype)
    if num_chosen:
        advantages[:num_chosen] = group_advantages(
            per_func[:num_chosen],
            reward_weights.cpu(),
            num_generations,
            scale_rewards=scale_rewards,
            multi_objective_aggregation=multi_objective_aggregation,
        )
    batch["advantages"] = advantages.to(accelerator.device)

    # 4. Fillers carry no signal: zero loss mask (and so no token in the normalizer).
    if fillers:
        batch["completion_mask"][num_chosen:] = 0
    loss_mask = batch["completion_mask"] * batch["tool_mask"] if "tool_mask" in batch else batch["completion_mask"]
    num_items_in_batch = loss_mask.sum()

    # 5. This process's slice, trimmed of columns that are padding on every local row.
    start = accelerator.process_index * local_rows
    local = {key: value[start : start + local_rows] for key, value in batch.items()}
    prompt_cols = local["prompt_mask"].any(dim=0).nonzero()
    first = int(prompt_cols.min()) if prompt_cols.numel() else 0
    completion_cols = local["completion_mask"].any(dim=0).nonzero()
    last = int(completion_cols.max()) + 1 if completion_cols.numel() else 1
    for key in LEFT_PADDED & local.keys():
        local[key] = local[key][:, first:]
    for key in RIGHT_PADDED & local.keys():
        if local[key].dim() > 1 and local[key].size(1) > 1:
            local[key] = local[key][:, :last]
    local["num_items_in_batch"] = num_items_in_batch
    return local, rows, advantages, fresh[start : start + local_rows], moved
