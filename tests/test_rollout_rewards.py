"""A reward function that reads a field returned by ``rollout_func`` (TRL passes a rollout function's extra fields to
the rewards as keywords) trains with trl-ext's trainers as with TRL's, with dynamic sampling off and on; a field
that neither the dataset nor the rollout function supplies stops at the first call, named."""

from __future__ import annotations

import copy

import pytest
import torch
import trl
from helpers import TINY_SETTINGS, tiny_args

from trl_ext import DAPOTrainer, GRPOTrainer
from trl_ext.reliability.reward_guard import RewardFunctionError


def rollout_with_solved(prompts, trainer):
    """Wraps generation: the policy samples each completion (transformers' ``generate``), and the rollout returns one
    extra field, ``solved``: 0, 1, 0, 1 within the group of a prompt whose first operand is even, all 0 otherwise
    (an uninformative group, for dynamic sampling to drop)."""
    tokenizer = trainer.processing_class
    model = trainer.accelerator.unwrap_model(trainer.model)
    prompt_ids, completion_ids = [], []
    with torch.no_grad():
        for prompt in prompts:
            ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            out = model.generate(
                torch.tensor([ids]),
                max_new_tokens=trainer.args.max_completion_length,
                do_sample=True,
                pad_token_id=tokenizer.pad_token_id,
            )
            prompt_ids.append(ids)
            completion_ids.append(out[0, len(ids) :].tolist())
    solved = [float(i % 2) if int(p[0]) % 2 == 0 else 0.0 for i, p in enumerate(prompts)]
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None, "solved": solved}


def solved_reward(completions, solved, **kwargs):
    return list(solved)


def _rewards(trainer) -> list[float]:
    return [h["rewards/solved_reward/mean"] for h in trainer.state.log_history if "loss" in h]


def test_rollout_field_reward_trains_as_with_trl(tiny_model, tokenizer, problems, tmp_path):
    """Dynamic sampling off: trl.GRPOTrainer and trl_ext.GRPOTrainer on the same seed log the same rewards."""
    steps = dict(max_steps=3)
    model = copy.deepcopy(tiny_model)  # the same initial weights for both
    reference = trl.GRPOTrainer(
        tiny_model,
        solved_reward,
        args=trl.GRPOConfig(output_dir=str(tmp_path / "trl"), **{**TINY_SETTINGS, **steps}),
        train_dataset=problems[0],
        processing_class=tokenizer,
        rollout_func=rollout_with_solved,
    )
    reference.train()
    ours = GRPOTrainer(
        model,
        solved_reward,
        args=tiny_args("grpo", tmp_path, beta=0.0, **steps),
        train_dataset=problems[0],
        processing_class=tokenizer,
        rollout_func=rollout_with_solved,
    )
    ours.train()
    assert ours.state.global_step == reference.state.global_step == 3
    assert _rewards(ours) == _rewards(reference)
    assert all(value in (0.0, 0.25, 0.5) for value in _rewards(ours))  # 2 groups: 0, 1 or 2 of them even


def test_rollout_field_reward_with_dynamic_sampling(tiny_model, tokenizer, problems, tmp_path):
    """Dynamic sampling on: only even-operand groups ([0, 1, 0, 1]) are informative, so groups are dropped and
    refilled; the refill rounds call the rollout function too, and their rewards read its field."""
    args = tiny_args("dapo", tmp_path, max_steps=3, soft_overlong_punishment=False)
    trainer = DAPOTrainer(
        tiny_model,
        [solved_reward],
        args=args,
        train_dataset=problems[0],
        processing_class=tokenizer,
        rollout_func=rollout_with_solved,
    )
    trainer.train()
    rows = [h for h in trainer.state.log_history if "loss" in h]
    assert trainer.state.global_step == 3
    assert sum(h["dynamic_sampling/rounds"] for h in rows) > 3  # groups were dropped and refilled
    assert all(h["dynamic_sampling/kept_group_frac"] > 0 for h in rows)  # the kept groups read the field
    assert min(h["rewards/solved_reward/mean"] for h in rows) < 0.5  # TRL logs every round, dropped groups too


def test_a_field_nobody_supplies_stops_at_the_first_call_naming_it(tiny_model, tokenizer, problems, tmp_path):
    def verified_reward(completions, verified, **kwargs):
        return [1.0] * len(completions)

    trainer = GRPOTrainer(
        tiny_model,
        verified_reward,
        args=tiny_args("grpo", tmp_path, beta=0.0, max_steps=1),
        train_dataset=problems[0],
        processing_class=tokenizer,
        rollout_func=rollout_with_solved,  # the construction check cannot know its fields: the first call checks
    )
    with pytest.raises(RewardFunctionError) as info:
        trainer.train()
    message = str(info.value)
    assert "reward function 'verified_reward' reads 'verified', but TRL's call carries no such keyword" in message
    assert "it passed ['answer', 'solved']" in message  # the dataset's column, the rollout's field
    assert "Return 'verified' from the rollout_func" in message
    with pytest.raises(ValueError, match="reads the column 'verified', but train_dataset has no such column"):
        GRPOTrainer(  # without a rollout_func, the dataset is the only source: refused at construction
            tiny_model,
            verified_reward,
            args=tiny_args("grpo", tmp_path, beta=0.0, max_steps=1),
            train_dataset=problems[0],
            processing_class=tokenizer,
        )
