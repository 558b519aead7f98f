"""Run by tests/test_resume.py in a subprocess: a tiny DAPO, GSPO or group-mined DPO run on CPU that checkpoints, can
be killed (SIGKILL) by the test and resumed, and writes what it did to ``<out>/result.json`` (log history, the
checkpoint it resumed from) and its final weights to ``<out>/final_weights.pt``.

    python tests/resume_script.py dapo|dapo_offpolicy|gspo|dpo <out> [--resume] [--step-sleep S] [--stall-save-at N]
    python tests/resume_script.py trl_sft|trl_dpo|trl_grpo <out> [--callback-only] ...

``trl_sft``, ``trl_dpo``, ``trl_grpo``: TRL's own ``SFTTrainer``, ``DPOTrainer`` and ``GRPOTrainer`` as
``class T(Reliable, trl.XTrainer)``, or with ``--callback-only`` unchanged plus ``PreemptionCallback(trainer)``.
    python -m torch.distributed.run --nproc_per_node 2 tests/resume_script.py dapo|dapo_offpolicy <out> [--resume]

``--step-sleep`` slows every step down (not its numbers) so that the test's kill lands between checkpoints;
``--stall-save-at N`` makes the save of checkpoint-N stop half-way (after the weights and optimizer, before the RNG
states), announce it with ``<out>/stalled-N`` and wait to be killed.

Fault injection for tests/test_preemption.py (the run records ``<out>/metrics.jsonl`` as the recipes do):

- ``--kill-at MOMENT:N``: the process SIGKILLs itself at one moment of step N: ``log`` (its metrics row written),
  ``save`` (checkpoint-N half-written: weights and optimizer, no RNG state), ``marker`` (checkpoint-N staged complete,
  not yet renamed into place), ``replace`` (an older checkpoint-N set aside, the new one not yet in place), ``rotate``
  (``save_total_limit`` half-way through deleting an old checkpoint).
- ``--signal-at N [--signal-rank R] [--signal-twice]``: the process (of rank R) sends itself SIGTERM (twice) during
  step N + 1; a ``Preempted`` exit is recorded in ``<out>/preempted-rank<k>.json`` before it propagates.
- ``--save-total-limit K``, ``--resume-from PATH`` (an explicit checkpoint instead of the newest).

Not a test file itself (pytest does not collect it).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import signal
import time

import torch
from transformers import TrainerCallback

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)


def parity_reward(completions, answer, **kwargs):
    """Depends on the completion (its length), and only for even answers: some groups are uninformative, so dynamic
    sampling drops and refills; the others are informative by chance."""
    return [float(len(c) % 2) if int(a) % 2 == 0 else 0.0 for c, a in zip(completions, answer, strict=True)]


def length_reward(completions, **kwargs):
    """Prefers longer completions: mined DPO groups are informative whenever lengths differ."""
    return [float(len(c)) for c in completions]


class Sleep(TrainerCallback):
    def __init__(self, seconds: float):
        self.seconds = seconds

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


class SignalAt(TrainerCallback):
    """Sends this process SIGTERM (``times`` times) at the start of the step after ``step``: mid-step."""

    def __init__(self, step: int, times: int):
        self.step, self.times = step, times

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            for _ in range(self.times):
                os.kill(os.getpid(), signal.SIGTERM)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillAfterLog(TrainerCallback):
    def __init__(self, step: int):
        self.step = step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.global_step == self.step and logs and "loss" in logs:
            _die()


def inject_kill(trainer, moment: str, step: int) -> None:
    """Make the process SIGKILL itself at ``moment`` of step ``step`` (module docstring)."""
    at_step = lambda: trainer.state.global_step == step  # noqa: E731
    if moment == "log":
        trainer.add_callback(KillAfterLog(step))
    elif moment == "save":
        original_rng = trainer._save_rng_state
        trainer._save_rng_state = lambda output_dir: _die() if at_step() else original_rng(output_dir)
    elif moment == "marker":
        original_publish = trainer._publish
        trainer._publish = lambda staging, final: _die() if at_step() else original_publish(staging, final)
    elif moment == "replace":
        rename = os.rename

        def rename_then_die(src, dst):
            rename(src, dst)
            if os.path.basename(dst).startswith("replaced-") and at_step():
                _die()

        os.rename = rename_then_die
    elif moment == "rotate":
        rmtree = shutil.rmtree

        def half_rmtree(path, *args, **kwargs):
            if os.path.basename(str(path)).startswith("deleting-") and os.path.isdir(path) and at_step():
                os.remove(os.path.join(path, "model.safetensors"))
                _die()
            rmtree(path, *args, **kwargs)

        shutil.rmtree = half_rmtree
    else:
        raise ValueError(moment)


def common(out: str, max_steps: int, save_steps: int) -> dict:
    return dict(
        output_dir=out,
        max_steps=max_steps,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="steps",
        save_steps=save_steps,
        report_to="none",
        use_cpu=True,
        bf16=False,
        disable_tqdm=True,
        seed=0,
    )


def build(algo: str, out: str, callbacks: list, **overrides):
    from trl_ext import DAPOTrainer, GSPOTrainer, get_preset
    from trl_ext.demo import DemoModelConfig, DemoTaskConfig, build_model, build_tokenizer, make_problems

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, DemoModelConfig(**SMALL))
    train, _ = make_problems(DemoTaskConfig(max_operand=9, num_train=12, num_eval=20))
    if algo.startswith("trl_"):
        train, _ = make_problems(DemoTaskConfig(max_operand=9, num_train=60, num_eval=20))
    if algo in ("dapo", "dapo_offpolicy"):
        # 2 prompts x 4 per step, 12 prompts: 6 steps per epoch, so the run crosses an epoch boundary. "dapo": one
        # rollout per step (the off-policy split is the GSPO case's). "dapo_offpolicy": 2 minibatches per rollout, so
        # old-policy log-probs exist (computed for the trained rows), and GRESO skipping keeps a history.
        variant = (
            dict(num_minibatches=1)
            if algo == "dapo"
            else dict(
                num_minibatches=2,
                dynamic_sampling_refill_margin=3.0,
                dynamic_sampling_skip_predicted=True,
            )
        )
        args = get_preset(
            "dapo",
            **common(out, max_steps=10, save_steps=3),
            per_device_train_batch_size=8,
            num_generations=4,
            max_completion_length=4,
            soft_overlong_punishment=False,
            dynamic_sampling_max_generation_batches=3,
            temperature=1.5,
            **variant,
            **overrides,
        )
        return DAPOTrainer(
            model, [parity_reward], args=args, train_dataset=train, processing_class=tokenizer, callbacks=callbacks
        )
    if algo == "gspo":
        # 4 minibatches per rollout of 8 prompts x 4: one generation per 4 steps, one generation batch per epoch.
        args = get_preset(
            "gspo",
            **common(out, max_steps=10, save_steps=3),
            per_device_train_batch_size=8,
            num_generations=4,
            max_completion_length=4,
            temperature=1.5,
        )
        return GSPOTrainer(
            model, [parity_reward], args=args, train_dataset=train, processing_class=tokenizer, callbacks=callbacks
        )
    if algo == "dpo":
        from trl_ext.dpo.trainer import DPOConfig, DPOTrainer
        from trl_ext.reliability.reliable import Reliable

        class ResumableDPOTrainer(Reliable, DPOTrainer):
            """The composition proposed for trl_ext.dpo.DPOTrainer: atomic checkpoints, checked resumes, and TRL's
            num_tokens counter restored."""

        args = DPOConfig(
            **common(out, max_steps=6, save_steps=2),
            per_device_train_batch_size=4,
            num_generations=4,
            mining_max_new_tokens=4,
            mining_temperature=1.5,
            max_length=32,
        )
        torch.manual_seed(args.seed)  # mining samples from the global RNG: the same pairs on every (re)start
        return ResumableDPOTrainer.from_groups(model, [length_reward], args, train, tokenizer, callbacks=callbacks)
    if algo.startswith("trl_"):
        return build_trl(algo, out, callbacks, model, tokenizer, train, **overrides)
    raise ValueError(algo)


def build_trl(algo: str, out: str, callbacks: list, model, tokenizer, train, callback_only: bool = False, **overrides):
    """TRL's own trainer as ``class T(Reliable, trl.<X>Trainer)``, or (``callback_only``) unchanged plus the
    preemption callback: 6 optimizer steps of 2 micro-steps, a checkpoint every 2 (GRPO: every 3, inside a
    generation block of 2 steps), all in the first epoch."""
    import trl

    from trl_ext.reliability.preemption import PreemptionCallback
    from trl_ext.reliability.reliable import Reliable

    settings = {**common(out, max_steps=6, save_steps=3 if algo == "trl_grpo" else 2), **overrides}
    settings.update(per_device_train_batch_size=4, gradient_accumulation_steps=2)
    if algo == "trl_sft":
        base, args = trl.SFTTrainer, trl.SFTConfig(**settings, max_length=32)
        kwargs = dict(train_dataset=train.select_columns(["prompt", "completion"]))
    elif algo == "trl_dpo":
        pairs = train.map(lambda row: {"chosen": row["completion"], "rejected": row["completion"][::-1] + "0"})
        base, args = trl.DPOTrainer, trl.DPOConfig(**settings, max_length=32)
        kwargs = dict(train_dataset=pairs.select_columns(["prompt", "chosen", "rejected"]))
        kwargs["ref_model"] = copy.deepcopy(model).eval()  # an in-memory model has no name TRL could reload
    else:
        settings.update(gradient_accumulation_steps=1, steps_per_generation=2)
        base = trl.GRPOTrainer
        args = trl.GRPOConfig(**settings, num_generations=4, max_completion_length=4, temperature=1.5)
        kwargs = dict(reward_funcs=[parity_reward], train_dataset=train)
    cls = base if callback_only else type(f"Reliable{base.__name__}", (Reliable, base), {})
    trainer = cls(model=model, args=args, processing_class=tokenizer, callbacks=callbacks, **kwargs)
    if callback_only:
        trainer.add_callback(PreemptionCallback(trainer))
    return trainer


class StopAt(TrainerCallback):
    """Ends training after step ``step`` (and its checkpoint): what a run killed right after that checkpoint keeps."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


