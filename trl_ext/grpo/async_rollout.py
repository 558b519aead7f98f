"""Generation that overlaps training: one-step off-policy rollouts over TRL's vLLM server mode.

While generation batch k trains, the vLLM server generates the first round of batch k+1 with the weights batch k
started from. Only the engine call runs in the background and no TRL generation code is copied: ``PrefetchingClient``
wraps TRL's ``VLLMClient``, and TRL's own ``_generate_and_score_completions`` later runs the round, its
``vllm_client.generate`` call receiving the prefetched completions. With dynamic sampling the groups the step will
likely need are submitted ahead (``sizing.ahead_round_sizes``), because a refill the trainer waits for stalls the
whole step; they go as TRL's batch and then half batches, so the step scores at most half a batch past the point
where it is full, and an unused one is dropped (``async/unused_rounds``).

Batch k+1 is sampled from pi_k and trained from pi_{k+1} (``async/staleness``). The lag sits in the importance weight
of TRL's vLLM correction, ``exp(old - sampling)``: hence ``vllm_importance_sampling_correction=True``. The rounds in
flight are checkpointed (``async_rollout.pt``) for exact resume. Not supported (construction fails naming the field):
tools, environments, ``rollout_func``, multimodal prompts, PEFT, an ``IterableDataset``. Details:
docs/ASYNC_GENERATION.md.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from typing import Any

import torch
from accelerate.utils import gather_object

from trl_ext.grpo.async_checks import check_async_trainer
from trl_ext.grpo.dynamic_sampling.loop import refill_inputs, sample_informative_batch
from trl_ext.grpo.dynamic_sampling.prompts import PromptStream
from trl_ext.grpo.dynamic_sampling.sizing import ahead_round_sizes, round_cap
from trl_ext.grpo.prefetching_client import PrefetchingClient, engine_sampling_params
from trl_ext.grpo.trainers import DAPOTrainer, GRPOTrainer, GSPOTokenTrainer, GSPOTrainer

logger = logging.getLogger(__name__)

ASYNC_STATE_FILE = "async_rollout_state.json"
ASYNC_ROLLOUT_FILE = "async_rollout.pt"
_STREAM_SEED_OFFSET = 2_000_029  # the prompt stream of the prefetched rounds, independent of the others


class AsyncGenerationMixin:
    """``async_generation`` for the GRPO-family trainers (module docstring); with the switch off it defers to TRL."""

    overlaps_generation = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefetched: list[tuple[list[dict], list[int]]] = []  # the rounds in flight: their inputs and prompts
        self.engine_block: int | None = None  # the generation block whose weights the server holds
        self.prefetch_stream: PromptStream | None = None
        if not self.args.async_generation:
            return
        check_async_trainer(self)
        self.prefetch_stream = PromptStream(len(self.train_dataset), seed=self.args.seed + _STREAM_SEED_OFFSET)
        generation = self.vllm_generation
        if self.accelerator.is_main_process and not isinstance(generation.vllm_client, PrefetchingClient):
            generation.vllm_client = PrefetchingClient(generation.vllm_client)

    @property
    def prefetching_client(self) -> PrefetchingClient | None:
        return self.vllm_generation.vllm_client if self.accelerator.is_main_process else None

    def train(self, *args: Any, **kwargs: Any):
        try:
            return super().train(*args, **kwargs)
        finally:
            if self.args.async_generation and self.prefetching_client is not None:
                self.prefetching_client.wait_idle()  # no request outlives train()

    def _generate_and_score_completions(self, inputs):
        if not (self.args.async_generation and self.model.training):
            return super()._generate_and_score_completions(inputs)
        block = self._step // (self.args.steps_per_generation * self.num_iterations)
        if not self.prefetched:  # the first batch, or a resume without a round in flight
            self.sync_engine(block)
            self.prefetch(inputs)
        client = self.prefetching_client
        started = time.perf_counter()
        if client is not None:
            client.wait_first()
        waited = time.perf_counter() - started
        ahead, self.prefetched = self.prefetched, []
        if self.dynamic_sampler is not None:
            batch = sample_informative_batch(self, inputs, rounds_ahead=ahead)
        else:
            batch = super()._generate_and_score_completions(ahead[0][0])
        if client is not None:  # a refill submitted ahead that the step did not need
            self._metrics["train"]["async/unused_rounds"].append(float(client.drop_pending()))
        self.sync_engine(block)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if (
            self.state.global_step + max(1, generate_every // self.args.gradient_accumulation_steps)
            < self.state.max_steps
        ):
            self.prefetch(inputs)  # generated with this block's weights while this batch trains
        metrics = self._metrics["train"]
        metrics["async/wait_time"].append(waited)
        metrics["async/staleness"].append(1.0 if self.engine_block is not None and block > 0 else 0.0)
        return batch

    def sync_engine(self, block: int) -> None:
        """Push the current weights to the server (TRL's ``sync_weights``), once per generation block."""
        if self.engine_block == block:
            return
        client = self.prefetching_client
        if client is not None:
            client.sync(self.vllm_generation.sync_weights)
        else:  # the other processes take part in the parameter gathers
            self.vllm_generation.sync_weights()
        self.engine_block = block
        self._metrics["train"]["async/weight_syncs"].append(1.0)

    def prefetch(self, template: list[dict[str, Any]]) -> None:
        """Submit the next batch's first round (with dynamic sampling, a refill round too) to the server."""
        world = self.accelerator.num_processes
        num_groups = len(template) * world // self.num_generations
        sizes = [num_groups]
        if self.dynamic_sampler is not None:  # sized from the running informative rate: refills are then rare
            sampler = self.dynamic_sampler
            cap = round_cap(num_groups, sampler.max_round_size)
            budget = sampler.max_generation_batches * num_groups
            sizes = ahead_round_sizes(sampler.rate.estimate(), num_groups, sampler.margin, world, cap, budget)
        stream = None if self.dynamic_sampler is not None else self.prefetch_stream  # DS: its stream and predictor
        self.prefetched = [refill_inputs(self, template, n, stream=stream) for n in sizes]
        client = self.prefetching_client
        for round_inputs, _ in self.prefetched:
            prompts = gather_object([x["prompt"] for x in round_inputs])
            if client is not None:
                prompt_ids, images, _ = self._tokenize_prompts(copy.deepcopy(prompts))
                if images is not None:
                    raise ValueError(
                        "async_generation=True does not support image prompts. Set async_generation=False."
                    )
                unique = [list(ids) for ids in prompt_ids[:: self.num_generations]]
                client.submit(unique, engine_sampling_params(self.vllm_generation, self.num_generations))

    def _save_extra_state(self, folder: str) -> None:
        super()._save_extra_state(folder)
        if not self.args.async_generation:
            return
        client = self.prefetching_client
        answers = []
        if self.prefetched and client is not None:
            client.wait_idle()
            answers = [{"prompts": p, "params": q, "result": f.result()} for p, q, f in client.pending_requests()]
        if self.args.should_save:
            state = {"stream": self.prefetch_stream.state_dict()}
            state["prefetched"] = [indices for _, indices in self.prefetched] or None
            with open(os.path.join(folder, ASYNC_STATE_FILE), "w") as f:
                json.dump(state, f)
            if answers:
                torch.save(answers, os.path.join(folder, ASYNC_ROLLOUT_FILE))

    def _load_extra_state(self, checkpoint: str) -> None:
        super()._load_extra_state(checkpoint)
        if not self.args.async_generation:
            return
        path = os.path.join(checkpoint, ASYNC_STATE_FILE)
        if not os.path.exists(path):
            logger.warning(
                f"Resuming from {checkpoint} without {ASYNC_STATE_FILE}: the next batch is generated again with the "
                "resumed weights, so the run will not reproduce an uninterrupted one exactly."
            )
            return
        with open(path) as f:
            state = json.load(f)
        self.prefetch_stream.load_state_dict(state["stream"])
        self.engine_block = None  # the server may hold other weights now: the first boundary pushes them
        if state["prefetched"] is None:
            return
        rounds = state["prefetched"]
        if isinstance(rounds[0], int):  # written before refill rounds were submitted ahead: one round
            rounds = [rounds]
        world, rank, group_size = self.accelerator.num_processes, self.accelerator.process_index, self.num_generations
        for indices in rounds:
            rows = [self.train_dataset[i] for i in indices for _ in range(group_size)]
            local = len(rows) // world
            self.prefetched.append((rows[rank * local : (rank + 1) * local], indices))
        client = self.prefetching_client
        if client is not None:
            answers = torch.load(os.path.join(checkpoint, ASYNC_ROLLOUT_FILE), weights_only=False)
            for answer in [answers] if isinstance(answers, dict) else answers:
                client.preload(answer["prompts"], answer["params"], answer["result"])


class AsyncGRPOTrainer(AsyncGenerationMixin, GRPOTrainer):
    """``GRPOTrainer`` whose next rollout is generated by the vLLM server while the current batch trains (module
    docstring); same arguments. Needs ``async_generation=True``, ``use_vllm=True``, ``vllm_mode="server"``."""


class AsyncDAPOTrainer(AsyncGenerationMixin, DAPOTrainer):
    """``DAPOTrainer`` with overlapped generation (``AsyncGRPOTrainer``)."""


class AsyncGSPOTrainer(AsyncGenerationMixin, GSPOTrainer):
    """``GSPOTrainer`` with overlapped generation (construction warns: GSPO's clip band is for on-policy rollouts)."""


class AsyncGSPOTokenTrainer(AsyncGenerationMixin, GSPOTokenTrainer):
    """``GSPOTokenTrainer`` with overlapped generation (``AsyncGSPOTrainer``)."""


#: The overlapped variant of each synchronous trainer class (``trl_ext.grpo.presets.trainer_class_for``).
OVERLAPPED = {
    GRPOTrainer: AsyncGRPOTrainer,
    DAPOTrainer: AsyncDAPOTrainer,
    GSPOTrainer: AsyncGSPOTrainer,
    GSPOTokenTrainer: AsyncGSPOTokenTrainer,
}
