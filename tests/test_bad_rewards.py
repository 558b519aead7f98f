"""Surviving bad rewards: a reward function that raises on some completions (stop by default, or score them None with
``reward_errors="skip"``, excluded from the group baseline and counted), one that hangs (bounded by
``reward_timeout``, counted, logged), and dynamic sampling on data where no group is ever informative."""

from __future__ import annotations

import logging
import pickle
import threading
import time

import pytest
import torch
from helpers import tiny_args
from trl.trainer.utils import nanstd

from trl_ext import DAPOTrainer
from trl_ext.reliability.reward_guard import GuardedReward, RewardFunctionError


def length_or_fail(completions, **kwargs):
    """Length of the completion; raises on a completion containing '5'."""
    out = []
    for c in completions:
        if "5" in c:
            raise ValueError(f"cannot score {c!r}")
        out.append(float(len(c)))
    return out


class _Metrics:
    def __init__(self):
        self.logged = []

    def __call__(self, name, value):
        self.logged.append((name, value))


# -- the guard on its own ------------------------------------------------------------------------------------------


def test_skip_scores_failing_completions_none_and_counts_them(caplog):
    guard = GuardedReward(length_or_fail, errors="skip")
    log_metric = _Metrics()
    with caplog.at_level(logging.WARNING, logger="trl_ext.reliability.reward_guard"):
        values = guard(prompts=["p"] * 4, completions=["1", "22", "456", "333"], log_metric=log_metric)
        guard(prompts=["p"] * 2, completions=["5", "55"], log_metric=log_metric)
    assert values == [1.0, 2.0, None, 3.0]
    assert log_metric.logged == [
        ("rewards/length_or_fail/errors", 1.0),
        ("rewards/length_or_fail/timeouts", 0.0),
        ("rewards/length_or_fail/errors", 2.0),
        ("rewards/length_or_fail/timeouts", 0.0),
    ]
    assert guard.total_errors == 3
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1  # once per function; the counts are in the logs
    assert "raised ValueError: cannot score '456' on 1 of 4 completions" in warnings[0]
    assert "completion 2 of 4 (prompt 'p' -> '456')" in warnings[0]


def test_raise_names_the_function_and_the_offending_completion():
    guard = GuardedReward(length_or_fail)
    with pytest.raises(RewardFunctionError) as info:
        guard(prompts=["a", "b", "c"], completions=["1", "456", "5"])
    assert str(info.value).startswith(
        "reward function 'length_or_fail' raised ValueError: cannot score '456' on completion 1 of 3 "
        "(prompt 'b' -> '456')"
    )
    assert "reward_errors='skip'" in str(info.value)


def test_guard_keeps_the_name_and_pickles():
    guard = GuardedReward(length_or_fail, errors="skip", timeout=5.0)
    clone = pickle.loads(pickle.dumps(guard))
    assert clone.__name__ == guard.__name__ == "length_or_fail"
    assert clone(prompts=["p"], completions=["12"]) == [2.0]


def test_hang_is_bounded_counted_and_stops_after_repeated_timeouts(caplog):
    release = threading.Event()

    def hanging(completions, **kwargs):
        if any("hang" in c for c in completions):
            release.wait(30)
        return [1.0] * len(completions)

    guard = GuardedReward(hanging, timeout=0.2)
    log_metric = _Metrics()
    try:
        with caplog.at_level(logging.WARNING, logger="trl_ext.reliability.reward_guard"):
            started = time.perf_counter()
            assert guard(prompts=["p"] * 3, completions=["a", "hang", "b"], log_metric=log_metric) == [None] * 3
            assert time.perf_counter() - started < 2
            assert guard(prompts=["p"], completions=["ok"], log_metric=log_metric) == [1.0]  # the next call is fine
        assert ("rewards/hanging/timeouts", 3.0) in log_metric.logged
        assert "overran reward_timeout=0.2s: its 3 completions of this batch are scored None" in caplog.text
        for _ in range(2):
            guard(prompts=["p"], completions=["hang"])
        with pytest.raises(RewardFunctionError, match="overran reward_timeout=0.2s on 3 calls in a row"):
            guard(prompts=["p"], completions=["hang"])
    finally:
        release.set()


