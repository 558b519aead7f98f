"""MoE under GRPO / GSPO / DAPO: tiny Qwen3-MoE and Mixtral models built from configs, the router-logits guard
(``output_router_logits=True`` checkpoints) and the routing monitor against hand-computed routings."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch
import trl
from helpers import TINY_SETTINGS, tiny_args
from transformers import MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

from trl_ext import DAPOConfig, DAPOTrainer, GSPOConfig, GSPOTokenTrainer, GSPOTrainer
from trl_ext.grpo.moe import (
    MoERoutingMonitor,
    attach_moe_monitor,
    guard_router_logits,
    router_modules,
    routing_change,
)

SIZES = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16)


def tiny_moe(tokenizer, arch: str = "qwen3_moe", layers: int = 2, output_router_logits: bool = True):
    """A random tiny MoE (4 experts, top-2) with the demo tokenizer's vocabulary."""
    torch.manual_seed(0)
    common = dict(
        vocab_size=len(tokenizer),
        num_hidden_layers=layers,
        num_experts_per_tok=2,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        output_router_logits=output_router_logits,
        **SIZES,
    )
    if arch == "qwen3_moe":
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(num_experts=4, moe_intermediate_size=32, **common))
    else:
        model = MixtralForCausalLM(MixtralConfig(num_local_experts=4, **common))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


