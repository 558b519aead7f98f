"""Presets carry the papers' defaults, and contradictory settings fail at construction naming field and fix."""

import pytest
from helpers import tiny_args

from trl_ext import DAPOConfig, GSPOConfig, get_preset, preset_names


def test_dapo_defaults_are_the_papers(tmp_path):
    args = DAPOConfig(
        output_dir=str(tmp_path), max_completion_length=20480, use_cpu=True, bf16=False, per_device_train_batch_size=16
    )
    assert (args.epsilon, args.epsilon_high, args.loss_type, args.beta) == (0.2, 0.28, "dapo", 0.0)
    assert args.num_generations == 16 and args.dynamic_sampling and args.soft_overlong_punishment
    assert args.overlong_buffer_len == 4096  # 20% of 20480, the paper's L_cache
    assert args.overlong_penalty_factor == 1.0


def test_gspo_defaults_are_the_papers(tmp_path):
    args = GSPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=8,
        num_generations=8,
        gradient_accumulation_steps=2,
    )
    assert args.importance_sampling_level == "sequence"
    assert (args.epsilon, args.epsilon_high, args.beta, args.loss_type) == (3e-4, 4e-4, 0.0, "grpo")
    assert args.steps_per_generation == 8  # 4 minibatches x 2 accumulation steps
    token = GSPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=8,
        num_generations=8,
        gspo_token=True,
    )
    # GSPO-token is the token level plus our switch: TRL >= 1.14 rejects TRL 1.12's "sequence_token" level
    assert token.importance_sampling_level == "token" and token.gspo_token


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "dapo", "gspo", "gspo_token"])
def test_every_preset_builds_by_name(name, tmp_path):
    args = tiny_args(name, tmp_path)
    assert args.num_generations == 4
    assert hasattr(args, "dynamic_sampling")


def test_preset_specific_defaults(tmp_path):
    assert tiny_args("dr_grpo", tmp_path).loss_type == "dr_grpo"
    assert tiny_args("dr_grpo", tmp_path).scale_rewards == "none"
    assert tiny_args("grpo", tmp_path).beta == 0.04
    assert tiny_args("grpo", tmp_path, dynamic_sampling=True).dynamic_sampling
    assert set(preset_names()) == {"grpo", "dr_grpo", "dapo", "gspo", "gspo_token"}


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [
        ("gspo", {"epsilon": 0.2, "epsilon_high": 0.28}, "epsilon=0.2 with importance_sampling_level='sequence'"),
        ("gspo", {"loss_type": "dapo"}, "TRL issue #3823"),
        ("gspo_token", {"epsilon": 0.2, "epsilon_high": 0.28}, "epsilon=0.2 with gspo_token=True"),
        ("gspo_token", {"importance_sampling_level": "sequnce"}, "gspo_token=True with importance_sampling_level"),
        ("dapo", {"epsilon_high": 0.1}, "epsilon_high=0.1 is below epsilon=0.2"),
        ("dapo", {"mask_truncated_completions": True}, "mask_truncated_completions"),
        ("dapo", {"overlong_buffer_len": 99}, "overlong_buffer_len=99"),
        ("dapo", {"dynamic_sampling_max_generation_batches": 0}, "dynamic_sampling_max_generation_batches=0"),
        ("dapo", {"dynamic_sampling_reward_range": [1.0, 0.0]}, "dynamic_sampling_reward_range"),
        ("grpo", {"num_generations": 1}, "num_generations"),
        ("dapo", {"per_device_train_batch_size": 2, "num_generations": 4}, "num_generations"),
        ("dapo", {"epsilonhigh": 0.3}, "Did you mean 'epsilon_high'"),
    ],
)
def test_contradictions_fail_at_construction(name, overrides, message, tmp_path):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        tiny_args(name, tmp_path, **overrides)


def test_unknown_preset_suggests_the_closest(tmp_path):
    with pytest.raises(ValueError, match="Did you mean 'dapo'"):
        get_preset("dappo", output_dir=str(tmp_path))
