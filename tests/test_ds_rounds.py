"""Issue 14: dynamic sampling that costs little. Right-sized refill rounds, old/ref log-probs only for the trained rows,
only the selected rows gathered; checked against hand-computed sizes and direct forward passes."""

from __future__ import annotations

import pytest
import torch
import trl
from helpers import tiny_args

from trl_ext import DAPOTrainer
from trl_ext.grpo.dynamic_sampling.sizing import (
    InformativeRate,
    expected_refill_rounds,
    refill_groups,
    round_cap,
)


def even_answer_reward(completions, answer, **kwargs):
    """Informative only for prompts whose answer is even ([0, 1, 0, 1] per group); constant 0 otherwise."""
    return [float(i % 2) if int(a) % 2 == 0 else 0.0 for i, a in enumerate(answer)]


def _groups(problems, parities, num_generations=4):
    """Rows of one generation batch: one group per entry of ``parities`` ("e": even answer, "o": odd)."""
    answers = [int(a) for a in problems[0]["answer"]]
    odd = [i for i, a in enumerate(answers) if a % 2]
    even = [i for i, a in enumerate(answers) if a % 2 == 0]
    picks, used = [], {"e": 0, "o": 0}
    for kind in parities:
        pool = even if kind == "e" else odd
        picks.append(pool[used[kind]])
        used[kind] += 1
    return [problems[0][i] for i in picks for _ in range(num_generations)]


def _record_sizes(trainer, method: str = "_generate") -> list[int]:
    """The length of the first argument of each call of ``trainer.<method>`` (``_generate``: the prompts of one
    generation round; ``generate_and_score``: its rows on this process), appended as rounds run."""
    sizes = []
    original = getattr(trainer, method)

    def recording(rows, *rest):
        sizes.append(len(rows))
        return original(rows, *rest)

    setattr(trainer, method, recording)
    return sizes


# -- sizing ---------------------------------------------------------------------------------------------------------


def test_refill_groups_hand_computed():
    # GRESO: missing / rate x 1.25, rounded up to whole groups on every process
    assert refill_groups(missing=1, rate=0.75, margin=1.25, world_size=1, cap=4, remaining=100) == 2  # ceil(1.67)
    assert refill_groups(missing=3, rate=0.5, margin=1.25, world_size=1, cap=16, remaining=100) == 8  # ceil(7.5)
    assert refill_groups(missing=3, rate=0.5, margin=1.25, world_size=2, cap=16, remaining=100) == 8
    assert refill_groups(missing=3, rate=0.5, margin=1.25, world_size=3, cap=16, remaining=100) == 9
    assert refill_groups(missing=1, rate=1.0, margin=1.0, world_size=2, cap=16, remaining=100) == 2  # >= 1 a process
    assert refill_groups(missing=3, rate=0.5, margin=1.25, world_size=1, cap=6, remaining=100) == 6  # capped
    assert refill_groups(missing=3, rate=0.5, margin=1.25, world_size=2, cap=5, remaining=100) == 6  # cap rounded up
    assert refill_groups(missing=3, rate=0.5, margin=1.25, world_size=2, cap=16, remaining=5) == 4  # budget, down
    assert refill_groups(missing=3, rate=0.5, margin=1.25, world_size=2, cap=16, remaining=1) == 0  # budget spent
    assert refill_groups(missing=0, rate=0.5, margin=1.25, world_size=1, cap=16, remaining=100) == 0
    assert refill_groups(missing=2, rate=0.0, margin=1.25, world_size=1, cap=16, remaining=100) == 16  # floor 0.05


