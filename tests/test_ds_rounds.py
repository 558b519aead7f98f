"""Issue 14: dynamic sampling that costs little. Right-sized refill rounds, old/ref log-probs only for the trained rows,
only the selected rows gathered; checked against hand-computed sizes and direct forward passes."""

from __future__ import annotations

import math

import pytest
import torch
import trl
from helpers import tiny_args

from trl_ext import DAPOTrainer
from trl_ext.diagnostics.probe_args import dynamic_sampling_policy
from trl_ext.grpo.ds_rounds import (
    InformativeRate,
    expected_refill_rounds,
    first_round_groups,
    importance_sampling_ratio,
    refill_groups,
    refill_margin,
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
    generation round; ``run_round``: its rows on this process), appended as rounds run."""
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


def test_first_round_margin_and_cap_hand_computed():
    # the margin in force: GRESO's 1.25 where surplus is carried (it costs nothing), 1.05 where it is discarded
    assert refill_margin(None, carrying=True) == 1.25 and refill_margin(None, carrying=False) == 1.05
    assert refill_margin(2.0, carrying=False) == 2.0
    assert round_cap(16, 2.0) == 32 and round_cap(16, 1.0) == 16 and round_cap(3, 0.5) == 2
    kw = dict(margin=1.25, world_size=1, cap=32, remaining=100)
    # oversampled: (16 - 2 carried) / 0.5 x 1.25 = 35 -> capped at 32
    assert first_round_groups(16, carried=2, rate=0.5, carrying=True, **kw) == 32
    assert first_round_groups(16, carried=0, rate=0.8, carrying=True, **kw) == 25  # ceil(16 / 0.8 x 1.25)
    assert first_round_groups(16, carried=0, rate=0.8, carrying=True, **{**kw, "world_size": 3}) == 27
    # TRL's own batch: nothing dropped yet, surplus not carried, or no more than TRL's batch
    assert first_round_groups(16, carried=0, rate=1.0, carrying=True, **kw) is None
    assert first_round_groups(16, carried=0, rate=0.5, carrying=False, **kw) is None
    assert first_round_groups(16, carried=8, rate=0.9, carrying=True, **kw) is None  # ceil(8 / 0.9 x 1.25) = 12


def test_simulated_cost_of_the_policy_stays_near_the_ideal():
    """The trainer's policy (first_round_groups + refill_groups), simulated at known rates: generated groups per
    trained group within 10% of the ideal 1/rate with and without carry-over, and oversampling the first round where
    surplus is carried cuts the rounds per step."""
    for rate in (0.75, 0.5, 0.25, 0.1):
        carried = expected_refill_rounds(rate, 64, 40, carry_share=0.25, steps=400)
        discarded = expected_refill_rounds(rate, 64, 40, carry_share=0.0, steps=400)
        whole = expected_refill_rounds(rate, 64, 40, carry_share=0.25, max_round_size=1.0, steps=400)
        assert carried["generated_per_trained_group"] * rate == pytest.approx(1.0, abs=0.1)
        assert discarded["generated_per_trained_group"] * rate == pytest.approx(1.0, abs=0.1)
        assert carried["rounds"] < discarded["rounds"] and carried["rounds"] < whole["rounds"]


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


@pytest.mark.parametrize("mode", ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
def test_importance_sampling_ratio_hand_computed(mode):
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -1.0]])
    sampled = torch.tensor([[-1.5, -1.0, float("nan")], [-1.0, -3.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    ratio = importance_sampling_ratio(old, sampled, mask, mode, clip_min=0.5, clip_max=2.0)
    diff = [[0.5, -1.0, 0.0], [0.0, 2.0, 0.0]]  # NaN sampling log-prob: no correction
    if mode.startswith("token"):
        raw = [[math.exp(d) for d in row] for row in diff]
    else:
        raw = [[math.exp(sum(row))] for row in diff]
    if mode.endswith("truncate"):
        expected = [[min(max(x, 0.5), 2.0) for x in row] for row in raw]
    else:
        expected = [[x if 0.5 <= x <= 2.0 else 0.0 for x in row] for row in raw]
    torch.testing.assert_close(ratio, torch.tensor(expected))


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


# -- no old/ref forward pass on dropped rows ---------------------------------------------------------------------


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


def _trainer_with_deferred_logps(tiny_model, tokenizer, problems, tmp_path) -> DAPOTrainer:
    """A DAPO trainer whose old-policy and reference log-probs are deferred to the trained rows: beta > 0 (reference)
    and 2 minibatches per generation (old policy), so TRL computes both."""
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


def test_old_and_ref_logps_only_for_trained_rows(tiny_model, tokenizer, problems, tmp_path, forward_rows):
    trainer = _trainer_with_deferred_logps(tiny_model, tokenizer, problems, tmp_path)
    generated = _record_sizes(trainer, "run_round")
    out = trainer._generate_and_score_completions(_groups(problems, "eoeo"))
    assert len(generated) > 1 and sum(generated) > 16  # something was dropped and refilled
    assert out["completion_ids"].size(0) == 16
    # one pass per kind, over the 16 trained rows only
    assert sorted(forward_rows) == [("old", 16), ("ref", 16)]
    # and the values are those of the trained rows (not placeholders)
    _close_on_completions(out["old_per_token_logps"], _direct_logps(trainer.model, out), out)
    _close_on_completions(out["ref_per_token_logps"], _direct_logps(trainer.ref_model, out), out)


def test_deferred_logps_call_fits_trl_1_14s_keyword_only_batch_size(
    tiny_model, tokenizer, problems, tmp_path, monkeypatch
):
    """TRL 1.14 declares ``_get_per_token_logps_and_entropies(self, model, *args, batch_size=None, ...)``: a batch size
    passed by position there lands in ``*args`` and TRL raises "got multiple values for argument 'batch_size'". The
    deferred old/ref pass must pass it by keyword (checked here against that signature on every release)."""
    original = trl.GRPOTrainer._get_per_token_logps_and_entropies

    def trl_1_14_shape(self, model, *args, batch_size=None, **kwargs):
        assert len(args) == 3, f"positional arguments beyond (input_ids, attention_mask, logits_to_keep): {args[3:]}"
        return original(self, model, *args, batch_size=batch_size, **kwargs)

    monkeypatch.setattr(trl.GRPOTrainer, "_get_per_token_logps_and_entropies", trl_1_14_shape)
    trainer = _trainer_with_deferred_logps(tiny_model, tokenizer, problems, tmp_path)
    out = trainer._generate_and_score_completions(_groups(problems, "eoeo"))
    assert out["old_per_token_logps"].size(0) == 16 and out["ref_per_token_logps"].size(0) == 16


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_nothing_to_filter_with_old_and_ref_logps_is_exactly_trls_step(tokenizer, problems, tmp_path, beta):
    """Deferred old/ref passes on an unfiltered batch: the same step as trl.GRPOTrainer, bit for bit."""
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


# -- only the selected rows are gathered ----------------------------------------------------------------------------


def test_gathered_bytes_are_the_selected_rows_only(tiny_model, tokenizer, problems, tmp_path):
    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False, dynamic_sampling_max_generation_batches=30)
    trainer = DAPOTrainer(
        tiny_model, [even_answer_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    trainer.model.train()
    rounds = []
    run_round = trainer.run_round

    def recording(inputs, scratch):
        rounds.append(run_round(inputs, scratch))
        return rounds[-1]

    trainer.run_round = recording
    trainer._generate_and_score_completions(_groups(problems, "oe"))
    assert len(rounds) > 1
    keys = ["prompt_ids", "prompt_mask", "completion_ids", "completion_mask"]
    assert set(rounds[0].output) - {"advantages", "num_items_in_batch"} == set(keys)
    # 8 selected rows, each padded to the widest round: one gather of exactly those rows per key
    expected = sum(8 * max(r.output[k].size(1) for r in rounds) * rounds[0].output[k].element_size() for k in keys)
    every_round = sum(r.output[k].numel() * r.output[k].element_size() for r in rounds for k in keys)
    assert trainer._metrics["train"]["dynamic_sampling/gathered_bytes"] == [float(expected)]
    assert expected < every_round  # what gathering every round's tensors moved


# -- surplus carried to the next step, once, with its own old-policy log-probs ------------------------------------


class MarkedConstant:
    """Constant for the odd-answer prompts ``_groups`` uses (its "o" groups), informative for every other prompt: a
    refill round is almost all informative, so it leaves surplus groups."""

    __name__ = "marked_constant"

    def __init__(self, problems):
        odd = [row["prompt"] for row in problems[0] if int(row["answer"]) % 2][:4]
        self.marked = set(odd)

    def __call__(self, prompts, completions, **kwargs):
        return [0.0 if p in self.marked else float(i % 2) for i, p in enumerate(prompts)]


def _carry_trainer(tokenizer, problems, out, model=None, **overrides):
    from trl_ext.demo import DemoModelConfig, build_model

    small = DemoModelConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
    )
    settings = dict(
        soft_overlong_punishment=False,
        num_minibatches=2,  # old-policy log-probs: carry-over is sound
        dynamic_sampling_max_generation_batches=30,
        dynamic_sampling_carry_over=0.5,
    )
    settings.update(overrides)
    args = tiny_args("dapo", out, **settings)
    return DAPOTrainer(
        model or build_model(tokenizer, small),
        [MarkedConstant(problems)],
        args=args,
        train_dataset=problems[0],
        processing_class=tokenizer,
    )


def test_surplus_is_carried_once_bounded_with_its_own_old_logps(tokenizer, problems, tmp_path):
    trainer = _carry_trainer(tokenizer, problems, tmp_path, dynamic_sampling_refill_margin=4.0)  # overshoot
    trainer.model.train()
    trainer._generate_and_score_completions(_groups(problems, "eeeo"))  # 3 of 4 informative: a refill of 4
    metrics = trainer._metrics["train"]
    surplus = metrics["dynamic_sampling/surplus_groups"][-1]
    carried = trainer.dynamic_sampler.carry
    assert surplus > 0 and carried is not None
    # bounded: at most 0.5 x 4 groups, and exactly min(surplus, 2)
    assert carried.num_rows == 4 * min(int(surplus), 2)
    assert metrics["dynamic_sampling/carried_groups_out"] == [float(carried.num_rows // 4)]
    assert bool(informative_rows(carried).all())
    stored = carried.output["old_per_token_logps"].clone()
    _close_on_completions(stored, _direct_logps(trainer.model, carried.output), carried.output)

    with torch.no_grad():  # the policy moves on before the next step
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    out = trainer._generate_and_score_completions(_groups(problems, "oooo"))
    n = carried.num_rows
    # the carried rows come first, with the old-policy log-probs of the policy that generated them
    assert torch.equal(
        out["completion_ids"][:n, : carried.output["completion_ids"].size(1)],
        carried.output["completion_ids"][:, : out["completion_ids"].size(1)],
    )
    width = min(stored.size(1), out["old_per_token_logps"].size(1))
    mask = out["completion_mask"][:n, :width].bool()
    assert torch.equal(out["old_per_token_logps"][:n, :width][mask], stored[:, :width][mask])
    current = _direct_logps(trainer.model, out)
    fresh = {"completion_mask": out["completion_mask"][n:]}
    _close_on_completions(out["old_per_token_logps"][n:], current[n:], fresh)
    assert not torch.allclose(
        out["old_per_token_logps"][:n][mask[:, : out["old_per_token_logps"].size(1)]],
        current[:n][mask[:, : current.size(1)]],
        atol=1e-4,
    )
    assert metrics["dynamic_sampling/carried_groups_used"][-1] == n // 4
    # at most once: what is carried out of step 2 comes from step 2's own rounds
    if trainer.dynamic_sampler.carry is not None:
        assert not any(
            torch.equal(trainer.dynamic_sampler.carry.output["completion_ids"][i], carried.output["completion_ids"][i])
            and torch.equal(trainer.dynamic_sampler.carry.output["prompt_ids"][i], carried.output["prompt_ids"][i])
            for i in range(min(n, trainer.dynamic_sampler.carry.num_rows))
        )


def test_first_round_is_oversampled_once_groups_are_dropped_where_surplus_is_carried(tokenizer, problems, tmp_path):
    # 2 minibatches: surplus is carried (at most 1 group of 4)
    trainer = _carry_trainer(tokenizer, problems, tmp_path, dynamic_sampling_carry_over=0.25)
    sizes = _record_sizes(trainer)
    trainer.model.train()
    trainer._generate_and_score_completions(_groups(problems, "eeee"))  # nothing dropped: TRL's own batch
    assert sizes == [16] and trainer.dynamic_sampler.rate.estimate() == 1.0
    trainer._generate_and_score_completions(_groups(problems, "eooo"))  # 3 of 4 dropped: a refill
    metrics = trainer._metrics["train"]
    assert sizes[1] == 16 and metrics["dynamic_sampling/first_round_groups"][:2] == [4.0, 4.0]
    rate = trainer.dynamic_sampler.rate.estimate()
    carried = trainer.dynamic_sampler.carry.num_rows // 4 if trainer.dynamic_sampler.carry is not None else 0
    assert rate < 1.0
    expected = first_round_groups(4, carried, rate, 1.25, 1, cap=8, remaining=30 * 4, carrying=True)
    del sizes[:]
    out = trainer._generate_and_score_completions(_groups(problems, "eeee"))
    # the next step's first round is sized from the rate, from the refill stream (whole groups), beyond TRL's 4
    assert expected is not None and expected > 4
    assert sizes[0] == 4 * expected and metrics["dynamic_sampling/first_round_groups"][-1] == expected
    assert out["completion_ids"].size(0) == 16  # the trained batch keeps TRL's shape


def test_first_round_is_trls_batch_where_surplus_would_be_discarded(tokenizer, problems, tmp_path):
    trainer = _carry_trainer(tokenizer, problems, tmp_path, num_minibatches=1)  # on-policy: nothing carried
    trainer.model.train()
    for _ in range(3):
        trainer._generate_and_score_completions(_groups(problems, "eo"))
    assert trainer.dynamic_sampler.rate.estimate() < 1.0
    assert trainer._metrics["train"]["dynamic_sampling/first_round_groups"] == [2.0, 2.0, 2.0]


def informative_rows(round_):
    from trl_ext.grpo.group_filter import informative_groups

    return informative_groups(round_.metric, 4, 1e-6)


@pytest.mark.parametrize(
    "overrides",
    [
        {"num_minibatches": 1},  # on-policy: TRL computes no old log-probs, a carried group's age is uncorrected
        {"dynamic_sampling_carry_over": 0.0},
    ],
)
def test_no_carry_where_unsound_or_off(tokenizer, problems, tmp_path, overrides):
    trainer = _carry_trainer(tokenizer, problems, tmp_path, dynamic_sampling_refill_margin=4.0, **overrides)
    trainer.model.train()
    trainer._generate_and_score_completions(_groups(problems, "eeeo"))
    assert trainer._metrics["train"]["dynamic_sampling/surplus_groups"][-1] > 0
    assert trainer.dynamic_sampler.carry is None
    assert trainer._metrics["train"]["dynamic_sampling/carried_groups_out"] == [0.0]


@pytest.mark.parametrize("preset", ["gspo", "gspo_token"])
def test_no_carry_for_gspo(tiny_model, tokenizer, problems, tmp_path, preset):
    """Off for a sequence-level ratio, GSPO-token's included (its ratio is sg[s_i] pi_t / sg[pi_t], and its config
    sets TRL's token level plus the gspo_token switch)."""
    from trl_ext import get_preset, trainer_class_for

    args = tiny_args(preset, tmp_path, dynamic_sampling=True, dynamic_sampling_carry_over=0.5)
    trainer = trainer_class_for(args)(
        tiny_model, [even_answer_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    assert trainer.args.gradient_accumulation_steps % (trainer.args.steps_per_generation * trainer.num_iterations)
    assert not trainer.carries_surplus()
    run = get_preset(preset, output_dir=str(tmp_path), dynamic_sampling=True, bf16=False)
    assert dynamic_sampling_policy(run)["carry_over"] == 0.0  # the probe predicts with the same rule


def test_carried_groups_are_checkpointed_and_resumed_exactly(tokenizer, problems, tmp_path):
    full = _carry_trainer(
        tokenizer,
        problems,
        tmp_path / "full",
        max_steps=4,
        save_strategy="steps",
        save_steps=2,
        dynamic_sampling_refill_margin=4.0,
        dynamic_sampling_carry_over=1.0,
    )
    full.train()
    logs = [h for h in full.state.log_history if "dynamic_sampling/carried_groups_out" in h]
    assert logs[0]["dynamic_sampling/carried_groups_out"] > 0  # the first generation carried groups over
    assert logs[1]["dynamic_sampling/carried_groups_used"] == logs[0]["dynamic_sampling/carried_groups_out"]
    checkpoint = tmp_path / "full" / "out" / "checkpoint-2"
    assert (checkpoint / "dynamic_sampling_carry.pt").exists()

    resumed = _carry_trainer(
        tokenizer,
        problems,
        tmp_path / "resumed",
        max_steps=4,
        dynamic_sampling_refill_margin=4.0,
        dynamic_sampling_carry_over=1.0,
    )
    resumed.train(resume_from_checkpoint=str(checkpoint))
    params = [torch.cat([p.detach().flatten() for p in t.model.parameters()]) for t in (full, resumed)]
    assert torch.equal(params[0], params[1])
    after = [h for h in resumed.state.log_history if "dynamic_sampling/carried_groups_out" in h]
    assert [h["dynamic_sampling/carried_groups_used"] for h in after] == [
        h["dynamic_sampling/carried_groups_used"] for h in logs
    ]


# -- vLLM's importance-sampling correction: old log-probs and the ratio only for the trained rows ------------------


def test_vllm_importance_sampling_ratio_on_the_trained_rows(tiny_model, tokenizer, problems, tmp_path, forward_rows):
    """TRL's vLLM path with the stand-in engine of test_configs (vLLM cannot run on CPU): TRL computes old-policy
    log-probs for the importance-sampling correction; we defer them to the trained rows and recompute the ratio there
    with TRL's formula for the configured mode."""
    from test_configs import StandInVLLM

    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False, dynamic_sampling_max_generation_batches=30)
    trainer = DAPOTrainer(
        tiny_model, [even_answer_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    engine = StandInVLLM(tokenizer, args.max_completion_length)
    trainer.use_vllm, trainer.vllm_generation, trainer._last_loaded_step = True, engine, -1  # what __init__ sets
    assert trainer.vllm_importance_sampling_correction
    trainer.model.train()
    out = trainer._generate_and_score_completions(_groups(problems, "oe"))
    assert len(engine.generate_calls) > 1  # something was dropped and refilled
    assert forward_rows == [("old", 8)]  # the trained rows only
    old = _direct_logps(trainer.model, out)
    _close_on_completions(out["old_per_token_logps"], old, out)
    mask = out["completion_mask"].float()
    diff = torch.nan_to_num((old - out["sampling_per_token_logps"]) * mask, nan=0.0)
    mode = trainer.vllm_importance_sampling_mode
    low = trainer.vllm_importance_sampling_clip_min if trainer.vllm_importance_sampling_clip_min is not None else 0.0
    high = trainer.vllm_importance_sampling_clip_max
    raw = torch.exp(diff.sum(dim=-1, keepdim=True) if mode.startswith("sequence") else diff)
    if mode.endswith("mask"):
        expected = torch.where((raw < low) | (raw > high), torch.zeros_like(raw), raw)
    else:
        expected = raw.clamp(min=low, max=high)
    torch.testing.assert_close(out["importance_sampling_ratio"], expected, rtol=1e-5, atol=1e-5)
    metrics = trainer._metrics["train"]
    assert len(metrics["sampling/importance_sampling_ratio/mean"]) == 1  # logged once, for the trained batch
