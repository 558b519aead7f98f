"""The group filter of dynamic sampling on crafted reward tables (DAPO Eq. 11: keep 0 < #correct < G)."""

import math

import pytest
import torch

from trl_ext.group_filter import expected_rounds, group_stats, informative_groups


def test_binary_rewards_keep_mixed_groups_only():
    rewards = torch.tensor([1.0, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1])
    assert informative_groups(rewards, 4).tolist() == [False, False, True, True]


def test_near_equal_floats_use_the_tolerance():
    base = 0.1 + 0.2  # 0.30000000000000004
    rewards = torch.tensor([base, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3 + 1e-3], dtype=torch.float64)
    assert informative_groups(rewards, 4, atol=1e-6).tolist() == [False, True]
    assert informative_groups(rewards, 4, atol=1e-2).tolist() == [False, False]
    assert informative_groups(rewards, 4, atol=0.0).tolist() == [True, True]  # exact compare sees float noise


def test_unscorable_completions_do_not_count():
    nan = math.nan
    rewards = torch.tensor([nan, 1.0, 1.0, 1.0, nan, nan, nan, 0.5, nan, 0.0, 1.0, nan])
    # group 0: scorable all equal; group 1: one scorable (cannot compare); group 2: mixed
    assert informative_groups(rewards, 4).tolist() == [False, False, True]


def test_shape_errors_name_the_problem():
    with pytest.raises(ValueError, match="num_generations=4"):
        informative_groups(torch.zeros(6), 4)
    with pytest.raises(ValueError, match="1-D"):
        informative_groups(torch.zeros(2, 4), 4)


def test_group_stats_labels_too_easy_and_too_hard():
    rewards = torch.tensor([1.0, 1, 0, 0, 0, 1, 1, 1, 0.5, 0.5])
    stats = group_stats(rewards, 2)  # groups: [1,1] [0,0] [0,1] [1,1] [.5,.5]
    assert (stats.num_groups, stats.num_informative, stats.num_all_max, stats.num_all_min) == (5, 1, 2, 1)
    assert stats.informative_frac == pytest.approx(0.2)
    explicit = group_stats(rewards, 2, reward_min=0.0, reward_max=2.0)
    assert (explicit.num_all_max, explicit.num_all_min) == (0, 1)


def test_expected_rounds_is_inverse_informative_fraction():
    assert expected_rounds(0.25) == pytest.approx(4.0)
    assert expected_rounds(0.1, max_rounds=4) == 4.0
    assert expected_rounds(0.0, max_rounds=3) == 3.0
