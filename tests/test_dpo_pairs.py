"""Pair mining on crafted reward tables: ties, all-equal groups, NaN, length matching (hand-computed references)."""

from __future__ import annotations

import math

import pytest
import torch

from trl_ext.dpo import pairs
from trl_ext.dpo.pairs import build_pairs, select_pairs
from trl_ext.dpo.trainer import length_margin_decomposition
from trl_ext.grpo.dynamic_sampling import groups as group_filter
from trl_ext.scoring import combine_rewards, score_completions

nan = math.nan


def test_uses_the_dynamic_sampling_filter():
    # One implementation, shared with DAPO's dynamic sampling.
    assert pairs.informative_groups is group_filter.informative_groups


def test_all_equal_and_unscorable_groups_are_dropped():
    rewards = torch.tensor(
        [
            1.0, 1.0, 1.0, 1.0,  # all right: dropped
            0.0, 0.0, 0.0, 0.0,  # all wrong: dropped
            nan, nan, nan, nan,  # unscorable: dropped
            nan, 1.0, nan, nan,  # one scorable completion: cannot compare, dropped
            0.0, 1.0, 0.0, 0.0,  # informative
        ]
    )  # fmt: skip
    assert select_pairs(rewards, [1] * 20, num_generations=4) == [(17, 16)]


def test_nan_never_enters_a_pair():
    rewards = torch.tensor([nan, 0.0, 1.0, nan])
    assert select_pairs(rewards, [1, 5, 5, 1], num_generations=4) == [(2, 1)]


def test_best_and_worst_tiers_with_length_matching():
    # Group of 6: best reward 1.0 at 0 and 3, worst 0.0 at 1 and 4, middle 0.5 at 2 and 5 (never paired).
    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0, 0.5])
    lengths = [9, 2, 4, 4, 5, 4]
    # candidate |gaps|: (0,1)=7, (0,4)=4, (3,1)=2, (3,4)=1 -> (3, 4); the middle tier would match 0 but is skipped.
    assert select_pairs(rewards, lengths, num_generations=6) == [(3, 4)]
    # two pairs per group: (3, 4) then the closest pair with unused completions, (0, 1).
    assert select_pairs(rewards, lengths, num_generations=6, pairs_per_group=2) == [(3, 4), (0, 1)]
    # max_length_gap=3 keeps (3, 4) (gap 1) and drops (0, 1) (gap 7).
    assert select_pairs(rewards, lengths, 6, pairs_per_group=2, max_length_gap=3) == [(3, 4)]
    assert select_pairs(rewards, lengths, 6, max_length_gap=0) == []


def test_length_ties_break_on_lowest_indices():
    rewards = torch.tensor([0.0, 1.0, 1.0, 0.0])
    assert select_pairs(rewards, [3, 3, 3, 3], num_generations=4) == [(1, 0)]


def test_atol_defines_ties_and_informativeness():
    rewards = torch.tensor([0.5, 0.5 + 1e-8, 0.2, 0.2, 1.0, 1.001, 0.0, 0.0])
    # group 0: range 0.3 > atol; best tier {0, 1} (within atol), worst {2, 3}: lowest indices (0, 2)
    assert select_pairs(rewards, [1] * 8, num_generations=4, atol=1e-6) == [(0, 2), (5, 6)]
    # with atol 0.01, the best tier of group 1 is {4, 5}: the lowest index wins the length tie
    assert select_pairs(rewards, [1] * 8, num_generations=4, atol=0.01) == [(0, 2), (4, 6)]
    # a range of 0.3 is uninformative under atol 0.5; group 1's best tier is then {4, 5} (>= 1.001 - 0.5)
    assert select_pairs(rewards, [1] * 8, num_generations=4, atol=0.5) == [(4, 6)]


