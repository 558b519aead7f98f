"""Dynamic sampling as DAPO defines it (section 3.2): filter on accuracy, advantages of the trained batch, fillers that
change nothing (optimizer state included), logs of the trained batch. Numbers are checked against hand computations."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import tiny_args
from transformers import TrainerCallback

from trl_ext import DAPOConfig, DAPOTrainer
from trl_ext.grpo.dynamic_sampling.groups import informative_groups


def even_answer_reward(completions, answer, **kwargs):
    """Informative only for prompts whose answer is even ([0, 1, 0, 1] per group); constant 0 otherwise."""
    return [float(i % 2) if int(a) % 2 == 0 else 0.0 for i, a in enumerate(answer)]


def position_shaping(completions, **kwargs):
    """A shaping term that varies inside every group (like the overlong penalty with different lengths)."""
    return [0.1 * (i % 4) for i in range(len(completions))]


class ScaledEvenReward:
    """j * (1 + answer) for the j-th completion of an even-answer prompt, 0 for odd answers: groups of different
    scales, so batch statistics differ from group statistics."""

    __name__ = "scaled_even"

    def __call__(self, completions, answer, **kwargs):
        return [float(i % 4) * (1 + int(a)) if int(a) % 2 == 0 else 0.0 for i, a in enumerate(answer)]


def _odd_then_even(problems, num_generations=4):
    answers = [int(a) for a in problems[0]["answer"]]
    odd = next(i for i, a in enumerate(answers) if a % 2)
    even = next(i for i, a in enumerate(answers) if a % 2 == 0)
    return [problems[0][i] for i in (odd, even) for _ in range(num_generations)]


def _answers_of(out, tokenizer, problems):
    by_prompt = {row["prompt"]: int(row["answer"]) for row in problems[0]}
    texts = tokenizer.batch_decode(out["prompt_ids"], skip_special_tokens=True)
    return [by_prompt[t.strip()] for t in texts]


# -- 1. the informative test reads the accuracy, not the shaping reward -------------------------------------------


def test_metric_excludes_shaping_reward_so_constant_accuracy_groups_are_dropped(
    tiny_model, tokenizer, problems, tmp_path
):
    args = tiny_args(
        "dapo", tmp_path, dynamic_sampling_max_generation_batches=1, max_completion_length=4, overlong_buffer_len=4
    )
    trainer = DAPOTrainer(
        tiny_model, [even_answer_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    assert trainer.reward_func_names == ["even_answer_reward", "soft_overlong_punishment_reward"]
    trainer.model.train()
    inputs = _odd_then_even(problems)
    prompts = [row["prompt"] for row in inputs]
    completions = ["1"] * 8
    ids = [[5] * n for n in (1, 2, 3, 4)] * 2  # lengths 1..4 in each group: the overlong reward varies
    per_func = trainer._calculate_rewards(inputs, prompts, completions, ids)
    assert per_func[:4, 1].tolist() == pytest.approx([-0.25, -0.5, -0.75, -1.0])  # Eq. 13, L_max - L_cache = 0
    metric = trainer.dynamic_sampling_metric(per_func)
    # group 0 (odd answer): accuracy all 0, overlong varies -> uninformative; group 1: accuracy [0,1,0,1]
    assert informative_groups(metric, 4).tolist() == [False, True]
    assert metric.tolist() == [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0]


def test_metric_field_selects_the_filter_reward_end_to_end(tiny_model, tokenizer, problems, tmp_path):
    args = tiny_args(
        "dapo",
        tmp_path,
        soft_overlong_punishment=False,
        dynamic_sampling_max_generation_batches=1,
        dynamic_sampling_metric=["even_answer_reward"],
    )
    trainer = DAPOTrainer(
        tiny_model,
        [even_answer_reward, position_shaping],
        args=args,
        train_dataset=problems[0],
        processing_class=tokenizer,
    )
    trainer.model.train()
    out = trainer._generate_and_score_completions(_odd_then_even(problems))
    # the odd-answer group (accuracy constant, shaping varying) is dropped: a zero-weight filler
    assert out["completion_mask"][:4].sum() > 0 and out["completion_mask"][4:].sum() == 0
    assert out["advantages"][4:].abs().sum() == 0
    assert trainer._metrics["train"]["dynamic_sampling/filler_groups"][-1] == 1.0


def test_unknown_metric_name_fails_at_construction_listing_known_names(tiny_model, tokenizer, problems, tmp_path):
    args = tiny_args("dapo", tmp_path, dynamic_sampling_metric=["accuracy"])
    with pytest.raises(ValueError, match=r"accuracy.*even_answer_reward.*soft_overlong_punishment_reward"):
        DAPOTrainer(tiny_model, [even_answer_reward], args=args, train_dataset=problems[0], processing_class=tokenizer)


# -- 2. the DAPO preset constructs with its own defaults and is off-policy ----------------------------------------


def test_dapo_config_constructs_with_its_defaults_and_paper_minibatches():
    args = DAPOConfig(output_dir="x", bf16=False)  # bf16=False only because this machine has no GPU
    assert args.num_generations == 16 and args.num_minibatches == 16
    assert args.steps_per_generation == 16  # 16 gradient updates per rollout (DAPO section 4.1)
    assert args.generation_batch_size == 8 * 16 and args.generation_batch_size % args.num_generations == 0
    assert DAPOConfig(output_dir="x", bf16=False, num_minibatches=2).steps_per_generation == 2
    with pytest.raises(ValueError, match="num_minibatches"):
        DAPOConfig(output_dir="x", bf16=False, num_minibatches=0)


# -- 3. advantages of the batch that is trained --------------------------------------------------------------------


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_refilled_batch_advantages_match_hand_computation(tiny_model, tokenizer, problems, tmp_path, scale):
    args = tiny_args(
        "dapo",
        tmp_path,
        soft_overlong_punishment=False,
        scale_rewards=scale,
        dynamic_sampling_max_generation_batches=30,
    )
    trainer = DAPOTrainer(
        tiny_model, [ScaledEvenReward()], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    trainer.model.train()
    out = trainer._generate_and_score_completions(_odd_then_even(problems))
    assert trainer._metrics["train"]["dynamic_sampling/rounds"][-1] > 1
    answers = _answers_of(out, tokenizer, problems)
    assert all(a % 2 == 0 for a in answers)
    # hand computation on the assembled batch: rewards j * (1 + a), group means (1 + a) * 1.5
    rewards = [j % 4 * (1 + a) for j, a in enumerate(answers)]
    expected = []
    flat_mean = sum(rewards) / 8
    batch_std = (sum((x - flat_mean) ** 2 for x in rewards) / 7) ** 0.5
    for g in range(2):
        group = rewards[4 * g : 4 * g + 4]
        mean = sum(group) / 4
        std = (sum((x - mean) ** 2 for x in group) / 3) ** 0.5
        for x in group:
            if scale == "group":
                expected.append((x - mean) / (std + 1e-4))
            elif scale == "batch":
                expected.append((x - mean) / (batch_std + 1e-4))
            else:
                expected.append(x - mean)
    assert out["advantages"].tolist() == pytest.approx(expected, rel=1e-5)


# -- 4. filler steps change nothing, optimizer state included ----------------------------------------------------


class InformativeThenConstant:
    """Informative for the first ``informative_calls`` calls, then constant: the later steps are all fillers."""

    __name__ = "informative_then_constant"

    def __init__(self, informative_calls: int):
        self.calls, self.informative_calls = 0, informative_calls

    def __call__(self, completions, **kwargs):
        self.calls += 1
        if self.calls <= self.informative_calls:
            return [float(i % 2) for i in range(len(completions))]
        return [1.0] * len(completions)


class Snapshot(TrainerCallback):
    def __init__(self, trainer, at_step):
        self.trainer, self.at_step, self.params, self.optimizer, self.lr = trainer, at_step, None, None, []

    def on_step_end(self, args, state, control, **kwargs):
        self.lr.append(self.trainer.lr_scheduler.get_last_lr()[0])
        if state.global_step == self.at_step:
            self.params = [p.detach().clone() for p in self.trainer.model.parameters()]
            self.optimizer = copy.deepcopy(self.trainer.optimizer.optimizer.state_dict())


@pytest.mark.parametrize("accumulation", [1, 2])
def test_filler_steps_after_informative_steps_change_neither_weights_nor_optimizer(
    tiny_model, tokenizer, problems, tmp_path, accumulation
):
    args = tiny_args(
        "dapo",
        tmp_path,
        soft_overlong_punishment=False,
        max_steps=4,
        dynamic_sampling_max_generation_batches=1,
        learning_rate=1e-3,
        per_device_train_batch_size=8 // accumulation,
        gradient_accumulation_steps=accumulation,
        lr_scheduler_type="linear",
    )
    reward = InformativeThenConstant(informative_calls=2)
    trainer = DAPOTrainer(tiny_model, [reward], args=args, train_dataset=problems[0], processing_class=tokenizer)
    initial = [p.detach().clone() for p in trainer.model.parameters()]
    snapshot = Snapshot(trainer, at_step=2)
    trainer.add_callback(snapshot)
    trainer.train()
    assert reward.calls == 4  # one generation round per step
    assert any(not torch.equal(a, b) for a, b in zip(initial, snapshot.params, strict=True))  # steps 1-2 trained
    final = [p.detach() for p in trainer.model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(snapshot.params, final, strict=True))
    state = trainer.optimizer.optimizer.state_dict()
    for key, saved in snapshot.optimizer["state"].items():
        for name, value in saved.items():
            assert torch.equal(value, state["state"][key][name]), (key, name)  # exp_avg, exp_avg_sq, step
    # documented choice: global_step and the LR schedule advance on a skipped step
    assert trainer.state.global_step == 4
    assert snapshot.lr == pytest.approx([1e-3 * (1 - s / 4) for s in range(1, 5)])
    logs = [h for h in trainer.state.log_history if "dynamic_sampling/skipped_optimizer_steps" in h]
    # logged (one all-reduce per optimizer step) only while the batch holds fillers
    assert [h["dynamic_sampling/skipped_optimizer_steps"] for h in logs] == [1.0, 1.0]


# -- 5. logs describe the trained batch ------------------------------------------------------------------------


def test_multi_round_step_logs_every_round_and_what_was_kept(tiny_model, tokenizer, problems, tmp_path):
    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False, dynamic_sampling_max_generation_batches=30)
    trainer = DAPOTrainer(
        tiny_model, [even_answer_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    trainer.model.train()
    out = trainer._generate_and_score_completions(_odd_then_even(problems))
    metrics = trainer._metrics["train"]
    rounds = metrics["dynamic_sampling/rounds"][-1]
    assert rounds > 1
    # TRL logs each round it generated and scored, as it does its own rounds
    assert len(metrics["reward"]) == rounds and len(metrics["rewards/even_answer_reward/mean"]) == rounds
    generated = metrics["dynamic_sampling/generated_groups"][0]  # refills are right-sized: not 2 groups per round
    assert len(trainer._logs["prompt"]) == min(generated * 4, trainer._logs["prompt"].maxlen or 10**9)
    # the trained batch: two even-answer groups, rewards [0, 1, 0, 1] each: advantages +-(0.5 / std)
    assert all(a % 2 == 0 for a in _answers_of(out, tokenizer, problems))
    std = (4 / 3 * 0.25) ** 0.5
    assert out["advantages"].tolist() == pytest.approx([-0.5 / (std + 1e-4), 0.5 / (std + 1e-4)] * 4, rel=1e-5)
    assert out["num_items_in_batch"].item() == out["completion_mask"].sum().item()
    surplus = metrics["dynamic_sampling/surplus_groups"][0]
    assert surplus >= 0 and metrics["dynamic_sampling/kept_group_frac"][0] * generated == pytest.approx(2 + surplus)
    assert metrics["dynamic_sampling/surplus_time"][0] >= 0
    # every dropped group is an odd-answer group whose rewards are all 0: labelled all-min ("too hard"), none all-max
    assert metrics["dynamic_sampling/all_max_frac"] == [0.0]
    dropped = 1 - metrics["dynamic_sampling/kept_group_frac"][0]
    assert dropped > 0 and metrics["dynamic_sampling/all_min_frac"][0] == pytest.approx(dropped)


# -- IterableDataset: refill prompts from the stream, exact resume ------------------------------------------------


def _iterable_trainer(tokenizer, problems, out, **overrides):
    from trl_ext.demo import DemoModelConfig, build_model

    small = DemoModelConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
    )
    args = tiny_args(
        "dapo",
        out,
        soft_overlong_punishment=False,
        dynamic_sampling_max_generation_batches=6,
        max_steps=4,
        **overrides,
    )
    stream = problems[0].to_iterable_dataset()
    return DAPOTrainer(
        build_model(tokenizer, small),
        [even_answer_reward],
        args=args,
        train_dataset=stream,
        processing_class=tokenizer,
    )


def test_iterable_dataset_refills_from_the_stream_and_resumes_exactly(tokenizer, problems, tmp_path):
    from trl_ext.grpo.dynamic_sampling.prompts import IterablePromptStream

    full = _iterable_trainer(tokenizer, problems, tmp_path / "full", save_strategy="steps", save_steps=2)
    assert isinstance(full.dynamic_sampler.stream, IterablePromptStream)
    full.train()
    rounds = [h["dynamic_sampling/rounds"] for h in full.state.log_history if "dynamic_sampling/rounds" in h]
    assert len(rounds) == 4 and max(rounds) > 1  # refill rounds drew prompts from the stream
    assert full.dynamic_sampler.stream.position > 0 or full.dynamic_sampler.stream.epoch > 0
    checkpoint = tmp_path / "full" / "out" / "checkpoint-2"
    assert (checkpoint / "dynamic_sampling_state.json").exists()

    resumed = _iterable_trainer(tokenizer, problems, tmp_path / "resumed")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert torch.equal(_params(resumed), _params(full))
    assert resumed.dynamic_sampler.stream.state_dict() == full.dynamic_sampler.stream.state_dict()
    after = [h["dynamic_sampling/rounds"] for h in resumed.state.log_history if "dynamic_sampling/rounds" in h]
    assert after == rounds  # the checkpoint's log history, then the same two steps as the uninterrupted run


def test_iterable_prompt_stream_is_seeded_and_resumable(problems):
    from trl_ext.grpo.dynamic_sampling.prompts import IterablePromptStream

    data = problems[0].select(range(10)).to_iterable_dataset()
    a = IterablePromptStream(data, seed=3)
    first = [r["prompt"] for r in a.take_rows(7)]
    b = IterablePromptStream(data, seed=3)
    b.load_state_dict(a.state_dict())
    assert [r["prompt"] for r in b.take_rows(8)] == [r["prompt"] for r in a.take_rows(8)]  # crosses an epoch
    assert (a.epoch, a.position) == (1, 5)
    again = IterablePromptStream(data, seed=3)
    assert [r["prompt"] for r in again.take_rows(7)] == first
    assert sorted(first + [r["prompt"] for r in again.take_rows(3)]) == sorted(problems[0]["prompt"][:10])


def _params(trainer):
    return torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
