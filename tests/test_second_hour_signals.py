"""What a Python user is told in the second hour: the preset's rollout rhythm and the logged rows it leaves without
reward figures, an overlong buffer too short to ramp, and shaping rewards recognized by their mark (not their name)
in dynamic sampling's accuracy metric (reward functions that score nothing: tests/test_unscorable.py)."""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace

import pytest
from helpers import tiny_args

from trl_ext import DAPOTrainer
from trl_ext.grpo import rollout_rhythm
from trl_ext.grpo.configs import warn_step_like_overlong_buffer
from trl_ext.grpo.dynamic_sampling.groups import informative_groups
from trl_ext.reliability.reward_guard import GuardedReward
from trl_ext.rewards import get_reward
from trl_ext.rewards.shaping import is_shaping_reward, mark_shaping


def position_reward(completions, **kwargs):
    """0, 1, 2, 3 within each group of 4: every group informative."""
    return [float(i % 4) for i in range(len(completions))]


def even_answer_reward(completions, answer, **kwargs):
    """[0, 1, 0, 1] in a group whose answer is even; all 0 otherwise."""
    return [float(i % 2) if int(a) % 2 == 0 else 0.0 for i, a in enumerate(answer)]


def _rhythm(spg, ga=1, iterations=1, logging_steps=1, max_steps=-1, **extra):
    return SimpleNamespace(
        steps_per_generation=spg,
        gradient_accumulation_steps=ga,
        num_iterations=iterations,
        logging_steps=logging_steps,
        logging_strategy="steps",
        max_steps=max_steps,
        **extra,
    )


# -- item 1: the rollout rhythm ------------------------------------------------------------------------------------


def test_rows_with_a_rollout_by_hand():
    assert rollout_rhythm.rows_with_rollout(_rhythm(16), 1) == (1, 16)
    assert rollout_rhythm.rows_with_rollout(_rhythm(16), 2) == (1, 8)
    assert rollout_rhythm.rows_with_rollout(_rhythm(16), 16) == (1, 1)
    # a rollout every 32 micro-steps, rows of 3 x 2 = 6 micro-steps: rollouts at 0, 32, 64 fall in rows 0, 5, 10 of 16
    assert rollout_rhythm.rows_with_rollout(_rhythm(32, ga=2), 3) == (3, 16)
    assert [rollout_rhythm.rollout_index(s, 16) for s in (0, 1, 16, 17, 32, 33)] == [0, 1, 1, 2, 2, 3]


def test_rhythm_warning_only_when_rows_miss_the_figures():
    text = rollout_rhythm.rhythm_warning(_rhythm(16, logging_steps=2, max_steps=10, num_minibatches=16))
    assert "trains 16 optimizer steps per rollout (num_minibatches=16, so steps_per_generation=16)" in text
    assert "with logging_steps=2 they appear on 1 of every 5 logged rows" in text
    assert "With max_steps=10 the run generates 1 rollout(s)" in text
    assert "set logging_steps to a multiple of 16" in text and "num_minibatches=1" in text
    assert rollout_rhythm.rhythm_warning(_rhythm(16, logging_steps=32)) is None  # every row holds a rollout
    assert rollout_rhythm.rhythm_warning(_rhythm(1)) is None  # TRL's rhythm
    assert rollout_rhythm.rhythm_warning(_rhythm(4, ga=4)) is None  # TRL's default, with accumulation
    # a run shorter than the pattern counts its own rows: 10 steps logged every 2 (the run), or every 0.5 x 4
    assert rollout_rhythm.rows_with_rollout(_rhythm(16, max_steps=10), 2) == (1, 5)
    assert "on 1 of every 2 logged rows" in rollout_rhythm.rhythm_warning(_rhythm(16, logging_steps=0.5, max_steps=4))
    assert rollout_rhythm.rhythm_warning(_rhythm(16, logging_steps=2, max_steps=2)) is None  # one row, one rollout


