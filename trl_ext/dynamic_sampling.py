"""DAPO dynamic sampling (arXiv 2503.14476, section 3.2, Eq. 11) as a mixin over TRL's ``GRPOTrainer``.

What it does, relative to the paper: after TRL generates and scores a generation batch, groups whose rewards are all
equal (zero advantage, see ``trl_ext.group_filter``) are dropped, and completions are generated for fresh training
prompts until the generation batch again holds as many informative groups as it was meant to hold. Extra informative
groups of the last round are discarded (not buffered: a buffered group would be off-policy at the next step). When
``dynamic_sampling_max_rounds`` is reached first, the missing groups are filled with uninformative ones whose loss
mask and advantage are zeroed, so they change nothing in the gradient, and ``num_items_in_batch`` (DAPO's token
normalizer) counts only the tokens that are trained on.

How it plugs into TRL 1.12 without copying TRL code (see DESIGN.md, "Override stable hooks, post-process super()"):

- ``_calculate_rewards`` is wrapped to remember the rewards it returns (already gathered across processes; groups
  are contiguous in that global order).
- ``_generate_and_score_completions`` is wrapped: it calls ``super()`` once per round and, only when something was
  dropped, assembles the kept groups. A group's completions may sit on two ranks, so each round's tensors are padded
  and gathered across processes, the kept rows are selected in global order and every rank takes its own slice:
  shapes are equal on every process and all ranks log the same figures.
- When every group of the first round is informative the output of ``super()`` is returned untouched: the step is
  exactly TRL's (same data, same loss, no extra work).
- Refill prompts come from a second, seeded stream over the training set; its position is saved with each checkpoint
  (``dynamic_sampling_state.json``) and restored on resume, like TRL's own ``entropy_ctrl_state.json``. Under
  ``trl_ext.checkpointing.AtomicCheckpointMixin`` (the trainers of ``trl_ext.trainers``) ``_get_output_dir`` points
  at the staging folder while a checkpoint is written, so this file is part of the atomic checkpoint.

Cost: each refill round costs a full generation batch. Old-policy and reference log-probs are computed inside TRL
before rewards, so a dropped group has already cost those forward passes when they are needed (``beta > 0``, or
off-policy minibatches such as GSPO's); with DAPO's defaults (``beta = 0``, on-policy, no vLLM) there are none, and a
dropped group costs only its generation. No dropped group ever reaches the training forward/backward pass.
``dynamic_sampling/generation_time`` and ``dynamic_sampling/dropped_time`` log the seconds spent per step.

Limits: text-only batches (multimodal keys raise), map-style datasets (an ``IterableDataset`` raises at
construction). With ``loss_type`` ``"grpo"`` or ``"dr_grpo"`` the loss is normalized by the number of rows, so filler
rows (only when the round limit is hit) add zero to the numerator but count in the denominator, like TRL's own
masked truncated completions: the step is scaled by the kept fraction, its direction is unchanged.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import torch
from accelerate.utils import pad_across_processes
from datasets import IterableDataset

from trl_ext.group_filter import group_reward_range, informative_groups

logger = logging.getLogger(__name__)

STATE_FILE = "dynamic_sampling_state.json"
_STREAM_SEED_OFFSET = 1_000_003  # keeps the refill stream independent of TRL's sampler (seeded with args.seed)
_EMPTY_STEPS_WARNING = 10  # consecutive steps without a single informative group before the second warning

# How each per-row tensor of TRL's generation output is padded when rows of different widths are joined.
_LEFT_PADDED = {"prompt_ids", "prompt_mask"}
_RIGHT_PADDED = {
    "completion_ids",
    "completion_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
    "tool_mask",
}
_PER_ROW = {"advantages"}
_SCALARS = {"num_items_in_batch"}


@dataclass
class PromptStream:
    """A seeded, resumable stream of training-set indices for refill rounds (an endless sequence of permutations)."""

    num_prompts: int
    seed: int
    epoch: int = 0
    position: int = 0

    def take(self, n: int) -> list[int]:
        out: list[int] = []
        while len(out) < n:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.num_prompts, generator=generator).tolist()
            chunk = order[self.position : self.position + n - len(out)]
            out.extend(chunk)
            self.position += len(chunk)
            if self.position >= self.num_prompts:
                self.epoch, self.position = self.epoch + 1, 0
        return out

    def state_dict(self) -> dict[str, int]:
        return {"num_prompts": self.num_prompts, "seed": self.seed, "epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("num_prompts") != self.num_prompts:
            raise ValueError(
                f"The checkpoint's dynamic-sampling prompt stream was built over {state.get('num_prompts')} prompts, "
                f"but the training set has {self.num_prompts}. Resume with the same train_dataset, or start a new run "
                "in a fresh output_dir."
            )
        self.seed, self.epoch, self.position = state["seed"], state["epoch"], state["position"]


def _pad_width(tensor: torch.Tensor, width: int, value: float, left: bool) -> torch.Tensor:
    missing = width - tensor.size(1)
    if missing <= 0:
        return tensor
    pad = tensor.new_full((tensor.size(0), missing, *tensor.shape[2:]), value)
    return torch.cat([pad, tensor] if left else [tensor, pad], dim=1)


class DynamicSamplingMixin:
    """Adds ``dynamic_sampling`` (a ``GRPOFamilyConfig`` field) to any TRL ``GRPOTrainer`` subclass.

    Put it first in the bases: ``class MyTrainer(DynamicSamplingMixin, trl.GRPOTrainer)``. With
    ``args.dynamic_sampling`` False (or a plain ``GRPOConfig``), every method defers to TRL unchanged.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ds_last_rewards: torch.Tensor | None = None
        self._ds_warned = False
        self._ds_empty_steps = 0
        self._ds_reward_low = float("inf")
        self._ds_reward_high = float("-inf")
        self._ds_stream: PromptStream | None = None
        if self._ds_enabled:
            if isinstance(self.train_dataset, IterableDataset) or not hasattr(self.train_dataset, "__len__"):
                raise ValueError(
                    "dynamic_sampling=True needs a map-style train_dataset (refill rounds draw fresh prompts by "
                    "index); got an IterableDataset. Materialize it (e.g. Dataset.from_list) or set "
                    "dynamic_sampling=False."
                )
            self._ds_stream = PromptStream(len(self.train_dataset), seed=self.args.seed + _STREAM_SEED_OFFSET)

    @property
    def _ds_enabled(self) -> bool:
        return bool(getattr(self.args, "dynamic_sampling", False))

    # -- hooks ---------------------------------------------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self._ds_enabled and self.model.training:
            # The scalar each completion's advantage is computed from (TRL's sum_then_normalize), NaN if unscorable.
            weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
            total = (rewards_per_func * weights).nansum(dim=1)
            total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
            self._ds_last_rewards = total
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        if not (self._ds_enabled and self.model.training):
            return super()._generate_and_score_completions(inputs)

        args = self.args
        num_generations = self.num_generations
        started = time.perf_counter()
        output = super()._generate_and_score_completions(inputs)
        rounds = [(output, self._take_round_rewards(), time.perf_counter() - started)]
        keep = informative_groups(rounds[0][1], num_generations, args.dynamic_sampling_atol)
        num_groups = keep.numel()
        kept = int(keep.sum())

        while kept < num_groups and len(rounds) < args.dynamic_sampling_max_rounds:
            started = time.perf_counter()
            refill = super()._generate_and_score_completions(self._refill_inputs(inputs))
            rewards = self._take_round_rewards()
            rounds.append((refill, rewards, time.perf_counter() - started))
            kept += int(informative_groups(rewards, num_generations, args.dynamic_sampling_atol).sum())

        self._log_round_stats(rounds, num_groups)
        if len(rounds) == 1 and kept == num_groups:
            return output  # nothing dropped: exactly TRL's step
        return self._assemble(rounds, num_groups, local_rows=len(inputs))

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self._ds_stream is not None and self.args.should_save:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            folder = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            state = {"stream": self._ds_stream.state_dict(), "warned": self._ds_warned}
            state["reward_range"] = [self._ds_reward_low, self._ds_reward_high]
            with open(os.path.join(folder, STATE_FILE), "w") as f:
                json.dump(state, f)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if self._ds_stream is None or checkpoint is None:
            return
        path = os.path.join(checkpoint, STATE_FILE)
        if os.path.exists(path):
            with open(path) as f:
                state = json.load(f)
            self._ds_stream.load_state_dict(state["stream"])
            self._ds_warned = state.get("warned", False)
            self._ds_reward_low, self._ds_reward_high = state.get("reward_range", [float("inf"), float("-inf")])
        else:
            logger.warning(
                f"Resuming from {checkpoint} without {STATE_FILE}: the dynamic-sampling refill stream restarts from "
                "its beginning, so the resumed run will not reproduce an uninterrupted one exactly."
            )

    # -- internals -----------------------------------------------------------------------------------------------

    def _take_round_rewards(self) -> torch.Tensor:
        rewards, self._ds_last_rewards = self._ds_last_rewards, None
        if rewards is None:
            raise RuntimeError(
                "Dynamic sampling found no rewards for this round: TRL's _generate_and_score_completions no longer "
                "calls _calculate_rewards. trl-ext is tested against trl==1.12.0; pin that version."
            )
        finite = rewards[torch.isfinite(rewards)]
        if finite.numel():
            self._ds_reward_low = min(self._ds_reward_low, finite.min().item())
            self._ds_reward_high = max(self._ds_reward_high, finite.max().item())
        return rewards.detach().cpu()

    def _refill_inputs(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Fresh prompts for one refill round, laid out as TRL's RepeatSampler lays out a generation batch."""
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        local_rows = len(inputs)
        num_prompts = local_rows * world // self.num_generations
        indices = self._ds_stream.take(num_prompts)  # identical on every rank (same seed, same state)
        global_rows = [i for i in indices for _ in range(self.num_generations)]
        keys = set(inputs[0].keys())
        rows = []
        for index in global_rows[rank * local_rows : (rank + 1) * local_rows]:
            row = self.train_dataset[index]
            rows.append({k: v for k, v in row.items() if k in keys})
        return rows

    def _log_round_stats(self, rounds: list[tuple[dict, torch.Tensor, float]], num_groups: int) -> None:
        args, metrics = self.args, self._metrics["train"]
        num_generations = self.num_generations
        all_rewards = torch.cat([r for _, r, _ in rounds])
        keep = informative_groups(all_rewards, self.num_generations, args.dynamic_sampling_atol)
        group_max, group_min = group_reward_range(all_rewards, self.num_generations)
        if args.dynamic_sampling_reward_range is not None:
            low, high = args.dynamic_sampling_reward_range
        else:
            low, high = self._ds_reward_low, self._ds_reward_high
        atol = args.dynamic_sampling_atol
        uninformative = ~keep & torch.isfinite(group_max)
        scale_known = high - low > atol
        all_max = uninformative & (group_min >= high - atol) if scale_known else torch.zeros_like(keep)
        all_min = uninformative & (group_max <= low + atol) if scale_known else torch.zeros_like(keep)
        generated = keep.numel()
        kept = int(keep.sum())
        dropped_time = 0.0
        for _, rewards, seconds in rounds:
            round_keep = informative_groups(rewards, self.num_generations, atol)
            dropped_time += seconds * (1.0 - round_keep.float().mean().item())
        metrics["dynamic_sampling/rounds"].append(float(len(rounds)))
        metrics["dynamic_sampling/kept_group_frac"].append(kept / generated)
        metrics["dynamic_sampling/all_max_frac"].append(all_max.float().mean().item())
        metrics["dynamic_sampling/all_min_frac"].append(all_min.float().mean().item())
        metrics["dynamic_sampling/filler_groups"].append(float(max(num_groups - kept, 0)))
        metrics["dynamic_sampling/limit_hit"].append(float(kept < num_groups))
        metrics["dynamic_sampling/generation_time"].append(sum(s for _, _, s in rounds))
        metrics["dynamic_sampling/dropped_time"].append(dropped_time)
        self._ds_empty_steps = self._ds_empty_steps + 1 if kept == 0 else 0
        if kept < num_groups and not self._ds_warned:
            self._ds_warned = True
            too_hard, too_easy = all_min.float().mean().item(), all_max.float().mean().item()
            if too_hard or too_easy:
                seen = f"{too_hard:.0%} of the groups were all-wrong and {too_easy:.0%} all-right"
            else:
                seen = "every uninformative group had one reward for all its completions"
            advice = [
                "if the model rarely succeeds (cold start), warm-start it with SFT on the task first (recipes/sft.py)",
                f"raise num_generations (now {num_generations}) so that a group is more likely to hold different "
                "rewards",
                "check the reward function: rewards/<name>/std near 0 in the logs means it hardly varies",
            ]
            if too_easy > 0:
                advice.append("filter always-solved prompts out of the data")
            advice.append("or raise dynamic_sampling_max_rounds")
            logger.warning(
                f"Dynamic sampling reached dynamic_sampling_max_rounds={args.dynamic_sampling_max_rounds} with only "
                f"{kept}/{num_groups} informative groups ({kept / generated:.0%} of the {generated} groups generated "
                f"were informative; {seen}). The missing groups were filled with zero-weight groups that change "
                f"nothing in the gradient. What to do: {'; '.join(advice)}. (Shown once; see "
                "dynamic_sampling/limit_hit and dynamic_sampling/kept_group_frac in the logs.)"
            )
        if self._ds_empty_steps == _EMPTY_STEPS_WARNING:
            logger.warning(
                f"Dynamic sampling found no informative group at all in the last {_EMPTY_STEPS_WARNING} steps: the "
                "policy is not being trained (every step is zero-weight fillers). Stop the run and fix the cold start "
                "(SFT first), the group size (num_generations) or the reward function."
            )

    def _assemble(self, rounds: list[tuple[dict, torch.Tensor, float]], num_groups: int, local_rows: int) -> dict:
        """Join the kept groups of all rounds into one generation batch with the first round's shapes."""
        accelerator = self.accelerator
        num_generations = self.num_generations
        pad_id = self._tokenizer.pad_token_id
        keys = list(rounds[0][0].keys())
        unknown = [k for k in keys if k not in _LEFT_PADDED | _RIGHT_PADDED | _PER_ROW | _SCALARS]
        if unknown:
            raise NotImplementedError(
                f"Dynamic sampling cannot regroup the generation outputs {unknown} (multimodal or tool inputs). "
                "Set dynamic_sampling=False for this dataset."
            )

        # 1. Each round's per-row tensors, gathered to the global batch (a group may straddle two ranks).
        gathered: list[dict[str, torch.Tensor]] = []
        for output, _, _ in rounds:
            round_global = {}
            for key in keys:
                if key in _SCALARS:
                    continue
                value = output[key]
                if key in _PER_ROW:
                    round_global[key] = accelerator.gather(value)
                    continue
                pad_value = pad_id if key.endswith("_ids") else (1.0 if key == "tool_mask" else 0)
                value = pad_across_processes(value, dim=1, pad_index=pad_value, pad_first=key in _LEFT_PADDED)
                round_global[key] = accelerator.gather(value)
            gathered.append(round_global)

        # 2. Which global rows to keep: informative groups in round order, then fillers if the limit was hit.
        chosen: list[tuple[int, int]] = []
        fillers: list[tuple[int, int]] = []
        for round_index, (_, rewards, _) in enumerate(rounds):
            keep = informative_groups(rewards, num_generations, self.args.dynamic_sampling_atol)
            for group in range(keep.numel()):
                (chosen if keep[group] else fillers).append((round_index, group))
        chosen = chosen[:num_groups]
        num_filler = num_groups - len(chosen)
        selected = chosen + fillers[len(fillers) - num_filler :] if num_filler else chosen

        # 3. Concatenate the rounds (widths padded to the widest round) and pick the chosen rows.
        offsets, total = [], 0
        for round_global in gathered:
            offsets.append(total)
            total += round_global["advantages"].size(0)
        rows = torch.tensor(
            [offsets[r] + g * num_generations + j for r, g in selected for j in range(num_generations)],
            device=accelerator.device,
        )
        batch: dict[str, torch.Tensor] = {}
        for key in gathered[0]:
            parts = [round_global[key] for round_global in gathered]
            if key not in _PER_ROW:
                width = max(p.size(1) for p in parts)
                pad_value = pad_id if key.endswith("_ids") else (1.0 if key == "tool_mask" else 0)
                parts = [_pad_width(p, width, pad_value, left=key in _LEFT_PADDED) for p in parts]
            batch[key] = torch.cat(parts).index_select(0, rows)

        # 4. Fillers carry no signal: zero advantage and loss mask (and so no token in the normalizer).
        if num_filler:
            filler_rows = torch.arange(len(chosen) * num_generations, rows.numel(), device=accelerator.device)
            batch["advantages"][filler_rows] = 0.0
            batch["completion_mask"][filler_rows] = 0
        loss_mask = batch["completion_mask"] * batch["tool_mask"] if "tool_mask" in batch else batch["completion_mask"]
        num_items_in_batch = loss_mask.sum()

        # 5. This rank's slice, trimmed of columns that are padding on every local row.
        start = accelerator.process_index * local_rows
        local = {key: value[start : start + local_rows] for key, value in batch.items()}
        prompt_cols = local["prompt_mask"].any(dim=0).nonzero()
        first = int(prompt_cols.min()) if prompt_cols.numel() else 0
        completion_cols = local["completion_mask"].any(dim=0).nonzero()
        last = int(completion_cols.max()) + 1 if completion_cols.numel() else 1
        for key in _LEFT_PADDED & local.keys():
            local[key] = local[key][:, first:]
        for key in _RIGHT_PADDED & local.keys():
            if local[key].dim() > 1 and local[key].size(1) > 1:
                local[key] = local[key][:, :last]
        local["num_items_in_batch"] = num_items_in_batch
        return local
