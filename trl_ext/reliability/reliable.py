"""``Reliable``: the one class that must override a Trainer method to make any TRL trainer preemption-safe and
exactly resumable: ``class T(Reliable, trl.SFTTrainer)`` (or ``DPOTrainer``, ``GRPOTrainer``, ...).

- **Atomic checkpoints** (``_save_checkpoint``): each save, rotation and same-step replacement is staged in
  ``output_dir/.incomplete/`` and renamed into place once complete (marker ``trl_ext_checkpoint.json``, fsynced);
  ``train()`` resumes from the newest complete checkpoint and refuses another run's (``trl_ext_run.json``).
- **Finite loss** (``compute_loss``): each training micro-step ORs ``~isfinite(loss)`` into a flag on the device; the
  flag is read once per optimizer step, before ``optimizer.step()``, so a NaN or infinite loss stops the run with
  the weights of the previous step and no host sync is added per micro-step.
- **Resume state** (``_save_extra_state`` / ``_load_extra_state``): TRL's token counter and, for a GRPO trainer,
  TRL's micro-step counter (``grpo_state.json``) and each process's generation buffer inside a generation block
  (``grpo_buffer_rank<k>.pt``); TRL's seeded ``RepeatSampler`` is advanced to the resumed epoch. With the Trainer's
  RNG states and the optimizer, a resumed run reproduces the uninterrupted one on CPU.

Graceful preemption is a callback (``preemption.PreemptionCallback``) this class adds itself; it also works alone on
any Trainer. Not restored: metrics since the last log, the completions table, a hung reward thread.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, sort_checkpoints

from trl_ext.reliability import checkpoints as ck
from trl_ext.reliability.checks import tokenizer_of
from trl_ext.reliability.preemption import PreemptionCallback, any_process

logger = logging.getLogger(__name__)

GRPO_STATE_FILE = "grpo_state.json"
GRPO_BUFFER_FILE = "grpo_buffer_rank{rank}.pt"


class NonFiniteLossError(RuntimeError):
    """The loss of a training batch was NaN or infinite; the run stopped before applying it."""


def find_seeded_sampler(dataloader: Any) -> Any:
    """TRL's seeded ``RepeatSampler`` under a dataloader (through accelerate's ``BatchSamplerShard``), or ``None``."""
    batch_sampler = getattr(dataloader, "batch_sampler", None)
    sampler = getattr(getattr(batch_sampler, "batch_sampler", batch_sampler), "sampler", None)
    return sampler if all(hasattr(sampler, a) for a in ("generator", "seed", "num_samples", "shuffle")) else None


class _ReliableSteps(TrainerCallback):
    """``Reliable``'s hooks into the loop: the sampler seek on resume and the once-per-optimizer-step loss check."""

    def __init__(self, trainer: Reliable) -> None:
        self.trainer = trainer

    def on_train_begin(self, args, state, control, train_dataloader: Any = None, **kwargs: Any):
        epoch = int(state.epoch or 0)  # the resumed state's: whole epochs done, as the Trainer counts them
        sampler = find_seeded_sampler(train_dataloader)  # None for an IterableDataset (resumed by position)
        if epoch == 0 or sampler is None or not sampler.shuffle or sampler.seed is None:  # TRL seeds it: args.seed
            return
        sampler.generator.manual_seed(sampler.seed)
        for _ in range(epoch):
            torch.randperm(sampler.num_samples, generator=sampler.generator)

    def on_pre_optimizer_step(self, args, state, control, **kwargs: Any):
        self.trainer._check_finite_loss()


