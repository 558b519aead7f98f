"""Length rewards: DAPO soft overlong and repetition (TRL's, checked against TRL) and the length budget."""

from __future__ import annotations

import pytest
from trl.rewards import get_repetition_penalty_reward, get_soft_overlong_punishment

from trl_ext.rewards.length import LengthBudget, Repetition, SoftOverlong


def test_soft_overlong_matches_dapo_eq13_and_trl():
    ids = [[1] * n for n in (50, 80, 90, 100, 101)]
    reward = SoftOverlong(max_completion_len=100, soft_punish_cache=20)
    # 0 up to 80 tokens, (80 - n) / 20 between 80 and 100, -1 beyond
    assert reward(prompts=None, completions=["x"] * 5, completion_ids=ids) == [0.0, 0.0, -0.5, -1.0, -1.0]
    assert reward(completions=["x"] * 5, completion_ids=ids) == get_soft_overlong_punishment(100, 20)(ids)
    assert reward.__name__ == "soft_overlong" and reward.last_unit == "tokens"


def test_soft_overlong_validates():
    with pytest.raises(ValueError, match="soft_punish_cache"):
        SoftOverlong(max_completion_len=10, soft_punish_cache=20)


def test_repetition_matches_trl():
    ids = [[1, 2, 3, 4], [5, 5, 5, 5, 5], [1, 2, 1, 2, 1, 2]]
    reward = Repetition(ngram_size=2, max_penalty=-1.0)
    # bigrams: 3 unique of 3 -> 0; 1 of 4 -> -0.75; 2 of 5 -> -0.6
    assert reward(completions=["x"] * 3, completion_ids=ids) == pytest.approx([0.0, -0.75, -0.6])
    assert reward(completions=["x"] * 3, completion_ids=ids) == get_repetition_penalty_reward(2, -1.0)(ids)
    with pytest.raises(ValueError):
        Repetition(max_penalty=0.5)


def test_words_when_called_without_token_ids():
    reward = Repetition(ngram_size=2)
    assert reward(completions=["a a a a a", [{"role": "assistant", "content": "one two three"}]]) == [-0.75, 0.0]
    assert reward.last_unit == "words"


def test_length_budget_max_and_exact():
    ids = [[0] * n for n in (5, 15, 30)]
    assert LengthBudget(budget=10)(completions=[""] * 3, completion_ids=ids) == [0.0, -0.5, -1.0]  # -2 clipped
    assert LengthBudget(budget=10, clip=False)(completions=[""] * 3, completion_ids=ids) == [0.0, -0.5, -2.0]
    assert LengthBudget(budget=10, mode="exact", alpha=0.5)(completions=[""] * 3, completion_ids=ids) == [
        -0.25,
        -0.25,
        -0.5,
    ]


def test_length_budget_per_example_column():
    reward = LengthBudget()
    ids = [[0] * 15] * 4
    out = reward(completions=[""] * 4, completion_ids=ids, length_budget=[10, 20, "abc", 0])
    assert out == [-0.5, 0.0, None, None]
    with pytest.raises(ValueError, match="budget"):
        reward(completions=[""], completion_ids=[[0]])
