"""Predictive prompt selection for dynamic sampling (``trl_ext.grpo.dynamic_sampling.selector``): the informative
probability, the posterior updates and the choice of a round's prompts by hand; fewer groups generated per kept one on
persistent data; the selector's state resumed exactly."""

from __future__ import annotations

import math

import pytest
import torch
from test_ds_skip import _trainer as skip_trainer

from trl_ext import DAPOConfig
from trl_ext.grpo.dynamic_sampling.selector import PromptSelector, informative_probability

NAN = float("nan")


class ListStream:
    """A prompt stream that hands out 0, 1, 2, ... in order."""

    def __init__(self) -> None:
        self.position = 0

    def take(self, n: int) -> list[int]:
        out = list(range(self.position, self.position + n))
        self.position += n
        return out


def test_informative_probability_by_hand():
    # Beta(1, 1), G = 2: 1 - E[p^2] - E[(1-p)^2] = 1 - 1/3 - 1/3
    assert informative_probability(1.0, 1.0, 2) == pytest.approx(1 / 3)
    # Beta(2, 1), G = 3: E[p^3] = B(5,1)/B(2,1) = (1/5)/(1/2) = 2/5; E[(1-p)^3] = B(2,4)/B(2,1) = (1/20)/(1/2) = 1/10
    assert informative_probability(2.0, 1.0, 3) == pytest.approx(1 - 2 / 5 - 1 / 10)
    # Beta(3, 3), G = 4: E[p^4] = B(7,3)/B(3,3) = (1/252)/(1/30); symmetric
    assert informative_probability(3.0, 3.0, 4) == pytest.approx(1 - 2 * 30 / 252)
    # a prompt solved at every visit is almost surely solved again
    assert informative_probability(200.0, 1.0, 8) < 0.05


def test_posterior_updates_by_hand():
    selector = PromptSelector(seed=0, group_size=4, decay=0.5)
    # two prompts, four completions each; NaN (unscored) is not counted
    selector.observe([7, 9], torch.tensor([1.0, 1.0, 0.0, NAN, 0.0, 0.0, 0.0, 0.0]), low=0.0, high=1.0)
    assert selector.posteriors == {7: [3.0, 2.0, 0], 9: [1.0, 5.0, 0]}
    selector.tick()
    selector.observe([7], torch.tensor([1.0, 1.0, 1.0, 1.0]), low=0.0, high=1.0)
    # a = a0 + decay^1 * (a - a0) + wins = 1 + 0.5 * 2 + 4; b = 1 + 0.5 * 1 + 0
    assert selector.posteriors[7] == [6.0, 1.5, 1]
    # evidence ages without a visit too: two batches later prompt 9 holds a quarter of its four failures
    selector.tick()
    selector.tick()
    assert selector.posterior(9) == (1.0, 1.0 + 0.5**3 * 4.0)
    assert selector.probability(9) == pytest.approx(informative_probability(1.0, 1.5, 4))
    # on a reward range of [-1, 1] a reward of 0 is half a success
    selector.observe([3], torch.tensor([0.0, 1.0, -1.0, 0.0]), low=-1.0, high=1.0)
    assert selector.posteriors[3] == [3.0, 3.0, 3]
    # one reward value seen so far: nothing is learned
    selector.observe([5], torch.tensor([1.0, 1.0, 1.0, 1.0]), low=1.0, high=1.0)
    assert 5 not in selector.posteriors


def test_choice_by_hand():
    selector = PromptSelector(seed=0, group_size=4, pool=2.0, floor=0.0)
    selector.posteriors = {0: [20.0, 1.0, 0], 2: [1.0, 20.0, 0], 3: [3.0, 3.0, 0]}  # 1 unseen: the prior Beta(1, 1)
    q = [selector.probability(i) for i in range(4)]
    assert q[1] == pytest.approx(1 - 2 / 5) and q[3] == pytest.approx(1 - 2 * 30 / 252)
    assert max(q[0], q[2]) < min(q[1], q[3])
    stream = ListStream()
    # 2 prompts from 2 x 2 candidates: the two most likely to be informative, in stream order
    assert selector.choose(stream, 2) == ([1, 3], 2)
    assert stream.position == 4
    # floor 1: every candidate is explored, so the first n of the pool are taken whatever their prediction
    explorer = PromptSelector(seed=0, group_size=4, pool=2.0, floor=1.0, posteriors=dict(selector.posteriors))
    assert explorer.choose(ListStream(), 2) == ([0, 1], 2)
    # pool 1: the stream as is
    assert PromptSelector(seed=0, group_size=4, pool=1.0).choose(ListStream(), 3) == ([0, 1, 2], 0)


