"""Dynamic sampling's core without a trainer: rounds planned, groups selected, figures computed, state saved, on
plain tensors (``trl_ext.grpo.ds_sampler``), against hand-computed numbers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from trl_ext.grpo.ds_sampler import DynamicSampler, Round
from trl_ext.grpo.prompt_stream import PromptStream

G = 2  # completions per group


def _args(**overrides):
    values = dict(
        dynamic_sampling_atol=1e-6,
        dynamic_sampling_max_generation_batches=4,
        dynamic_sampling_max_round_size=2.0,
        dynamic_sampling_refill_margin=None,
        dynamic_sampling_carry_over=0.25,
        dynamic_sampling_reward_range=(0.0, 1.0),
    )
    return SimpleNamespace(**{**values, **overrides})


def _round(pattern: str, seconds: float = 1.0) -> Round:
    """One round, a group per character: "i" informative ([0, 1]), "w" all wrong, "r" all right."""
    rows = {"i": [0.0, 1.0], "w": [0.0, 0.0], "r": [1.0, 1.0]}
    metric = torch.tensor([v for group in pattern for v in rows[group]])
    return Round(
        output={},
        rewards_per_func=metric.unsqueeze(1),
        metric=metric,
        lengths=torch.full_like(metric, 3),
        truncated=torch.zeros_like(metric, dtype=torch.bool),
        seconds=seconds,
    )


def _drive(sampler, rounds, num_groups=4):
    plan = sampler.plan(num_groups, local_rows=num_groups * G, world_size=1, scratch=None)
    requests = [next(plan)]
    try:
        for round_ in rounds:
            requests.append(plan.send(round_))
    except StopIteration as stop:
        return [r.groups for r in requests], stop.value
    raise AssertionError("the plan asked for more rounds than given")


def test_a_refill_is_sized_from_the_rate_and_the_surplus_is_counted():
    sampler = DynamicSampler(_args(), G, PromptStream(100, seed=0), carries=False)
    sizes, rollout = _drive(sampler, [_round("iiww"), _round("iiiww")])
    # TRL's batch first (None); then ceil(missing 2 / rate 2/4 x margin 1.05) = ceil(4.2) = 5 groups
    assert sizes == [None, 5]
    assert (rollout.informative, rollout.generated, rollout.num_groups) == (5, 9, 4)
    selection = sampler.finish(rollout)
    assert selection.chosen == [(0, 0), (0, 1), (1, 0), (1, 1)] and selection.surplus == [(1, 2)]
    assert selection.fillers == []
    assert sampler.rate.estimate() == pytest.approx(5 / 9)
    stats = sampler.round_stats(rollout.rounds, 4, len(selection.surplus))
    assert stats["dynamic_sampling/rounds"] == 2 and stats["dynamic_sampling/generated_groups"] == 9
    assert stats["dynamic_sampling/kept_group_frac"] == pytest.approx(5 / 9)
    assert stats["dynamic_sampling/all_min_frac"] == pytest.approx(4 / 9)
    assert stats["dynamic_sampling/dropped_time"] == pytest.approx(0.5 + 0.4)  # 2/4 of round 1, 2/5 of round 2
    assert stats["dynamic_sampling/surplus_time"] == pytest.approx(1.0 * 1 * G / 10)  # 1 group of round 2's 10 rows
    assert stats["dynamic_sampling/limit_hit"] == 0.0 and stats["dynamic_sampling/filler_groups"] == 0.0


def test_a_spent_budget_fills_with_the_last_uninformative_groups_and_warns_once(caplog):
    sampler = DynamicSampler(_args(dynamic_sampling_max_generation_batches=1), G, PromptStream(10, 0), carries=False)
    sizes, rollout = _drive(sampler, [_round("iwrw")])
    assert sizes == [None]  # the budget is one generation batch: no refill
    selection = sampler.finish(rollout)
    assert selection.chosen == [(0, 0)] and selection.fillers == [(0, 1), (0, 2), (0, 3)]
    stats = sampler.round_stats(rollout.rounds, 4, 0)
    assert stats["dynamic_sampling/limit_hit"] == 1.0 and stats["dynamic_sampling/filler_groups"] == 3.0
    assert stats["dynamic_sampling/all_max_frac"] == 0.25 and stats["dynamic_sampling/all_min_frac"] == 0.5
    assert sampler.warned and "dynamic_sampling_max_generation_batches=1" in caplog.text
    caplog.clear()
    sampler.round_stats(rollout.rounds, 4, 0)
    assert "spent its generation budget" not in caplog.text


def test_carried_groups_count_and_the_first_round_is_oversampled_once_groups_drop():
    sampler = DynamicSampler(_args(), G, PromptStream(100, seed=0), carries=True)
    sampler.rate.update(informative=1, generated=2)  # half the groups informative so far
    sampler.carry = _round("i")  # one group carried from the last step
    sampler.carry.replicated = True
    sizes, rollout = _drive(sampler, [_round("iiwwii")])
    # first round from the stream: ceil((4 - 1 carried) / 0.5 x GRESO's 1.25) = ceil(7.5) = 8 > 4 groups
    assert sizes == [8]
    assert rollout.num_carried == 1 and rollout.rounds[0] is not None and sampler.carry is None


def test_state_round_trips_and_skipping_draws_from_the_stream():
    sampler = DynamicSampler(_args(), G, PromptStream(20, seed=3), carries=False)
    indices = sampler.take_indices(5)
    assert len(set(indices)) == 5 and sampler.pending_indices == indices
    sampler.rate.update(2, 8)
    sampler.observe(torch.tensor([0.0, 1.0, float("nan")]))
    other = DynamicSampler(_args(), G, PromptStream(20, seed=3), carries=False)
    other.load_state_dict(sampler.state_dict())
    assert other.take_indices(3) == sampler.take_indices(3)
    assert other.rate.estimate() == sampler.rate.estimate() and (other.reward_low, other.reward_high) == (0.0, 1.0)
