"""The training-health monitor on synthetic metric streams (one per condition, plus a healthy run), and inside real
trainers: a NaN run that must stop with a checkpoint, and a short GRPO run whose metric names and TensorBoard
output must carry the health flags."""

from __future__ import annotations

import logging
import math
import os
from types import SimpleNamespace

import pytest
import torch
from transformers import TrainerCallback, TrainerControl, TrainerState

from trl_ext.diagnostics.health import CONDITIONS, HealthMonitor, HealthThresholds


def run(monitor: HealthMonitor, stream: list[dict], args=None) -> list[dict]:
    """Feed a stream of logs; returns the health metrics of each log."""
    return [monitor.check(dict(logs), step=i + 1, args=args) for i, logs in enumerate(stream)]


def healthy_stream(n: int = 60) -> list[dict]:
    """A run that learns: KL creeps up, entropy eases down, reward rises, nothing truncated or clipped much."""
    out = []
    for i in range(n):
        wobble = 0.5 * math.sin(i)  # deterministic noise
        out.append(
            {
                "loss": 0.02 * wobble,
                "grad_norm": 0.5 + 0.1 * wobble,
                "kl": 1e-5 * i * i * (1 + 0.2 * wobble),  # KL grows from 0, as it does from the reference
                "entropy": 1.0 - 0.004 * i + 0.02 * wobble,
                "clip_ratio/region_mean": 0.02 + 0.01 * wobble,
                "clip_ratio/low_mean": 0.01,
                "clip_ratio/high_mean": 0.01,
                "reward": 0.2 + 0.008 * i + 0.02 * wobble,
                "frac_reward_zero_std": 0.3 + 0.05 * wobble,
                "dynamic_sampling/kept_group_frac": 0.7 + 0.05 * wobble,
                "dynamic_sampling/all_max_frac": 0.1,
                "dynamic_sampling/all_min_frac": 0.2,
                "completions/clipped_ratio": 0.02,
                "completions/mean_length": 40.0,
                "learning_rate": 1e-6,
            }
        )
    return out


def test_healthy_run_stays_quiet(caplog):
    monitor = HealthMonitor()
    with caplog.at_level(logging.WARNING, logger="trl_ext.diagnostics.health"):
        metrics = run(monitor, healthy_stream())
    assert monitor.events == [] and caplog.records == []
    # Every condition was evaluated (its flag logged, 0.0) once the warm-up / window allowed it.
    # every check ran (the over-optimization check needs a learned reward: off here)
    assert {f"health/{name}" for name in CONDITIONS if name != "reward_overoptimized"} <= set(metrics[-1])
    assert all(value == 0.0 for m in metrics for key, value in m.items() if not key.endswith("_ratio"))