def test_floor_explores_at_its_rate():
    selector = PromptSelector(seed=3, group_size=8, pool=2.0, floor=0.2)
    selector.posteriors = {i: [200.0, 1.0, 0] for i in range(0, 4000, 2)}  # even indices: solved, never predicted
    taken = []
    stream = ListStream()
    for _ in range(1000):
        taken += selector.choose(stream, 1)[0]
    solved = sum(1 for i in taken if i % 2 == 0)
    # each candidate is explored with probability 0.2 / 2; the solved (even) one comes first in its pool of two, so it
    # is taken exactly when it is explored
    assert solved / len(taken) == pytest.approx(0.1, abs=0.03)


def test_state_round_trip_gives_the_same_choices():
    selector = PromptSelector(seed=5, group_size=4, floor=0.3)
    selector.observe([0, 1], torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0]), low=0.0, high=1.0)
    selector.choose(ListStream(), 3)
    copy = PromptSelector(seed=0, group_size=4, floor=0.3)
    copy.load_state_dict(selector.state_dict())
    assert copy.posteriors == selector.posteriors and (copy.draws, copy.batches) == (selector.draws, selector.batches)
    assert [copy.choose(ListStream(), 2) for _ in range(5)] == [selector.choose(ListStream(), 2) for _ in range(5)]


def test_config_checks():
    with pytest.raises(ValueError, match="two predictors"):
        DAPOConfig(output_dir="x", dynamic_sampling_select_prompts=True, dynamic_sampling_skip_predicted=True)
    with pytest.raises(ValueError, match="dynamic_sampling_selection_pool"):
        DAPOConfig(output_dir="x", dynamic_sampling_select_prompts=True, dynamic_sampling_selection_pool=0.5)
    with pytest.raises(ValueError, match="dynamic_sampling_selection_floor"):
        DAPOConfig(output_dir="x", dynamic_sampling_selection_floor=1.5)


def _trainer(tokenizer, problems, out, select, **overrides):
    """test_ds_skip's trainer (16 prompts, half of them never informative) with the selector instead of GRESO."""
    return skip_trainer(tokenizer, problems, out, False, dynamic_sampling_select_prompts=select, **overrides)


def test_selection_generates_fewer_groups_on_persistent_data(tokenizer, problems, tmp_path):
    per_kept = {}
    for select in (False, True):
        trainer = _trainer(tokenizer, problems, tmp_path / str(select), select)
        trainer.train()
        logs = [h for h in trainer.state.log_history if "dynamic_sampling/generated_groups" in h][4:]
        generated = sum(h["dynamic_sampling/generated_groups"] for h in logs)
        kept = sum(h["dynamic_sampling/generated_groups"] * h["dynamic_sampling/kept_group_frac"] for h in logs)
        per_kept[select] = generated / kept
        if select:
            answers = [int(a) for a in problems[0]["answer"]]
            posteriors = trainer.dynamic_sampler.selector.posteriors
            # odd answers: every completion scores 0, so their posteriors hold failures only
            assert all(b > 1 and a == 1 for i, (a, b, _) in posteriors.items() if answers[i] % 2)
    # half the prompts never give an informative group: about 2 groups per kept one without selection
    assert per_kept[False] > 1.4
    assert per_kept[True] < 0.85 * per_kept[False]


def test_selector_state_is_checkpointed_and_resumed_exactly(tokenizer, problems, tmp_path):
    common = dict(max_steps=6, learning_rate=1e-2)
    full = _trainer(tokenizer, problems, tmp_path / "full", True, save_strategy="steps", save_steps=3, **common)
    full.train()
    resumed = _trainer(tokenizer, problems, tmp_path / "resumed", True, **common)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "out" / "checkpoint-3"))
    assert resumed.dynamic_sampler.selector.state_dict() == full.dynamic_sampler.selector.state_dict()
    params = [torch.cat([p.detach().flatten() for p in t.model.parameters()]) for t in (full, resumed)]
    assert torch.equal(params[0], params[1])
    assert not any(math.isnan(v) for p in full.dynamic_sampler.selector.posteriors.values() for v in p)