def test_build_pairs_dataset():
    prompts = ["1+1=", "2+2="]  # one per group
    completions = ["2", "3", "11", "4", "4 4", "5"]
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    data = build_pairs(prompts, completions, rewards, num_generations=3)
    assert data.column_names == list(pairs.PAIR_COLUMNS)
    assert data["prompt"] == ["1+1=", "2+2="]
    assert data["chosen"] == ["2", "4"]  # "2" vs "3": same length (1); "4" vs "5": same length
    assert data["rejected"] == ["3", "5"]
    assert data["chosen_length"] == [1, 1] and data["rejected_length"] == [1, 1]
    assert data["chosen_reward"] == [1.0, 1.0] and data["rejected_reward"] == [0.0, 0.0]
    # prompts repeated per completion are accepted too; token lengths override character lengths
    per_completion = build_pairs(
        [p for p in prompts for _ in range(3)], completions, rewards, 3, lengths=[1, 1, 1] * 2
    )
    assert per_completion["prompt"] == ["1+1=", "2+2="]
    assert len(build_pairs(prompts, completions, [1.0] * 6, 3)) == 0  # nothing informative: empty dataset


def test_build_pairs_errors_name_the_argument():
    with pytest.raises(ValueError, match="prompts has 3 entries"):
        build_pairs(["a", "b", "c"], ["x"] * 4, [0.0, 1.0, 0.0, 1.0], num_generations=2)
    with pytest.raises(ValueError, match="rewards has 3 entries"):
        build_pairs(["a"], ["x"] * 4, [0.0, 1.0, 0.0], num_generations=4)
    with pytest.raises(ValueError, match="num_generations=3"):
        select_pairs(torch.zeros(4), [1] * 4, num_generations=3)


def test_combine_rewards_is_nan_aware():
    table = torch.tensor([[1.0, 0.5], [nan, 0.5], [nan, nan], [0.0, 0.0]])
    combined = combine_rewards(table, [2.0, 1.0])
    assert combined[:2].tolist() == [2.5, 0.5] and math.isnan(combined[2]) and combined[3] == 0.0
    with pytest.raises(ValueError, match="reward_weights has 1 values for 2"):
        combine_rewards(table, [1.0])


def test_score_completions_passes_columns_and_weights():
    def correct(prompts, completions, answer, **kwargs):
        return [1.0 if c == str(a) else 0.0 for c, a in zip(completions, answer, strict=True)]

    def short(prompts, completions, **kwargs):
        return [None if c == "" else -len(c) / 10 for c in completions]

    rewards = score_completions([correct, short], ["1+1="] * 3, ["2", "22", ""], [1.0, 0.5], answer=[2, 2, 2])
    assert torch.allclose(rewards, torch.tensor([1.0 - 0.05, 0.0 - 0.1, 0.0]))

    def broken(prompts, completions, **kwargs):
        return [0.0]

    with pytest.raises(ValueError, match="'broken' returned 1 rewards for 3"):
        score_completions([broken], ["p"] * 3, ["a", "b", "c"])


def test_length_margin_decomposition_by_hand():
    # chosen: 4 tokens, log-ratio sum 2.0 (a_w = 0.5); rejected: 2 tokens, sum -1.0 (a_l = -0.5); beta 0.1
    parts = length_margin_decomposition(
        torch.tensor([2.0, 1.0]), torch.tensor([-1.0, 1.0]), torch.tensor([4, 2]), torch.tensor([2, 2]), beta=0.1
    )
    # pair 0: margin 0.1 * 3 = 0.3; length part 0.1 * (4-2) * (0.5-0.5)/2 = 0; per-token 0.1 * 1.0 * 6/2 = 0.3
    # pair 1: same lengths, same log-ratios: all zero
    assert torch.allclose(parts["margin"], torch.tensor([0.3, 0.0]))
    assert torch.allclose(parts["length_part"], torch.tensor([0.0, 0.0]))
    assert torch.allclose(parts["per_token_part"], torch.tensor([0.3, 0.0]))
    # pure length effect: both sides gain 0.25 per token, chosen is 3 tokens longer
    parts = length_margin_decomposition(
        torch.tensor([1.25]), torch.tensor([0.5]), torch.tensor([5]), torch.tensor([2]), beta=1.0
    )
    assert torch.allclose(parts["length_part"], torch.tensor([0.75])) and torch.allclose(
        parts["per_token_part"], torch.tensor([0.0])
    )
    assert torch.allclose(parts["margin"], parts["length_part"] + parts["per_token_part"])