def test_simulated_cost_of_the_policy_stays_near_the_ideal():
    """The trainer's policy (TRL's batch, then refill_groups), simulated at known rates: generated groups per trained
    group within 10% of the ideal 1/rate, and rounds of at most one generation batch take more rounds."""
    assert round_cap(16, 2.0) == 32 and round_cap(16, 1.0) == 16 and round_cap(3, 0.5) == 2
    for rate in (0.75, 0.5, 0.25, 0.1):
        cost = expected_refill_rounds(rate, 64, 40, steps=400)
        whole = expected_refill_rounds(rate, 64, 40, max_round_size=1.0, steps=400)
        assert cost["generated_per_trained_group"] * rate == pytest.approx(1.0, abs=0.1)
        assert cost["rounds"] <= whole["rounds"]


def test_informative_rate_is_a_decayed_ratio_and_round_trips():
    rate = InformativeRate(decay=0.5)
    assert rate.estimate() == 1.0  # nothing seen: assume everything is informative (no oversampling)
    assert rate.estimate(1, 4) == 0.25  # the current step's counts so far
    rate.update(informative=2, generated=4)
    rate.update(informative=1, generated=4)  # (0.5 * 2 + 1) / (0.5 * 4 + 4)
    assert rate.estimate() == pytest.approx(2 / 6)
    assert rate.estimate(3, 4) == pytest.approx(5 / 10)
    copy = InformativeRate()
    copy.load_state_dict(rate.state_dict())
    assert copy.state_dict() == rate.state_dict()