# -- through the trainer -------------------------------------------------------------------------------------------


def _batch(problems, prompts=2, num_generations=4):
    return [problems[0][i] for i in range(prompts) for _ in range(num_generations)]


def test_skipped_completions_are_excluded_from_the_group_baseline(tiny_model, tokenizer, problems, tmp_path):
    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False, dynamic_sampling=False, temperature=2.0)
    args.reward_errors = "skip"
    trainer = DAPOTrainer(
        tiny_model, [length_or_fail], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    trainer.model.train()
    out = trainer._generate_and_score_completions(_batch(problems))
    texts = tokenizer.batch_decode(out["completion_ids"], skip_special_tokens=True)
    failed = torch.tensor(["5" in t for t in texts])
    per_group = failed.view(-1, 4).sum(dim=1)
    assert bool(((per_group > 0) & (per_group < 4)).any())  # this seed fails part of a group
    rewards = torch.tensor([float("nan") if f else float(len(t)) for t, f in zip(texts, failed, strict=True)])
    rewards = rewards.view(-1, 4)
    mean = torch.nanmean(rewards, dim=1, keepdim=True)  # the baseline over scorable completions only
    expected = ((rewards - mean) / (nanstd(rewards, dim=1).unsqueeze(1) + 1e-4)).nan_to_num(0.0).flatten()
    torch.testing.assert_close(out["advantages"], expected)
    assert bool((out["advantages"][failed] == 0).all())
    assert trainer._metrics["train"]["rewards/length_or_fail/errors"] == [float(failed.sum())]


def test_hanging_reward_in_training_is_bounded_and_logged(tiny_model, tokenizer, problems, tmp_path):
    release = threading.Event()
    calls = []

    def slow_verifier(completions, **kwargs):
        calls.append(len(completions))
        if len(calls) == 1:
            release.wait(30)  # the first call hangs
        return [float(len(c)) for c in completions]

    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False, dynamic_sampling=False)
    args.reward_timeout = 0.5
    trainer = DAPOTrainer(
        tiny_model, [slow_verifier], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    try:
        started = time.perf_counter()
        trainer.train()
        assert time.perf_counter() - started < 20
    finally:
        release.set()
    logs = [h for h in trainer.state.log_history if "rewards/slow_verifier/timeouts" in h]
    assert [h["rewards/slow_verifier/timeouts"] for h in logs] == [8.0, 0.0]
    assert [h["rewards/slow_verifier/errors"] for h in logs] == [0.0, 0.0]


def test_dynamic_sampling_with_no_informative_group_is_bounded_and_says_what_to_do(
    tiny_model, tokenizer, problems, tmp_path, caplog
):
    def constant(completions, **kwargs):
        return [1.0] * len(completions)

    args = tiny_args(
        "dapo", tmp_path, soft_overlong_punishment=False, max_steps=10, dynamic_sampling_max_generation_batches=2
    )
    trainer = DAPOTrainer(tiny_model, [constant], args=args, train_dataset=problems[0], processing_class=tokenizer)
    before = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
    with caplog.at_level(logging.WARNING, logger="trl_ext.grpo.dynamic_sampling.sampler"):
        trainer.train()  # no crash; each step is at most dynamic_sampling_max_generation_batches generations (below)
    assert torch.equal(before, torch.cat([p.detach().flatten() for p in trainer.model.parameters()]))
    logs = [h for h in trainer.state.log_history if "dynamic_sampling/rounds" in h]
    assert [h["dynamic_sampling/rounds"] for h in logs] == [2.0] * 10
    messages = [r.getMessage() for r in caplog.records]
    first = next(m for m in messages if "dynamic_sampling_max_generation_batches=2" in m)
    for advice in ("warm-start it with SFT", "raise num_generations (now 4)", "check the reward function"):
        assert advice in first
    assert any("no informative group at all in the last 10 steps" in m for m in messages)
