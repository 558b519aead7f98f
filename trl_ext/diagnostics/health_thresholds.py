"""When the training-health checks speak: :class:`HealthThresholds`, validated at construction."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl_ext.diagnostics import option


@dataclass
class HealthThresholds:
    """When the monitor speaks; each field's help says what it sets, each check's method what it means.

    ``ema_decay`` 0.8 follows the early, quadratic-like growth of KL closely enough not to call it a spike, and still
    remembers the last few logs; ``kl_min`` keeps near-zero KL early in training from firing. ``is_ratio_tolerance``
    and ``logp_gap_max``: a same-weights bf16 engine typically stays within a few hundredths of a nat. The
    over-optimization defaults are above the noise of greedy accuracy on a few hundred problems (standard error about
    0.03).
    """

    warmup_logs: int = option(3, "Logs that set the running levels before checks fire.")
    ema_decay: float = option(0.8, "Decay of the KL running level (EMA).")
    kl_spike_ratio: float = option(3.0, "KL spike: kl > this x its running level.")
    kl_min: float = option(0.01, "KL spike: the running level counts as at least this.")
    entropy_collapse_ratio: float = option(0.3, "Entropy collapse: entropy < this x its starting level.")
    entropy_floor: float | None = option(None, "Entropy collapse: or entropy below this (nats); None = off.")
    clip_frac_max: float = option(0.2, "Clip fraction considered high.")
    clip_patience: int = option(3, "Logs in a row the clip fraction must stay high.")
    kept_frac_min: float = option(0.25, "Kept-group fraction considered low.")
    kept_patience: int = option(2, "Logs in a row the kept fraction must stay low.")
    truncated_frac_max: float = option(0.1, "Truncated fraction considered high.")
    truncated_patience: int = option(2, "Logs in a row truncation must stay high.")
    stall_window: int = option(20, "Logs over which the reward trend is measured.")
    stall_steps: int = option(
        200, "Training steps the reward-trend window spans at least (when logging_steps is known)."
    )
    reward_stall_delta: float = option(0.01, "Minimum reward rise over the window.")
    loss_move_delta: float = option(1e-3, "Loss range over the window that counts as moving.")
    reward_ceiling: float | None = option(None, "No stall warning when the mean reward is at or above this.")
    is_ratio_tolerance: float = option(0.1, "Sampling mismatch: |mean importance ratio - 1| above this.")
    logp_gap_max: float = option(0.1, "Sampling mismatch: mean per-token |log p_trainer - log p_vLLM| above this.")
    sampling_patience: int = option(2, "Logs in a row the mismatch must persist.")
    proxy_metrics: list[str] | None = option(
        None, "Logged keys of learned rewards (over-optimization check); None = off."
    )
    gold_metrics: list[str] = field(
        default_factory=lambda: ["held_out/accuracy"],
        metadata={"help": "Logged keys of the gold figure a learned reward stands in for."},
    )
    overopt_window: int = option(6, "Gold values over which the trends are measured.")
    overopt_gold_drop: float = option(0.05, "Fall of the gold figure over the window that counts as falling.")
    non_finite_keys: list[str] = field(
        default_factory=lambda: ["loss", "grad_norm", "kl", "entropy", "reward"],
        metadata={"help": "Metrics that must stay finite."},
    )
    stop_on_non_finite: bool = option(True, "Stop training on a non-finite metric.")
    save_on_non_finite: bool = option(
        False,
        "Also save a checkpoint when stopping on a non-finite metric (for post-mortems). Off by default: "
        "that checkpoint may already hold non-finite weights and would become the newest one, which "
        "resume_from_checkpoint=True picks; the checkpoints written before it are kept either way.",
    )
    print_warnings: bool = option(True, "Log the warnings (metrics are always added).")

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, rule: str) -> None:
            if not ok:
                raise ValueError(f"HealthThresholds.{name}={getattr(self, name)!r}: {rule}.")

        need(self.warmup_logs >= 1, "warmup_logs", "pass 1 or more (e.g. 3)")
        need(0.0 <= self.ema_decay < 1.0, "ema_decay", "pass a value in [0, 1) (e.g. 0.9)")
        need(self.kl_spike_ratio > 1.0, "kl_spike_ratio", "pass a ratio above 1 (e.g. 3.0)")
        need(self.kl_min > 0.0, "kl_min", "pass a positive floor (e.g. 0.01)")
        need(0.0 < self.entropy_collapse_ratio < 1.0, "entropy_collapse_ratio", "pass a fraction in (0, 1) (e.g. 0.3)")
        need(self.entropy_floor is None or self.entropy_floor >= 0, "entropy_floor", "pass None or a value >= 0")
        for name in ("clip_frac_max", "kept_frac_min", "truncated_frac_max"):
            need(0.0 <= getattr(self, name) <= 1.0, name, "pass a fraction in [0, 1]")
        need(self.is_ratio_tolerance > 0, "is_ratio_tolerance", "pass a positive tolerance (e.g. 0.1)")
        need(self.logp_gap_max > 0, "logp_gap_max", "pass a positive gap in nats (e.g. 0.1)")
        for name in ("clip_patience", "kept_patience", "truncated_patience", "sampling_patience"):
            need(getattr(self, name) >= 1, name, "pass 1 or more")
        need(self.stall_window >= 3, "stall_window", "pass 3 or more logs (e.g. 20)")
        need(self.stall_steps >= 0, "stall_steps", "pass 0 or more steps (e.g. 200)")
        need(self.reward_stall_delta >= 0, "reward_stall_delta", "pass 0 or more")
        need(self.loss_move_delta >= 0, "loss_move_delta", "pass 0 or more")
        need(self.overopt_window >= 3, "overopt_window", "pass 3 or more values (e.g. 6)")
        need(self.overopt_gold_drop >= 0, "overopt_gold_drop", "pass 0 or more")