class Reliable:
    """Atomic checkpoints, the finite-loss stop, exact resume and graceful preemption for any ``transformers``
    Trainer (module docstring). Put it first: ``class T(Reliable, trl.SFTTrainer)``."""

    _staging_parent: str | None = None
    _identity: dict[str, Any] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._nonfinite: torch.Tensor | None = None  # device flag: a loss of this optimizer step was not finite
        self._loss_window: list[tuple[dict[str, Any], torch.Tensor]] = []  # (inputs, loss) of its micro-steps
        #: called with each training micro-batch before its loss (e.g. dynamic sampling's step gate)
        self.loss_observers: list[Any] = []
        self.add_callback(_ReliableSteps(self))
        self.add_callback(PreemptionCallback(self))

    # -- the finite-loss stop ----------------------------------------------------------------------------------

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        training = self.model.training
        for observe in self.loss_observers if training else ():
            observe(inputs)
        result = super().compute_loss(
            model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
        )
        if training:
            loss = (result[0] if isinstance(result, tuple) else result).detach()
            bad = ~torch.isfinite(loss).all()  # on the loss's device: no host sync here
            self._nonfinite = bad if self._nonfinite is None else self._nonfinite | bad
            self._loss_window.append((inputs, loss))
        return result

    def _check_finite_loss(self) -> None:
        """Once per optimizer step, on every process: raise ``NonFiniteLossError`` if any process saw a NaN or
        infinite loss since the last step (one read of the flag)."""
        flag, window = self._nonfinite, self._loss_window
        self._nonfinite, self._loss_window = None, []
        local = flag is not None and bool(flag)  # the one host read of this optimizer step
        if not any_process(self.accelerator, local):
            return
        step, rank = self.state.global_step + 1, self.accelerator.process_index
        checkpoint = ck.last_complete_checkpoint(self.args.output_dir)
        kept = (
            f"The last checkpoint, {checkpoint}, is kept: fix the cause, then resume with resume_from_checkpoint=True."
            if checkpoint
            else "No checkpoint had been written yet."
        )
        if not local:
            raise NonFiniteLossError(
                f"non-finite loss on another process at step {step}; training stopped before the optimizer update "
                f"(see that process's error for the batch). {kept}"
            )
        inputs, loss = next((x, y) for x, y in window if not bool(torch.isfinite(y).all()))
        tensors = {k: v.detach().cpu() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        nonfinite = [k for k, v in tensors.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
        os.makedirs(self.args.output_dir, exist_ok=True)
        path = os.path.join(self.args.output_dir, f"nonfinite-batch-step{step}-rank{rank}.pt")
        torch.save(tensors, path)
        value = loss.float().flatten()[0].item() if loss.numel() else float("nan")
        where = (
            f"non-finite inputs: {nonfinite}" if nonfinite else "all inputs finite: the model's forward produced it"
        )
        raise NonFiniteLossError(
            f"non-finite loss ({value}) at step {step} on process {rank}; training stopped before the optimizer "
            f"update, so the weights are still those of step {step - 1}. The batch is saved in {path} (prompts: "
            f"{_prompt_texts(self, inputs)}; {where}). {kept} Usual causes: a reward function returning huge values, "
            "a learning_rate too high (lower it, keep max_grad_norm > 0), fp16 overflow (use bf16 or float32)."
        )

    # -- identity of a run and the resume ------------------------------------------------------------------------

    def run_identity(self) -> dict[str, Any]:
        """What makes two runs the same run (a resume must match it); JSON-serializable."""
        model = getattr(self, "model", None)
        config = getattr(model, "config", None)
        identity: dict[str, Any] = {"trainer": type(self).__name__, "seed": self.args.seed}
        if config is not None:
            identity["model_type"] = getattr(config, "model_type", None)
        if model is not None:
            # ds_numel: the full size of a DeepSpeed ZeRO-3 parameter, whose local tensor is a shard
            identity["model_parameters"] = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
        dataset = getattr(self, "train_dataset", None)
        if dataset is not None:
            if getattr(dataset, "column_names", None) is not None:
                identity["dataset_columns"] = sorted(dataset.column_names)
            if hasattr(dataset, "__len__"):
                identity["dataset_rows"] = len(dataset)
                identity["dataset_first_rows"] = ck.rows_digest(dataset)
        extra = {
            f"model_{key}": getattr(config, key, None) for key in ("vocab_size", "hidden_size", "num_hidden_layers")
        }
        extra |= {key: getattr(self, key, None) for key in ("reward_func_names", "num_generations")}
        extra["loss_type"] = getattr(self.args, "loss_type", None)
        for key, value in extra.items():
            if value is not None:
                identity[key] = list(value) if isinstance(value, list | tuple) else value
        return identity

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any):
        output_dir = self.args.output_dir
        if self.args.should_save:
            ck.recover_interrupted_publish(output_dir)  # before any process looks for the newest checkpoint
        self.accelerator.wait_for_everyone()
        resume = ck.resolve_resume(resume_from_checkpoint, output_dir)
        self._identity = self.run_identity()  # before the model is wrapped or sharded; stored in each checkpoint
        if resume is None:
            ck.check_fresh_output_dir(output_dir, self._identity)
        elif diff := ck.identity_difference(resume, self._identity):
            raise ValueError(
                f"resume_from_checkpoint={resume!r} was written by another run ({'; '.join(diff)}). Resume from a "
                "checkpoint of this run, or start this run without resume_from_checkpoint in a new output_dir. If the "
                f"change is intended, delete {os.path.join(resume, ck.RUN_FILE)} to resume anyway."
            )
        if self.args.should_save:
            shutil.rmtree(os.path.join(output_dir, ck.STAGING_DIR), ignore_errors=True)  # killed saves: garbage
        if resume is not None:
            self._load_extra_state(resume)  # before the Trainer's loop, which starts from this state
        self._nonfinite, self._loss_window = None, []
        try:
            return super().train(resume, *args, **kwargs)
        finally:  # the signal handlers go whatever ended the run
            for callback in self.callback_handler.callbacks:
                if isinstance(callback, PreemptionCallback):
                    callback.latch.restore()

    # -- saving --------------------------------------------------------------------------------------------------

    def _get_output_dir(self, trial: Any) -> str:
        return self._staging_parent or super()._get_output_dir(trial)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        run_dir = self._get_output_dir(trial)
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging_parent = os.path.join(run_dir, ck.STAGING_DIR)
        staging, final = os.path.join(staging_parent, name), os.path.join(run_dir, name)
        if self.args.should_save:
            shutil.rmtree(staging_parent, ignore_errors=True)
            os.makedirs(staging_parent, exist_ok=True)
        self.accelerator.wait_for_everyone()
        self._staging_parent = staging_parent
        error: Exception | None = None
        try:
            super()._save_checkpoint(model, trial)  # every file lands in output_dir/.incomplete/checkpoint-N
            os.makedirs(staging, exist_ok=True)
            self._save_extra_state(staging)
        except Exception as raised:  # noqa: BLE001 - every process must reach the agreement below, then raise
            error = raised
        finally:
            self._staging_parent = None
        # all processes' files are in the staging folder, or some process failed: every process learns which
        if any_process(self.accelerator, error is not None):
            self._fail_save(error, staging, run_dir)
        best = self.state.best_model_checkpoint
        if best is not None and os.path.abspath(os.path.dirname(best)) == os.path.abspath(staging_parent):
            self.state.best_model_checkpoint = os.path.join(run_dir, os.path.basename(best))
            if self.args.should_save:
                self.state.save_to_json(os.path.join(staging, TRAINER_STATE_NAME))
        if self.args.should_save:
            try:
                ck.write_json_atomic(os.path.join(staging, ck.RUN_FILE), self._identity or self.run_identity())
                ck.write_json_atomic(os.path.join(staging, ck.MARKER_FILE), {"global_step": self.state.global_step})
                ck.fsync_tree(staging)
                self._publish(staging, final)
            except Exception as raised:  # noqa: BLE001 - as above
                error = raised
        if any_process(self.accelerator, error is not None):
            self._fail_save(error, staging, run_dir)
        if self.args.should_save:
            self._rotate(run_dir)
        self.accelerator.wait_for_everyone()

    def _publish(self, staging: str, final: str) -> None:
        ck.publish(staging, final)

    def _fail_save(self, error: Exception | None, staging: str, run_dir: str) -> None:
        """Remove the unfinished staging folder and raise ``CheckpointSaveError`` (on every process)."""
        if self.args.should_save:
            shutil.rmtree(staging, ignore_errors=True)
            ck.remove_if_empty(os.path.dirname(staging))
        model, optimizer = getattr(self, "model", None), getattr(self, "optimizer", None)
        other = None if error is not None else f" on another process than process {self.accelerator.process_index}"
        message = ck.save_failure_message(error, staging, run_dir, self.state.global_step, model, optimizer, other)
        logger.error(message)
        raise ck.CheckpointSaveError(message) from error

    def _rotate(self, run_dir: str) -> None:
        """``save_total_limit`` as the Trainer applies it (``sort_checkpoints`` puts the best just before the newest:
        both stay, the oldest go first), each folder renamed into the staging area before it is deleted."""
        limit = self.args.save_total_limit
        if limit is None or limit <= 0:
            return
        best = self.state.best_model_checkpoint
        checkpoints = sort_checkpoints(run_dir, PREFIX_CHECKPOINT_DIR, use_mtime=True, best_model_checkpoint=best)
        protected = len(set(checkpoints[-1:]) | ({str(Path(best))} if best is not None else set()))
        for checkpoint in checkpoints[: max(len(checkpoints) - max(limit, protected), 0)]:
            ck.delete_checkpoint(checkpoint, os.path.join(run_dir, ck.STAGING_DIR))
        ck.remove_if_empty(os.path.join(run_dir, ck.STAGING_DIR))

    # -- resume state --------------------------------------------------------------------------------------------

    def _generate_every(self) -> int:
        return self.args.steps_per_generation * self.num_iterations

    def _save_extra_state(self, folder: str) -> None:
        """Hook (every process): save state outside ``TrainerState`` in the staged checkpoint (module docstring)."""
        if hasattr(self, "_total_train_tokens") and self.args.should_save:
            with open(os.path.join(folder, ck.COUNTERS_FILE), "w") as f:
                json.dump({"total_train_tokens": self._total_train_tokens}, f)
        if not hasattr(self, "_buffered_inputs"):  # not a GRPO trainer
            return
        if self.args.should_save:
            with open(os.path.join(folder, GRPO_STATE_FILE), "w") as f:
                json.dump({"step": self._step, "generate_every": self._generate_every()}, f)
        if self._buffered_inputs is not None and self._step % self._generate_every() != 0:
            rank = self.accelerator.process_index
            torch.save(self._buffered_inputs, os.path.join(folder, GRPO_BUFFER_FILE.format(rank=rank)))

    def _load_extra_state(self, checkpoint: str) -> None:
        """Hook: restore what ``_save_extra_state`` wrote (called on every process, before the Trainer resumes)."""
        path = os.path.join(checkpoint, ck.COUNTERS_FILE)
        if hasattr(self, "_total_train_tokens") and os.path.exists(path):
            with open(path) as f:
                self._total_train_tokens = json.load(f)["total_train_tokens"]
        path = os.path.join(checkpoint, GRPO_STATE_FILE)
        if not hasattr(self, "_buffered_inputs") or not os.path.exists(path):
            return  # not a GRPO trainer, or a plain TRL run's checkpoint: TRL's behaviour (regenerate at once)
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


def _prompt_texts(trainer: Any, inputs: dict[str, Any], limit: int = 3) -> list[str]:
    """The first ``limit`` prompts of a GRPO batch (``prompt_ids`` under ``prompt_mask``), decoded."""
    tokenizer = tokenizer_of(getattr(trainer, "processing_class", None))
    ids, mask = inputs.get("prompt_ids"), inputs.get("prompt_mask")
    if tokenizer is None or not isinstance(ids, torch.Tensor) or not isinstance(mask, torch.Tensor):
        return []
    rows = [row[m.bool()] for row, m in zip(ids[:limit], mask[:limit], strict=True)]
    return tokenizer.batch_decode(rows, skip_special_tokens=True)
