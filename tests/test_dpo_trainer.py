"""trl_ext.DPOTrainer: same loss as TRL's on the same batch, length-bias metrics against a hand computation, pairs
mined from groups, iterative rounds."""

from __future__ import annotations

import copy

import pytest
import torch
import trl
from datasets import Dataset

from trl_ext.dpo.trainer import DPOConfig, DPOTrainer, train_iterative_dpo

PAIRS = Dataset.from_dict(
    {
        "prompt": ["1+2=", "3+4=", "5+6=", "7+8="],
        "chosen": ["3", "7", "11", "15"],
        "rejected": ["33 3", "8", "1", "15 15"],
    }
)


def _args(config_class, tmp_path, **overrides):
    settings = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        max_length=32,
        report_to="none",
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1,
        learning_rate=1e-2,
        seed=0,
        max_steps=2,
    )
    settings.update(overrides)
    return config_class(**settings)


def _policy_and_ref(tiny_model):
    ref = copy.deepcopy(tiny_model)
    policy = copy.deepcopy(tiny_model)
    with torch.no_grad():  # make the policy differ from the reference, so log-ratios are not all zero
        generator = torch.Generator().manual_seed(1)
        for p in policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    return policy, ref


def _loss_and_grads(trainer_class, config_class, policy, ref, tokenizer, tmp_path, **loss_settings):
    trainer = trainer_class(
        model=copy.deepcopy(policy),
        ref_model=copy.deepcopy(ref),
        args=_args(config_class, tmp_path, **loss_settings),
        train_dataset=PAIRS,
        processing_class=tokenizer,
    )
    trainer.model.train()
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(PAIRS))])
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    grads = [p.grad.clone() for p in trainer.model.parameters()]
    return trainer, batch, loss.detach(), grads


