"""DAPO dynamic sampling (arXiv 2503.14476, section 3.2, Eq. 11) as a mixin over TRL's ``GRPOTrainer``.

What it does, relative to the paper: after TRL generates and scores a generation batch, groups whose *accuracy* is
all equal are dropped (``trl_ext.grpo.group_filter``), and completions are generated for fresh training prompts until the
generation batch again holds as many informative groups as it was meant to hold.

What it costs (issue 14; ``benchmarks/dynamic_sampling.py`` measures it):

- **Right-sized rounds** (``trl_ext.grpo.ds_rounds``): a refill round generates ``missing / rate x margin`` groups,
  ``rate`` a running estimate of the informative fraction, rounded up so that every process generates the same whole
  number of groups, at most ``dynamic_sampling_max_round_size`` generation batches; the step's generation budget is
  ``dynamic_sampling_max_rounds`` generation batches. The margin (``dynamic_sampling_refill_margin``) defaults to
  GRESO's 1.25 where surplus groups are carried over and to 1.05 where they are discarded (a margin ``m`` discards up
  to ``(m - 1) x missing`` groups).
- **The first round oversampled** where surplus is carried over, once the estimate says groups are being dropped:
  ``(groups - carried) / rate x margin`` groups drawn from the refill stream (whole groups per process, whatever
  TRL's layout; TRL's sampler still advances, its prompts unused), so that most steps need one round. Where surplus
  would be discarded the first round stays TRL's batch: oversampling would trade discarded groups for rounds. While
  nothing has been dropped, the rate is 1 and every step is exactly TRL's.
- **Surplus carried once** (``dynamic_sampling_carry_over``, a share of the batch's groups, default 0.25): informative
  groups beyond the need are trained at the next step (first, then never again), with the old-policy log-probs of
  the policy that generated them so that TRL's clipped ratio corrects for their age. Off where TRL computes no
  old-policy log-probs (one on-policy step per generation: its ratio is 1 by construction, a stale group's age would
  go uncorrected) and for a sequence-level ratio (GSPO and GSPO-token: their 3e-4 clipping band would clip a
  one-step-old group entirely). Checkpointed (``dynamic_sampling_carry.pt``), logged (``dynamic_sampling/carried_groups_*``). Other
  surplus is discarded and counted (``dynamic_sampling/surplus_groups``, ``surplus_time``).
- **No forward pass on dropped groups**: while a round runs, TRL's no-grad old-policy / reference passes
  (``_get_per_token_logps_and_entropies``) return a placeholder; they are computed afterwards, by TRL's own method,
  for the trained rows only (``_fill_logps``), and under vLLM's importance-sampling correction the ratio and its
  ``sampling/*`` metrics are recomputed for those rows (``ds_rounds.importance_sampling_ratio``, TRL's formula).
  Not deferred: PEFT with ``beta > 0`` (TRL computes the reference with the adapter disabled, a context we could not
  replay).
- **Only the selected rows move**: each process contributes the selected rows it holds to one all-gather per key
  (deferred log-probs are not moved at all); ``dynamic_sampling/gathered_bytes`` logs the bytes each process
  receives.
- **GRESO skipping** (``dynamic_sampling_skip_predicted``, off by default; ``trl_ext.grpo.ds_skip``): prompts predicted
  to give a zero-variance group are skipped before their rollout; every round's prompts then come from the refill
  stream (TRL's sampler still advances). ``dynamic_sampling/skipped_prompts`` counts them.

- **The metric** (``dynamic_sampling_metric``): the weighted sum of the named reward functions; by default every
  reward function except the shaping ones, known by their mark (``trl_ext.rewards.shaping``: DAPO's trainer-added
  overlong punishment, the registry's ``soft_overlong`` and length rewards, or your own). The paper keeps prompts
  with 0 < #correct < G, and verl filters on ``acc``: a length penalty that varies inside an all-correct group must
  not make it "informative".
- **Advantages of the batch that is trained.** Whenever something was dropped, the kept rows' advantages are
  recomputed from their stored per-function rewards with the assembled batch's statistics
  (``group_filter.group_advantages``: TRL's formula for every ``scale_rewards`` and ``multi_objective_aggregation``).
  TRL's per-round advantages would carry each round's scale (with ``scale_rewards="batch"``, dropped groups in it).
- **Fillers change nothing.** When ``dynamic_sampling_max_rounds`` is reached first, the missing groups are filled
  with uninformative ones whose loss mask and advantage are zeroed, and ``num_items_in_batch`` (DAPO's token
  normalizer) counts only the tokens that are trained on. An optimizer step whose accumulation window trains no token
  on any process is skipped (``_gate_optimizer``): weights and optimizer state stay exactly as they were, while
  ``global_step`` and the LR schedule advance (the schedule stays a function of the step count, so ``max_steps``,
  logging, saving and exact resume are unchanged). A window that trains some tokens is a normal step: its gradient
  comes from those tokens only, normalized by the generation batch's trained-token count as TRL does.
- **Logs describe what was trained.** TRL logs per call; while the rounds run, its metrics and completions table go
  to scratch buffers, and one entry per step reaches the real ones: ``reward``, ``reward_std``,
  ``frac_reward_zero_std``, ``rewards/<f>/*``, ``completions/*`` and the table for the assembled batch (fillers
  included, with zero weight), ``dynamic_sampling/generated_<metric>`` for everything that was generated. Other
  per-call metrics (e.g. the reward guard's counts) are kept per round.

How it plugs into TRL (1.12 to 1.16) without copying TRL code (docs/ARCHITECTURE.md: override stable hooks,
post-process super()):

- ``_calculate_rewards`` is wrapped to remember the per-function rewards it returns (already gathered across
  processes; groups are contiguous in that global order), the metric, and the completion lengths / truncation.
- ``_generate_and_score_completions`` is wrapped: it calls ``super()`` once per round and, only when something was
  dropped, assembles the kept groups. A group's completions may sit on two ranks, so the selected rows are gathered
  across processes in global order and every rank takes its own slice: shapes are equal on every process and all
  ranks log the same figures.
- When every group of the first round is informative (and nothing was carried) the output of ``super()`` is
  returned with its deferred log-probs computed on the same rows by the same method: the step is exactly TRL's
  (same data, same loss, same logs; tested bit for bit).
- ``compute_loss`` counts the trained tokens of each micro-batch; ``create_optimizer`` installs the step gate.
- Refill prompts come from a second, seeded stream over the training set; its position is saved with each checkpoint
  (``dynamic_sampling_state.json``) and restored on resume, like TRL's own ``entropy_ctrl_state.json``. It is
  written through ``AtomicCheckpointMixin``'s ``_save_extra_state`` / ``_load_extra_state`` hooks (the mixin's base,
  the one extra-state mechanism of the package), into the staged folder: part of the atomic checkpoint.

No dropped group ever reaches a log-prob or training forward pass; it costs its generation and scoring only.
``dynamic_sampling/generation_time`` and ``dynamic_sampling/dropped_time`` log the seconds spent per step.

- With an ``IterableDataset`` the refill prompts come from the stream itself (``IterablePromptStream``: a second,
  seeded pass; its epoch and position are checkpointed, and a resumed run skips the rows already read).

With carried groups the processes may hold different numbers of fresh rows. Where a forward pass is collective
(ZeRO-3, FSDP), the deferred log-prob pass then runs over all of a process's rows, carried ones included, and keeps
the fresh rows' values (``_ds_sharded_forward``; ZeRO-3 against ZeRO-2 with carried groups in ``tests/test_configs.py``).

Limits: text-only batches (multimodal keys raise); the optimizer gate is not applied under DeepSpeed (its engine owns
the step). With ``loss_type``
``"grpo"`` or ``"dr_grpo"`` the loss is normalized by the number of rows, so filler rows (only when the round limit is
hit) add zero to the numerator but count in the denominator, like TRL's own masked truncated completions: the step is
scaled by the kept fraction, its direction is unchanged.
"""