def test_kl_spike_against_running_level():
    # Warm-up level = mean(0.01, 0.01, 0.01) = 0.01. Log 5: 0.05 / 0.01 = 5x -> fires; EMA (decay 0.8) -> 0.018.
    # Log 6: 0.08 / 0.018 = 4.44x, still active (same episode); EMA -> 0.0304. Log 7: 0.05 / 0.0304 -> clears.
    # EMA -> 0.03432, then 0.029456 after log 8; log 9: 0.2 / 0.029456 = 6.8x -> a second episode.
    stream = [{"kl": v} for v in (0.01, 0.01, 0.01, 0.01, 0.05, 0.08, 0.05, 0.01, 0.2)]
    monitor = HealthMonitor()
    metrics = run(monitor, stream, args=SimpleNamespace(beta=0.04, learning_rate=1e-6))
    assert "health/kl_spike" not in metrics[2]  # still warming up
    assert [m["health/kl_spike"] for m in metrics[3:]] == [0.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    assert metrics[4]["health/kl_ratio"] == pytest.approx(5.0)
    assert metrics[5]["health/kl_ratio"] == pytest.approx(0.08 / 0.018)
    assert metrics[6]["health/kl_ratio"] == pytest.approx(0.05 / 0.0304)
    assert metrics[8]["health/kl_ratio"] == pytest.approx(0.2 / 0.029456)
    assert [(e.step, e.condition) for e in monitor.events] == [(5, "kl_spike"), (9, "kl_spike")]
    assert "5.0x" in monitor.events[0].message and "beta (now 0.04)" in monitor.events[0].message
    assert "learning_rate (now 1e-06)" in monitor.events[0].message


def test_kl_spike_ignores_tiny_kl():
    # 20x the running level, but the level counts as at least kl_min = 0.01: 0.02 / 0.01 = 2x.
    stream = [{"kl": v} for v in (1e-3, 1e-3, 1e-3, 0.02)]
    monitor = HealthMonitor()
    metrics = run(monitor, stream)
    assert metrics[-1]["health/kl_spike"] == 0.0 and metrics[-1]["health/kl_ratio"] == pytest.approx(2.0)
    assert monitor.events == []


def test_entropy_collapse_relative_to_start():
    stream = [{"entropy": v} for v in (1.2, 1.0, 0.8, 0.5, 0.25, 0.2, 0.5)]  # start = mean(1.2, 1.0, 0.8) = 1.0
    monitor = HealthMonitor()
    metrics = run(monitor, stream, args=SimpleNamespace(epsilon_high=0.2, entropy_coef=0.0))
    assert [m["health/entropy_collapse"] for m in metrics[3:]] == [0.0, 1.0, 1.0, 0.0]
    assert metrics[4]["health/entropy_ratio"] == pytest.approx(0.25)
    (event,) = monitor.events
    assert event.step == 5 and "epsilon_high (now 0.2)" in event.message and "entropy_coef" in event.message


def test_entropy_floor():
    monitor = HealthMonitor(HealthThresholds(entropy_floor=0.1, warmup_logs=1))
    metrics = run(monitor, [{"entropy": 0.12}, {"entropy": 0.09}])  # ratio 0.75: only the floor fires
    assert metrics[1]["health/entropy_collapse"] == 1.0


def test_clip_fraction_must_stay_high():
    values = (0.05, 0.3, 0.3, 0.05, 0.3, 0.3, 0.3, 0.3)  # patience 3: fires on the third high log in a row
    stream = [
        {"clip_ratio/region_mean": v, "clip_ratio/low_mean": v / 3, "clip_ratio/high_mean": 2 * v / 3} for v in values
    ]
    monitor = HealthMonitor()
    metrics = run(monitor, stream, args=SimpleNamespace(learning_rate=1e-6, num_iterations=4))
    assert [m["health/clip_high"] for m in metrics] == [0, 0, 0, 0, 0, 0, 1, 1]
    (event,) = monitor.events
    assert event.step == 7 and "30.0% of tokens clipped (low 10.0%, high 20.0%)" in event.message
    assert "num_iterations (now 4)" in event.message


def test_kept_groups_low_with_dynamic_sampling_split():
    too_easy = {
        "dynamic_sampling/kept_group_frac": 0.1,
        "dynamic_sampling/rounds": 3.0,
        "dynamic_sampling/all_max_frac": 0.8,
        "dynamic_sampling/all_min_frac": 0.1,
    }
    monitor = HealthMonitor()
    metrics = run(monitor, [too_easy, too_easy])
    assert [m["health/kept_groups_low"] for m in metrics] == [0.0, 1.0]
    message = monitor.events[0].message
    assert (
        "only 10% of groups" in message
        and "about 10.0 groups per trained group" in message
        and "in 3 generation round(s)" in message
        and "too easy" in message
    )

    too_hard = {**too_easy, "dynamic_sampling/all_max_frac": 0.1, "dynamic_sampling/all_min_frac": 0.8}
    monitor = HealthMonitor()
    run(monitor, [too_hard, too_hard], args=SimpleNamespace(num_generations=8))
    assert "too hard" in monitor.events[0].message and "num_generations (now 8)" in monitor.events[0].message


def test_kept_groups_falls_back_to_trl_zero_std_metric():
    monitor = HealthMonitor(HealthThresholds(kept_patience=1))
    metrics = run(monitor, [{"frac_reward_zero_std": 0.5}, {"frac_reward_zero_std": 0.8}])  # kept 0.5, then 0.2
    assert [m["health/kept_groups_low"] for m in metrics] == [0.0, 1.0]
    assert (
        "only 20% of groups" in monitor.events[0].message
        and "5.0 groups per trained group" in monitor.events[0].message
    )


def test_truncation_grows():
    stream = [{"completions/clipped_ratio": v, "completions/mean_length": 250.0} for v in (0.05, 0.3, 0.3, 0.3)]
    monitor = HealthMonitor()
    metrics = run(monitor, stream, args=SimpleNamespace(max_completion_length=256))
    assert [m["health/truncation_high"] for m in metrics] == [0.0, 0.0, 1.0, 1.0]
    (event,) = monitor.events
    assert "30% of completions were truncated" in event.message
    assert "max_completion_length (now 256)" in event.message and "overlong" in event.message


def test_reward_stall_while_loss_moves():
    th = HealthThresholds(stall_window=5)
    flat = [{"reward": 0.5, "loss": (-1) ** i * 0.1} for i in range(6)]
    monitor = HealthMonitor(th)
    metrics = run(monitor, flat)
    assert "health/reward_stall" not in metrics[3]  # window not full yet
    assert [m["health/reward_stall"] for m in metrics[4:]] == [1.0, 1.0]
    assert "changed by +0.0000 over the last 5 logs" in monitor.events[0].message

    # Rewards 0.1, 0.2, ..., 0.5: least-squares slope 0.1, rise 0.4 over the window -> healthy.
    rising = [{"reward": 0.1 * (i + 1), "loss": (-1) ** i * 0.1} for i in range(5)]
    assert run(HealthMonitor(th), rising)[-1]["health/reward_stall"] == 0.0
    # Flat reward but a frozen loss: nothing is being optimised, not a stall of training.
    frozen = [{"reward": 0.5, "loss": 0.0} for _ in range(5)]
    assert run(HealthMonitor(th), frozen)[-1]["health/reward_stall"] == 0.0
    # At the ceiling a flat reward is expected.
    ceiling = HealthThresholds(stall_window=5, reward_ceiling=0.5)
    assert run(HealthMonitor(ceiling), flat)[-1]["health/reward_stall"] == 0.0


def test_warning_printed_once_per_episode(caplog):
    high, low = {"completions/clipped_ratio": 0.5}, {"completions/clipped_ratio": 0.0}
    monitor = HealthMonitor(HealthThresholds(truncated_patience=1))
    with caplog.at_level(logging.WARNING, logger="trl_ext.diagnostics.health"):
        run(monitor, [high, high, high, low, high, high])
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "[trl-ext health] step 1, truncation_high",
        "[trl-ext health] step 5, truncation_high",
    ]
    assert len(monitor.events) == 2 and monitor.active == {"truncation_high"}


