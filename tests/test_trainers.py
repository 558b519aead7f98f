"""DAPO / GSPO trainers: the loss against hand-computed references, equivalence with TRL, dynamic sampling."""

from __future__ import annotations

import logging
import math

import pytest
import torch
import trl
from helpers import tiny_args

from trl_ext import DAPOTrainer, GRPOTrainer, GSPOTokenTrainer, GSPOTrainer, trainer_class_for


def position_reward(completions, **kwargs):
    """Always informative: rewards 0, 1, 2, ... within every group (deterministic, independent of the text)."""
    return [float(i % 4) for i in range(len(completions))]


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


def even_answer_reward(completions, answer, **kwargs):
    """Informative only for prompts whose answer is even; constant (uninformative) otherwise."""
    return [float(i % 2) if int(a) % 2 == 0 else 0.0 for i, a in enumerate(answer)]


def _fixed_batch(trainer, tokenizer, log_ratio: torch.Tensor, advantages: torch.Tensor):
    """A batch of 4 prompt/completion rows whose old log-probs are current log-probs minus ``log_ratio``."""
    prompts = tokenizer(["1+2=", "12+7=", "3+3=", "20+9="], return_tensors="pt", padding=True)
    completion_ids = tokenizer(["3<eos>", "19", "6<eos>", "29"], return_tensors="pt", padding=True)["input_ids"]
    completion_ids = completion_ids[:, :2]
    completion_mask = torch.ones_like(completion_ids)
    input_ids = torch.cat([prompts["input_ids"], completion_ids], dim=1)
    attention = torch.cat([prompts["attention_mask"], completion_mask], dim=1)
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps  # set by train()
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, attention, 2)
    return {
        "prompt_ids": prompts["input_ids"],
        "prompt_mask": prompts["attention_mask"],
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages,
        "old_per_token_logps": logps - log_ratio,
        "num_items_in_batch": completion_mask.sum(),
    }


def test_dapo_clip_higher_token_level_loss_matches_hand_computation(tiny_model, tokenizer, problems, tmp_path):
    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False)
    trainer = DAPOTrainer(
        tiny_model, [position_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    ratios = torch.tensor([[0.7, 1.1], [1.4, 0.9], [1.25, 1.3], [0.75, 0.85]])
    advantages = torch.tensor([1.0, 1.0, -1.0, -1.0])
    inputs = _fixed_batch(trainer, tokenizer, ratios.log(), advantages)
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, inputs)

    # DAPO Eq. 10 with eps_low 0.2, eps_high 0.28, token-level mean over the 8 tokens.
    a = advantages.unsqueeze(1)
    clipped = ratios.clamp(0.8, 1.28)
    expected = -torch.minimum(ratios * a, clipped * a).sum() / 8
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)
    # hand-check: only 1.4 (A>0) is clipped above; only 0.75 (A<0) is clipped below.
    metrics = trainer._metrics["train"]
    assert metrics["clip_ratio/high_mean"][-1] == pytest.approx(1 / 8)
    assert metrics["clip_ratio/low_mean"][-1] == pytest.approx(1 / 8)


def _gspo_inputs(trainer, tokenizer):
    # Per-sequence mean log-ratios: 1e-4 (inside), 1e-3 (above, A>0), -1e-3 (below, A<0), 1e-3 with A<0.
    log_ratio = torch.tensor([[0.5e-4, 1.5e-4], [0.0, 2e-3], [-2e-3, 0.0], [1e-3, 1e-3]])
    advantages = torch.tensor([1.0, 1.0, -1.0, -1.0])
    return _fixed_batch(trainer, tokenizer, log_ratio, advantages), log_ratio, advantages