def main() -> None:
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser()
    parser.add_argument("algo", choices=["dapo", "dapo_offpolicy", "gspo", "dpo", "trl_sft", "trl_dpo", "trl_grpo"])
    parser.add_argument("--callback-only", action="store_true")
    parser.add_argument("out")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--resume-from", default=None)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--stall-save-at", type=int, default=None)
    parser.add_argument("--kill-at", default=None)
    parser.add_argument("--signal-at", type=int, default=None)
    parser.add_argument("--signal-rank", type=int, default=0)
    parser.add_argument("--signal-twice", action="store_true")
    parser.add_argument("--save-total-limit", type=int, default=None)
    options = parser.parse_args()

    from trl_ext.recipe.grpo import MetricsFileCallback, prepare_output_dir
    from trl_ext.reliability.preemption import Preempted

    rank = int(os.environ.get("RANK", "0"))
    resume = options.resume_from or (True if options.resume else None)
    metrics = prepare_output_dir(options.out, resume, is_main=rank == 0)  # the recipes' record, continued
    callbacks = [MetricsFileCallback(metrics)]
    callbacks += [Sleep(options.step_sleep)] if options.step_sleep else []
    if options.signal_at is not None and rank == options.signal_rank:
        callbacks.append(SignalAt(options.signal_at, 2 if options.signal_twice else 1))
    overrides = {"save_total_limit": options.save_total_limit} if options.save_total_limit else {}
    if options.callback_only:
        overrides["callback_only"] = True
    trainer = build(options.algo, options.out, callbacks, **overrides)
    if options.stall_save_at is not None:
        original = trainer._save_rng_state

        def stalled(output_dir):
            if trainer.state.global_step == options.stall_save_at:
                open(os.path.join(options.out, f"stalled-{options.stall_save_at}"), "w").close()
                time.sleep(600)  # the test kills us here, half-way through writing the checkpoint
            original(output_dir)

        trainer._save_rng_state = stalled
    if options.kill_at is not None:
        moment, step = options.kill_at.split(":")
        inject_kill(trainer, moment, int(step))
    resumed_from = options.resume_from
    if options.resume and not resumed_from:
        from transformers.trainer_utils import get_last_checkpoint

        resumed_from = get_last_checkpoint(options.out)
    try:
        trainer.train(resume_from_checkpoint=resume)
    except Preempted as stop:
        with open(os.path.join(options.out, f"preempted-rank{rank}.json"), "w") as f:
            json.dump({"step": stop.step, "checkpoint": stop.checkpoint, "signal": stop.signal_name}, f)
        raise
    if not trainer.accelerator.is_main_process:
        return
    weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    torch.save(weights, os.path.join(options.out, "final_weights.pt"))
    result = {
        "log_history": trainer.state.log_history,
        "resumed_from": resumed_from,
        "step": trainer.state.global_step,
        "num_processes": trainer.accelerator.num_processes,
    }
    with open(os.path.join(options.out, "result.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    from helpers import torchrun_script  # this script's folder (tests/) is on sys.path

    with torchrun_script():
        main()
