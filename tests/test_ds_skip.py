"""GRESO pre-rollout skipping (arXiv 2506.02177) for dynamic sampling: the skip rule by hand, its effect on persistent
data, and its history resumed exactly."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_args

from trl_ext import DAPOTrainer
from trl_ext.grpo.dynamic_sampling.skip import SkipPredictor


def even_answer_reward(completions, answer, **kwargs):
    """Informative only for prompts whose answer is even; constant 0 otherwise (difficulty persists)."""
    return [float(i % 2) if int(a) % 2 == 0 else 0.0 for i, a in enumerate(answer)]


def test_skip_rule_by_hand():
    skip = SkipPredictor(seed=0, target=0.25, p=0.5, step=0.1, p_min=0.2)
    assert not any(skip.should_skip(7) for _ in range(100))  # never seen uninformative: never skipped
    skip.record(7, zero_variance=True)
    skip.record(7, zero_variance=True)
    assert skip.skip_probability(7) == pytest.approx(1 - 0.5**2)
    draws = [skip.should_skip(7) for _ in range(4000)]
    assert sum(draws) / 4000 == pytest.approx(0.75, abs=0.03)
    skip.record(7, zero_variance=False)  # an informative visit resets the streak
    assert skip.skip_probability(7) == 0.0
    skip.adapt(0.5)  # above the target: explore less (skip more)
    assert skip.p == pytest.approx(0.4)
    skip.adapt(0.5)
    skip.adapt(0.5)
    skip.adapt(0.5)
    assert skip.p == pytest.approx(0.2)  # floor
    skip.adapt(0.1)
    assert skip.p == pytest.approx(0.3)
    copy = SkipPredictor(seed=1)
    copy.load_state_dict(skip.state_dict())
    skip.record(3, True)
    copy.record(3, True)
    assert [skip.should_skip(3) for _ in range(50)] == [copy.should_skip(3) for _ in range(50)]


def _trainer(tokenizer, problems, out, skip, **overrides):
    from trl_ext.demo import DemoModelConfig, build_model

    small = DemoModelConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
    )
    settings = dict(
        soft_overlong_punishment=False,
        dynamic_sampling_max_generation_batches=30,
        dynamic_sampling_skip_predicted=skip,
        max_steps=12,
        learning_rate=0.0,
    )
    settings.update(overrides)
    args = tiny_args("dapo", out, **settings)
    return DAPOTrainer(
        build_model(tokenizer, small),
        [even_answer_reward],
        args=args,
        train_dataset=problems[0].select(range(16)),  # small: every prompt is revisited within a few steps
        processing_class=tokenizer,
    )


def test_skipping_generates_fewer_groups_on_persistent_data(tokenizer, problems, tmp_path):
    generated = {}
    for skip in (False, True):
        trainer = _trainer(tokenizer, problems, tmp_path / str(skip), skip)
        trainer.train()
        logs = [h for h in trainer.state.log_history if "dynamic_sampling/generated_groups" in h]
        generated[skip] = sum(h["dynamic_sampling/generated_groups"] for h in logs[6:])  # once the history exists
        if skip:
            skipped = [h["dynamic_sampling/skipped_prompts"] for h in logs]
            assert sum(skipped[6:]) > 0
            assert trainer.dynamic_sampler.skip.streaks  # odd-answer prompts have zero-variance streaks
            answers = [int(a) for a in problems[0]["answer"]]
            assert all(
                answers[i] % 2 for i in trainer.dynamic_sampler.skip.streaks
            )  # indices of the 16-row subset = first 16
        else:
            assert "dynamic_sampling/skipped_prompts" not in logs[0]
    # half the prompts are always uninformative: about 2 groups per kept one without skipping, fewer with it
    assert generated[True] < generated[False]


def test_skip_history_is_checkpointed_and_resumed_exactly(tokenizer, problems, tmp_path):
    full = _trainer(
        tokenizer,
        problems,
        tmp_path / "full",
        True,
        max_steps=6,
        save_strategy="steps",
        save_steps=3,
        learning_rate=1e-2,
    )
    full.train()
    checkpoint = tmp_path / "full" / "out" / "checkpoint-3"
    resumed = _trainer(tokenizer, problems, tmp_path / "resumed", True, max_steps=6, learning_rate=1e-2)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.dynamic_sampler.skip.state_dict() == full.dynamic_sampler.skip.state_dict()
    params = [torch.cat([p.detach().flatten() for p in t.model.parameters()]) for t in (full, resumed)]
    assert torch.equal(params[0], params[1])
    skipped = [
        [h["dynamic_sampling/skipped_prompts"] for h in t.state.log_history if "dynamic_sampling/skipped_prompts" in h]
        for t in (full, resumed)
    ]
    assert skipped[0] == skipped[1]


@pytest.mark.parametrize("predictor", ["dynamic_sampling_skip_predicted", "dynamic_sampling_select_prompts"])
def test_predictors_need_a_map_style_dataset(predictor, tokenizer, problems, tmp_path, tiny_model):
    """GRESO and the posterior selector keep a history per training-set index."""
    args = tiny_args("dapo", tmp_path, **{predictor: True})
    with pytest.raises(ValueError, match=predictor):
        DAPOTrainer(
            tiny_model,
            [even_answer_reward],
            args=args,
            train_dataset=problems[0].to_iterable_dataset(),
            processing_class=tokenizer,
        )