def test_gspo_sequence_ratio_and_clipping_match_hand_computation(tiny_model, tokenizer, problems, tmp_path):
    args = tiny_args("gspo", tmp_path)
    trainer = GSPOTrainer(
        tiny_model, [position_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    inputs, log_ratio, advantages = _gspo_inputs(trainer, tokenizer)
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, inputs)

    s = log_ratio.mean(dim=1).exp()  # GSPO Eq. 7: s_i = exp(mean_t log r_it)
    expected = -torch.minimum(s * advantages, s.clamp(1 - 3e-4, 1 + 4e-4) * advantages).mean()  # Eq. 5
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-7)
    metrics = trainer._metrics["train"]
    assert metrics["clip_ratio/high_mean"][-1] == pytest.approx(1 / 4)  # sequence 1
    assert metrics["clip_ratio/low_mean"][-1] == pytest.approx(1 / 4)  # sequence 2
    trainer.log({})
    assert trainer.state.log_history[-1]["clip_ratio/region_mean"] == pytest.approx(1 / 2)
    assert trainer.state.log_history[-1]["clip_ratio/high_mean"] == pytest.approx(1 / 4)


def _small_model(tokenizer):
    from trl_ext.demo import DemoModelConfig, build_model

    small = DemoModelConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
    )
    return build_model(tokenizer, small)


def test_gspo_token_equals_gspo_with_sequence_advantages(tokenizer, problems, tmp_path):
    """GSPO-token (Eq. 13) equals GSPO (Eq. 7) in loss and gradient when all tokens of a sequence share one advantage
    (paper, Eq. 14-17). TRL computes log-probabilities in float32 whatever the model's dtype, and GSPO-token's ratio
    is formed over TRL's token level with one more subtraction at the scale of log pi (~3), so s_i may differ from
    GSPO's by one float32 ulp of 1.0 (1.2e-7): the loss is compared to that absolute precision (it is
    mean (s_i - 1) A_i ~ 5e-5 here, since sum A_i = 0), not to a relative one only a copy of TRL's code could meet."""
    losses, grads = [], []
    for gspo_token in (False, True):
        args = tiny_args("gspo", tmp_path / str(gspo_token), gspo_token=gspo_token)
        # the preset table picks the class: GSPOTokenTrainer exactly when the config says gspo_token
        trainer = trainer_class_for(args)(
            _small_model(tokenizer),
            [position_reward],
            args=args,
            train_dataset=problems[0],
            processing_class=tokenizer,
        )
        assert isinstance(trainer, GSPOTokenTrainer) == gspo_token
        inputs, _, _ = _gspo_inputs(trainer, tokenizer)
        trainer.model.train()
        loss = trainer.compute_loss(trainer.model, inputs)
        loss.backward()
        losses.append(loss.item())
        grads.append(torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]))
    assert losses[0] == pytest.approx(losses[1], abs=1.2e-7)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-7)


def test_gspo_token_per_token_advantages_match_hand_computation(tokenizer, problems, tmp_path):
    """With one advantage per token, GSPO-token's loss is (1/G) sum_i (1/|y_i|) sum_t -min(s_i A_it, clip(s_i) A_it)
    and its gradient is sum_{i,t} w_it grad log pi(y_it) with w_it = -s_i A_it / (G |y_i|) where the token is not
    clipped, 0 where it is (Eq. 13: the value of s_i,t is s_i, its gradient that of s_i log pi(y_it))."""
    args = tiny_args("gspo", tmp_path, gspo_token=True)
    model = _small_model(tokenizer)
    trainer = GSPOTrainer(model, [position_reward], args=args, train_dataset=problems[0], processing_class=tokenizer)
    # sequence log-ratios 1e-4 (inside), 1e-3 (above 1 + 4e-4), -1e-3 (below 1 - 3e-4), 0 (inside)
    log_ratio = torch.tensor(
        [[0.5e-4, 1.5e-4], [0.0, 2e-3], [-2e-3, 0.0], [1e-3, -1e-3]],
    )
    advantages = torch.tensor([[1.0, -2.0], [1.0, -1.0], [-1.0, 0.5], [3.0, -1.0]])
    inputs = _fixed_batch(trainer, tokenizer, log_ratio, advantages)
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    grad = torch.cat([p.grad.flatten() for p in trainer.model.parameters()])

    s = log_ratio.mean(dim=1, keepdim=True).exp().expand(-1, 2)  # value of s_i,t = s_i on every token
    clipped = s.clamp(1 - 3e-4, 1 + 4e-4)
    expected = (-torch.minimum(s * advantages, clipped * advantages)).mean(dim=1).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    # tokens whose clipped term is the minimum get no gradient: here sequence 1's A>0 token (s above the range) and
    # sequence 2's A<0 token (s below it); sequence 1's A<0 and sequence 2's A>0 tokens keep theirs
    active = (s * advantages <= clipped * advantages).float()
    assert active.tolist() == [[1.0, 1.0], [0.0, 1.0], [0.0, 1.0], [1.0, 1.0]]
    weights = -(s * advantages * active) / (4 * 2)
    model.zero_grad()
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, -3:-1]
    logps = torch.log_softmax(logits, -1).gather(-1, inputs["completion_ids"][..., None]).squeeze(-1)
    (weights * logps).sum().backward()
    reference = torch.cat([p.grad.flatten() for p in model.parameters()])
    torch.testing.assert_close(grad, reference, rtol=1e-5, atol=1e-7)  # float32 sums
    # ... and it is not GSPO's gradient, which weighs every token of sequence i by the same mean advantage
    assert not torch.allclose(grad, torch.zeros_like(grad))


