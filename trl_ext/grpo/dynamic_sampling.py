"""DAPO dynamic sampling (arXiv 2503.14476, section 3.2, Eq. 11) over TRL's ``GRPOTrainer``: the trainer side.

After TRL generates and scores a generation batch, groups whose *accuracy* is all equal are dropped, and completions
are generated for fresh training prompts until the batch again holds as many informative groups as it was meant to
(docs/DYNAMIC_SAMPLING.md). The pieces, each in its own module:

- ``ds_sampler.DynamicSampler``: the core on plain tensors (rounds to generate, groups to train, surplus to carry,
  the informative-rate estimate, the refill prompt stream, GRESO's skip history, the step's figures).
- ``ds_batch``: the kept groups of all rounds assembled into one batch, only the selected rows moved between
  processes; advantages recomputed with TRL's formula on the trained batch; fillers zero-weighted.
- ``deferred_logps``: TRL's no-grad old-policy / reference passes deferred while rounds run, then computed for the
  trained rows only.
- ``ds_logs``: logs that describe the trained batch (TRL's per-call logs held in scratch buffers meanwhile).
- ``step_gate.UntrainedStepGate``: an optimizer step whose window trained no token changes nothing (a callback).

How it plugs into TRL (1.12 to 1.16) without copying TRL code: ``_generate_and_score_completions`` (the one hook)
calls ``super()`` once per round and reads what the round scored (``scored_rounds.ScoredRoundsMixin``: the
per-function rewards in global order, groups contiguous, and the completion lengths / truncation);
``_get_per_token_logps_and_entropies`` returns placeholders while a round runs. When every group of the
first round is informative (and nothing was carried) the output of ``super()`` is returned with its deferred
log-probs computed on the same rows by the same method: the step is exactly TRL's (tested bit for bit).

The metric (``dynamic_sampling_metric``): the weighted sum of the named reward functions; by default every reward
function except the shaping ones (``trl_ext.rewards.shaping``): DAPO filters on accuracy, as verl does on ``acc``.

State (the sampler's stream position, rate estimate, skip history, reward range and carried groups) is written into
every checkpoint (``dynamic_sampling_state.json``, ``dynamic_sampling_carry.pt``) and restored on resume.

Limits: text-only batches (multimodal keys raise); the step gate is not applied under DeepSpeed. With ``loss_type``
``"grpo"`` or ``"dr_grpo"`` the loss is normalized by the number of rows, so filler rows (only when the budget runs
out) count in the denominator like TRL's masked truncated completions: the step is scaled by the kept fraction.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import defaultdict
from collections.abc import Generator
from typing import Any

import torch
from datasets import IterableDataset

from trl_ext.grpo import ds_batch, ds_logs
from trl_ext.grpo.deferred_logps import DeferredPasses, can_defer, fill_deferred_logps
from trl_ext.grpo.ds_rounds import carries_surplus
from trl_ext.grpo.ds_sampler import DynamicSampler, Rollout, Round
from trl_ext.grpo.ds_skip import SkipPredictor
from trl_ext.grpo.prompt_stream import IterablePromptStream, PromptStream
from trl_ext.grpo.step_gate import UntrainedStepGate
from trl_ext.reliability.checkpoints import AtomicCheckpointMixin
from trl_ext.reliability.checks import tokenizer_of
from trl_ext.rewards.shaping import is_shaping_reward
from trl_ext.scoring import combine_rewards

logger = logging.getLogger(__name__)

STATE_FILE = "dynamic_sampling_state.json"
CARRY_FILE = "dynamic_sampling_carry.pt"
_STREAM_SEED_OFFSET = 1_000_003  # keeps the refill stream independent of TRL's sampler (seeded with args.seed)

__all__ = ["DynamicSamplingMixin", "IterablePromptStream", "PromptStream", "Round", "Rollout", "tokenizer_of"]


def metric_columns(reward_funcs: list, names: list[str], requested: Any) -> list[int]:
    """Indices of the reward functions whose weighted sum decides whether a group is informative."""
    marked = [is_shaping_reward(func) for func in reward_funcs]
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


class DynamicSamplingMixin(AtomicCheckpointMixin):
    """Adds ``dynamic_sampling`` (a ``GRPOFamilyConfig`` field) to a TRL ``GRPOTrainer`` subclass (module docstring).
    With ``args.dynamic_sampling`` False (or a plain ``GRPOConfig``) every hook defers to TRL unchanged."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deferred_passes = DeferredPasses()
        self.dynamic_sampler: DynamicSampler | None = None
        self.step_gate: UntrainedStepGate | None = None
        self.metric_columns: list[int] = []
        if not self.dynamic_sampling_enabled:
            return
        self.metric_columns = metric_columns(
            self.reward_funcs, list(self.reward_func_names), getattr(self.args, "dynamic_sampling_metric", None)
        )
        self.dynamic_sampler = DynamicSampler(
            self.args, self.num_generations, self._refill_stream(), self.carries_surplus(), self._skip_predictor()
        )
        if getattr(self, "is_deepspeed_enabled", False):
            logger.warning(
                "Dynamic sampling under DeepSpeed: an optimizer step whose batch is only zero-weight filler groups "
                "still applies the optimizer's momentum (the DeepSpeed engine owns the step)."
            )
        else:
            self.step_gate = UntrainedStepGate(self.accelerator, self._record_skipped_step)
            self.add_callback(self.step_gate)

    @property
    def dynamic_sampling_enabled(self) -> bool:
        return bool(getattr(self.args, "dynamic_sampling", False))

    def _refill_stream(self) -> PromptStream | IterablePromptStream:
        seed = self.args.seed + _STREAM_SEED_OFFSET
        if isinstance(self.train_dataset, IterableDataset):
            shuffle = bool(getattr(self, "shuffle_dataset", True))
            return IterablePromptStream(self.train_dataset, seed=seed, shuffle=shuffle)
        if hasattr(self.train_dataset, "__len__"):
            return PromptStream(len(self.train_dataset), seed=seed)
        raise ValueError(
            f"dynamic_sampling=True needs a datasets.Dataset or datasets.IterableDataset train_dataset to draw refill "
            f"prompts from; got {type(self.train_dataset).__name__}. Wrap it (e.g. Dataset.from_list or "
            "IterableDataset.from_generator) or set dynamic_sampling=False."
        )

    def _skip_predictor(self) -> SkipPredictor | None:
        if not getattr(self.args, "dynamic_sampling_skip_predicted", False):
            return None
        if isinstance(self.train_dataset, IterableDataset):
            raise ValueError(
                "dynamic_sampling_skip_predicted=True keeps a history per training-set index, which an IterableDataset "
                "does not have. Use a datasets.Dataset, or set dynamic_sampling_skip_predicted=False."
            )
        seed = self.args.seed + _STREAM_SEED_OFFSET
        return SkipPredictor(seed=seed, target=self.args.dynamic_sampling_skip_target)

    def carries_surplus(self) -> bool:
        """Whether this run carries surplus groups over (``ds_rounds.carries_surplus``, the probe's rule too)."""
        return carries_surplus(
            self.args,
            vllm_correction=bool(self.use_vllm and getattr(self, "vllm_importance_sampling_correction", False)),
        )

    # -- TRL hooks -----------------------------------------------------------------------------------------------

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        if self.deferred_passes.active and not torch.is_grad_enabled():
            kind = "ref" if self.ref_model is not None and model is self.ref_model else "old"
            return self.deferred_passes.defer(kind, input_ids.size(0), logits_to_keep, input_ids.device), None, None
        return super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
        )

    def _generate_and_score_completions(self, inputs):
        if not (self.dynamic_sampling_enabled and self.model.training):
            return super()._generate_and_score_completions(inputs)
        rounds = self.rollout_rounds(inputs)
        try:
            request = next(rounds)
            while True:
                request = rounds.send(self.run_round(*request))
        except StopIteration as stop:
            return self.train_batch(stop.value)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.step_gate is not None and self.model.training:
            self.step_gate.count(inputs)
        return super().compute_loss(
            model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
        )

    # -- the rounds of one step (public: overlapped generation drives them) -----------------------------------------

    def rollout_rounds(
        self, inputs: list[dict[str, Any]], from_stream: bool = False
    ) -> Generator[tuple[list[dict[str, Any]], tuple], Round, Rollout]:
        """The rounds of one generation batch: yields ``(round inputs, scratch buffers)``, is sent the ``Round`` TRL
        generated and scored for them (``run_round``), returns the ``Rollout`` that ``train_batch`` turns into the
        trained batch. ``from_stream``: the first round too comes from the refill stream (``inputs`` then only gives
        the layout: rows per process and columns)."""
        scratch = (defaultdict(list), ds_logs.scratch_logs(self._logs))
        world = self.accelerator.num_processes
        num_groups = len(inputs) * world // self.num_generations  # TRL's generation batch, in groups
        plan = self.dynamic_sampler.plan(num_groups, len(inputs), world, scratch, from_stream=from_stream)
        try:
            request = next(plan)
            while True:
                round_inputs = inputs if request.groups is None else self._refill_inputs(inputs, request.groups)
                request = plan.send((yield round_inputs, scratch))
        except StopIteration as stop:
            return stop.value

    def run_round(self, inputs: list[dict[str, Any]], scratch: tuple[dict, dict]) -> Round:
        """One round: TRL's generation and scoring, its no-grad log-prob passes deferred; TRL's per-call metrics and
        completions table go to the step's ``scratch`` buffers (``ds_logs``)."""
        started = time.perf_counter()
        self.last_round = None
        output, deferred = self.generate_deferred(inputs, scratch)
        scored, self.last_round = self.last_round, None  # ScoredRoundsMixin: what TRL scored in this round
        capture = {**scored, "metric": self.dynamic_sampling_metric(scored["rewards_per_func"])}
        sampler = self.dynamic_sampler
        sampler.observe(capture["metric"])
        indices, sampler.pending_indices = sampler.pending_indices, None
        return Round(
            output=output, seconds=time.perf_counter() - started, deferred=deferred, indices=indices, **capture
        )

    def generate_deferred(self, inputs: list[dict[str, Any]], scratch: tuple[dict, dict]) -> tuple[dict, frozenset]:
        """TRL's ``_generate_and_score_completions`` on ``inputs`` with its no-grad log-prob passes deferred and its
        per-call metrics and completions table written to ``scratch``; returns its output and the deferred passes."""
        metrics, logs = self._metrics["train"], self._logs
        self._metrics["train"], self._logs = scratch
        if can_defer(self):
            self.deferred_passes.start()
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            deferred = self.deferred_passes.stop()
            self._metrics["train"], self._logs = metrics, logs
        return output, deferred

    def train_batch(self, rollout: Rollout) -> dict[str, Any]:
        """The trained batch of a finished rollout: the kept groups assembled, their deferred log-probs computed with
        the current weights, the logs of what is trained."""
        sampler, metrics = self.dynamic_sampler, self._metrics["train"]
        rounds, first, num_groups = rollout.rounds, rollout.first, rollout.num_groups
        round_metrics, _ = rollout.scratch
        selection = sampler.finish(rollout)
        fresh_rounds = [r for r in rounds if not r.replicated]
        for key, value in sampler.update_skip_history(fresh_rounds).items():
            metrics[key].append(value)
        used = sum(1 for r, _ in selection.chosen if rounds[r].replicated)
        stats = sampler.round_stats(fresh_rounds, num_groups, len(selection.surplus), carried_used=used)
        for key, value in stats.items():
            metrics[key].append(value)
        deferred = first.deferred
        if deferred and self.use_vllm and getattr(self, "vllm_importance_sampling_correction", False):
            # TRL's sampling/* metrics of the rounds were computed from placeholders: logged again for the batch.
            for key in [k for k in round_metrics if k.startswith("sampling/")]:
                del round_metrics[key]
        moved = self._carry_surplus(rollout, selection.surplus, deferred)
        metrics["dynamic_sampling/carried_groups_used"].append(float(used))
        metrics["dynamic_sampling/carried_groups_expired"].append(float(rollout.num_carried - used))
        metrics["dynamic_sampling/first_round_groups"].append(float(rollout.first_size))
        names, weights = list(self.reward_func_names), self.reward_weights.cpu()
        if len(rounds) == 1 and rollout.first_size == num_groups and not selection.fillers:
            # Nothing dropped: exactly TRL's step, logs included (deferred log-probs computed on the same rows).
            ds_logs.merge_round_logs(
                metrics, self._logs, rollout.scratch, rounds, None, None, names, weights, self.num_generations
            )
            metrics["dynamic_sampling/gathered_bytes"].append(float(moved))
            return fill_deferred_logps(self, first.output, deferred)
        batch, rows, advantages, fresh, gathered = ds_batch.assemble(
            rounds,
            selection.chosen,
            selection.fillers,
            rollout.local_rows,
            self.accelerator,
            tokenizer_of(self.processing_class).pad_token_id,
            self.reward_weights,
            self.num_generations,
            self.scale_rewards,
            getattr(self, "multi_objective_aggregation", "sum_then_normalize"),
        )
        metrics["dynamic_sampling/gathered_bytes"].append(float(moved + gathered))
        ds_logs.merge_round_logs(
            metrics, self._logs, rollout.scratch, rounds, rows, advantages, names, weights, self.num_generations
        )
        return fill_deferred_logps(self, batch, deferred, rows=fresh)

    # -- internals -----------------------------------------------------------------------------------------------

    def _record_skipped_step(self, skipped: float) -> None:
        self._metrics["train"]["dynamic_sampling/skipped_optimizer_steps"].append(skipped)

    def dynamic_sampling_metric(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """Per completion, what decides whether its group is informative (DAPO Eq. 11's accuracy): the weighted sum of
        the ``dynamic_sampling_metric`` functions' rewards, NaN where none of them scored it."""
        columns = self.metric_columns
        weights = self.reward_weights.detach().cpu()[columns]
        return combine_rewards(rewards_per_func.detach().cpu()[:, columns], weights)

    def _carry_surplus(self, rollout: Rollout, surplus: list, deferred: frozenset) -> int:
        """Keep fresh surplus informative groups (at most ``dynamic_sampling_carry_over`` x the batch's groups) for
        the next step, on every process, with their old-policy (and reference) log-probs of this step's policy.
        Returns the bytes this process received."""
        rounds = rollout.rounds
        fresh = [(r, g) for r, g in surplus if not rounds[r].replicated][
            : self.dynamic_sampler.carry_limit(rollout.num_groups)
        ]
        carried_out = len(fresh) if self.carries_surplus() else 0
        self._metrics["train"]["dynamic_sampling/carried_groups_out"].append(float(carried_out))
        if not carried_out:
            return 0
        selected = ds_batch.global_rows(rounds, fresh, self.num_generations)
        pad_id = tokenizer_of(self.processing_class).pad_token_id
        output, moved = ds_batch.gather_rows(
            rounds, selected, ds_batch.deferred_keys(rounds), self.accelerator, pad_id
        )
        output = fill_deferred_logps(self, output, deferred, metrics=False)
        offsets = [sum(r.num_rows for r in rounds[:i]) for i in range(len(rounds))]
        index = torch.tensor([offsets[r] + i for r, i in selected])
        cat = {
            name: torch.cat([getattr(r, name) for r in rounds]).index_select(0, index)
            for name in ("rewards_per_func", "metric", "lengths", "truncated")
        }
        entries = ds_logs.carried_log_entries(rounds, selected, rollout.scratch[1])
        self.dynamic_sampler.carry = Round(output=output, seconds=0.0, replicated=True, log_entries=entries, **cat)
        return moved

    def _refill_inputs(self, inputs: list[dict[str, Any]], num_prompts: int) -> list[dict[str, Any]]:
        """Fresh prompts for one round of ``num_prompts`` groups (a multiple of the number of processes: each process
        generates ``num_prompts / world`` whole groups), laid out as TRL's RepeatSampler lays out a batch."""
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        if num_prompts % world:
            raise ValueError(f"A refill of {num_prompts} groups cannot be split evenly over {world} processes.")
        local_rows = num_prompts * self.num_generations // world
        # identical on every rank (same seed, same state): each rank reads the whole stream, then takes its slice
        stream = self.dynamic_sampler.stream
        if isinstance(stream, IterablePromptStream):
            prompts = stream.take_rows(num_prompts)
        else:
            prompts = [self.train_dataset[i] for i in self.dynamic_sampler.take_indices(num_prompts)]
        global_rows = [row for row in prompts for _ in range(self.num_generations)]
        keys = set(inputs[0].keys())
        return [
            {k: v for k, v in row.items() if k in keys}
            for row in global_rows[rank * local_rows : (rank + 1) * local_rows]
        ]

    # -- checkpoint state ----------------------------------------------------------------------------------------

    def _save_extra_state(self, folder: str) -> None:
        super()._save_extra_state(folder)
        sampler = self.dynamic_sampler
        if sampler is None or not self.args.should_save:
            return
        with open(os.path.join(folder, STATE_FILE), "w") as f:
            json.dump(sampler.state_dict(), f)
        if sampler.carry is not None:
            torch.save(sampler.carry.to("cpu").__dict__, os.path.join(folder, CARRY_FILE))

    def _load_extra_state(self, checkpoint: str) -> None:
        super()._load_extra_state(checkpoint)
        sampler = self.dynamic_sampler
        if sampler is None:
            return
        path = os.path.join(checkpoint, STATE_FILE)
        if not os.path.exists(path):
            logger.warning(
                f"Resuming from {checkpoint} without {STATE_FILE}: the dynamic-sampling refill stream restarts from "
                "its beginning, so the resumed run will not reproduce an uninterrupted one exactly."
            )
            return
        with open(path) as f:
            sampler.load_state_dict(json.load(f))
        carry = os.path.join(checkpoint, CARRY_FILE)
        sampler.carry = None
        if os.path.exists(carry):
            saved = torch.load(carry, map_location="cpu", weights_only=False)
            sampler.carry = Round(**saved).to(self.accelerator.device)
