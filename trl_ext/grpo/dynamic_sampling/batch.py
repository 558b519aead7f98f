"""The trained batch of dynamic sampling: the kept groups of several rounds joined into one generation batch with the
shapes TRL's loss expects.

Rows are regrouped by the per-sample structure of whatever TRL's ``_generate_and_score_completions`` returned, never
from a list of known keys, so new TRL outputs and multimodal tensors (split per sample as TRL's ``_prepare_inputs``
does) survive. A group's completions may sit on two processes: one ``gather_object`` per step. Advantages are TRL's,
per round, except under ``scale_rewards="batch"``, whose std is that of the trained batch. Fillers get a zero loss
mask and a zero advantage: they change nothing in the gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from accelerate.utils import gather_object, send_to_device
from trl.trainer.utils import nanstd, pad, split_pixel_values_by_grid, unsplit_pixel_values_by_grid

from trl_ext.scoring import combine_rewards

#: Keys padded with the tokenizer's pad token (everything else is padded with 0: masked positions).
TOKEN_KEYS = ("prompt_ids", "completion_ids")


@dataclass
class Round:
    """One generation round: TRL's output on this process, the rewards its ``_calculate_rewards`` returned (every
    process's rows, global order), the dynamic-sampling metric and which groups it keeps."""

    output: dict[str, Any]
    rewards_per_func: torch.Tensor  # [global rows, functions], NaN where a function returned None
    metric: torch.Tensor  # [global rows] what decides informativeness (DAPO Eq. 11's accuracy)
    informative: torch.Tensor  # [groups] bool
    seconds: float
    indices: list[int] | None = None  # training-set index of each group's prompt (rounds drawn from the stream)

    @property
    def num_rows(self) -> int:
        return int(self.metric.numel())