def _final_params(trainer):
    return torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])


@pytest.mark.parametrize("num_minibatches", [1, 2])
def test_nothing_to_filter_is_exactly_trls_step(tokenizer, problems, tmp_path, num_minibatches):
    from trl_ext.demo import DemoModelConfig, build_model

    small = DemoModelConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
    )
    runs = {}
    for name, trainer_class in (("trl", trl.GRPOTrainer), ("ours", DAPOTrainer)):
        args = tiny_args(
            "dapo", tmp_path / name, soft_overlong_punishment=False, max_steps=4, num_minibatches=num_minibatches
        )
        assert args.dynamic_sampling
        trainer = trainer_class(
            build_model(tokenizer, small),
            [position_reward],
            args=args,
            train_dataset=problems[0],
            processing_class=tokenizer,
        )
        trainer.train()
        runs[name] = trainer
    ours, theirs = runs["ours"], runs["trl"]
    assert torch.equal(_final_params(ours), _final_params(theirs))
    loss = [h["loss"] for h in ours.state.log_history if "loss" in h]
    assert loss == [h["loss"] for h in theirs.state.log_history if "loss" in h]
    rounds = [h.get("dynamic_sampling/rounds") for h in ours.state.log_history if "loss" in h]
    assert rounds == ([1.0] * 4 if num_minibatches == 1 else [1.0, None, 1.0, None])  # logged when generating
    assert ours.optimizer.optimizer.state_dict()["state"][0]["step"] == 4  # no step skipped: every step trained