def test_refill_round_is_sized_from_the_informative_rate(tiny_model, tokenizer, problems, tmp_path):
    args = tiny_args(
        "dapo",
        tmp_path,
        soft_overlong_punishment=False,
        per_device_train_batch_size=16,
        dynamic_sampling_max_generation_batches=30,
    )
    trainer = DAPOTrainer(
        tiny_model, [even_answer_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    sizes = _record_sizes(trainer)
    trainer.model.train()
    trainer._generate_and_score_completions(_groups(problems, "eeeo"))  # 3 of 4 groups informative
    # on-policy, surplus discarded: margin 1.05. Missing 1 group, rate 3/4: ceil(1 / 0.75 x 1.05) = 2 groups = 8 rows
    # (a whole batch would be 16)
    assert sizes[:2] == [16, 8]
    metrics = trainer._metrics["train"]
    assert metrics["dynamic_sampling/generated_groups"] == [float(sum(sizes) // 4)]


# -- old-policy and reference log-probs: TRL's values for the trained rows ---------------------------------------------------------------------


@pytest.fixture
def forward_rows(monkeypatch):
    """Rows of every no-grad log-prob forward pass TRL runs (old policy or reference), by model."""
    calls = []
    original = trl.GRPOTrainer._get_per_token_logps_and_entropies

    def counting(self, model, input_ids, *args, **kwargs):
        if not torch.is_grad_enabled():
            calls.append(("ref" if model is self.ref_model else "old", input_ids.size(0)))
        return original(self, model, input_ids, *args, **kwargs)

    monkeypatch.setattr(trl.GRPOTrainer, "_get_per_token_logps_and_entropies", counting)
    return calls


def _close_on_completions(actual, expected, out):
    """Equal (float tolerance) on the completion tokens; padding positions are not compared (TRL 1.16 masks them)."""
    mask = out["completion_mask"].bool()
    torch.testing.assert_close(actual[mask], expected[mask], rtol=1e-5, atol=1e-5)


def _direct_logps(model, out):
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
    width = out["completion_ids"].size(1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, -width - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(-1, out["completion_ids"][..., None]).squeeze(-1)


def _saved(model, tokenizer, path):
    """A model TRL can load twice (beta > 0 builds its reference model from the policy's path)."""
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def _trainer_with_old_and_ref_logps(tiny_model, tokenizer, problems, tmp_path) -> DAPOTrainer:
    """A DAPO trainer for which TRL computes old-policy and reference log-probs: beta > 0 (reference) and 2
    minibatches per generation (old policy)."""
    args = tiny_args(
        "dapo",
        tmp_path,
        soft_overlong_punishment=False,
        beta=0.04,
        num_minibatches=2,
        per_device_train_batch_size=8,
        dynamic_sampling_max_generation_batches=30,
    )
    trainer = DAPOTrainer(
        _saved(tiny_model, tokenizer, tmp_path / "policy"),
        [even_answer_reward],
        args=args,
        train_dataset=problems[0],
        processing_class=tokenizer,
    )
    trainer.model.train()
    return trainer


def test_old_and_ref_logps_of_the_trained_rows_are_trls(tiny_model, tokenizer, problems, tmp_path, forward_rows):
    trainer = _trainer_with_old_and_ref_logps(tiny_model, tokenizer, problems, tmp_path)
    generated = _record_sizes(trainer, "generate_and_score")
    out = trainer._generate_and_score_completions(_groups(problems, "eoeo"))
    assert len(generated) > 1 and sum(generated) > 16  # something was dropped and refilled
    assert out["completion_ids"].size(0) == 16
    # the reference pass is TRL's, in every round; the old-policy pass ran once, over the 16 trained rows only
    assert sorted(forward_rows) == sorted([("old", 16)] + [("ref", n) for n in generated])
    # and the assembled values are those of the trained rows
    _close_on_completions(out["old_per_token_logps"], _direct_logps(trainer.model, out), out)
    _close_on_completions(out["ref_per_token_logps"], _direct_logps(trainer.ref_model, out), out)


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_nothing_to_filter_with_old_and_ref_logps_is_exactly_trls_step(tokenizer, problems, tmp_path, beta):
    """Old/ref passes on an unfiltered batch: the same step as trl.GRPOTrainer, bit for bit."""
    from trl_ext.demo import DemoModelConfig, build_model

    def position_reward(completions, **kwargs):
        return [float(i % 4) for i in range(len(completions))]

    small = DemoModelConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
    )
    path = _saved(build_model(tokenizer, small), tokenizer, tmp_path / "policy")
    params, losses = {}, {}
    for name, trainer_class in (("trl", trl.GRPOTrainer), ("ours", DAPOTrainer)):
        args = tiny_args(
            "dapo", tmp_path / name, soft_overlong_punishment=False, max_steps=4, num_minibatches=2, beta=beta
        )
        trainer = trainer_class(
            path,
            [position_reward],
            args=args,
            train_dataset=problems[0],
            processing_class=tokenizer,
        )
        trainer.train()
        params[name] = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
        losses[name] = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert torch.equal(params["ours"], params["trl"])
    assert losses["ours"] == losses["trl"]


def test_a_user_override_of_the_logps_pass_always_receives_trls_tensors(tiny_model, tokenizer, problems, tmp_path):
    """The deferred old-policy pass never reaches a user's override: a subclass outside trl_ext and TRL gets TRL's
    pass in every round, on every row (the MoE benchmark's subclass once received None here)."""
    received = []

    class Watching(DAPOTrainer):
        def _get_per_token_logps_and_entropies(self, model, input_ids, *args, **kwargs):
            result = super()._get_per_token_logps_and_entropies(model, input_ids, *args, **kwargs)
            received.append((input_ids.size(0), result[0]))
            return result

    args = tiny_args(
        "dapo",
        tmp_path,
        soft_overlong_punishment=False,
        num_minibatches=2,
        per_device_train_batch_size=8,
        dynamic_sampling_max_generation_batches=30,
    )
    trainer = Watching(
        tiny_model, [even_answer_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    trainer.model.train()
    generated = _record_sizes(trainer, "generate_and_score")
    out = trainer._generate_and_score_completions(_groups(problems, "eoeo"))
    assert len(generated) > 1  # something was dropped and refilled
    assert [rows for rows, _ in received] == generated  # TRL's old-policy pass, in every round, on every row
    assert all(isinstance(logps, torch.Tensor) for _, logps in received)
    _close_on_completions(out["old_per_token_logps"], _direct_logps(trainer.model, out), out)
    assert not trainer.deferred_old_logps.deferred