def select_groups(rounds: list[Round], num_groups: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(round, group) pairs to train: the first ``num_groups`` informative groups in generation order, and the
    fillers that complete the batch when there were too few (the last uninformative groups generated)."""
    informative, uninformative = [], []
    for r, round_ in enumerate(rounds):
        for g, keep in enumerate(round_.informative.tolist()):
            (informative if keep else uninformative).append((r, g))
    chosen = informative[:num_groups]
    missing = num_groups - len(chosen)
    return chosen, uninformative[len(uninformative) - missing :] if missing else []


def _sample_rows(output: dict[str, Any], rows: int) -> tuple[list[dict[str, Any]], set[str]]:
    """``output`` cut into ``rows`` per-sample dicts (TRL's multimodal split first; batch-level scalars such as
    ``num_items_in_batch`` left out), and the keys TRL's split turned into per-sample lists."""
    split = split_pixel_values_by_grid(output)
    per_row = {}
    for key, value in split.items():
        if value is None or isinstance(value, torch.Tensor) and value.ndim == 0:
            continue
        if len(value) != rows:
            raise ValueError(
                f"Dynamic sampling cannot regroup TRL's generation output {key!r}: its first dimension is {len(value)}, "
                f"not the round's {rows} rows, and TRL's split_pixel_values_by_grid did not split it per sample. "
                "Set dynamic_sampling=False for this model, or report the key with your TRL version."
            )
        per_row[key] = value
    lists = {key for key, value in per_row.items() if isinstance(value, list)}
    return [{key: value[i] for key, value in per_row.items()} for i in range(rows)], lists


def column_layout(rounds: list[Round], lists: set[str]) -> dict[str, str]:
    """Where each per-row tensor's columns sit: ``prompt`` (left-padded), ``completion`` (right-padded), ``both`` or
    ``fixed`` (never padded); a key is sequence-aligned when its width matches the same part in every round."""
    kinds: dict[str, set[str]] = {}
    for round_ in rounds:
        prompt, completion = round_.output["prompt_ids"].size(1), round_.output["completion_ids"].size(1)
        for key, value in round_.output.items():
            if key in lists or not isinstance(value, torch.Tensor) or value.ndim < 2:
                kinds[key] = set()
                continue
            width = value.size(1)
            match = {
                k
                for k, w in (("prompt", prompt), ("completion", completion), ("both", prompt + completion))
                if w == width
            }
            kinds[key] = kinds.get(key, match) & match
    layout = {}
    for key, match in kinds.items():
        if match == {"prompt", "completion"}:  # prompt and completion equally wide in every round: go by the name
            match = {"prompt" if key.startswith("prompt") else "completion"}
        layout[key] = match.pop() if len(match) == 1 else "fixed"
    return layout


def _pad_beyond_first_dim(values: list[Any]) -> list[Any]:
    """Per-sample entries of TRL's split (one tensor per sample, joined by ``torch.cat`` along dim 0) zero-padded in
    their other dims to the largest, as a processor pads one batch: LLaVA-NeXT's ``[images, patches, C, H, W]`` pixel
    values of two rounds may hold different patch counts (the model reads the real count from ``image_sizes``)."""
    if not all(isinstance(v, torch.Tensor) for v in values) or len({v.shape[1:] for v in values}) <= 1:
        return values
    target = [max(v.size(d) for v in values) for d in range(1, values[0].ndim)]
    # F.pad takes (before, after) pairs from the last dimension backwards
    pads = [[x for n, t in zip(v.shape[:0:-1], target[::-1], strict=True) for x in (0, t - n)] for v in values]
    return [F.pad(v, widths) for v, widths in zip(values, pads, strict=True)]


def _stack(
    samples: list[dict[str, Any]], prompt_widths: list[int], layout: dict[str, str], lists: set[str], pad_id: int
) -> dict[str, Any]:
    """Per-sample dicts (with their round's prompt width) stacked into one batch, padded by TRL's ``pad``."""
    batch: dict[str, Any] = {}
    for key in samples[0]:
        values = [s[key] for s in samples]
        kind, fill = layout.get(key, "fixed"), pad_id if key in TOKEN_KEYS else 0
        if key in lists:
            batch[key] = _pad_beyond_first_dim(values)
        elif not isinstance(values[0], torch.Tensor):
            batch[key] = values
        elif kind == "both":  # the prompt's columns padded on the left, the completion's on the right
            prompts = pad([v[:p] for v, p in zip(values, prompt_widths, strict=True)], fill, "left")
            completions = pad([v[p:] for v, p in zip(values, prompt_widths, strict=True)], fill, "right")
            batch[key] = torch.cat([prompts, completions], dim=1)
        elif kind == "fixed":
            batch[key] = torch.stack(values)
        else:
            batch[key] = pad(values, fill, "left" if kind == "prompt" else "right")
    return batch


def batch_scaled_advantages(
    rewards_per_func: torch.Tensor, weights: torch.Tensor, num_generations: int
) -> torch.Tensor:
    """``scale_rewards="batch"`` over the trained groups: (r - group mean) / (std of the trained batch + 1e-4), r being
    TRL's weighted reward (NaN where no function scored) and the std TRL's ``nanstd``; unscorable rows get 0."""
    rewards = combine_rewards(rewards_per_func, weights.cpu())
    centered = rewards - torch.nanmean(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations)
    scale = nanstd(rewards) if rewards.numel() > 1 else torch.zeros(())
    return torch.nan_to_num(centered / (scale + 1e-4), nan=0.0)


def assemble(
    rounds: list[Round],
    chosen: list[tuple[int, int]],
    fillers: list[tuple[int, int]],
    accelerator: Any,
    num_generations: int,
    pad_id: int,
    batch_weights: torch.Tensor | None = None,
) -> dict[str, Any]:
    """This process's slice of the trained batch: the rows of the ``chosen`` groups, then the ``fillers``', in global
    order (module docstring). ``batch_weights``: the reward weights, when advantages are scaled over the batch."""
    world, rank = accelerator.num_processes, accelerator.process_index
    groups = chosen + fillers
    filler_from = len(chosen) * num_generations
    wanted = {}  # (round, global row) -> position in the trained batch
    for position, (r, g) in enumerate(groups):
        for i in range(num_generations):
            wanted[(r, g * num_generations + i)] = position * num_generations + i
    local, lists = [], set()  # (position, sample, prompt width) of the wanted rows this process holds
    for r, round_ in enumerate(rounds):
        rows = round_.num_rows // world
        samples, round_lists = _sample_rows(round_.output, rows)
        lists |= round_lists
        width = round_.output["prompt_ids"].size(1)
        for i, sample in enumerate(samples):
            position = wanted.get((r, rank * rows + i))
            if position is not None:
                local.append((position, sample, width))
    if world > 1:
        local = gather_object([(p, send_to_device(s, "cpu"), w) for p, s, w in local])
    per_process = len(groups) * num_generations // world
    mine = sorted((entry for entry in local if entry[0] // per_process == rank), key=lambda entry: entry[0])
    positions = [p for p, _, _ in mine]
    layout = column_layout(rounds, lists)
    batch = _stack([s for _, s, _ in mine], [w for _, _, w in mine], layout, lists, pad_id)
    batch = send_to_device(batch, accelerator.device)
    if batch_weights is not None:
        picked = torch.cat(
            [rounds[r].rewards_per_func[g * num_generations : (g + 1) * num_generations] for r, g in groups]
        )
        batch["advantages"] = batch_scaled_advantages(picked, batch_weights, num_generations)[positions].to(
            batch["advantages"].device, batch["advantages"].dtype
        )
    filler = torch.tensor([p >= filler_from for p in positions], device=accelerator.device)
    if filler.any():
        batch["advantages"] = batch["advantages"].masked_fill(filler, 0.0)
        batch["completion_mask"] = batch["completion_mask"].masked_fill(filler.unsqueeze(1), 0)
    loss_mask = batch["completion_mask"] if "tool_mask" not in batch else batch["completion_mask"] * batch["tool_mask"]
    batch["num_items_in_batch"] = accelerator.gather(loss_mask.sum()).sum()
    return unsplit_pixel_values_by_grid(batch)
