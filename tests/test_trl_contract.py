"""The TRL internals trl-ext relies on, one test each: when a TRL release changes the shape of one of them, the test
that names it fails here, before a run misbehaves. ``tests/test_thin_layer.py`` keeps this list complete (at most 10)."""

from __future__ import annotations

import inspect

import pytest
import torch
import transformers
import trl
from helpers import tiny_args

from trl_ext import DAPOTrainer


def _params(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def zero_reward(completions, **kwargs):
    return [0.0] * len(completions)


@pytest.fixture
def trainer(tiny_model, tokenizer, problems, tmp_path):
    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False)
    return DAPOTrainer(tiny_model, [zero_reward], args=args, train_dataset=problems[0], processing_class=tokenizer)


def test_generate_and_score_completions_takes_the_inputs_and_returns_the_batch():
    """The one hook dynamic sampling and overlapped generation wrap."""
    assert _params(trl.GRPOTrainer._generate_and_score_completions) == ["self", "inputs"]


def test_per_token_logps_takes_model_ids_mask_width_and_batch_size():
    """GSPO-token rewrites the old log-probs after the policy forward."""
    params = _params(trl.GRPOTrainer._get_per_token_logps_and_entropies)
    assert params[:5] == ["self", "model", "input_ids", "attention_mask", "logits_to_keep"]
    assert "batch_size" in params


def half_none_reward(completions, **kwargs):
    return [None if i % 2 else float(i) for i in range(len(completions))]


def test_a_round_scores_every_row_once_with_nan_for_none(tiny_model, tokenizer, problems, tmp_path):
    """Dynamic sampling's rewards are what TRL's ``_calculate_rewards`` returns inside one
    ``_generate_and_score_completions`` call: once per call, [rows of every process, functions], NaN for None."""
    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False)
    trainer = DAPOTrainer(
        tiny_model, [zero_reward, half_none_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    trainer.model.train()
    output, rewards = trainer.generate_and_score([problems[0][0]] * 4 + [problems[0][1]] * 4)
    assert rewards.shape == (8, 2) and output["completion_ids"].size(0) == 8
    assert rewards[:, 0].tolist() == [0.0] * 8
    assert torch.isnan(rewards[1::2, 1]).all() and rewards[0::2, 1].tolist() == [0.0, 2.0, 4.0, 6.0]


class PromptPositionReward:
    """A reward of (the completion's position in its group) x (1 + the prompt's answer): deterministic per group."""

    __name__ = "prompt_position"

    def __call__(self, completions, answer, **kwargs):
        return [float(i % 4) * (1 + int(a)) for i, a in enumerate(answer)]


@pytest.mark.parametrize("scale", ["group", "none"])
def test_group_scaled_advantages_depend_on_the_group_alone(tiny_model, tokenizer, problems, tmp_path, scale):
    """Why dynamic sampling keeps TRL's per-round advantages under ``scale_rewards`` "group" (DAPO's) and "none": a
    group's advantages do not change when the other groups of its round change."""
    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False, scale_rewards=scale)
    trainer = trl.GRPOTrainer(
        tiny_model, [PromptPositionReward()], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    trainer.model.train()
    shared = [problems[0][0]] * 4
    first = trainer._generate_and_score_completions(shared + [problems[0][1]] * 4)["advantages"][:4]
    second = trainer._generate_and_score_completions(shared + [problems[0][7]] * 4)["advantages"][:4]
    torch.testing.assert_close(first, second)


def test_nanstd_is_the_bessel_corrected_std_over_scored_values():
    """``scale_rewards="batch"`` over the assembled batch uses TRL's ``nanstd``."""
    from trl.trainer.utils import nanstd

    values = torch.tensor([1.0, float("nan"), 3.0, 5.0])
    assert nanstd(values).item() == pytest.approx(2.0)  # mean 3, squared deviations 4 + 0 + 4, / (3 - 1)


def test_pixel_values_split_per_sample_and_join_back():
    """The assembly regroups multimodal fields through TRL's own split (per sample) and unsplit (joined)."""
    from trl.trainer.utils import split_pixel_values_by_grid, unsplit_pixel_values_by_grid

    batch = {
        "pixel_values": torch.arange(20.0).view(10, 2),
        "image_grid_thw": torch.tensor([[1, 2, 2], [1, 1, 2], [1, 2, 2]]),  # 4 + 2 + 4 rows
        "num_images": [1, 2],
        "prompt_ids": torch.zeros(2, 3),
    }
    split = split_pixel_values_by_grid(batch)
    assert [t.size(0) for t in split["pixel_values"]] == [4, 6] and len(split["image_grid_thw"]) == 2
    joined = unsplit_pixel_values_by_grid({**split, "pixel_values": split["pixel_values"][::-1]})
    assert joined["pixel_values"].size(0) == 10 and torch.equal(joined["pixel_values"][:6], batch["pixel_values"][4:])


def test_metrics_are_trl_buffers_of_the_expected_shape(trainer):
    """``_metrics[mode][key]`` lists, averaged by TRL's ``log``: dynamic sampling appends its figures there."""
    assert set(trainer._metrics) == {"train", "eval"}
    trainer._metrics["train"]["probe"].append(1.0)  # a defaultdict(list)


def test_step_and_buffered_inputs_are_the_generation_block_state(trainer):
    """Exact resume inside a generation block restores TRL's micro-step counter and its buffered batch."""
    assert trainer._step == 0 and trainer._buffered_inputs is None
    source = inspect.getsource(trl.GRPOTrainer._prepare_inputs)
    assert "self._step % generate_every == 0 or self._buffered_inputs is None" in source
    assert "self._buffered_inputs[self._step % self.args.steps_per_generation]" in source


def test_save_checkpoint_writes_under_get_output_dir():
    """Atomic checkpoints point ``_get_output_dir`` at the staging folder while the Trainer saves."""
    assert _params(transformers.Trainer._get_output_dir) == ["self", "trial"]
    assert _params(transformers.Trainer._save_checkpoint) == ["self", "model", "trial"]
    assert "self._get_output_dir(trial=trial)" in inspect.getsource(transformers.Trainer._save_checkpoint)


def test_tokenize_prompts_returns_ids_images_and_fields(trainer, problems):
    """Overlapped generation tokenizes a round's prompts as TRL will, to submit them ahead."""
    ids, images, fields = trainer._tokenize_prompts([problems[0][0]["prompt"]])
    assert isinstance(ids[0], list) and all(isinstance(i, int) for i in ids[0]) and images is None
    assert isinstance(fields, dict)


def test_total_train_tokens_is_the_num_tokens_counter_of_dpo():
    """Checkpoints keep the token counter TRL's DPO / SFT / reward trainers log as ``num_tokens``."""
    source = inspect.getsource(trl.DPOTrainer)
    assert "self._total_train_tokens = 0" in source
    assert '["num_tokens"] = [self._total_train_tokens]' in source
