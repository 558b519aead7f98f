"""The TRL internals trl-ext relies on, one test each: when a TRL release changes the shape of one of them, the test
that names it fails here, before a run misbehaves. ``tests/test_thin_layer.py`` keeps this list complete (at most 10)."""

from __future__ import annotations

import inspect
from collections import deque

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
    """The one hook dynamic sampling and overlapped generation wrap (and ScoredRoundsMixin reads back)."""
    assert _params(trl.GRPOTrainer._generate_and_score_completions) == ["self", "inputs"]
    source = inspect.getsource(trl.GRPOTrainer._generate_and_score_completions)
    for key in ("prompt_ids", "completion_ids", "completion_mask", "advantages", "num_items_in_batch"):
        assert f'"{key}"' in source, key


def test_per_token_logps_takes_model_ids_mask_width_and_batch_size():
    """Deferred old / reference passes return a placeholder of TRL's shape; GSPO-token rewrites the old log-probs
    after the policy forward."""
    params = _params(trl.GRPOTrainer._get_per_token_logps_and_entropies)
    assert params[:5] == ["self", "model", "input_ids", "attention_mask", "logits_to_keep"]
    assert "batch_size" in params


def test_metrics_and_logs_are_trl_buffers_of_the_expected_shape(trainer):
    """``_metrics[mode][key]`` lists (swapped for scratch buffers while rounds run) and the completions table
    ``_logs`` whose ``rewards`` column ScoredRoundsMixin reads back."""
    assert set(trainer._metrics) == {"train", "eval"}
    trainer._metrics["train"]["probe"].append(1.0)  # a defaultdict(list)
    assert {"prompt", "completion", "rewards", "advantages"} <= set(trainer._logs)
    assert isinstance(trainer._logs["rewards"], dict) and isinstance(trainer._logs["prompt"], deque)
    source = inspect.getsource(trl.GRPOTrainer._generate_and_score_completions)
    assert 'self._logs["rewards"][name].extend(rewards_per_func[:, i].tolist())' in source


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


def test_placeholder_shape_matches_the_real_pass(trainer, problems):
    """A deferred pass's placeholder has the real pass's shape: [rows, logits_to_keep]."""
    ids = torch.ones(3, 7, dtype=torch.long)
    mask = torch.ones_like(ids)
    real = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, 4, batch_size=3)[0]
    trainer.deferred_passes.start()
    with torch.no_grad():
        placeholder = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, 4, batch_size=3)[0]
    assert trainer.deferred_passes.stop() == frozenset({"old"})
    assert placeholder.shape == real.shape