def test_non_finite_stops_without_saving_by_default():
    monitor = HealthMonitor()
    state, control = TrainerState(), TrainerControl()
    state.global_step = 12
    logs = {"loss": 0.3, "grad_norm": float("nan"), "learning_rate": 1e-6}
    state.log_history.append({**logs, "step": 12})
    control = monitor.on_log(SimpleNamespace(learning_rate=1e-6, max_grad_norm=1.0), state, control, logs=logs)
    assert control.should_training_stop and not control.should_save  # no possibly-poisoned newest checkpoint
    assert logs["health/non_finite"] == 1.0 and state.log_history[-1]["health/non_finite"] == 1.0
    (event,) = monitor.events
    assert event.fatal and "grad_norm=nan" in event.message and "learning_rate (now 1e-06)" in event.message

    warn_only = HealthMonitor(HealthThresholds(stop_on_non_finite=False))
    control = warn_only.on_log(None, state, TrainerControl(), logs={"loss": float("inf")})
    assert not control.should_save and not control.should_training_stop and warn_only.fatal


def test_thresholds_validate_with_field_names():
    with pytest.raises(ValueError, match="kl_spike_ratio=0.5"):
        HealthThresholds(kl_spike_ratio=0.5)
    with pytest.raises(ValueError, match="stall_window"):
        HealthThresholds(stall_window=1)


class _NaNAfter(torch.nn.Module):
    """A one-parameter model whose loss turns NaN from the ``bad_call``-th forward on."""

    def __init__(self, bad_call: int):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))
        self.calls, self.bad_call = 0, bad_call

    def forward(self, x, labels=None):
        self.calls += 1
        loss = ((self.w * x).sum(-1) - 1.0).pow(2).mean()
        return {"loss": loss * float("nan") if self.calls >= self.bad_call else loss}


def test_trainer_stops_and_saves_on_nan(tmp_path):
    from transformers import Trainer, TrainingArguments

    data = [{"x": torch.tensor([1.0, 2.0])} for _ in range(64)]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=10,
        per_device_train_batch_size=2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    monitor = HealthMonitor(HealthThresholds(save_on_non_finite=True))  # opt-in post-mortem checkpoint
    trainer = Trainer(model=_NaNAfter(bad_call=4), args=args, train_dataset=data, callbacks=[monitor])
    monitor.attach(trainer)  # moves it first, once
    assert [cb for cb in trainer.callback_handler.callbacks if cb is monitor] == [monitor]
    assert trainer.callback_handler.callbacks[0] is monitor
    trainer.train()
    # The 4th step's loss is NaN: transformers' logging_nan_inf_filter hides it from `loss`, grad_norm shows it.
    assert trainer.state.global_step == 4
    assert os.path.isdir(tmp_path / "checkpoint-4")
    flagged = [h for h in trainer.state.log_history if h.get("health/non_finite") == 1.0]
    assert [h["step"] for h in flagged] == [4] and math.isnan(flagged[0]["grad_norm"])
    assert [e.condition for e in monitor.events] == ["non_finite"]


