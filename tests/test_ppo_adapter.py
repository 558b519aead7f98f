"""The PPO reward adapter, called the way TRL's PPOTrainer calls a reward model (trl.experimental.utils.get_reward).

If TRL changes how it calls the reward model, these tests fail loudly: that call is the one TRL internal we rely on.
"""

from __future__ import annotations

import copy

import pytest
import torch
from datasets import Dataset

pytest.importorskip(
    "trl.experimental.ppo",
    reason='PPO needs trl 1.12 (removed in 1.13): run its tests in the PPO venv of README "Set up"',
)
from trl.experimental.utils import get_reward  # noqa: E402

from trl_ext.ppo import RuleRewardModel, prompt_token_ids, tokenize_prompts  # noqa: E402
from trl_ext.rewards import arithmetic_reward  # noqa: E402

PROMPTS = Dataset.from_dict({"prompt": ["1+2=", "10+5=", "7+7="], "answer": [3, 15, 14]})


def _query_responses(tokenizer, prompts, responses, response_width=5):
    """Left-padded queries followed by responses right-padded with pad, like PPOTrainer's postprocessed batch."""
    queries = [prompt_token_ids(p, tokenizer) for p in prompts]
    context = max(len(q) for q in queries)
    rows = []
    for query, response in zip(queries, responses, strict=True):
        ids = tokenizer(response, add_special_tokens=False)["input_ids"] if response else []
        ids = ids + [tokenizer.eos_token_id]
        ids = ids + [tokenizer.pad_token_id] * (response_width - len(ids))
        rows.append([tokenizer.pad_token_id] * (context - len(query)) + query + ids)
    return torch.tensor(rows), context


def test_trl_get_reward_reads_the_rule_reward(tokenizer):
    model = RuleRewardModel([arithmetic_reward], tokenizer, PROMPTS)
    query_responses, context = _query_responses(tokenizer, ["1+2=", "10+5=", "7+7="], ["3", "16", "14 1"])
    logits, scores, lengths = get_reward(model, query_responses, tokenizer.pad_token_id, context)
    assert scores.tolist() == [1.0, 0.0, 1.0]
    assert logits.shape == (*query_responses.shape, 1)
    # TRL reads the score at the last non-pad token of the response (the EOS here)
    assert lengths.tolist() == [context + 1, context + 2, context + 4]


def test_columns_completions_and_weights_reach_the_reward_functions(tokenizer):
    seen = {}

    def record(prompts, completions, answer, completion_ids, **kwargs):
        seen.update(prompts=prompts, completions=completions, answer=answer, completion_ids=completion_ids)
        return [None if c == "" else 0.5 for c in completions]

    model = RuleRewardModel([arithmetic_reward, record], tokenizer, [PROMPTS], reward_weights=[2.0, -1.0])
    query_responses, context = _query_responses(tokenizer, ["7+7=", "1+2="], ["14", ""])
    _, scores, _ = get_reward(model, query_responses, tokenizer.pad_token_id, context)
    # row 0: 2 * 1.0 - 0.5 = 1.5; row 1: arithmetic 0.0, record None (skipped, TRL's nansum rule) -> 0.0
    assert scores.tolist() == [1.5, 0.0]
    assert seen["prompts"] == ["7+7=", "1+2="] and seen["answer"] == [14, 3]
    assert seen["completions"] == ["14", ""]  # EOS and padding removed
    assert seen["completion_ids"][0] == tokenizer("14", add_special_tokens=False)["input_ids"] + [
        tokenizer.eos_token_id
    ]


def test_unscored_completions_get_the_fallback(tokenizer):
    model = RuleRewardModel(
        [lambda prompts, completions, **kw: [None] * len(completions)], tokenizer, PROMPTS, unscored_reward=-1.0
    )
    query_responses, context = _query_responses(tokenizer, ["1+2="], ["3"])
    assert get_reward(model, query_responses, tokenizer.pad_token_id, context)[1].tolist() == [-1.0]


def test_unknown_prompt_names_the_fix(tokenizer):
    model = RuleRewardModel([arithmetic_reward], tokenizer, PROMPTS)
    query_responses, context = _query_responses(tokenizer, ["9+9="], ["18"])
    with pytest.raises(KeyError, match="train_dataset and eval_dataset"):
        get_reward(model, query_responses, tokenizer.pad_token_id, context)


def test_tokenize_prompts_matches_the_lookup(tokenizer):
    tokenized = tokenize_prompts(PROMPTS, tokenizer)
    assert tokenized.column_names == ["input_ids"]
    assert tokenized[1]["input_ids"] == prompt_token_ids("10+5=", tokenizer)
    with pytest.raises(ValueError, match="'prompt' column"):
        tokenize_prompts(PROMPTS.rename_column("prompt", "question"), tokenizer)


def test_trl_ppo_trainer_runs_with_the_adapter(tiny_model, tokenizer, problems, tmp_path):
    from transformers import Qwen2ForSequenceClassification
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    train, held_out = problems
    value_config = copy.deepcopy(tiny_model.config)
    value_config.num_labels = 1
    value = Qwen2ForSequenceClassification(value_config)
    rewards_seen = []

    def counting_reward(prompts, completions, answer, **kwargs):
        values = arithmetic_reward(prompts, completions, answer)
        rewards_seen.extend(values)
        return values

    args = PPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        total_episodes=16,
        num_ppo_epochs=1,
        response_length=3,
        stop_token="eos",
        num_sample_generations=0,
        gradient_checkpointing=False,
        bf16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
    )
    trainer = PPOTrainer(
        args=args,
        processing_class=tokenizer,
        model=tiny_model,
        ref_model=None,
        reward_model=RuleRewardModel([counting_reward], tokenizer, [train, held_out]),
        value_model=value,
        train_dataset=tokenize_prompts(train, tokenizer),
    )
    trainer.train()
    scores = [log["objective/scores"] for log in trainer.state.log_history if "objective/scores" in log]
    assert len(scores) == 2 and len(rewards_seen) == 16
    assert sum(scores) / 2 == pytest.approx(sum(rewards_seen) / 16)