@pytest.fixture(scope="module")
def padded_problems():
    """Prompts of 8 different lengths ("1=", "1+1=", ...): any batch holds several, so generation pads them (the
    upstream bug needs a padded mask)."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": ["+".join("1" * n) + "=" for n in range(1, 9)]})


def parity_reward(completions, **kwargs):
    """Informative for a random policy: 1 for a completion of odd length, else 0."""
    return [float(len(c) % 2) for c in completions]


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


def test_routing_change_hand_computed():
    # 3 tokens x 2 layers x top-2 of 4 experts; the third token is masked out (a prompt or pad token)
    old = torch.tensor([[[0, 1], [2, 3]], [[2, 3], [0, 1]], [[0, 2], [1, 3]]])
    new = torch.tensor([[[1, 0], [2, 3]], [[2, 1], [0, 1]], [[3, 2], [1, 0]]])
    # token 0: both layers keep their set (order within top-k ignored); token 1: layer 0 changes
    assert routing_change(old, new, torch.tensor([True, True, False])) == (1, 4)
    assert routing_change(old, new, torch.tensor([True, True, True])) == (3, 6)


@pytest.mark.parametrize("arch", ["qwen3_moe", "mixtral"])
@pytest.mark.parametrize("style", ["labels", "logits_to_keep"])
def test_monitor_matches_a_hand_computed_expert_swap(tokenizer, arch, style):
    """One MoE layer: swapping experts 0 and 2 in the router changes a token's top-2 set exactly when it holds one of
    them, which the router logits of the old forward tell by hand. Rows reach the training forward in another order."""
    model = tiny_moe(tokenizer, arch, layers=1, output_router_logits=False)
    batch = tokenizer(["1+2=5", "12+7=19", "3+3=6<eos>", "20+9=29"], return_tensors="pt", padding=True)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    completion = torch.zeros_like(mask, dtype=torch.bool)
    completion[:, -3:] = True  # the last 3 positions are "completion" tokens
    completion &= mask.bool()
    if style == "labels":  # TRL >= 1.14
        kwargs = {"labels": ids.masked_fill(~completion, -100)}
    else:  # TRL 1.12: logits_to_keep = completion length + 1
        kwargs = {"logits_to_keep": 4}
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, output_router_logits=True).router_logits[0]
    top2 = logits.view(*ids.shape, -1).topk(2, dim=-1).indices  # (B, L, 2)
    holds_one = ((top2 == 0) | (top2 == 2)).sum(-1) == 1
    expected = holds_one[completion].float().mean().item()
    assert 0 < expected < 1  # the case tests something

    metrics = defaultdict(list)
    monitor = MoERoutingMonitor(model, metrics)
    with torch.no_grad():  # TRL's old-policy pass
        model(input_ids=ids, attention_mask=mask, **kwargs)
    router = router_modules(model)[0][0]
    with torch.no_grad():
        router.weight[[0, 2]] = router.weight[[2, 0]].clone()
    order = torch.tensor([3, 1, 0, 2])
    model(
        input_ids=ids[order],
        attention_mask=mask[order],
        **{k: v[order] if k == "labels" else v for k, v in kwargs.items()},
    )
    monitor.on_step_end(None, None, None)
    assert metrics["moe/routing_change_frac"] == [pytest.approx(expected)]
    # the busiest expert's share of the training forward's top-2 assignments, over every non-pad token
    new_top2 = top2.clone()
    new_top2[top2 == 0], new_top2[top2 == 2] = 2, 0
    counts = torch.bincount(new_top2[mask.bool()].flatten(), minlength=4).float()
    assert metrics["moe/max_expert_load"] == [pytest.approx((counts / counts.sum()).max().item())]
    monitor.remove()


def test_generate_with_output_router_logits_upstream_bug_and_guard(tokenizer):
    """transformers computes the aux loss in generate's cached steps, from router logits of the new token only and the
    mask of the whole cache. If this stops raising, transformers fixed it and ``guard_router_logits`` can go."""
    flagged = tiny_moe(tokenizer, output_router_logits=True)
    batch = tokenizer(["1+2=", "12+17="], return_tensors="pt", padding=True)
    with pytest.raises(RuntimeError, match="must match the size"):
        flagged.generate(**batch, max_new_tokens=3, do_sample=False)
    guard_router_logits(flagged)
    guarded = flagged.generate(**batch, max_new_tokens=3, do_sample=False)
    plain = tiny_moe(tokenizer, output_router_logits=False).generate(**batch, max_new_tokens=3, do_sample=False)
    assert torch.equal(guarded, plain)  # same weights (same seed): the guard changes no token
    # full forwards keep the checkpoint's flag: the aux loss is still computed
    assert flagged(**batch).aux_loss is not None


def test_trl_grpo_trainer_on_policy_trains_a_flagged_moe(tokenizer, padded_problems, tmp_path):
    """TRL's own trainer crashes on an ``output_router_logits=True`` checkpoint and trains once attached. The aux loss
    is TRL's, weighted by ``router_aux_loss_coef``: with a constant reward the advantages are 0, so the loss is exactly
    coef x aux_loss. On-policy (one step per generation) TRL runs no old-policy forward: no routing change is logged."""
    args = trl.GRPOConfig(**(dict(TINY_SETTINGS) | {"output_dir": str(tmp_path), "router_aux_loss_coef": 0.25}))
    make = lambda: trl.GRPOTrainer(  # noqa: E731
        tiny_moe(tokenizer), constant_reward, args=args, train_dataset=padded_problems, processing_class=tokenizer
    )
    with pytest.raises(RuntimeError, match="must match the size"):
        make().train()
    trainer = make()
    attach_moe_monitor(trainer)
    trainer.train()
    logs = [row for row in trainer.state.log_history if "loss" in row]
    assert [row["loss"] for row in logs] == pytest.approx([0.25 * row["aux_loss"] for row in logs], rel=1e-5)
    assert all("moe/routing_change_frac" not in row and "moe/max_expert_load" in row for row in logs)


def test_dense_model_gets_no_monitor(tiny_model, tokenizer, padded_problems, tmp_path):
    trainer = trl.GRPOTrainer(
        tiny_model,
        constant_reward,
        args=tiny_args(GSPOConfig, tmp_path),
        train_dataset=padded_problems,
        processing_class=tokenizer,
    )
    assert attach_moe_monitor(trainer) is None and router_modules(tiny_model) == []


@pytest.mark.parametrize(
    "trainer_class,make_args",
    [
        (GSPOTrainer, lambda p: tiny_args(GSPOConfig, p, num_minibatches=2)),
        (GSPOTokenTrainer, lambda p: tiny_args(GSPOConfig, p, num_minibatches=2, gspo_token=True)),
        (DAPOTrainer, lambda p: tiny_args(DAPOConfig, p, num_minibatches=2)),
    ],
    ids=["gspo", "gspo_token", "dapo"],
)
def test_presets_train_a_flagged_moe(tokenizer, padded_problems, tmp_path, trainer_class, make_args):
    model = tiny_moe(tokenizer)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = trainer_class(
        model, [parity_reward], args=make_args(tmp_path), train_dataset=padded_problems, processing_class=tokenizer
    )
    assert attach_moe_monitor(trainer) is not None
    trainer.train()
    logs = [row for row in trainer.state.log_history if "loss" in row]
    assert len(logs) == 2 and all(row["aux_loss"] > 0 for row in logs)  # the router aux loss is in TRL's loss
    # step 1 trains the policy that generated the rollout: no routing has changed; step 2 sees the updated policy
    assert logs[0]["moe/routing_change_frac"] == 0.0
    assert 0.0 <= logs[1]["moe/routing_change_frac"] <= 1.0
    assert all(0.25 <= row["moe/max_expert_load"] <= 1.0 for row in logs)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