@pytest.mark.slow
def test_grpo_metric_names_and_tensorboard_see_health_flags(tmp_path, monkeypatch):
    """TRL 1.12's GRPOTrainer must log the names the monitor reads (this fails loudly if TRL renames them), and
    attach() must put the health flags into what TensorBoard writes."""
    pytest.importorskip("tensorboard")
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from trl import GRPOConfig, GRPOTrainer

    from trl_ext.demo import build_model, build_tokenizer, make_problems
    from trl_ext.rewards import arithmetic_reward

    tokenizer = build_tokenizer()
    train, _ = make_problems()
    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=4,
        beta=0.04,
        logging_steps=1,
        save_strategy="no",
        report_to=["tensorboard"],
        use_cpu=True,
        bf16=False,
        disable_tqdm=True,
        seed=0,
    )
    model_dir = str(tmp_path / "model")  # with beta > 0 TRL loads the reference model from the model's path
    build_model(tokenizer).save_pretrained(model_dir)
    trainer = GRPOTrainer(
        model=model_dir,
        reward_funcs=arithmetic_reward,
        args=args,
        train_dataset=train.select(range(16)),
        processing_class=tokenizer,
    )
    monitor = HealthMonitor().attach(trainer)
    assert trainer.callback_handler.callbacks[0] is monitor
    trainer.train()

    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2
    for key in (
        "loss",
        "grad_norm",
        "kl",
        "entropy",
        "reward",
        "clip_ratio/region_mean",
        "clip_ratio/low_mean",
        "clip_ratio/high_mean",
        "completions/clipped_ratio",
        "completions/mean_length",
        "frac_reward_zero_std",
    ):
        assert key in logged[0], f"TRL no longer logs {key!r}: update trl_ext/diagnostics/health.py"
    for key in ("health/non_finite", "health/clip_high", "health/kept_groups_low", "health/truncation_high"):
        assert key in logged[0]

    event_files = [os.path.join(root, f) for root, _, files in os.walk(tmp_path / "tb") for f in files]
    assert event_files
    tags = set()
    for path in event_files:
        accumulator = EventAccumulator(path)
        accumulator.Reload()
        tags |= set(accumulator.Tags()["scalars"])
    assert {"train/health/non_finite", "train/health/truncation_high"} <= tags, sorted(tags)


def test_reward_stall_quiet_on_a_healthy_run_logged_every_step():
    # per-step rewards of a run that learns (+0.001 per step) with the noise of a single batch (std 0.08)
    generator = torch.Generator().manual_seed(0)
    noise = torch.randn(600, generator=generator) * 0.08
    stream = [{"reward": 0.3 + 0.001 * i + noise[i].item(), "loss": 0.05 * math.sin(i)} for i in range(600)]
    monitor = HealthMonitor()
    metrics = run(monitor, stream, args=SimpleNamespace(logging_steps=1))
    assert [e.condition for e in monitor.events] == []
    assert metrics[-1]["health/reward_stall"] == 0.0  # evaluated (the window spans 200 steps), and quiet
    # the same run logged every 10 steps (means of 10 steps) keeps the 20-log window
    assert "health/reward_stall" not in run(HealthMonitor(), stream[:19], args=SimpleNamespace(logging_steps=10))[-1]
    # a stalled run logged every step still warns
    flat = [{"reward": 0.5 + noise[i].item() * 0.01, "loss": 0.05 * math.sin(i)} for i in range(300)]
    stalled = HealthMonitor()
    run(stalled, flat, args=SimpleNamespace(logging_steps=1))
    assert [e.condition for e in stalled.events] == ["reward_stall"]