def test_round_limit_trains_on_nothing_and_warns_once(tiny_model, tokenizer, problems, tmp_path, caplog):
    args = tiny_args(
        "dapo", tmp_path, soft_overlong_punishment=False, max_steps=3, dynamic_sampling_max_generation_batches=2
    )
    trainer = DAPOTrainer(
        tiny_model, [constant_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    before = _final_params(trainer)
    with caplog.at_level(logging.WARNING, logger="trl_ext.grpo.dynamic_sampling.sampler"):
        trainer.train()
    assert torch.equal(before, _final_params(trainer))  # zero-weight fillers change nothing
    logs = [h for h in trainer.state.log_history if "dynamic_sampling/limit_hit" in h]
    assert [h["dynamic_sampling/limit_hit"] for h in logs] == [1.0, 1.0, 1.0]
    assert [h["dynamic_sampling/rounds"] for h in logs] == [2.0, 2.0, 2.0]
    assert [h["dynamic_sampling/kept_group_frac"] for h in logs] == [0.0, 0.0, 0.0]
    warnings = [r for r in caplog.records if "dynamic_sampling_max_generation_batches=2" in r.getMessage()]
    assert len(warnings) == 1 and "SFT" in warnings[0].getMessage()


def _odd_then_even_batch(problems, num_generations=4):
    """One group for an odd-answer prompt (uninformative under even_answer_reward), then one for an even one."""
    answers = [int(a) for a in problems[0]["answer"]]
    odd = next(i for i, a in enumerate(answers) if a % 2)
    even = next(i for i, a in enumerate(answers) if a % 2 == 0)
    return [problems[0][i] for i in (odd, even) for _ in range(num_generations)]


def test_refill_keeps_only_informative_groups(tiny_model, tokenizer, problems, tmp_path):
    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False, dynamic_sampling_max_generation_batches=20)
    trainer = DAPOTrainer(
        tiny_model, [even_answer_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    trainer.model.train()
    inputs = _odd_then_even_batch(problems)
    out = trainer._generate_and_score_completions(inputs)
    assert out["completion_ids"].size(0) == 8 and out["advantages"].shape == (8,)
    groups = out["advantages"].view(-1, 4)
    assert bool((groups.abs().sum(dim=1) > 0).all())  # every group carries signal
    assert out["num_items_in_batch"].item() == out["completion_mask"].sum().item()
    assert trainer._metrics["train"]["dynamic_sampling/kept_group_frac"][-1] < 1.0


def test_fillers_are_masked_out_of_loss_and_token_count(tiny_model, tokenizer, problems, tmp_path):
    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False, dynamic_sampling_max_generation_batches=1)
    trainer = DAPOTrainer(
        tiny_model, [even_answer_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    trainer.model.train()
    inputs = _odd_then_even_batch(problems)
    out = trainer._generate_and_score_completions(inputs)
    mask_rows = out["completion_mask"].sum(dim=1)
    filler = mask_rows == 0
    assert int(filler.sum()) == 4  # the odd-answer group
    assert bool((out["advantages"][filler] == 0).all())
    assert out["num_items_in_batch"].item() == out["completion_mask"].sum().item()
    assert trainer._metrics["train"]["dynamic_sampling/limit_hit"][-1] == 1.0


def test_plain_grpo_trainer_with_dynamic_sampling_off_defers_to_trl(tiny_model, tokenizer, problems, tmp_path):
    args = tiny_args("grpo", tmp_path, beta=0.0)
    trainer = GRPOTrainer(
        tiny_model, [constant_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    trainer.train()
    assert not any(k.startswith("dynamic_sampling/") for h in trainer.state.log_history for k in h)


def test_dapo_adds_the_overlong_reward_without_mutating_args(tiny_model, tokenizer, problems, tmp_path):
    args = tiny_args("dapo", tmp_path, reward_weights=[2.0], overlong_buffer_len=2)
    trainer = DAPOTrainer(
        tiny_model, [position_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    assert trainer.reward_func_names == ["position_reward", "soft_overlong_punishment_reward"]
    assert trainer.reward_weights.tolist() == [2.0, 1.0]
    assert args.reward_weights == [2.0]
    overlong = trainer.reward_funcs[1]
    assert overlong(completion_ids=[[1, 1], [1, 1, 1], [1] * 4, [1] * 5]) == [0.0, -0.5, -1.0, -1.0]
    assert not math.isnan(trainer.reward_weights.sum().item())


def test_peft_checkpoints_and_model_card_work_through_dapo(tiny_model, tokenizer, problems, tmp_path):
    from peft import LoraConfig

    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False, save_strategy="steps", save_steps=2)
    trainer = DAPOTrainer(
        tiny_model,
        [position_reward],
        args=args,
        train_dataset=problems[0],
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    trainer.train()
    checkpoint = tmp_path / "out" / "checkpoint-2"
    assert (checkpoint / "adapter_model.safetensors").exists()
    assert (checkpoint / "dynamic_sampling_state.json").exists()  # the refill stream is checkpointed
    trainer.save_model(str(tmp_path / "final"))
    assert (tmp_path / "final" / "adapter_config.json").exists()
    card = (tmp_path / "out" / "README.md").read_text()  # TRL's model card, written at each checkpoint
    assert "trained with DAPO" in card and "2503.14476" in card
