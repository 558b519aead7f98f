"""Training-health monitor: plain-words warnings, with the suggested fix, while an RL run can still be saved.

:class:`HealthMonitor` is a ``transformers.TrainerCallback``: it works with any TRL trainer (and any ``Trainer``)
and reads only the metrics the trainer logs. At every log it checks:

- ``non_finite`` (fatal): ``loss``, ``grad_norm``, ``kl``, ``entropy`` or ``reward`` is NaN/inf. Optionally stops
  with a checkpoint. Action: lower the learning rate, keep gradient clipping on, check precision and rewards.
- ``kl_spike``: ``kl`` > ``kl_spike_ratio`` x its running level (an EMA, counted as at least ``kl_min``). Action:
  raise ``beta`` or lower the learning rate.
- ``entropy_collapse``: ``entropy`` < ``entropy_collapse_ratio`` x its starting level (or < ``entropy_floor``).
  Action: clip-higher (``epsilon_high``), an entropy bonus (``entropy_coef``).
- ``clip_high``: ``clip_ratio/region_mean`` > ``clip_frac_max`` for ``clip_patience`` logs in a row. Action: lower
  the learning rate, fewer updates per generation (more on-policy).
- ``kept_groups_low``: ``dynamic_sampling/kept_group_frac`` (else ``1 - frac_reward_zero_std``) < ``kept_frac_min``
  for ``kept_patience`` logs. Action: a curriculum / filtering prompts, larger groups.
- ``truncation_high``: ``completions/clipped_ratio`` > ``truncated_frac_max`` for ``truncated_patience`` logs.
  Action: a longer ``max_completion_length``, overlong shaping or masking.
- ``reward_stall``: over the last ``stall_window`` logs the least-squares rise of ``reward`` is below
  ``reward_stall_delta`` while ``loss`` spanned more than ``loss_move_delta``. Action: check the rewards against
  sampled completions, the data's difficulty, the learning rate and the group size.

- ``sampling_mismatch``: vLLM's importance-sampling correction (TRL's ``sampling/*`` metrics, which nothing else reads)
  says the engine's and the trainer's token log-probs disagree: ``sampling/importance_sampling_ratio/mean`` is more
  than ``is_ratio_tolerance`` from 1, or ``sampling/sampling_logp_difference/mean`` exceeds ``logp_gap_max`` nats, for
  ``sampling_patience`` logs. Causes: truncated sampling (top-p < 1, top-k, min-p: the correction is biased, TRL issue
  #6789), a precision mismatch between engine and trainer, ``--logprobs-mode`` other than ``processed_logprobs``,
  weights that did not reach the engine, or (``async_generation``) a policy that moves too far in one step.

- ``reward_overoptimized``: a learned reward (``proxy_metrics``, e.g. ``rewards/<reward model>/mean``) rises while a
  gold figure (``gold_metrics``: ``held_out/accuracy``, or a rule reward's ``rewards/<name>/mean``) falls by more
  than ``overopt_gold_drop`` over its last ``overopt_window`` values (least-squares rise; the proxy over the same
  steps): the policy games the reward model (Gao et al. 2022, arXiv 2210.10760). Action: stop at the best
  checkpoint, raise ``beta``, retrain the reward model on the policy's own samples, or mix in a rule reward.

A check whose metric is absent from a log (e.g. ``kl`` with ``beta=0``) is skipped for that log.

**Once per episode.** A condition warns when it becomes active and then stays quiet until it has cleared and comes
back; the warning is logged with the ``logging`` module (logger ``trl_ext.diagnostics.health``) on the main process only.

**As metrics.** Every log gains ``health/<condition>`` = 1.0 (active) or 0.0 for each condition evaluated, plus
``health/kl_ratio`` and ``health/entropy_ratio`` (the quantities behind the two relative thresholds). The monitor
adds them to the ``logs`` dict it receives and to the matching ``state.log_history`` entry. Reporting callbacks
(TensorBoard, W&B, ...) see them only if they run *after* the monitor, but ``Trainer`` registers its reporting
callbacks *before* those passed in ``callbacks=[...]``. :meth:`HealthMonitor.attach` therefore puts the monitor
first in the trainer's callback list; a monitor passed only through ``callbacks=[...]`` still warns, stops and
writes ``log_history``, but dashboards then miss the ``health/*`` series.

**Fatal condition.** ``transformers`` hides a non-finite ``loss`` from the logs by default
(``logging_nan_inf_filter=True`` replaces it by the running average), but ``grad_norm`` and TRL's metrics still show
it. On a non-finite value the monitor sets ``control.should_training_stop`` (when ``stop_on_non_finite``) and, only
with ``save_on_non_finite``, ``control.should_save``: a checkpoint written then may already hold non-finite weights
and would be the newest, which ``resume_from_checkpoint=True`` picks, so by default the run stops without saving and
the checkpoints written before are kept. The check runs per log, so use ``logging_steps=1`` to stop at the first bad
step.

**Resume.** The running levels (the KL EMA, the starting entropy, the reward window, the streaks and the active
episodes) are saved in every checkpoint (the monitor is a ``transformers`` ``ExportableState``: they go into
``trainer_state.json`` under ``stateful_callbacks["HealthMonitor"]``) and restored at the start of a resumed run, so
a resumed run warns exactly as the uninterrupted one would; so are the warnings given (``events``), so that a
resumed run's summary lists those of the whole run.

**Reward-stall window.** The trend is measured over at least ``stall_window`` logs and, when the trainer's
``logging_steps`` is known, at least ``stall_steps`` training steps (200 logs at ``logging_steps=1``): a per-step
reward is noisy, and 20 single-step logs of a healthy run often show no least-squares rise.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_callback import ExportableState

from trl_ext.grpo.async_rollout import truncated_sampling

logger = logging.getLogger(__name__)

CONDITIONS = (
    "non_finite",
    "kl_spike",
    "entropy_collapse",
    "clip_high",
    "kept_groups_low",
    "truncation_high",
    "reward_stall",
    "reward_overoptimized",
)
#: Checks that read only what vLLM's importance-sampling correction logs (absent from other runs' logs).
VLLM_CONDITIONS = ("sampling_mismatch",)


@dataclass
class HealthThresholds:
    """When the monitor speaks. Every threshold is explained with its check in :mod:`trl_ext.diagnostics.health`.

    Running levels:
        warmup_logs: logs used to establish the KL running level and the starting entropy before the relative
            checks may fire.
        ema_decay: decay of the KL running level (exponential moving average) after the warm-up. 0.8 follows the
            early, quadratic-like growth of KL closely enough not to call it a spike, and still remembers the last
            few logs.
    KL and entropy:
        kl_spike_ratio, kl_min: ``kl_spike`` when ``kl > kl_spike_ratio * max(running level, kl_min)``. The floor
            keeps ratios of near-zero KL early in training from firing: with the defaults a spike is at least 0.03
            nats per token.
        entropy_collapse_ratio, entropy_floor: ``entropy_collapse`` when the entropy falls below this fraction of
            its starting level, or below the absolute ``entropy_floor`` (nats; ``None``: off).
    Sustained conditions (each must hold ``*_patience`` logs in a row):
        clip_frac_max, clip_patience: fraction of clipped tokens (``clip_ratio/region_mean``).
        kept_frac_min, kept_patience: fraction of groups with a learning signal.
        truncated_frac_max, truncated_patience: fraction of completions cut at ``max_completion_length``.
    Reward stall:
        stall_window, stall_steps, reward_stall_delta, loss_move_delta, reward_ceiling: ``reward_stall`` when,
            over the last ``max(stall_window, stall_steps / logging_steps)`` logs, the least-squares rise of ``reward`` is below ``reward_stall_delta`` while
            ``loss`` spanned more than ``loss_move_delta``; never when the mean reward is at or above
            ``reward_ceiling`` (``None``: no ceiling).
    Engine / trainer mismatch (vLLM's importance-sampling correction):
        is_ratio_tolerance, logp_gap_max, sampling_patience: ``sampling_mismatch`` when the mean importance ratio is
            more than ``is_ratio_tolerance`` from 1 or the mean per-token log-prob gap exceeds ``logp_gap_max`` nats,
            ``sampling_patience`` logs in a row. A same-weights bf16 engine typically stays within a few hundredths
            of a nat; 0.1 nats per token is a ratio of about 1.1 on every token.
    Reward over-optimization:
        proxy_metrics, gold_metrics, overopt_window, overopt_gold_drop: ``reward_overoptimized`` when the first
            present ``proxy_metrics`` key rises while the first present ``gold_metrics`` key falls by more than
            ``overopt_gold_drop`` over its last ``overopt_window`` values. ``proxy_metrics=None``: off (the recipes
            set it when a reward function is a reward model). The defaults (6 values, a fall of 0.05) are above the
            noise of greedy accuracy on a few hundred problems (standard error about 0.03): watched as if its rule
            reward were learned, the demo's 1000-step DAPO run never triggers them, while 4 values and 0.02 fire
            five times on it.
    Fatal:
        non_finite_keys, stop_on_non_finite: which metrics must stay finite, and whether a non-finite one stops
            training with a checkpoint (otherwise it only warns).
    Output:
        print_warnings: log the warnings (the ``health/*`` metrics are always added).
    """

    warmup_logs: int = field(default=3, metadata={"help": "Logs that set the running levels before checks fire."})
    ema_decay: float = field(default=0.8, metadata={"help": "Decay of the KL running level (EMA)."})
    kl_spike_ratio: float = field(default=3.0, metadata={"help": "KL spike: kl > this x its running level."})
    kl_min: float = field(default=0.01, metadata={"help": "KL spike: the running level counts as at least this."})
    entropy_collapse_ratio: float = field(
        default=0.3, metadata={"help": "Entropy collapse: entropy < this x its starting level."}
    )
    entropy_floor: float | None = field(
        default=None, metadata={"help": "Entropy collapse: or entropy below this (nats); None = off."}
    )
    clip_frac_max: float = field(default=0.2, metadata={"help": "Clip fraction considered high."})
    clip_patience: int = field(default=3, metadata={"help": "Logs in a row the clip fraction must stay high."})
    kept_frac_min: float = field(default=0.25, metadata={"help": "Kept-group fraction considered low."})
    kept_patience: int = field(default=2, metadata={"help": "Logs in a row the kept fraction must stay low."})
    truncated_frac_max: float = field(default=0.1, metadata={"help": "Truncated fraction considered high."})
    truncated_patience: int = field(default=2, metadata={"help": "Logs in a row truncation must stay high."})
    stall_window: int = field(default=20, metadata={"help": "Logs over which the reward trend is measured."})
    stall_steps: int = field(
        default=200,
        metadata={"help": "Training steps the reward-trend window spans at least (when logging_steps is known)."},
    )
    reward_stall_delta: float = field(default=0.01, metadata={"help": "Minimum reward rise over the window."})
    loss_move_delta: float = field(
        default=1e-3, metadata={"help": "Loss range over the window that counts as moving."}
    )
    reward_ceiling: float | None = field(
        default=None, metadata={"help": "No stall warning when the mean reward is at or above this."}
    )
    is_ratio_tolerance: float = field(
        default=0.1, metadata={"help": "Sampling mismatch: |mean importance ratio - 1| above this."}
    )
    logp_gap_max: float = field(
        default=0.1, metadata={"help": "Sampling mismatch: mean per-token |log p_trainer - log p_vLLM| above this."}
    )
    sampling_patience: int = field(default=2, metadata={"help": "Logs in a row the mismatch must persist."})
    proxy_metrics: list[str] | None = field(
        default=None, metadata={"help": "Logged keys of learned rewards (over-optimization check); None = off."}
    )
    gold_metrics: list[str] = field(
        default_factory=lambda: ["held_out/accuracy"],
        metadata={"help": "Logged keys of the gold figure a learned reward stands in for."},
    )
    overopt_window: int = field(default=6, metadata={"help": "Gold values over which the trends are measured."})
    overopt_gold_drop: float = field(
        default=0.05, metadata={"help": "Fall of the gold figure over the window that counts as falling."}
    )
    non_finite_keys: list[str] = field(
        default_factory=lambda: ["loss", "grad_norm", "kl", "entropy", "reward"],
        metadata={"help": "Metrics that must stay finite."},
    )
    stop_on_non_finite: bool = field(default=True, metadata={"help": "Stop training on a non-finite metric."})
    save_on_non_finite: bool = field(
        default=False,
        metadata={
            "help": "Also save a checkpoint when stopping on a non-finite metric (for post-mortems). Off by default: "
            "that checkpoint may already hold non-finite weights and would become the newest one, which "
            "resume_from_checkpoint=True picks; the checkpoints written before it are kept either way."
        },
    )
    print_warnings: bool = field(default=True, metadata={"help": "Log the warnings (metrics are always added)."})

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


@dataclass
class HealthEvent:
    """One warning: the condition that became active, at which step, what was said, and whether it was fatal."""

    step: int
    condition: str
    message: str
    fatal: bool = False


def _value(logs: dict[str, Any], key: str) -> float | None:
    """A logged number as float, or None when absent or not numeric (TRL logs None for all-NaN metrics)."""
    value = logs.get(key)
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _rise(values: list[float]) -> float:
    """The least-squares slope of ``values`` (evenly spaced) times their span: how much they rose, robust to noise."""
    n = len(values)
    if n < 2:
        return 0.0
    x_mean, mean = (n - 1) / 2, sum(values) / n
    slope = sum((i - x_mean) * (v - mean) for i, v in enumerate(values)) / sum((i - x_mean) ** 2 for i in range(n))
    return slope * (n - 1)


def _hint(args: Any, name: str) -> str:
    """`` (now X)`` when the training arguments have this field, for messages that name a setting."""
    value = getattr(args, name, None) if args is not None else None
    return f" (now {value:g})" if isinstance(value, int | float) and not isinstance(value, bool) else ""


class HealthMonitor(TrainerCallback, ExportableState):
    """Watches logged metrics and warns, once per episode, with the suggested action (see :mod:`trl_ext.diagnostics.health`).

    ``check(logs, step)`` is the whole logic and needs no trainer; ``on_log`` calls it, writes the ``health/*``
    metrics into the logs and stops training on a fatal condition. ``events`` holds every warning given (kept in
    checkpoints, so a resumed run still has those of before the resume); :meth:`warnings_by_kind` groups them for a
    run's summary. ``summary_at_end=False`` leaves out the end-of-training list on stderr, for a caller that reports
    the warnings itself (the recipes' summary table and ``summary.json``).
    """

    def __init__(self, thresholds: HealthThresholds | dict | None = None, summary_at_end: bool = True):
        if isinstance(thresholds, dict):  # as saved in a checkpoint (``state()``)
            thresholds = HealthThresholds(**thresholds)
        self.thresholds = thresholds or HealthThresholds()
        self.summary_at_end = summary_at_end
        self.reset()

    def reset(self) -> None:
        """Forget running levels, streaks and episodes (called at the start of training)."""
        self.events: list[HealthEvent] = []
        self.active: set[str] = set()
        self._streak: dict[str, int] = dict.fromkeys(CONDITIONS + VLLM_CONDITIONS, 0)
        self._kl_level: float | None = None
        self._kl_count = 0
        self._entropy_start: list[float] = []
        self._window: deque[tuple[float, float]] = deque()
        self._proxy: list[list[float]] = []  # [step, value] of the learned reward, one per log
        self._gold: list[list[float]] = []  # [step, value] of the gold figure, one per log that has it

    _LEVELS = ("_streak", "_kl_level", "_kl_count", "_entropy_start", "_proxy", "_gold")

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps (``transformers.trainer_callback.ExportableState``): the thresholds as ``args`` and
        the running levels, streaks and active episodes as ``attributes``."""
        levels = {name: getattr(self, name) for name in self._LEVELS}
        levels["_window"] = [list(item) for item in self._window]
        levels["active"] = sorted(self.active)
        levels["events"] = [asdict(event) for event in self.events]
        return {"args": {"thresholds": asdict(self.thresholds)}, "attributes": {"levels": levels}}

    def load_levels(self, levels: dict[str, Any]) -> None:
        """Restore what ``state()`` saved (called at the start of a resumed run)."""
        for name in self._LEVELS:
            if name in levels:
                setattr(self, name, levels[name])
        self._window = deque(tuple(item) for item in levels.get("_window", []))
        self.active = set(levels.get("active", []))
        self.events = [HealthEvent(**event) for event in levels.get("events", [])]  # absent from older checkpoints

    @property
    def levels(self) -> dict[str, Any]:
        return self.state()["attributes"]["levels"]

    @levels.setter
    def levels(self, value: dict[str, Any]) -> None:  # transformers' restore_callback_states_from_checkpoint path
        self.load_levels(value)

    @property
    def fatal(self) -> bool:
        """Whether a fatal condition (non-finite metric) has been seen since the start of training."""
        return any(event.fatal for event in self.events)

    def attach(self, trainer: Any) -> HealthMonitor:
        """Register with ``trainer`` as its *first* callback, so that the reporting callbacks (TensorBoard, W&B),
        which ``Trainer`` registers before user callbacks, see the ``health/*`` metrics of the same log."""
        callbacks = trainer.callback_handler.callbacks
        callbacks[:] = [cb for cb in callbacks if cb is not self]
        callbacks.insert(0, self)
        return self

    # ------------------------------------------------------------------------------------------------ the checks

    def _non_finite(self, logs: dict[str, Any], args: Any) -> tuple[bool | None, str]:
        """Divergence: a watched metric is NaN or inf. Nothing later in the run can be trusted."""
        seen = {key: _value(logs, key) for key in self.thresholds.non_finite_keys}
        seen = {key: value for key, value in seen.items() if value is not None}
        if not seen:
            return None, ""
        bad = {key: value for key, value in seen.items() if not math.isfinite(value)}
        stop = (
            (
                "Stopping and saving a checkpoint for a post-mortem (it may hold non-finite weights: resume from the "
                "one before). "
                if self.thresholds.save_on_non_finite
                else "Stopping without saving (the earlier checkpoints are kept; resume from the last of them). "
            )
            if self.thresholds.stop_on_non_finite
            else ""
        )
        listed = ", ".join(f"{key}={value}" for key, value in bad.items())
        return bool(bad), (
            f"non-finite {listed}: training diverged. {stop}Lower learning_rate{_hint(args, 'learning_rate')}, keep "
            f"gradient clipping on (max_grad_norm{_hint(args, 'max_grad_norm')}), check bf16/fp16, and check that "
            "no reward function returns inf."
        )

    def _kl_spike(self, logs: dict[str, Any], args: Any, metrics: dict[str, float]) -> tuple[bool | None, str]:
        """KL to the reference jumps above its running level: the policy moved much further in one log than
        before, the usual prelude to a collapse. The level is the mean of the first ``warmup_logs`` values, then
        an EMA that also absorbs each new value (a sustained new level stops counting as a jump), floored at
        ``kl_min`` (near-zero KL at the start makes any ratio large)."""
        kl, th = _value(logs, "kl"), self.thresholds
        if kl is None or not math.isfinite(kl):
            return None, ""
        active, message = None, ""
        if self._kl_count >= th.warmup_logs and self._kl_level is not None:
            reference = max(self._kl_level, th.kl_min)
            ratio = kl / reference
            metrics["health/kl_ratio"] = ratio
            active = ratio > th.kl_spike_ratio
            floored = f" (floored at kl_min={th.kl_min:g})" if reference > self._kl_level else ""
            message = (
                f"KL jumped to {kl:.4g}, {ratio:.1f}x its running level {reference:.4g}{floored} (threshold "
                f"{th.kl_spike_ratio:g}x). Raise beta{_hint(args, 'beta')} or lower "
                f"learning_rate{_hint(args, 'learning_rate')}."
            )
        self._kl_count += 1
        if self._kl_level is None:
            self._kl_level = kl
        elif self._kl_count <= th.warmup_logs:
            self._kl_level += (kl - self._kl_level) / self._kl_count
        else:
            self._kl_level = th.ema_decay * self._kl_level + (1.0 - th.ema_decay) * kl
        return active, message

    def _entropy_collapse(self, logs: dict[str, Any], args: Any, metrics: dict[str, float]) -> tuple[bool | None, str]:
        """Policy entropy falls far below where it started: the policy turns near-deterministic, exploration stops
        and groups turn uniform (DAPO section 3.1 motivates clip-higher with exactly this collapse)."""
        entropy, th = _value(logs, "entropy"), self.thresholds
        if entropy is None or not math.isfinite(entropy):
            return None, ""
        if len(self._entropy_start) < th.warmup_logs:
            self._entropy_start.append(entropy)
            return None, ""
        start = sum(self._entropy_start) / len(self._entropy_start)
        ratio = entropy / start if start > 0 else 1.0
        metrics["health/entropy_ratio"] = ratio
        below_floor = th.entropy_floor is not None and entropy < th.entropy_floor
        active = ratio < th.entropy_collapse_ratio or below_floor
        return active, (
            f"entropy collapsed to {entropy:.4g} nats, {ratio:.0%} of its starting {start:.4g} (threshold "
            f"{th.entropy_collapse_ratio:.0%}{'' if th.entropy_floor is None else f' or below {th.entropy_floor:g}'}"
            f"). Use clip-higher (raise epsilon_high{_hint(args, 'epsilon_high')}; DAPO uses 0.28), add an entropy "
            f"bonus (entropy_coef{_hint(args, 'entropy_coef')}), or lower learning_rate"
            f"{_hint(args, 'learning_rate')}."
        )

    def _sustained(self, name: str, exceeded: bool, patience: int) -> bool:
        self._streak[name] = self._streak.get(name, 0) + 1 if exceeded else 0  # .get: checkpoints of older releases
        return self._streak[name] >= patience

    def _clip_high(self, logs: dict[str, Any], args: Any) -> tuple[bool | None, str]:
        """The fraction of tokens whose ratio is clipped stays high: each update pushes the policy far from the
        one that sampled, so much of the batch carries no gradient (the PPO rule of thumb)."""
        key = "clip_ratio/region_mean" if "clip_ratio/region_mean" in logs else "clip_ratio"
        clip, th = _value(logs, key), self.thresholds
        if clip is None or not math.isfinite(clip):
            return None, ""
        active = self._sustained("clip_high", clip > th.clip_frac_max, th.clip_patience)
        low, high = _value(logs, "clip_ratio/low_mean"), _value(logs, "clip_ratio/high_mean")
        split = f" (low {low:.1%}, high {high:.1%})" if low is not None and high is not None else ""
        return active, (
            f"{clip:.1%} of tokens clipped{split}, above {th.clip_frac_max:.0%} for {self._streak['clip_high']} logs. "
            f"Lower learning_rate{_hint(args, 'learning_rate')} or make training more on-policy (fewer "
            f"num_iterations{_hint(args, 'num_iterations')} / steps_per_generation"
            f"{_hint(args, 'steps_per_generation')}); for GSPO check that epsilon is on the sequence-ratio scale."
        )

    def _kept_groups_low(self, logs: dict[str, Any], args: Any) -> tuple[bool | None, str]:
        """Few groups carry a learning signal (rewards not all equal): the gradient comes from a shrinking part of
        the batch and dynamic sampling generates about ``1 / kept`` groups per trained group (its ideal; the rounds
        it took are quoted from ``dynamic_sampling/rounds`` when it runs). The all-max / all-min split (logged by
        dynamic sampling) tells whether the prompts became too easy or are too hard."""
        th = self.thresholds
        kept = _value(logs, "dynamic_sampling/kept_group_frac")
        if kept is None:
            zero_std = _value(logs, "frac_reward_zero_std")
            kept = None if zero_std is None else 1.0 - zero_std
        if kept is None or not math.isfinite(kept):
            return None, ""
        active = self._sustained("kept_groups_low", kept < th.kept_frac_min, th.kept_patience)
        all_max, all_min = _value(logs, "dynamic_sampling/all_max_frac"), _value(logs, "dynamic_sampling/all_min_frac")
        if all_max is not None and all_min is not None and all_max > all_min:
            why = (
                f" {all_max:.0%} of groups are all-max (too easy): move to harder prompts (curriculum) or filter "
                "solved ones."
            )
        elif all_max is not None and all_min is not None:
            why = (
                f" {all_min:.0%} of groups are all-min (too hard): raise num_generations"
                f"{_hint(args, 'num_generations')} or use easier prompts first (curriculum)."
            )
        else:
            why = (
                " Use a curriculum (prompts of matched difficulty) or raise num_generations"
                f"{_hint(args, 'num_generations')}."
            )
        rounds = _value(logs, "dynamic_sampling/rounds")
        if kept > 0:
            cost = f"dynamic sampling generates about {1 / kept:.1f} groups per trained group"
        else:
            cost = "dynamic sampling cannot fill a batch"
        if rounds is not None:
            cost += f", in {rounds:.0f} generation round(s) this step"
        return active, (
            f"only {kept:.0%} of groups have a learning signal (below {th.kept_frac_min:.0%} for "
            f"{self._streak['kept_groups_low']} logs; {cost}).{why}"
        )

    def _truncation_high(self, logs: dict[str, Any], args: Any) -> tuple[bool | None, str]:
        """Many completions hit ``max_completion_length`` without EOS: they are scored for being cut, not for
        their content, which adds reward noise (DAPO's overlong reward shaping addresses it)."""
        trunc, th = _value(logs, "completions/clipped_ratio"), self.thresholds
        if trunc is None or not math.isfinite(trunc):
            return None, ""
        active = self._sustained("truncation_high", trunc > th.truncated_frac_max, th.truncated_patience)
        mean_length = _value(logs, "completions/mean_length")
        length = "" if mean_length is None else f"; mean length {mean_length:.0f}"
        return active, (
            f"{trunc:.0%} of completions were truncated (above {th.truncated_frac_max:.0%} for "
            f"{self._streak['truncation_high']} logs{length}). "
            f"Raise max_completion_length{_hint(args, 'max_completion_length')}, or add overlong reward shaping / "
            "mask_truncated_completions=True."
        )

    def _sampling_mismatch(self, logs: dict[str, Any], args: Any) -> tuple[bool | None, str]:
        """The engine that sampled and the trainer disagree on the sampled tokens' log-probs (TRL's vLLM
        importance-sampling metrics): the correction then reweights a distribution that is not the one sampled."""
        ratio = _value(logs, "sampling/importance_sampling_ratio/mean")
        gap = _value(logs, "sampling/sampling_logp_difference/mean")
        ratio = ratio if ratio is not None and math.isfinite(ratio) else None
        gap = gap if gap is not None and math.isfinite(gap) else None
        if ratio is None and gap is None:
            return None, ""
        th = self.thresholds
        off = (ratio is not None and abs(ratio - 1.0) > th.is_ratio_tolerance) or (
            gap is not None and gap > th.logp_gap_max
        )
        active = self._sustained("sampling_mismatch", off, th.sampling_patience)
        seen = []
        if ratio is not None:
            low, high = (
                _value(logs, "sampling/importance_sampling_ratio/min"),
                _value(logs, "sampling/importance_sampling_ratio/max"),
            )
            span = f" (min {low:.3g}, max {high:.3g})" if low is not None and high is not None else ""
            seen.append(f"mean importance ratio {ratio:.3f}{span}")
        if gap is not None:
            seen.append(f"mean log-prob gap {gap:.3f} nats per token")
        causes = []
        found = truncated_sampling(args)
        if found:
            causes.append(
                f"sampling is truncated ({', '.join(found)}): the correction is biased (TRL issue #6789); sample with "
                "top_p=1, top_k=0, min_p=0"
            )
        staleness = _value(logs, "async/staleness/max")
        if staleness:
            causes.append(
                f"rollouts are {staleness:.0f} generation batch(es) old (async_generation): lower learning_rate"
                f"{_hint(args, 'learning_rate')} or switch async_generation off"
            )
        causes.append(
            "the engine and the trainer run different precisions (vLLM bf16 vs a float32 trainer: set bf16=True), "
            "the server is not started with --logprobs-mode processed_logprobs, or the weights did not reach it"
        )
        return active, (
            f"engine and trainer disagree on the sampled tokens ({'; '.join(seen)}; tolerance {th.is_ratio_tolerance} "
            f"/ {th.logp_gap_max} nats, {self._streak['sampling_mismatch']} logs). Likely: {'; or '.join(causes)}."
        )

    def _reward_stall(self, logs: dict[str, Any], args: Any) -> tuple[bool | None, str]:
        """The optimizer keeps changing the loss but the reward does not rise: updates are not paying off (a
        reward that misreads the answers, a too-hard or too-easy dataset, a learning rate too low to matter or so
        high that it thrashes). The rise is the least-squares slope times the window, robust to noisy logs."""
        reward, loss, th = _value(logs, "reward"), _value(logs, "loss"), self.thresholds
        if reward is None or loss is None or not (math.isfinite(reward) and math.isfinite(loss)):
            return None, ""
        size = th.stall_window
        logging_steps = getattr(args, "logging_steps", None)
        if isinstance(logging_steps, int | float) and logging_steps >= 1:
            size = max(size, math.ceil(th.stall_steps / logging_steps))
        self._window.append((reward, loss))
        while len(self._window) > size:
            self._window.popleft()
        if len(self._window) < size:
            return None, ""
        rewards = [r for r, _ in self._window]
        losses = [x for _, x in self._window]
        n = len(rewards)
        r_mean = sum(rewards) / n
        rise, loss_range = _rise(rewards), max(losses) - min(losses)
        at_ceiling = th.reward_ceiling is not None and r_mean >= th.reward_ceiling
        active = rise < th.reward_stall_delta and loss_range > th.loss_move_delta and not at_ceiling
        return active, (
            f"reward stalled: it changed by {rise:+.4f} over the last {n} logs (mean {r_mean:.3f}, threshold "
            f"{th.reward_stall_delta:g}) while the loss moved over a range of {loss_range:.4g}. Check a sample of "
            "completions against the reward functions, the dataset's difficulty (run trl_ext.diagnostics.probe), "
            f"learning_rate{_hint(args, 'learning_rate')} and num_generations{_hint(args, 'num_generations')}."
        )

    def _reward_overoptimized(self, logs: dict[str, Any], step: int) -> tuple[bool | None, str]:
        """A learned reward that keeps rising while the gold figure falls is being gamed (Gao et al. 2022)."""
        th = self.thresholds
        if not th.proxy_metrics:
            return None, ""
        proxy_key = next((k for k in th.proxy_metrics if _value(logs, k) is not None), None)
        gold_key = next((k for k in th.gold_metrics if _value(logs, k) is not None), None)
        if proxy_key is not None:
            self._proxy.append([step, _value(logs, proxy_key)])
        if gold_key is not None:
            self._gold.append([step, _value(logs, gold_key)])
        del self._gold[: -th.overopt_window]
        if gold_key is None or len(self._gold) < th.overopt_window:
            return None, ""
        first = self._gold[0][0]
        self._proxy = [item for item in self._proxy if item[0] >= first]
        proxy = [value for _, value in self._proxy]
        gold = [value for _, value in self._gold]
        proxy_rise, gold_rise = _rise(proxy), _rise(gold)
        active = len(proxy) >= 2 and proxy_rise > 0 and gold_rise < -th.overopt_gold_drop
        return active, (
            f"reward over-optimization: the learned reward {proxy_key} rose by {proxy_rise:+.4f} while the gold figure "
            f"{gold_key} fell by {gold_rise:+.4f} over steps {first:g}-{step} (Gao et al. 2022, arXiv 2210.10760): "
            "the policy is gaming the reward model. Keep the checkpoint with the best gold figure, raise beta "
            "(the KL penalty), retrain the reward model on the policy's own samples, or add a rule reward."
        )

    # ------------------------------------------------------------------------------------------------ episodes

    def check(self, logs: dict[str, Any], step: int = 0, args: Any = None, main_process: bool = True) -> dict:
        """Run every check on one log; returns the ``health/*`` metrics. New episodes are appended to ``events``
        and (``print_warnings``, ``main_process``) logged. ``args`` only enriches messages with current settings."""
        metrics: dict[str, float] = {}
        results = {
            "non_finite": self._non_finite(logs, args),
            "kl_spike": self._kl_spike(logs, args, metrics),
            "entropy_collapse": self._entropy_collapse(logs, args, metrics),
            "clip_high": self._clip_high(logs, args),
            "kept_groups_low": self._kept_groups_low(logs, args),
            "truncation_high": self._truncation_high(logs, args),
            "sampling_mismatch": self._sampling_mismatch(logs, args),
            "reward_stall": self._reward_stall(logs, args),
            "reward_overoptimized": self._reward_overoptimized(logs, step),
        }
        for name, (active, message) in results.items():
            if active is None:
                continue
            metrics[f"health/{name}"] = float(active)
            if not active:
                self.active.discard(name)
                continue
            if name in self.active:
                continue
            self.active.add(name)
            event = HealthEvent(step=step, condition=name, message=message, fatal=name == "non_finite")
            self.events.append(event)
            if self.thresholds.print_warnings and main_process:
                logger.warning("[trl-ext health] step %d, %s: %s", step, name, message)
        return metrics

    def warnings_by_kind(self) -> list[dict[str, Any]]:
        """The warnings given so far, one entry per condition in the order they first fired: ``{"kind", "count"
        (episodes), "step" (the first), "message" (the first, with its suggested fix), "fatal"}``. What a run's
        summary reports: a condition that returns several times in a long run is one line with its count."""
        grouped: dict[str, dict[str, Any]] = {}
        for event in self.events:
            entry = grouped.setdefault(
                event.condition,
                {"kind": event.condition, "count": 0, "step": event.step, "message": event.message, "fatal": False},
            )
            entry["count"] += 1
            entry["fatal"] = entry["fatal"] or event.fatal
        return list(grouped.values())

    def summary(self) -> str:
        """One line per warning given so far."""
        if not self.events:
            return "[trl-ext health] no warnings."
        lines = [f"[trl-ext health] {len(self.events)} warning(s):"]
        lines += [f"  step {e.step:>6d}  {e.condition:<17s} {e.message}" for e in self.events]
        return "\n".join(lines)

    # ------------------------------------------------------------------------------------------------ callbacks

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        self.reset()
        saved = (state.stateful_callbacks or {}).get(type(self).__name__) if state.global_step > 0 else None
        if isinstance(saved, list):
            saved = saved[0] if saved else None
        if saved:  # a resumed run: the checkpoint's trainer_state.json holds the levels
            self.load_levels(saved.get("attributes", {}).get("levels", {}))

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs=None, **kwargs):
        if not logs:
            return control
        num_events = len(self.events)
        metrics = self.check(logs, state.global_step, args, main_process=state.is_world_process_zero)
        if not metrics:
            return control
        logs.update(metrics)
        # Trainer.log appended a copy of `logs` to log_history just before calling on_log: extend that copy too.
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            last = state.log_history[-1]
            if all(key in last for key in logs if key not in metrics):
                last.update(metrics)
        if self.thresholds.stop_on_non_finite and any(event.fatal for event in self.events[num_events:]):
            control.should_save = self.thresholds.save_on_non_finite
            control.should_training_stop = True
        return control

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        if self.events and self.summary_at_end and self.thresholds.print_warnings and state.is_world_process_zero:
            logger.warning(self.summary())