class _InjectReward(TrainerCallback):
    """Puts a deterministic 'reward' and 'kl' into each log, before the monitor reads it."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None and "loss" in logs:
            logs["reward"] = 0.1 * state.global_step
            logs["kl"] = 0.001 * state.global_step
            logs["entropy"] = 1.0 - 0.01 * state.global_step


def test_running_levels_are_saved_in_checkpoints_and_restored_on_resume(tmp_path):
    from transformers import Trainer, TrainingArguments

    data = [{"x": torch.tensor([1.0, 2.0])} for _ in range(64)]

    def trainer_for(output_dir, monitor):
        args = TrainingArguments(
            output_dir=str(output_dir), max_steps=6, per_device_train_batch_size=2, logging_steps=1,
            save_strategy="steps", save_steps=3, report_to="none", use_cpu=True, disable_tqdm=True,
            learning_rate=1e-3,
        )  # fmt: skip
        thresholds = HealthThresholds(stall_window=4, stall_steps=0, print_warnings=False)
        model = _NaNAfter(bad_call=10**9)
        return Trainer(model=model, args=args, train_dataset=data, callbacks=[_InjectReward(), monitor(thresholds)])

    full_monitor = []
    full = trainer_for(tmp_path / "full", lambda th: full_monitor.append(HealthMonitor(th)) or full_monitor[-1])
    full.train()
    import json

    saved = json.loads((tmp_path / "full" / "checkpoint-3" / "trainer_state.json").read_text())
    levels = saved["stateful_callbacks"]["HealthMonitor"]["attributes"]["levels"]
    assert [r for r, _ in levels["_window"]] == pytest.approx([0.1, 0.2, 0.3])
    assert levels["_kl_count"] == 3 and levels["_entropy_start"] == pytest.approx([0.99, 0.98, 0.97])

    resumed_monitor = []
    resumed = trainer_for(
        tmp_path / "full", lambda th: resumed_monitor.append(HealthMonitor(th)) or resumed_monitor[-1]
    )
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-3"))
    a, b = full_monitor[0], resumed_monitor[0]
    assert len(b._window) == 4 and [r for r, _ in b._window] == pytest.approx([r for r, _ in a._window])
    assert [x for _, x in b._window] == pytest.approx([x for _, x in a._window])  # two steps from before the resume
    assert (b._kl_level, b._kl_count, b._entropy_start) == (pytest.approx(a._kl_level), a._kl_count, a._entropy_start)


def test_warnings_by_kind_count_episodes_with_the_first_step_and_advice():
    """Two reward-stall episodes and one truncation episode: one entry per kind, in the order they first fired."""
    th = HealthThresholds(stall_window=5, stall_steps=0, truncated_patience=1, print_warnings=False)
    flat = {"reward": 0.5, "completions/clipped_ratio": 0.0}
    stream = [{**flat, "loss": (-1) ** i * 0.1} for i in range(6)]  # stalls from the 5th log
    stream[5]["completions/clipped_ratio"] = 0.5  # truncation at the 6th
    stream += [{"reward": 0.1 * i, "loss": 0.1} for i in range(5)]  # rising: the stall episode ends
    stream += [{"reward": 0.4, "loss": (-1) ** i * 0.1} for i in range(5)]  # flat again: a second episode
    monitor = HealthMonitor(th)
    run(monitor, stream)
    stalls = [e.step for e in monitor.events if e.condition == "reward_stall"]
    assert len(stalls) == 2 and stalls[0] == 5
    grouped = monitor.warnings_by_kind()
    assert [(w["kind"], w["count"], w["step"], w["fatal"]) for w in grouped] == [
        ("reward_stall", 2, 5, False),
        ("truncation_high", 1, 6, False),
    ]
    assert grouped[0]["message"] == monitor.events[0].message
    assert "Check a sample of completions" in grouped[0]["message"]


def test_warnings_are_kept_in_checkpoints_and_the_end_summary_can_be_left_to_the_caller(caplog):
    high = {"completions/clipped_ratio": 0.5}
    monitor = HealthMonitor(HealthThresholds(truncated_patience=1, print_warnings=True), summary_at_end=False)
    with caplog.at_level(logging.WARNING, logger="trl_ext.diagnostics.health"):
        run(monitor, [high])
        state = TrainerState()
        state.is_world_process_zero = True
        monitor.on_train_end(None, state, TrainerControl())
    assert len(caplog.records) == 1  # the warning itself, no end-of-training list
    resumed = HealthMonitor(monitor.thresholds)
    resumed.load_levels(monitor.state()["attributes"]["levels"])
    assert resumed.events == monitor.events and resumed.warnings_by_kind()[0]["kind"] == "truncation_high"
    resumed.load_levels({})  # a checkpoint written before events were saved
    assert resumed.events == []
