"""The group filter of dynamic sampling on crafted reward tables (DAPO Eq. 11: keep 0 < #correct < G)."""

import math

import pytest
import torch

from trl_ext.grpo.dynamic_sampling.groups import expected_rounds, group_stats, informative_groups


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


def test_expected_rounds_one_group_per_batch_is_geometric():
    assert expected_rounds(0.25) == pytest.approx(4.0)  # uncapped: 1/p
    # capped at 4 rounds: E[min(R, 4)] = 1 + 0.9 + 0.81 + 0.729, not min(1/p, 4) = 4
    assert expected_rounds(0.1, max_rounds=4) == pytest.approx(3.439)
    assert expected_rounds(0.0, max_rounds=3) == 3.0


def _simulated_rounds(p: float, num_groups: int, max_rounds: int, trials: int = 20000, seed: int = 0) -> float:
    """The trainer's refill policy, simulated: whole batches of num_groups groups until num_groups informative ones
    are in hand or max_rounds rounds were made."""
    generator = torch.Generator().manual_seed(seed)
    draws = torch.rand(trials, max_rounds, num_groups, generator=generator) < p
    found = draws.sum(dim=2).cumsum(dim=1)  # informative groups in hand after each round
    full = found >= num_groups
    first = torch.where(full.any(dim=1), full.float().argmax(dim=1) + 1, torch.full((trials,), max_rounds))
    return first.float().mean().item()


@pytest.mark.parametrize("p,num_groups,max_rounds", [(0.5, 2, 3), (0.78, 16, 4), (0.3, 8, 10), (0.9, 32, 4)])
def test_expected_rounds_matches_the_refill_policy(p, num_groups, max_rounds):
    expected = expected_rounds(p, max_rounds, num_groups)
    assert expected == pytest.approx(_simulated_rounds(p, num_groups, max_rounds), abs=0.02)


def test_expected_rounds_hand_values():
    # two groups, p = 0.5: P(R > 1) = P(Bin(2, .5) < 2) = 3/4; P(R > 2) = P(Bin(4, .5) < 2) = 5/16; capped at 3
    assert expected_rounds(0.5, 3, 2) == pytest.approx(1 + 3 / 4 + 5 / 16)
    # a batch of 16 groups at p = 0.78 needs 2 rounds almost always (16 informative of 16 has 0.78^16 = 1.9%)
    assert expected_rounds(0.78, 4, 16) == pytest.approx(
        1 + (1 - 0.78**16) + _tail(0.78, 32, 16) + _tail(0.78, 48, 16)
    )
    assert expected_rounds(1.0, 4, 16) == 1.0


def _tail(p: float, n: int, k: int) -> float:
    import math

    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k))