@pytest.mark.parametrize(
    "loss_settings",
    [
        {},
        {"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, 1.0]},  # RPO's NLL term
        {"loss_type": ["sigmoid_norm"]},
        {"ld_alpha": 0.5},
    ],
    ids=["sigmoid", "rpo", "sigmoid_norm", "ld_alpha"],
)
def test_same_loss_and_gradients_as_trl(tiny_model, tokenizer, tmp_path, loss_settings):
    policy, ref = _policy_and_ref(tiny_model)
    _, _, trl_loss, trl_grads = _loss_and_grads(
        trl.DPOTrainer, trl.DPOConfig, policy, ref, tokenizer, tmp_path / "trl", **loss_settings
    )
    ours, _, our_loss, our_grads = _loss_and_grads(
        DPOTrainer, DPOConfig, policy, ref, tokenizer, tmp_path / "ours", **loss_settings
    )
    assert torch.equal(trl_loss, our_loss)
    assert all(torch.equal(a, b) for a, b in zip(trl_grads, our_grads, strict=True))
    assert "length_bias/gap" in ours._metrics["train"]  # diagnostics ran, and changed nothing


def _sequence_logps(model, batch):
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    token = torch.log_softmax(logits.float(), -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    return (token * batch["completion_mask"][:, 1:]).sum(1)


def test_length_bias_metrics_by_hand(tiny_model, tokenizer, tmp_path):
    policy, ref = _policy_and_ref(tiny_model)
    trainer, batch, _, _ = _loss_and_grads(DPOTrainer, DPOConfig, policy, ref, tokenizer, tmp_path, beta=0.5)
    metrics = {key: values[-1] for key, values in trainer._metrics["train"].items()}
    # completion tokens: the text's characters plus EOS
    chosen_len = torch.tensor([len(c) + 1 for c in PAIRS["chosen"]], dtype=torch.float)
    rejected_len = torch.tensor([len(r) + 1 for r in PAIRS["rejected"]], dtype=torch.float)
    assert metrics["length_bias/chosen_len"] == pytest.approx(chosen_len.mean().item())
    assert metrics["length_bias/rejected_len"] == pytest.approx(rejected_len.mean().item())
    assert metrics["length_bias/gap"] == pytest.approx((chosen_len - rejected_len).mean().item())  # (6-14)/4 = -2
    with torch.no_grad():
        ratio = _sequence_logps(policy, batch) - _sequence_logps(ref, batch)
    aw, al = ratio[:4] / chosen_len, ratio[4:] / rejected_len
    length_part = 0.5 * (chosen_len - rejected_len) * (aw + al) / 2
    token_part = 0.5 * (aw - al) * (chosen_len + rejected_len) / 2
    assert torch.allclose(length_part + token_part, 0.5 * (ratio[:4] - ratio[4:]), atol=1e-5)
    assert metrics["length_bias/margin_from_length"] == pytest.approx(length_part.mean().item(), abs=1e-5)
    share = length_part.abs().sum() / (length_part.abs().sum() + token_part.abs().sum())
    assert metrics["length_bias/length_share"] == pytest.approx(share.item(), abs=1e-5)
    # TRL's own margin metric agrees with the sum of the two parts
    assert metrics["rewards/margins"] == pytest.approx((length_part + token_part).mean().item(), abs=1e-5)


def test_diagnostics_can_be_switched_off(tiny_model, tokenizer, tmp_path):
    policy, ref = _policy_and_ref(tiny_model)
    trainer, *_ = _loss_and_grads(DPOTrainer, DPOConfig, policy, ref, tokenizer, tmp_path, length_diagnostics=False)
    assert not any(key.startswith("length_bias/") for key in trainer._metrics["train"])


def _starts_with_digit(prompts, completions, **kwargs):
    return [1.0 if c[:1].isdigit() else 0.0 for c in completions]


def test_from_groups_mines_trains_and_logs(tiny_model, tokenizer, problems, tmp_path):
    train, _ = problems
    torch.manual_seed(0)
    args = _args(DPOConfig, tmp_path, num_generations=4, mining_max_new_tokens=4, prompts_per_round=16)
    trainer = DPOTrainer.from_groups(tiny_model, [_starts_with_digit], args, train, tokenizer)
    pairs = trainer.mined_pairs
    # one pair per informative group, except groups whose best completions were all truncated (never chosen, issue
    # 11) or do not re-tokenize to their sampled ids (the random tiny model samples <pad>/<unk>)
    stats = trainer.mining_stats
    assert 0 < len(pairs) == stats.num_pairs <= stats.num_informative
    assert stats.num_truncated > 0 and stats.num_not_round_trip > 0
    assert all(
        c[:1].isdigit() and not r[:1].isdigit() for c, r in zip(pairs["chosen"], pairs["rejected"], strict=True)
    )
    # the reference is a frozen copy of the policy as it was when mining
    assert trainer.ref_model is not tiny_model
    assert all(torch.equal(a, b) for a, b in zip(trainer.ref_model.parameters(), tiny_model.parameters(), strict=True))
    trainer.train()
    first_log = trainer.state.log_history[0]
    assert first_log["mining/num_pairs"] == len(pairs) and "length_bias/gap" in first_log


def test_iterative_rounds_resample_from_the_trained_model(tiny_model, tokenizer, problems, tmp_path):
    train, _ = problems
    torch.manual_seed(0)
    snapshots = []

    def on_round_end(k, model):
        snapshots.append([p.detach().clone() for p in model.parameters()])
        return {"round_seen": k}

    args = _args(
        DPOConfig,
        tmp_path,
        num_generations=4,
        mining_max_new_tokens=4,
        prompts_per_round=16,
        mining_rounds=2,
        max_steps=1,
    )
    results = train_iterative_dpo(tiny_model, [_starts_with_digit], args, train, tokenizer, on_round_end=on_round_end)
    assert [r.round for r in results] == [0, 1] and [r.metrics["round_seen"] for r in results] == [0, 1]
    assert all(r.stats.num_pairs > 0 for r in results)
    assert not all(torch.equal(a, b) for a, b in zip(snapshots[0], snapshots[1], strict=True))  # round 2 trained on
    assert (tmp_path / "out" / "round-1").is_dir()


def test_no_informative_group_fails_with_a_fix(tiny_model, tokenizer, problems, tmp_path):
    args = _args(DPOConfig, tmp_path, num_generations=2, mining_max_new_tokens=2, prompts_per_round=4)
    with pytest.raises(ValueError, match="no preference pair could be mined.*warm start"):
        DPOTrainer.from_groups(
            tiny_model, [lambda prompts, completions, **kw: [1.0] * len(completions)], args, problems[0], tokenizer
        )


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("num_generations", 1, "num_generations=1"),
        ("mining_temperature", 0.0, "greedy"),
        ("pairs_per_group", 0, "pairs_per_group=0"),
        ("max_length_gap", -1, "max_length_gap=-1"),
    ],
)
def test_config_errors_name_the_field(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=message):
        DPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, **{field: value})


