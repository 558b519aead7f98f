"""Run by tests/test_resume.py in a subprocess: a tiny DAPO, GSPO or group-mined DPO run on CPU that checkpoints, can
be killed (SIGKILL) by the test and resumed, and writes what it did to ``<out>/result.json`` (log history, the
checkpoint it resumed from) and its final weights to ``<out>/final_weights.pt``.

    python tests/resume_script.py dapo|dapo_carry|gspo|dpo <out> [--resume] [--step-sleep S] [--stall-save-at N]
    python -m torch.distributed.run --nproc_per_node 2 tests/resume_script.py dapo|dapo_carry <out> [--resume]

``--step-sleep`` slows every step down (not its numbers) so that the test's kill lands between checkpoints;
``--stall-save-at N`` makes the save of checkpoint-N stop half-way (after the weights and optimizer, before the RNG
states), announce it with ``<out>/stalled-N`` and wait to be killed. Not a test file itself (pytest does not collect
it).
"""

from __future__ import annotations

import argparse
import json
import os
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


def build(algo: str, out: str, callbacks: list):
    from trl_ext import DAPOTrainer, GSPOTrainer, get_preset
    from trl_ext.demo import DemoModelConfig, DemoTaskConfig, build_model, build_tokenizer, make_problems

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, DemoModelConfig(**SMALL))
    train, _ = make_problems(DemoTaskConfig(max_operand=9, num_train=12, num_eval=20))
    if algo in ("dapo", "dapo_carry"):
        # 2 prompts x 4 per step, 12 prompts: 6 steps per epoch, so the run crosses an epoch boundary. "dapo": one
        # rollout per step (the off-policy split is the GSPO case's). "dapo_carry": 2 minibatches per rollout, so
        # old-policy log-probs exist and surplus is carried over (a margin of 3 makes it certain), the first round is
        # oversampled, and GRESO skipping keeps a history.
        variant = (
            dict(num_minibatches=1)
            if algo == "dapo"
            else dict(
                num_minibatches=2,
                dynamic_sampling_carry_over=0.5,
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
            dynamic_sampling_max_rounds=3,
            temperature=1.5,
            **variant,
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
        from trl_ext.reliability.checkpoints import AtomicCheckpointMixin

        class ResumableDPOTrainer(AtomicCheckpointMixin, DPOTrainer):
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
    raise ValueError(algo)


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
    parser.add_argument("algo", choices=["dapo", "dapo_carry", "gspo", "dpo"])
    parser.add_argument("out")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--stall-save-at", type=int, default=None)
    options = parser.parse_args()

    callbacks = [Sleep(options.step_sleep)] if options.step_sleep else []
    trainer = build(options.algo, options.out, callbacks)
    if options.stall_save_at is not None:
        original = trainer._save_rng_state

        def stalled(output_dir):
            if trainer.state.global_step == options.stall_save_at:
                open(os.path.join(options.out, f"stalled-{options.stall_save_at}"), "w").close()
                time.sleep(600)  # the test kills us here, half-way through writing the checkpoint
            original(output_dir)

        trainer._save_rng_state = stalled
    resumed_from = None
    if options.resume:
        from transformers.trainer_utils import get_last_checkpoint

        resumed_from = get_last_checkpoint(options.out)
    trainer.train(resume_from_checkpoint=True if options.resume else None)
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
    main()