def test_dapo_trainer_warns_about_its_rhythm_and_rows_carry_the_rollout_index(
    tiny_model, tokenizer, problems, tmp_path, caplog
):
    args = tiny_args(
        "dapo", tmp_path, num_minibatches=2, max_steps=3, soft_overlong_punishment=False, dynamic_sampling=False
    )
    with caplog.at_level(logging.WARNING, logger="trl_ext"):
        trainer = DAPOTrainer(
            tiny_model, [position_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
        )
    warnings = [r.getMessage() for r in caplog.records if "optimizer steps per rollout" in r.getMessage()]
    assert len(warnings) == 1
    assert "DAPOConfig trains 2 optimizer steps per rollout" in warnings[0]
    assert "with logging_steps=1 they appear on 1 of every 2 logged rows" in warnings[0]
    assert "With max_steps=3 the run generates 2 rollout(s)" in warnings[0]
    trainer.train()
    rows = [h for h in trainer.state.log_history if "loss" in h]
    assert [h["rollout"] for h in rows] == [1.0, 1.0, 2.0]
    assert ["reward" in h for h in rows] == [True, False, True]


# -- item 8: an overlong buffer too short to ramp ------------------------------------------------------------------


def test_tiny_default_overlong_buffer_warns_with_the_penalized_lengths(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="trl_ext.grpo.configs"):
        args = tiny_args("dapo", tmp_path, max_completion_length=8)
    assert args.overlong_buffer_len == 1  # int(0.2 * 8)
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith("overlong_buffer_len=1 token(s) (20% of max_completion_length=8)")
    assert "Completions of 8 tokens (the last 1 of 8 lengths) are penalized" in message
    assert "the full -1 (overlong_penalty_factor)" in message
    for fix in ("Raise max_completion_length", "set overlong_buffer_len explicitly", "soft_overlong_punishment=False"):
        assert fix in message
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trl_ext.grpo.configs"):
        assert warn_step_like_overlong_buffer(12, 2, 0.5)
        assert "Completions of 11-12 tokens (the last 2 of 12 lengths)" in caplog.text and "full -0.5" in caplog.text
        caplog.clear()
        assert tiny_args("dapo", tmp_path, max_completion_length=20).overlong_buffer_len == 4  # a 4-token ramp
        tiny_args("dapo", tmp_path, max_completion_length=8, overlong_buffer_len=2)  # chosen explicitly
        tiny_args("dapo", tmp_path, max_completion_length=8, soft_overlong_punishment=False)
    assert not caplog.records


# -- item 10b: shaping rewards by their mark -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, options, shaping",
    [
        ("soft_overlong", {"max_completion_len": 4}, True),
        ("repetition", {}, True),
        ("length_budget", {"budget": 4}, True),
        ("len_reward", {}, True),
        ("accuracy", {}, False),
        ("format", {}, False),
        ("cosine", {}, False),  # replaces the accuracy reward: its sign is the correctness
    ],
)
def test_registry_rewards_carry_the_shaping_mark(name, options, shaping):
    func = get_reward(name, **options)
    assert is_shaping_reward(func) is shaping
    assert is_shaping_reward(GuardedReward(func)) is shaping  # seen through the reward guard


def test_dynamic_sampling_metric_leaves_out_marked_shaping_rewards_whatever_their_name(
    tiny_model, tokenizer, problems, tmp_path
):
    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False, dynamic_sampling_max_generation_batches=1)
    overlong = get_reward("soft_overlong", max_completion_len=4, soft_punish_cache=4)  # --reward_funcs soft_overlong
    trainer = DAPOTrainer(
        tiny_model, [even_answer_reward, overlong], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    assert trainer.reward_func_names == ["even_answer_reward", "soft_overlong"]
    assert trainer.metric_columns == [0]
    trainer.model.train()
    answers = [int(a) for a in problems[0]["answer"]]
    odd, even = next(i for i, a in enumerate(answers) if a % 2), next(i for i, a in enumerate(answers) if a % 2 == 0)
    inputs = [problems[0][i] for i in (odd, even) for _ in range(4)]
    ids = [[5] * n for n in (1, 2, 3, 4)] * 2  # lengths 1..4 in each group: the overlong reward varies
    per_func = trainer._calculate_rewards(inputs, [r["prompt"] for r in inputs], ["1"] * 8, ids)
    assert per_func[:4, 1].tolist() == pytest.approx([-0.25, -0.5, -0.75, -1.0])
    # the odd-answer group: accuracy all 0, overlong varying -> uninformative
    assert informative_groups(trainer.dynamic_sampling_metric(per_func), 4).tolist() == [False, True]


def test_a_function_of_yours_is_left_out_once_marked(tiny_model, tokenizer, problems, tmp_path):
    def brevity(completions, **kwargs):
        return [-0.1 * len(c) for c in completions]

    args = tiny_args("dapo", tmp_path, overlong_buffer_len=4)
    build = dict(args=args, train_dataset=problems[0], processing_class=tokenizer)
    unmarked = DAPOTrainer(tiny_model, [even_answer_reward, brevity], **build)
    assert unmarked.metric_columns == [0, 1]  # the trainer-added overlong term (column 2) is marked
    assert is_shaping_reward(unmarked.reward_funcs[2]) and not is_shaping_reward(unmarked.reward_funcs[1])
    marked = DAPOTrainer(tiny_model, [even_answer_reward, mark_shaping(brevity)], **build)
    assert marked.metric_columns == [0]
    assert math.isclose(marked.reward_weights[2].item(), 1.0)  # overlong_penalty_factor
