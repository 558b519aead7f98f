"""``GRPOReliabilityMixin``, a base of every trainer of ``trl_ext.grpo.trainers``: the package's checks, guarded
rewards, preemption, atomic checkpoints, the stop on a non-finite loss (``FiniteLossMixin``) and an exact resume.

Exact resume: TRL generates once per ``steps_per_generation * num_iterations`` micro-steps and keeps the batch in
``_buffered_inputs``; a resumed trainer starts at ``_step = 0`` with no buffer, so a checkpoint inside a generation
block would regenerate with updated weights and shift every later boundary. Each checkpoint therefore stores TRL's
micro-step counter (``grpo_state.json``) and, inside a block, each process's buffer (``grpo_buffer_rank<k>.pt``);
TRL's seeded ``RepeatSampler`` is advanced to the resumed epoch. With the Trainer's RNG states, the refill stream and
the optimizer, a resumed run reproduces the uninterrupted one on CPU. Not restored: metrics since the last log (logs
match when ``save_steps`` is a multiple of ``logging_steps``), the completions table, a hung reward thread.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from typing import Any

import torch
import trl
from transformers import TrainerCallback

from trl_ext.reliability import checks
from trl_ext.reliability.checkpoints import AtomicCheckpointMixin, any_process, last_complete_checkpoint
from trl_ext.reliability.preemption import PreemptionMixin
from trl_ext.reliability.reward_guard import guard_reward_funcs

logger = logging.getLogger(__name__)

GRPO_STATE_FILE = "grpo_state.json"
GRPO_BUFFER_FILE = "grpo_buffer_rank{rank}.pt"


class NonFiniteLossError(RuntimeError):
    """The loss of a training batch was NaN or infinite; the run stopped before applying it."""


def _prompt_texts(trainer: Any, inputs: dict[str, Any], limit: int = 3) -> list[str]:
    """The first ``limit`` prompts of a GRPO batch (``prompt_ids`` under ``prompt_mask``), decoded."""
    tokenizer = checks.tokenizer_of(getattr(trainer, "processing_class", None))
    ids, mask = inputs.get("prompt_ids"), inputs.get("prompt_mask")
    if tokenizer is None or not isinstance(ids, torch.Tensor) or not isinstance(mask, torch.Tensor):
        return []
    rows = [row[m.bool()] for row, m in zip(ids[:limit], mask[:limit], strict=True)]
    return tokenizer.batch_decode(rows, skip_special_tokens=True)


class FiniteLossMixin:
    """Stops training on a NaN or infinite loss before the backward pass (the Trainer's ``logging_nan_inf_filter``
    would hide it in the logs while the weights turn to NaN)."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        result = super().compute_loss(
            model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
        )
        if self.model.training:
            loss = result[0] if isinstance(result, tuple) else result
            self._check_finite_loss(loss, inputs)
        return result

    def _check_finite_loss(self, loss: torch.Tensor, inputs: dict[str, Any]) -> None:
        # every process stops, not only the one that saw it
        if not any_process(self.accelerator, not bool(torch.isfinite(loss.detach()).all())):
            return
        step = self.state.global_step + 1
        rank = self.accelerator.process_index
        tensors = {k: v.detach().cpu() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        nonfinite = [k for k, v in tensors.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
        os.makedirs(self.args.output_dir, exist_ok=True)
        path = os.path.join(self.args.output_dir, f"nonfinite-batch-step{step}-rank{rank}.pt")
        torch.save(tensors, path)
        checkpoint = last_complete_checkpoint(self.args.output_dir)
        kept = (
            f"The last checkpoint, {checkpoint}, is kept: fix the cause, then resume with resume_from_checkpoint=True."
            if checkpoint
            else "No checkpoint had been written yet."
        )
        value = loss.detach().float().flatten()[0].item() if loss.numel() else float("nan")
        where = (
            f"non-finite inputs: {nonfinite}" if nonfinite else "all inputs finite: the model's forward produced it"
        )
        raise NonFiniteLossError(
            f"non-finite loss ({value}) at step {step} on process {rank}; training stopped before the optimizer "
            f"update, so the weights are still those of step {step - 1}. The batch is saved in {path} (prompts: "
            f"{_prompt_texts(self, inputs)}; {where}). {kept} Usual causes: a reward function returning huge values, "
            "a learning_rate too high (lower it, keep max_grad_norm > 0), fp16 overflow (use bf16 or float32)."
        )


def find_seeded_sampler(dataloader: Any) -> Any:
    """TRL's seeded ``RepeatSampler`` under a dataloader (through accelerate's ``BatchSamplerShard``), or ``None``."""
    batch_sampler = getattr(dataloader, "batch_sampler", None)
    sampler = getattr(getattr(batch_sampler, "batch_sampler", batch_sampler), "sampler", None)
    return sampler if all(hasattr(sampler, a) for a in ("generator", "seed", "num_samples", "shuffle")) else None


class SamplerSeekOnResume(TrainerCallback):
    """On a resume, advance TRL's ``RepeatSampler`` to the resumed epoch (at ``on_train_begin``: state loaded)."""

    def on_train_begin(self, args, state, control, train_dataloader: Any = None, **kwargs: Any):
        epoch = int(state.epoch or 0)  # the resumed state's: whole epochs done, as the Trainer counts them
        sampler = find_seeded_sampler(train_dataloader)  # None for an IterableDataset (resumed by position)
        if epoch == 0 or sampler is None or not sampler.shuffle or sampler.seed is None:  # TRL seeds it: args.seed
            return
        sampler.generator.manual_seed(sampler.seed)
        for _ in range(epoch):
            torch.randperm(sampler.num_samples, generator=sampler.generator)


class GRPOReliabilityMixin(FiniteLossMixin, PreemptionMixin, AtomicCheckpointMixin):
    """The reliability layer over TRL's ``GRPOTrainer`` (module docstring); takes exactly its arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Bound against TRL's own signature: every argument is found by name, and a call TRL rejects fails alike.
        bound = inspect.signature(trl.GRPOTrainer.__init__).bind(self, *args, **kwargs)
        params = bound.arguments
        config = params.get("args")
        dataset = params.get("train_dataset")
        funcs = guard_reward_funcs(
            params.get("reward_funcs"),
            errors=getattr(config, "reward_errors", "raise"),
            timeout=getattr(config, "reward_timeout", None),
        )
        checks.check_prompt_column(dataset, environment_factory=params.get("environment_factory"))
        checks.check_reward_columns(funcs, dataset, rollout_func=params.get("rollout_func"))
        checks.check_dataset_size(dataset, config)
        checks.check_tokenizer(params.get("processing_class"))
        checks.check_tools(params.get("tools"), params.get("environment_factory"), params.get("processing_class"))
        model = params["model"]
        if not isinstance(model, str):  # fail before TRL copies the model or loads a reference model
            checks.check_context_length(
                getattr(model, "config", None), config, params.get("processing_class"), dataset
            )
        params["reward_funcs"] = funcs
        super().__init__(*bound.args[1:], **bound.kwargs)
        checks.check_tokenizer(self.processing_class)
        if isinstance(model, str):  # loaded by TRL
            checks.check_context_length(
                getattr(self.model, "config", None), self.args, checks.tokenizer_of(self.processing_class), dataset
            )
        self.add_callback(SamplerSeekOnResume())

    # -- exact resume ----------------------------------------------------------------------------------------------

    def _generate_every(self) -> int:
        return self.args.steps_per_generation * self.num_iterations

    def _save_extra_state(self, folder: str) -> None:
        super()._save_extra_state(folder)
        if self.args.should_save:
            with open(os.path.join(folder, GRPO_STATE_FILE), "w") as f:
                json.dump({"step": self._step, "generate_every": self._generate_every()}, f)
        if self._buffered_inputs is not None and self._step % self._generate_every() != 0:
            rank = self.accelerator.process_index
            torch.save(self._buffered_inputs, os.path.join(folder, GRPO_BUFFER_FILE.format(rank=rank)))

    def _load_extra_state(self, checkpoint: str) -> None:
        super()._load_extra_state(checkpoint)
        path = os.path.join(checkpoint, GRPO_STATE_FILE)
        if not os.path.exists(path):
            return  # a checkpoint of a plain TRL run: TRL's own behaviour (regenerate at the first step)
        with open(path) as f:
            state = json.load(f)
        if state["generate_every"] != self._generate_every():
            logger.warning(
                f"The checkpoint was written with a generation every {state['generate_every']} micro-steps, this run "
                f"generates every {self._generate_every()} (steps_per_generation or num_iterations changed): the "
                "resumed run regenerates at its first step."
            )
            return
        self._step = state["step"]
        if self._step % self._generate_every() == 0:
            return
        buffer = os.path.join(checkpoint, GRPO_BUFFER_FILE.format(rank=self.accelerator.process_index))
        if os.path.exists(buffer):
            self._buffered_inputs = torch.load(buffer, map_location=self.accelerator.device, weights_only=True)
        else:
            logger.warning(
                f"{checkpoint} was saved inside a generation block but holds no {os.path.basename(buffer)} (another "
                "number of processes?): the resumed run regenerates at its first step, not reproducing the original."
            )
            self._step = 0