def _count_forwards(trainer):
    counts = {"policy": 0, "reference": 0}

    def counter(key):
        def hook(module, args, output):
            counts[key] += 1

        return hook

    handles = [trainer.accelerator.unwrap_model(trainer.model).register_forward_hook(counter("policy"))]
    if trainer.ref_model is not None:
        handles.append(trainer.ref_model.register_forward_hook(counter("reference")))
    return counts, handles


def test_diagnostics_run_no_forward_pass_of_their_own(tiny_model, tokenizer, tmp_path):
    """The diagnostics read TRL's own policy and reference forwards (TRL >= 1.15: the fused LM head's ``log_probs``;
    older TRL: the logits), and never call ``compute_loss(return_outputs=True)``, which costs TRL >= 1.15 an extra
    forward. Same number of forwards per loss as TRL's trainer."""
    policy, ref = _policy_and_ref(tiny_model)
    counted = {}
    for name, trainer_class, config_class in (
        ("trl", trl.DPOTrainer, trl.DPOConfig),
        ("ours", DPOTrainer, DPOConfig),
    ):
        trainer = trainer_class(
            model=copy.deepcopy(policy),
            ref_model=copy.deepcopy(ref),
            args=_args(config_class, tmp_path / name),
            train_dataset=PAIRS,
            processing_class=tokenizer,
        )
        trainer.model.train()
        batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(PAIRS))])
        counts, handles = _count_forwards(trainer)
        trainer.compute_loss(trainer.model, batch)
        for handle in handles:
            handle.remove()
        counted[name] = counts
    assert counted["ours"] == counted["trl"] == {"policy": 1, "reference": 1}
    assert "length_bias/gap" in trainer._metrics["train"]


def test_diagnostics_with_peft_read_the_adapter_disabled_reference(tiny_model, tokenizer, tmp_path):
    """With PEFT and no ref_model, TRL's reference is the policy with its adapter disabled, called after the policy:
    the length split of the margin must add up to TRL's own ``rewards/margins``, which it computes from that pass."""
    from peft import LoraConfig

    trainer = DPOTrainer(
        model=copy.deepcopy(tiny_model),
        args=_args(DPOConfig, tmp_path, beta=0.5),
        train_dataset=PAIRS,
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    with torch.no_grad():  # a non-zero adapter, so that the policy differs from the adapter-disabled reference
        generator = torch.Generator().manual_seed(2)
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.add_(0.5 * torch.randn(p.shape, generator=generator))
    trainer.model.train()
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(PAIRS))])
    trainer.compute_loss(trainer.model, batch)
    metrics = {key: values[-1] for key, values in trainer._metrics["train"].items()}
    assert metrics["rewards/margins"] != pytest.approx(0.0, abs=1e-4)
    chosen_len = torch.tensor([len(c) + 1 for c in PAIRS["chosen"]], dtype=torch.float)
    rejected_len = torch.tensor([len(r) + 1 for r in PAIRS["rejected"]], dtype=torch.float)
    assert metrics["length_bias/gap"] == pytest.approx((chosen_len - rejected_len).mean().item())
    # the reference the diagnostics used is the one TRL used: both agree with a separate adapter-disabled forward
    with torch.no_grad():
        policy_ratio = _sequence_logps(trainer.model, batch)
        with trainer.model.disable_adapter():
            reference = _sequence_logps(trainer.model, batch)
    ratio = policy_ratio - reference
    aw, al = ratio[:4] / chosen_len, ratio[4:] / rejected_len
    length_part = 0.5 * (chosen_len - rejected_len) * (aw + al) / 2
    assert metrics["length_bias/margin_from_length"] == pytest.approx(length_part.mean().item(), abs=1e-4)
    assert metrics["rewards/margins"] == pytest.approx(0.5 * (ratio[:4] - ratio[4:]).mean().item(), abs=1e-4)