def test_truncated_completion_is_never_chosen():
    # index 0 is correct but truncated (no EOS) and the closest in length to the rejected ones: never chosen
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0])
    lengths = [3, 8, 3, 3]
    assert select_pairs(rewards, lengths, 4) == [(0, 2)]  # without the flag, length matching picks it
    assert select_pairs(rewards, lengths, 4, truncated=[True, False, False, False]) == [(1, 2)]
    # when every best-reward completion is truncated, the chosen tier is the best among those that ended
    rewards = torch.tensor([1.0, 0.5, 0.0, 0.0])
    assert select_pairs(rewards, [3, 3, 3, 3], 4, truncated=[True, False, False, False]) == [(1, 2)]
    # no completion ended: no pair
    assert select_pairs(rewards, [3] * 4, 4, truncated=[True] * 4) == []
    # an excluded completion enters no pair, on either side
    assert select_pairs(torch.tensor([1.0, 0.0, 0.0, 1.0]), [1, 1, 2, 2], 4, excluded=[True, True, False, False]) == [
        (3, 2)
    ]


def test_mined_pairs_train_on_the_sampled_ids(tokenizer, tiny_model, monkeypatch):
    from datasets import Dataset

    from trl_ext.dpo.pairs import mine_pairs, round_trips, sample_groups

    # the demo tokenizer: text -> ids is exact, with the EOS TRL's DPOTrainer appends
    ids = tokenizer("12", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert round_trips(tokenizer, "12", ids) and round_trips(tokenizer, "12", ids[:-1])
    assert not round_trips(tokenizer, "13", ids)
    prompts = ["1+2=", "3+4=", "5+5=", "7+1="]
    completions, sampled = sample_groups(tiny_model, tokenizer, prompts, 4, max_new_tokens=3)
    # a random model samples <pad>/<unk> too: decode drops them, so that text does not give back the sampled ids
    special = {tokenizer.pad_token_id, tokenizer.unk_token_id}
    faithful = [round_trips(tokenizer, c, i) for c, i in zip(completions, sampled, strict=True)]
    assert faithful == [not special & set(i) for i in sampled]
    assert 0 < sum(faithful) < len(faithful)

    def by_length(completions, completion_ids, **kwargs):
        return [float(len(i)) for i in completion_ids]  # long completions (the truncated ones) score highest

    eos, unk = tokenizer.eos_token_id, tokenizer.unk_token_id
    ids_of = {text: tokenizer(text, add_special_tokens=False)["input_ids"] for text in ("12", "1", "123", "9")}
    crafted = [  # one group of 4: (text, sampled ids)
        ("123", ids_of["123"]),  # truncated (no EOS), longest: the best reward, never chosen
        ("12", [*ids_of["12"], unk]),  # decoded text drops <unk>: does not round-trip, left out
        ("1", [*ids_of["1"], eos]),  # ended, length 2: chosen
        ("", [eos]),  # ended, length 1: rejected
    ]
    monkeypatch.setattr(pairs, "sample_groups", lambda *a, **k: ([t for t, _ in crafted], [i for _, i in crafted]))
    data = Dataset.from_dict({"prompt": ["1+2="]})
    mined, stats = mine_pairs(tiny_model, tokenizer, data, [by_length], num_generations=4, max_new_tokens=3)
    assert (stats.num_truncated, stats.num_not_round_trip) == (2, 1)  # "12"+<unk> did not end with EOS either
    assert stats.as_dict()["mining/truncated"] == 2
    assert mined["chosen"] == ["1"] and mined["rejected"] == [""]