from __future__ import annotations

import json
import logging
import os
import time
import types
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch
from accelerate.utils import pad_across_processes
from datasets import IterableDataset

from trl_ext.grpo.ds_rounds import (
    InformativeRate,
    carries_surplus,
    first_round_groups,
    importance_sampling_ratio,
    refill_groups,
    refill_margin,
    round_cap,
)
from trl_ext.grpo.ds_skip import SkipPredictor
from trl_ext.grpo.group_filter import group_advantages, group_stats, informative_groups, nanstd
from trl_ext.reliability.checkpoints import AtomicCheckpointMixin
from trl_ext.rewards.shaping import is_shaping_reward
from trl_ext.scoring import combine_rewards

logger = logging.getLogger(__name__)

STATE_FILE = "dynamic_sampling_state.json"
CARRY_FILE = "dynamic_sampling_carry.pt"
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


class IterablePromptStream:
    """A seeded, resumable stream of rows of an ``IterableDataset`` for refill rounds: the dataset itself, shuffled
    with its own seed (``IterableDataset.shuffle``, a buffered shuffle whose order also depends on the epoch) when the
    trainer shuffles, read epoch after epoch. Refill prompts come from the stream, as verl draws them from its
    dataloader, but from a second pass of it so that TRL's own iteration (and its resume) is untouched. Its position
    is the number of rows read in the current epoch: a resumed run reopens the epoch and skips exactly those rows."""

    def __init__(self, dataset: IterableDataset, seed: int, shuffle: bool = True) -> None:
        self.dataset, self.seed, self.shuffle = dataset, seed, shuffle
        self.epoch = 0
        self.position = 0
        self._iterator: Any = None

    def _open(self) -> None:
        dataset = self.dataset
        if self.shuffle:
            dataset = dataset.shuffle(seed=self.seed)  # a new object: the trainer's dataset keeps its own epoch
            dataset.set_epoch(self.epoch)
        self._iterator = iter(dataset)
        for _ in range(self.position):
            next(self._iterator)

    def take_rows(self, n: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while len(out) < n:
            if self._iterator is None:
                self._open()
            try:
                row = next(self._iterator)
            except StopIteration:
                if self.position == 0:
                    raise ValueError(
                        "dynamic sampling: the train_dataset stream yielded no row to refill from."
                    ) from None
                self.epoch, self.position, self._iterator = self.epoch + 1, 0, None
                continue
            out.append(row)
            self.position += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "iterable", "seed": self.seed, "epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "iterable":
            raise ValueError(
                "The checkpoint's dynamic-sampling prompt stream was built over a map-style dataset, but the "
                "train_dataset is now an IterableDataset. Resume with the same train_dataset, or start a new run in a "
                "fresh output_dir."
            )
        self.seed, self.epoch, self.position, self._iterator = state["seed"], state["epoch"], state["position"], None


def _pad_width(tensor: torch.Tensor, width: int, value: float, left: bool) -> torch.Tensor:
    missing = width - tensor.size(1)
    if missing <= 0:
        return tensor
    pad = tensor.new_full((tensor.size(0), missing, *tensor.shape[2:]), value)
    return torch.cat([pad, tensor] if left else [tensor, pad], dim=1)


@dataclass
class _Round:
    """One generation round: TRL's output plus what the ``_calculate_rewards`` wrapper captured (global order)."""

    output: dict[str, Any]
    rewards_per_func: torch.Tensor  # [rows, num_funcs], NaN where a function returned None
    metric: torch.Tensor  # [rows] the weighted sum that decides informativeness (dynamic_sampling_metric)
    lengths: torch.Tensor  # [rows] completion lengths, TRL's definition (len of the sampled ids)
    truncated: torch.Tensor  # [rows] no EOS at the end (TRL's completions/clipped_ratio)
    seconds: float
    deferred: frozenset = frozenset()  # log-prob keys of ``output`` that are placeholders ("old", "ref")
    replicated: bool = False  # a carried round: its rows (global) are on every process, with real log-probs
    log_entries: dict | None = None  # a carried round's completions-table entries
    indices: list | None = None  # training-set index of each group's prompt (rounds drawn from the refill stream)

    @property
    def num_rows(self) -> int:
        return int(self.metric.numel())


@dataclass
class _DSRollout:
    """The rounds of one generation batch, generated and scored, before ``_ds_finish`` assembles what is trained."""

    rounds: list[_Round]  # the carried round (if any) first, then the fresh rounds in order
    first: _Round  # the first fresh round
    first_size: int  # its groups
    informative: int  # informative groups among the fresh rounds
    generated: int  # groups generated by the fresh rounds
    num_groups: int  # groups of the generation batch (what is trained)
    num_carried: int  # groups of the carried round
    local_rows: int  # rows of the generation batch on this process
    scratch: tuple[dict, dict]  # TRL's per-call metrics and completions table of the rounds


class DynamicSamplingMixin(AtomicCheckpointMixin):
    """Adds ``dynamic_sampling`` (a ``GRPOFamilyConfig`` field) to any TRL ``GRPOTrainer`` subclass.

    Put it first in the bases: ``class MyTrainer(DynamicSamplingMixin, trl.GRPOTrainer)``. With
    ``args.dynamic_sampling`` False (or a plain ``GRPOConfig``), every method defers to TRL unchanged.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ds_capture: dict[str, torch.Tensor] | None = None
        self._ds_warned = False
        self._ds_empty_steps = 0
        self._ds_reward_low = float("inf")
        self._ds_reward_high = float("-inf")
        self._ds_stream: PromptStream | IterablePromptStream | None = None
        self._ds_window_tokens = 0
        self._ds_metric_columns: list[int] = []
        self._ds_rate = InformativeRate()
        self._ds_defer: set[str] | None = None  # while a round runs: the no-grad log-prob passes deferred
        self._ds_carry: _Round | None = None  # surplus informative groups kept for the next step
        self._ds_moved_bytes = 0
        self._ds_skip: SkipPredictor | None = None
        self._ds_pending_indices: list[int] | None = None
        self._ds_skipped = 0
        if self._ds_enabled:
            seed = self.args.seed + _STREAM_SEED_OFFSET
            if isinstance(self.train_dataset, IterableDataset):
                shuffle = bool(getattr(self, "shuffle_dataset", True))
                self._ds_stream = IterablePromptStream(self.train_dataset, seed=seed, shuffle=shuffle)
            elif hasattr(self.train_dataset, "__len__"):
                self._ds_stream = PromptStream(len(self.train_dataset), seed=seed)
            else:
                raise ValueError(
                    f"dynamic_sampling=True needs a datasets.Dataset or datasets.IterableDataset train_dataset to "
                    f"draw refill prompts from; got {type(self.train_dataset).__name__}. Wrap it (e.g. "
                    "Dataset.from_list or IterableDataset.from_generator) or set dynamic_sampling=False."
                )
            self._ds_metric_columns = self._resolve_metric_columns()
            if getattr(self.args, "dynamic_sampling_skip_predicted", False):
                if not isinstance(self._ds_stream, PromptStream):
                    raise ValueError(
                        "dynamic_sampling_skip_predicted=True keeps a history per training-set index, which an "
                        "IterableDataset does not have. Use a datasets.Dataset, or set "
                        "dynamic_sampling_skip_predicted=False."
                    )
                self._ds_skip = SkipPredictor(seed=seed, target=self.args.dynamic_sampling_skip_target)

    @property
    def _ds_enabled(self) -> bool:
        return bool(getattr(self.args, "dynamic_sampling", False))

    def _resolve_metric_columns(self) -> list[int]:
        """Indices of the reward functions whose weighted sum decides whether a group is informative."""
        names = list(self.reward_func_names)
        requested = getattr(self.args, "dynamic_sampling_metric", None)
        marked = [is_shaping_reward(func) for func in self.reward_funcs]
        shaping = [name for name, is_shaping in zip(names, marked, strict=True) if is_shaping]
        if requested is None:
            # DAPO Eq. 11 filters on accuracy: shaping terms (marked, trl_ext.rewards.shaping) are left out
            columns = [i for i, is_shaping in enumerate(marked) if not is_shaping]
            return columns or list(range(len(names)))
        requested = [requested] if isinstance(requested, str) else list(requested)
        unknown = [name for name in requested if name not in names]
        if unknown or not requested:
            raise ValueError(
                f"dynamic_sampling_metric={requested} names no reward function of this trainer ({unknown} unknown). "
                f"Known reward functions: {names}. Name the task reward(s) (e.g. the accuracy reward), or leave it "
                f"unset for every reward function except the shaping ones {shaping}."
            )
        return [i for i, name in enumerate(names) if name in requested]

    # -- hooks ---------------------------------------------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self._ds_enabled and self.model.training:
            # The metric (DAPO Eq. 11's accuracy): weighted sum over dynamic_sampling_metric, NaN if unscorable.
            columns = self._ds_metric_columns
            weights = self.reward_weights.detach().cpu()[columns]
            metric = combine_rewards(rewards_per_func.detach().cpu()[:, columns], weights)
            # Completion lengths and truncation as TRL logs them, gathered like the rewards (global order).
            device = self.accelerator.device
            eos_and_pad = [self._tokenizer.eos_token_id, self._tokenizer.pad_token_id]
            lengths = torch.tensor([len(ids) for ids in completion_ids_list], device=device)
            truncated = torch.tensor(
                [len(ids) > 0 and int(ids[-1]) not in eos_and_pad for ids in completion_ids_list], device=device
            )
            self._ds_capture = {
                "rewards_per_func": rewards_per_func.detach().cpu(),
                "metric": metric,
                "lengths": self.accelerator.gather(lengths).cpu(),
                "truncated": self.accelerator.gather(truncated).cpu(),
            }
        return rewards_per_func

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        """While a round is generated, TRL's no-grad old-policy / reference passes are deferred: they return a
        placeholder, and ``_fill_logps`` computes them afterwards for the trained rows only."""
        if self._ds_defer is not None and not torch.is_grad_enabled():
            kind = "ref" if self.ref_model is not None and model is self.ref_model else "old"
            self._ds_defer.add(kind)
            return torch.zeros(input_ids.size(0), logits_to_keep, device=input_ids.device), None, None
        return super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
        )

    def _generate_and_score_completions(self, inputs):
        if not (self._ds_enabled and self.model.training):
            return super()._generate_and_score_completions(inputs)
        return self._ds_finish(self._ds_drive(self._ds_rounds(inputs)))

    def _ds_drive(self, rounds: Any) -> _DSRollout:
        """Run every round of a ``_ds_rounds`` generator now, one after the other (the synchronous path;
        ``trl_ext.grpo.async_rollout`` drives the same generator while the previous step trains)."""
        try:
            request = next(rounds)
            while True:
                request = rounds.send(self._ds_execute(*request))
        except StopIteration as stop:
            return stop.value

    def _ds_execute(self, inputs: list[dict[str, Any]], scratch: tuple[dict, dict]) -> _Round:
        """One round (TRL's generation and scoring); TRL's per-call metrics and completions table go to the step's
        scratch buffers, and only what describes the trained batch reaches the real ones (``_merge_logs``)."""
        metrics, logs = self._metrics["train"], self._logs
        self._metrics["train"], self._logs = scratch
        try:
            return self._run_round(inputs)
        finally:
            self._ds_defer = None
            self._metrics["train"], self._logs = metrics, logs

    def _ds_rounds(self, inputs: list[dict[str, Any]], from_stream: bool = False) -> Any:
        """The rounds of one generation batch, as a generator: it yields ``(round inputs, scratch buffers)`` and is
        sent the ``_Round`` that TRL generated and scored for them; it returns the ``_DSRollout`` that
        ``_ds_finish`` turns into the trained batch. ``from_stream``: the first round too comes from the refill
        stream (``inputs`` then only gives the layout: rows per process and columns)."""
        args = self.args
        num_generations = self.num_generations
        scratch = (defaultdict(list), _scratch_logs(self._logs))
        world = self.accelerator.num_processes
        carried, self._ds_carry = self._ds_carry, None  # informative groups of the last step, used now or never
        self._ds_skipped = 0
        carrying = self._carry_allowed()
        margin = refill_margin(getattr(args, "dynamic_sampling_refill_margin", None), carrying)
        num_groups = len(inputs) * world // num_generations  # TRL's generation batch, in groups: what is trained
        num_carried = carried.num_rows // num_generations if carried is not None else 0
        budget = args.dynamic_sampling_max_rounds * num_groups  # whole generation batches' worth of groups
        cap = round_cap(num_groups, getattr(args, "dynamic_sampling_max_round_size", 2.0))
        # The first round: oversampled from the refill stream once groups are being dropped (where the surplus
        # is carried); with skipping, drawn from the refill stream so that predicted zero-variance prompts are
        # skipped before their rollout; else TRL's own batch. The refill stream lays out whole groups per
        # process, whatever TRL's layout (TRL's sampler still advances; its prompts are then not used).
        rate = self._ds_rate.estimate()
        first_size = first_round_groups(num_groups, num_carried, rate, margin, world, cap, budget, carrying)
        if first_size is not None:
            first = yield self._refill_inputs(inputs, first_size), scratch
        elif (self._ds_skip is not None or from_stream) and num_groups % world == 0:
            first_size = num_groups
            first = yield self._refill_inputs(inputs, num_groups), scratch
        else:
            first_size = num_groups
            first = yield inputs, scratch
        rounds = [carried, first] if carried is not None else [first]
        informative = int(informative_groups(first.metric, num_generations, args.dynamic_sampling_atol).sum())
        kept = informative + num_carried
        generated = first_size
        while kept < num_groups:
            size = refill_groups(
                missing=num_groups - kept,
                rate=self._ds_rate.estimate(informative, generated),
                margin=margin,
                world_size=world,
                cap=cap,
                remaining=budget - generated,
            )
            if size == 0:
                break
            rounds.append((yield self._refill_inputs(inputs, size), scratch))
            generated += size
            found = int(informative_groups(rounds[-1].metric, num_generations, args.dynamic_sampling_atol).sum())
            informative, kept = informative + found, kept + found
        return _DSRollout(
            rounds, first, first_size, informative, generated, num_groups, num_carried, len(inputs), scratch
        )

    def _ds_finish(self, rollout: _DSRollout) -> dict[str, Any]:
        """The trained batch of a finished ``_ds_rounds``: the kept groups assembled, their deferred log-probs
        computed with the current weights, the logs of what is trained."""
        rounds, first, first_size = rollout.rounds, rollout.first, rollout.first_size
        num_groups, num_carried = rollout.num_groups, rollout.num_carried
        round_metrics, round_logs = rollout.scratch
        self._ds_rate.update(rollout.informative, rollout.generated)
        self._ds_moved_bytes = 0
        self._update_skip_history([r for r in rounds if not r.replicated])

        chosen, fillers, surplus = self._select(rounds, num_groups)
        fresh_rounds = [r for r in rounds if not r.replicated]
        used = sum(1 for r, _ in chosen if rounds[r].replicated)
        self._log_round_stats(fresh_rounds, num_groups, len(surplus), carried_used=used)
        deferred = first.deferred
        if deferred and self.use_vllm and getattr(self, "vllm_importance_sampling_correction", False):
            # TRL's sampling/* metrics of the rounds were computed from placeholders: logged again for the batch.
            for key in [k for k in round_metrics if k.startswith("sampling/")]:
                del round_metrics[key]
        self._carry_surplus(rounds, surplus, round_logs, num_groups, deferred)
        self._metrics["train"]["dynamic_sampling/carried_groups_used"].append(float(used))
        self._metrics["train"]["dynamic_sampling/carried_groups_expired"].append(float(num_carried - used))
        self._metrics["train"]["dynamic_sampling/first_round_groups"].append(float(first_size))
        if len(rounds) == 1 and first_size == num_groups and not fillers:
            # Nothing dropped: exactly TRL's step, logs included (deferred log-probs computed on the same rows).
            self._merge_logs(round_metrics, round_logs, rounds, rows=None, advantages=None)
            self._metrics["train"]["dynamic_sampling/gathered_bytes"].append(float(self._ds_moved_bytes))
            return self._fill_logps(first.output, deferred)
        batch, rows, advantages, fresh = self._assemble(rounds, chosen, fillers, local_rows=rollout.local_rows)
        self._metrics["train"]["dynamic_sampling/gathered_bytes"].append(float(self._ds_moved_bytes))
        self._merge_logs(round_metrics, round_logs, rounds, rows=rows, advantages=advantages)
        return self._fill_logps(batch, deferred, rows=fresh)

    def _update_skip_history(self, fresh_rounds: list[_Round]) -> None:
        """GRESO's per-prompt zero-variance streaks and exploration probability, after a step's rounds."""
        if self._ds_skip is None:
            return
        zero, total = 0, 0
        for round_ in fresh_rounds:
            keep = informative_groups(round_.metric, self.num_generations, self.args.dynamic_sampling_atol)
            zero, total = zero + int((~keep).sum()), total + keep.numel()
            if round_.indices is not None:
                for index, informative in zip(round_.indices, keep.tolist(), strict=True):
                    self._ds_skip.record(index, zero_variance=not informative)
        self._ds_skip.adapt(zero / max(total, 1))
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/skipped_prompts"].append(float(self._ds_skipped))
        metrics["dynamic_sampling/skip_exploration_p"].append(self._ds_skip.p)

    def _carry_allowed(self) -> bool:
        """Whether this run carries surplus groups over (``ds_rounds.carries_surplus``, the probe's rule too)."""
        return carries_surplus(
            self.args,
            vllm_correction=bool(self.use_vllm and getattr(self, "vllm_importance_sampling_correction", False)),
        )

    def _carry_surplus(
        self, rounds: list[_Round], surplus: list, round_logs: dict, num_groups: int, deferred: frozenset
    ) -> None:
        """Keep fresh surplus informative groups (at most ``dynamic_sampling_carry_over`` x the batch's groups) for
        the next step, on every process, with their old-policy (and reference) log-probs of this step's policy."""
        fresh = [(r, g) for r, g in surplus if not rounds[r].replicated]
        limit = int(float(getattr(self.args, "dynamic_sampling_carry_over", 0.0) or 0.0) * num_groups)
        fresh = fresh[:limit]
        carried_out = len(fresh) if self._carry_allowed() else 0
        self._metrics["train"]["dynamic_sampling/carried_groups_out"].append(float(carried_out))
        if not carried_out:
            return
        num_generations = self.num_generations
        selected = [(r, g * num_generations + j) for r, g in fresh for j in range(num_generations)]
        output = self._gather_rows(rounds, selected, self._skip_keys(rounds))
        output = self._fill_logps(output, deferred, metrics=False)
        offsets = [sum(r.num_rows for r in rounds[:i]) for i in range(len(rounds))]
        index = torch.tensor([offsets[r] + i for r, i in selected])
        cat = {
            name: torch.cat([getattr(r, name) for r in rounds]).index_select(0, index)
            for name in ("rewards_per_func", "metric", "lengths", "truncated")
        }
        # completions-table entries of those rows (TRL logged one per fresh row, in round order)
        base = sum(r.num_rows for r in rounds if r.replicated)
        picked = [offsets[r] + i - base for r, i in selected]
        entries: dict[str, Any] = {}
        total = sum(r.num_rows for r in rounds if not r.replicated)
        for key, value in round_logs.items():
            if isinstance(value, dict):
                entries[key] = {c: _pick(v, picked, total) for c, v in value.items() if len(v) == total}
            elif len(value) == total and key != "advantages":
                entries[key] = _pick(value, picked, total)
        self._ds_carry = _Round(output=output, seconds=0.0, replicated=True, log_entries=entries, **cat)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self._ds_enabled and self.model.training:
            # Tokens this micro-batch trains on; the optimizer gate reads the sum over the accumulation window.
            mask = inputs["completion_mask"]
            if "tool_mask" in inputs:
                mask = mask * inputs["tool_mask"]
            self._ds_window_tokens += int(mask.sum())
        return super().compute_loss(
            model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
        )

    def create_optimizer(self, *args: Any, **kwargs: Any):
        optimizer = super().create_optimizer(*args, **kwargs)
        if self._ds_enabled:
            self._gate_optimizer(self.optimizer)
        return optimizer

    def _save_extra_state(self, folder: str) -> None:
        """The refill stream, the informative-rate estimate, the skip history and the carried groups, written into
        the checkpoint being staged (``AtomicCheckpointMixin``: the one extra-state mechanism, so they are part of
        the atomic checkpoint)."""
        super()._save_extra_state(folder)
        if self._ds_stream is None or not self.args.should_save:
            return
        state = {"stream": self._ds_stream.state_dict(), "warned": self._ds_warned}
        state["informative_rate"] = self._ds_rate.state_dict()
        if self._ds_skip is not None:
            state["skip"] = self._ds_skip.state_dict()
        state["reward_range"] = [self._ds_reward_low, self._ds_reward_high]
        with open(os.path.join(folder, STATE_FILE), "w") as f:
            json.dump(state, f)
        if self._ds_carry is not None:
            torch.save(_round_to(self._ds_carry, "cpu").__dict__, os.path.join(folder, CARRY_FILE))

    def _load_extra_state(self, checkpoint: str) -> None:
        super()._load_extra_state(checkpoint)
        if self._ds_stream is None:
            return
        path = os.path.join(checkpoint, STATE_FILE)
        if os.path.exists(path):
            with open(path) as f:
                state = json.load(f)
            self._ds_stream.load_state_dict(state["stream"])
            self._ds_warned = state.get("warned", False)
            if "informative_rate" in state:
                self._ds_rate.load_state_dict(state["informative_rate"])
            if self._ds_skip is not None and "skip" in state:
                self._ds_skip.load_state_dict(state["skip"])
            carry = os.path.join(checkpoint, CARRY_FILE)
            self._ds_carry = None
            if os.path.exists(carry):
                saved = torch.load(carry, map_location="cpu", weights_only=False)
                self._ds_carry = _round_to(_Round(**saved), self.accelerator.device)
            self._ds_reward_low, self._ds_reward_high = state.get("reward_range", [float("inf"), float("-inf")])
        else:
            logger.warning(
                f"Resuming from {checkpoint} without {STATE_FILE}: the dynamic-sampling refill stream restarts from "
                "its beginning, so the resumed run will not reproduce an uninterrupted one exactly."
            )

    # -- the optimizer gate (a step that trains no token changes nothing) -------------------------------------------

    def _gate_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Skip ``optimizer.step()`` for an accumulation window in which no process trained a single token.

        Zero-weight filler groups give a zero gradient, but AdamW would still apply its momentum (and weight decay)
        and advance its step count. The gate wraps the torch optimizer's ``step`` (below accelerate's wrapper, which
        calls it), so the weights and the optimizer state (moments, step count) stay exactly as they were. The
        Trainer still counts the step: ``global_step`` and the LR schedule advance (the schedule stays a function of
        the step count, so ``max_steps``, logging, saving and exact resume are unchanged), and
        ``dynamic_sampling/skipped_optimizer_steps`` logs it. Not applied under DeepSpeed, whose engine owns the step.
        """
        if getattr(optimizer, "_trl_ext_gated", False):
            return
        if getattr(self, "is_deepspeed_enabled", False):
            logger.warning(
                "Dynamic sampling under DeepSpeed: an optimizer step whose batch is only zero-weight filler groups "
                "still applies the optimizer's momentum (the DeepSpeed engine owns the step)."
            )
            return
        inner_step = optimizer.step
        trainer = self

        def step(opt: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
            if trainer._window_trained_nothing():
                return None
            return inner_step(*args, **kwargs)

        optimizer.step = types.MethodType(step, optimizer)
        optimizer._trl_ext_gated = True

    def _window_trained_nothing(self) -> bool:
        tokens = torch.tensor(float(self._ds_window_tokens), device=self.accelerator.device)
        self._ds_window_tokens = 0
        if self.accelerator.num_processes > 1:
            tokens = self.accelerator.reduce(tokens, reduction="sum")
        empty = bool(tokens.item() == 0)
        self._metrics["train"]["dynamic_sampling/skipped_optimizer_steps"].append(float(empty))
        return empty

    # -- internals -----------------------------------------------------------------------------------------------

    def _run_round(self, inputs: list[dict[str, Any]]) -> _Round:
        started = time.perf_counter()
        self._ds_capture = None
        # PEFT with a KL term computes the reference with the adapter disabled inside TRL: not deferred (the context
        # could not be replayed); everything else is.
        self._ds_defer = None if self.beta != 0.0 and self.ref_model is None else set()
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            deferred, self._ds_defer = frozenset(self._ds_defer or ()), None
        capture, self._ds_capture = self._ds_capture, None
        if capture is None:
            raise RuntimeError(
                "Dynamic sampling found no rewards for this round: TRL's _generate_and_score_completions no longer "
                "calls _calculate_rewards. trl-ext is tested against trl 1.12 to 1.16; pin one of those versions."
            )
        finite = capture["metric"][torch.isfinite(capture["metric"])]
        if finite.numel():
            self._ds_reward_low = min(self._ds_reward_low, finite.min().item())
            self._ds_reward_high = max(self._ds_reward_high, finite.max().item())
        indices, self._ds_pending_indices = self._ds_pending_indices, None
        return _Round(
            output=output, seconds=time.perf_counter() - started, deferred=deferred, indices=indices, **capture
        )

    def _fill_logps(
        self, batch: dict[str, Any], deferred: frozenset, rows: torch.Tensor | None = None, metrics: bool = True
    ) -> dict[str, Any]:
        """Compute the deferred old-policy / reference log-probs for the rows of ``batch`` (the trained rows only),
        with TRL's own ``_get_per_token_logps_and_entropies`` on TRL's inputs (prompt + completion ids, their masks,
        the completion width, ``per_device_train_batch_size``); then, under vLLM's importance-sampling correction,
        the ratio of those rows (``importance_sampling_ratio``, TRL's formula) and its ``sampling/*`` metrics."""
        if not deferred:
            return batch
        from trl.models.utils import disable_gradient_checkpointing

        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        width = batch["completion_ids"].size(1)
        index = None if rows is None or bool(rows.all()) else rows.nonzero().flatten().to(ids.device)
        if index is not None and not self._ds_sharded_forward():
            # carried rows keep the log-probs of the policy that generated them: not computed again
            ids, mask = ids.index_select(0, index), mask.index_select(0, index)
            index_into = None
        else:
            # with sharded parameters every forward is collective: every process runs the pass over all its rows
            # (as many as every other process has), and only the fresh rows' values are kept
            index_into = index
        size = self.args.per_device_train_batch_size
        gc_kwargs = self.args.gradient_checkpointing_kwargs
        with torch.no_grad(), disable_gradient_checkpointing(self.model, gc_kwargs):
            for kind, key, model in (
                ("old", "old_per_token_logps", self.model),
                ("ref", "ref_per_token_logps", self.ref_model),
            ):
                if kind not in deferred or key not in batch or ids.size(0) == 0:
                    continue
                # batch_size by keyword: TRL 1.14 takes it keyword-only (``model, *args, batch_size=None``)
                values = self._get_per_token_logps_and_entropies(model, ids, mask, width, batch_size=size)[0]
                if index is None:
                    batch[key] = values
                else:
                    if index_into is not None:
                        values = values.index_select(0, index_into)
                    batch[key] = _pad_width(batch[key], width, 0, left=False)[:, :width].clone()
                    batch[key][index] = values.to(batch[key].dtype)
        if "old" in deferred and "importance_sampling_ratio" in batch and "sampling_per_token_logps" in batch:
            self._fill_importance_sampling(batch, metrics=metrics)
        return batch

    def _ds_sharded_forward(self) -> bool:
        """Whether a forward pass is a collective over the processes (DeepSpeed ZeRO-3 or FSDP shard the weights):
        every process must then run the same number of forward calls."""
        if getattr(self, "is_fsdp_enabled", False):
            return True
        if not getattr(self, "is_deepspeed_enabled", False):
            return False
        plugin = getattr(self.accelerator.state, "deepspeed_plugin", None)
        return getattr(plugin, "zero_stage", 0) == 3

    def _fill_importance_sampling(self, batch: dict[str, Any], metrics: bool = True) -> None:
        """vLLM's importance-sampling ratio of the trained rows, and TRL's ``sampling/*`` metrics for them."""
        loss_mask = batch["completion_mask"] * batch["tool_mask"] if "tool_mask" in batch else batch["completion_mask"]
        old, sampled = batch["old_per_token_logps"], batch["sampling_per_token_logps"]
        mode = self.vllm_importance_sampling_mode
        ratio = importance_sampling_ratio(
            old,
            sampled,
            loss_mask,
            mode,
            self.vllm_importance_sampling_clip_min,
            self.vllm_importance_sampling_clip_max,
        )
        batch["importance_sampling_ratio"] = ratio
        if not metrics:
            return
        metrics, gather = self._metrics["train"], self.accelerator.gather
        zero = torch.tensor(0.0, device=old.device)
        mask = loss_mask.bool()
        delta = torch.abs(old - sampled)[mask]
        delta = delta[~torch.isnan(delta)]
        metrics["sampling/sampling_logp_difference/mean"].append(
            gather(delta.mean() if delta.numel() else zero).mean().item()
        )
        metrics["sampling/sampling_logp_difference/max"].append(
            gather(delta.max() if delta.numel() else zero).max().item()
        )
        flat = ratio.flatten() if mode.startswith("sequence") else ratio[mask]
        metrics["sampling/importance_sampling_ratio/min"].append(
            gather(flat.min() if flat.numel() else zero).min().item()
        )
        metrics["sampling/importance_sampling_ratio/mean"].append(
            gather(flat.mean() if flat.numel() else zero).mean().item()
        )
        metrics["sampling/importance_sampling_ratio/max"].append(
            gather(flat.max() if flat.numel() else zero).max().item()
        )

    def _select(self, rounds: list[_Round], num_groups: int) -> tuple[list, list, list]:
        """(round, group) pairs: the informative groups trained (in round order), the fillers (uninformative groups
        of the last rounds, only when the round limit was hit) and the surplus (informative, discarded)."""
        informative, uninformative = [], []
        for index, round_ in enumerate(rounds):
            keep = informative_groups(round_.metric, self.num_generations, self.args.dynamic_sampling_atol)
            for group in range(keep.numel()):
                (informative if keep[group] else uninformative).append((index, group))
        chosen, surplus = informative[:num_groups], informative[num_groups:]
        num_filler = num_groups - len(chosen)
        fillers = uninformative[len(uninformative) - num_filler :] if num_filler else []
        return chosen, fillers, surplus

    def _refill_inputs(self, inputs: list[dict[str, Any]], num_prompts: int) -> list[dict[str, Any]]:
        """Fresh prompts for one refill round of ``num_prompts`` groups (a multiple of the number of processes: each
        process generates ``num_prompts / world`` whole groups), laid out as TRL's RepeatSampler lays out a batch."""
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        if num_prompts % world:
            raise ValueError(f"A refill of {num_prompts} groups cannot be split evenly over {world} processes.")
        local_rows = num_prompts * self.num_generations // world
        # identical on every rank (same seed, same state): each rank reads the whole stream, then takes its slice
        if isinstance(self._ds_stream, IterablePromptStream):
            prompts = self._ds_stream.take_rows(num_prompts)
        else:
            indices = self._take_indices(num_prompts)
            self._ds_pending_indices = indices
            prompts = [self.train_dataset[i] for i in indices]
        global_rows = [row for row in prompts for _ in range(self.num_generations)]
        keys = set(inputs[0].keys())
        return [
            {k: v for k, v in row.items() if k in keys}
            for row in global_rows[rank * local_rows : (rank + 1) * local_rows]
        ]

    def _take_indices(self, num_prompts: int) -> list[int]:
        """``num_prompts`` training-set indices from the refill stream; with ``dynamic_sampling_skip_predicted``,
        a prompt predicted to give a zero-variance group is skipped (GRESO), at most 10 candidates per prompt."""
        if self._ds_skip is None:
            return self._ds_stream.take(num_prompts)
        out: list[int] = []
        attempts = 0
        while len(out) < num_prompts:
            index = self._ds_stream.take(1)[0]
            attempts += 1
            if attempts <= 10 * num_prompts and self._ds_skip.should_skip(index):
                self._ds_skipped += 1
                continue
            out.append(index)
        return out

    def _describe(self, per_func: torch.Tensor, lengths: torch.Tensor, truncated: torch.Tensor) -> dict[str, float]:
        """TRL's per-batch metrics (``reward``, ``reward_std``, ``frac_reward_zero_std``, ``rewards/<f>/*``,
        ``completions/*``) for the given rows, with TRL's definitions. ``frac_reward_zero_std`` is the fraction of
        rows whose group's rewards have zero std."""
        out: dict[str, float] = {}
        for i, name in enumerate(self.reward_func_names):
            out[f"rewards/{name}/mean"] = torch.nanmean(per_func[:, i]).item()
            out[f"rewards/{name}/std"] = nanstd(per_func[:, i]).item()
        rewards = (per_func * self.reward_weights.to(per_func.dtype).unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
        out["reward"] = torch.nanmean(rewards).item()
        out["reward_std"] = nanstd(rewards).item()
        group_std = nanstd(rewards.view(-1, self.num_generations), dim=1)
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

    def _merge_logs(
        self,
        round_metrics: dict[str, list],
        round_logs: dict[str, Any],
        rounds: list[_Round],
        rows: torch.Tensor | None,
        advantages: torch.Tensor | None,
    ) -> None:
        """Move what TRL logged during the rounds into the real buffers: the per-batch metrics and the completions
        table describe the trained batch (global ``rows`` of the concatenated rounds; ``None``: the one round as
        is); what was generated is logged as ``dynamic_sampling/generated_<metric>``."""
        metrics = self._metrics["train"]
        per_func = torch.cat([r.rewards_per_func for r in rounds])
        lengths = torch.cat([r.lengths for r in rounds])
        truncated = torch.cat([r.truncated for r in rounds])
        fresh = [r for r in rounds if not r.replicated]
        generated = self._describe(
            torch.cat([r.rewards_per_func for r in fresh]),
            torch.cat([r.lengths for r in fresh]),
            torch.cat([r.truncated for r in fresh]),
        )
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
        for key, value in generated.items():
            metrics[f"dynamic_sampling/generated_{key}"].append(value)
        trained = None
        if rows is not None:
            rows_cpu = rows.cpu()
            trained = self._describe(per_func[rows_cpu], lengths[rows_cpu], truncated[rows_cpu])
        for key, values in round_metrics.items():
            if key == "num_tokens":  # TRL assigns the running total
                metrics[key] = list(values[-1:])
            elif trained is not None and key in trained:
                metrics[key].append(trained[key])
            else:
                metrics[key].extend(values)

        total = per_func.size(0)
        index = None if rows is None else rows.cpu().tolist()
        for key, value in round_logs.items():
            if isinstance(value, dict):
                for column, entries in value.items():
                    self._logs[key][column].extend(_pick(entries, index, total))
            elif key == "advantages" and advantages is not None:
                self._logs[key].extend(advantages.tolist())
            else:
                self._logs[key].extend(_pick(value, index, total))

    def _log_round_stats(self, rounds: list[_Round], num_groups: int, num_surplus: int, carried_used: int = 0) -> None:
        args, metrics = self.args, self._metrics["train"]
        num_generations = self.num_generations
        all_rewards = torch.cat([r.metric for r in rounds])
        keep = informative_groups(all_rewards, self.num_generations, args.dynamic_sampling_atol)
        if args.dynamic_sampling_reward_range is not None:
            low, high = args.dynamic_sampling_reward_range
        else:  # the extremes seen so far in training (inf / -inf before any: then no group is labelled)
            low, high = self._ds_reward_low, self._ds_reward_high
        atol = args.dynamic_sampling_atol
        stats = group_stats(all_rewards, num_generations, atol, reward_max=high, reward_min=low)
        generated = keep.numel()
        too_easy, too_hard = stats.num_all_max / generated, stats.num_all_min / generated
        kept = min(int(keep.sum()) + carried_used, num_groups)  # the batch's informative groups, carried included
        dropped_time = 0.0
        for round_ in rounds:
            round_keep = informative_groups(round_.metric, self.num_generations, atol)
            dropped_time += round_.seconds * (1.0 - round_keep.float().mean().item())
        last = rounds[-1]
        metrics["dynamic_sampling/rounds"].append(float(len(rounds)))
        metrics["dynamic_sampling/generated_groups"].append(float(generated))
        metrics["dynamic_sampling/informative_rate_estimate"].append(self._ds_rate.estimate())
        metrics["dynamic_sampling/kept_group_frac"].append(int(keep.sum()) / generated)
        metrics["dynamic_sampling/all_max_frac"].append(too_easy)
        metrics["dynamic_sampling/all_min_frac"].append(too_hard)
        metrics["dynamic_sampling/filler_groups"].append(float(num_groups - kept))
        metrics["dynamic_sampling/surplus_groups"].append(float(num_surplus))
        metrics["dynamic_sampling/limit_hit"].append(float(kept < num_groups))
        metrics["dynamic_sampling/generation_time"].append(sum(r.seconds for r in rounds))
        metrics["dynamic_sampling/dropped_time"].append(dropped_time)
        # Surplus groups all come from the last round: the batch was full as soon as it had enough.
        metrics["dynamic_sampling/surplus_time"].append(last.seconds * num_surplus * num_generations / last.num_rows)
        self._ds_empty_steps = self._ds_empty_steps + 1 if kept == 0 else 0
        if kept < num_groups and not self._ds_warned:
            self._ds_warned = True
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
                f"Dynamic sampling spent its generation budget (dynamic_sampling_max_rounds={args.dynamic_sampling_max_rounds} "
                f"generation batches) with only "
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

    def _skip_keys(self, rounds: list[_Round]) -> set[str]:
        """Per-row keys whose values in the fresh rounds are placeholders (deferred log-probs) and are not moved."""
        deferred = frozenset().union(*(r.deferred for r in rounds if not r.replicated))
        skip = set()
        if "old" in deferred:
            skip |= {"old_per_token_logps", "importance_sampling_ratio"}
        if "ref" in deferred:
            skip.add("ref_per_token_logps")
        return skip

    def _gather_rows(self, rounds: list[_Round], selected: list[tuple[int, int]], skip: set[str]) -> dict:
        """The per-row tensors of ``selected`` (round, global row) pairs, in that order, on every process.

        Only the selected rows move: round k's global row i lives on process i // (rows_k / world) at local index
        i % (rows_k / world); each process contributes the selected rows it holds (padded to the same count and
        width), one all-gather per key. Rows of a carried round (``replicated``) are on every process already. Keys in
        ``skip`` are not moved: zeros for fresh rows, the stored values for carried rows."""
        accelerator = self.accelerator
        world, rank = accelerator.num_processes, accelerator.process_index
        pad_id = self._tokenizer.pad_token_id
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
            if key in _SCALARS or key in _PER_ROW:
                continue
            pad_value = pad_id if key.endswith("_ids") else (1.0 if key == "tool_mask" else 0)
            left = key in _LEFT_PADDED
            wide = template.dim() > 1
            width = max(r.output[key].size(1) for r in rounds) if wide else 0

            def pad(t: torch.Tensor, to: int, pad_value=pad_value, left=left, wide=wide) -> torch.Tensor:
                return _pad_width(t, to, pad_value, left) if wide else t

            parts = []
            if fresh and key in skip:
                parts.append(
                    torch.zeros(len(fresh), *template.shape[1:], dtype=template.dtype, device=template.device)
                )
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
                    torch.cat(
                        [rounds[selected[n][0]].output[key][selected[n][1] : selected[n][1] + 1] for n in carried]
                    )
                )
            if wide:
                full = max(p.size(1) for p in parts)
                parts = [pad(p, full) for p in parts]
            out[key] = torch.cat(parts).index_select(0, perm)
        self._ds_moved_bytes += moved
        return out

    def _assemble(
        self, rounds: list[_Round], chosen: list, fillers: list, local_rows: int
    ) -> tuple[dict, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Join the chosen groups (then the fillers) of all rounds into one generation batch with the first round's
        shapes; advantages are recomputed on that batch. Returns this rank's slice, the selected global rows of the
        concatenated rounds, their advantages and which local rows still need their deferred log-probs (the fresh
        ones; a carried row keeps those of the policy that generated it)."""
        accelerator = self.accelerator
        num_generations = self.num_generations
        keys = list(rounds[-1].output.keys())
        unknown = [k for k in keys if k not in _LEFT_PADDED | _RIGHT_PADDED | _PER_ROW | _SCALARS]
        if unknown:
            raise NotImplementedError(
                f"Dynamic sampling cannot regroup the generation outputs {unknown} (multimodal or tool inputs). "
                "Set dynamic_sampling=False for this dataset."
            )

        # 1-2. The selected global rows of the concatenated rounds (informative groups in round order, carried ones
        #      first, then fillers), and only those rows moved between processes.
        offsets = [sum(r.num_rows for r in rounds[:i]) for i in range(len(rounds))]
        selected = [(r, g * num_generations + j) for r, g in chosen + fillers for j in range(num_generations)]
        rows = torch.tensor([offsets[r] + i for r, i in selected], device=accelerator.device)
        skip = self._skip_keys(rounds)
        batch = self._gather_rows(rounds, selected, skip)
        fresh = torch.tensor([not rounds[r].replicated for r, _ in selected], dtype=torch.bool)
        width = batch["completion_ids"].size(1)
        for key in _RIGHT_PADDED & batch.keys():
            if batch[key].dim() > 1 and batch[key].size(1) > 1:
                batch[key] = _pad_width(batch[key], width, 1.0 if key == "tool_mask" else 0, left=False)[:, :width]

        # 3. Advantages of the batch that is trained: TRL's formula (scale_rewards, multi_objective_aggregation)
        #    over the chosen rows' stored rewards, with this batch's group / batch statistics. Fillers: zero.
        num_chosen = len(chosen) * num_generations
        per_func = torch.cat([r.rewards_per_func for r in rounds])[rows.cpu()]
        advantages = torch.zeros(rows.numel(), dtype=per_func.dtype)
        if num_chosen:
            advantages[:num_chosen] = group_advantages(
                per_func[:num_chosen],
                self.reward_weights.cpu(),
                num_generations,
                scale_rewards=self.scale_rewards,
                multi_objective_aggregation=getattr(self, "multi_objective_aggregation", "sum_then_normalize"),
            )
        batch["advantages"] = advantages.to(accelerator.device)

        # 4. Fillers carry no signal: zero loss mask (and so no token in the normalizer).
        if fillers:
            batch["completion_mask"][num_chosen:] = 0
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
        return local, rows, advantages, fresh[start : start + local_rows]


def _round_to(round_: _Round, device: Any) -> _Round:
    """A copy of a carried round whose output tensors are on ``device`` (captures stay on the CPU)."""
    output = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in round_.output.items()}
    return _Round(**{**round_.__dict__, "output": output})


def _scratch_logs(logs: dict[str, Any]) -> dict[str, Any]:
    """Unbounded buffers with the keys of TRL's ``_logs`` (its deques keep only one generation batch)."""
    return {key: defaultdict(list) if isinstance(value, dict) else [] for key, value in logs.items()}


def _pick(entries: list, index: list[int] | None, total: int) -> list:
    """The entries of the selected rows when ``entries`` holds one per generated row; otherwise all of them."""
    if index is None or len(entries) != total:
        return list(entries)
    return [entries[i] for i in index]
