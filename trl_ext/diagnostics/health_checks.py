"""The training-health checks: what the metrics a trainer logs say about an RL run, and the fix to suggest.

:class:`HealthChecks` evaluates every check on one log, no trainer needed (``HealthMonitor`` builds on it). Each
``_<condition>`` method says what its condition means; a check whose metric is absent from a log is skipped.
"""

from __future__ import annotations

import math
from typing import Any

from trl_ext.diagnostics.health_thresholds import HealthThresholds
from trl_ext.grpo.async_checks import truncated_sampling

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


def _value(logs: dict[str, Any], key: str) -> float | None:
    """A logged number as float, or None when absent or not numeric (TRL logs None for all-NaN metrics)."""
    value = logs.get(key)
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _finite(logs: dict[str, Any], key: str) -> float | None:
    """A logged number that is finite, else None."""
    value = _value(logs, key)
    return value if value is not None and math.isfinite(value) else None


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


class HealthChecks:
    """The running levels (JSON-able, for checkpoints) and every check over one log (module docstring)."""

    #: The attributes that hold the running levels, under the names checkpoints keep them by.
    _LEVELS = ("_streak", "_kl_level", "_kl_count", "_entropy_start", "_proxy", "_gold", "_window")

    def __init__(self, thresholds: HealthThresholds | None = None):
        self.thresholds = thresholds or HealthThresholds()
        self.reset()

    def reset(self) -> None:
        """Forget the running levels and streaks."""
        self._streak: dict[str, int] = dict.fromkeys(CONDITIONS + VLLM_CONDITIONS, 0)
        self._kl_level: float | None = None
        self._kl_count = 0
        self._entropy_start: list[float] = []
        self._window: list[list[float]] = []  # [reward, loss], one per log, the last stall window's
        self._proxy: list[list[float]] = []  # [step, value] of the learned reward, one per log
        self._gold: list[list[float]] = []  # [step, value] of the gold figure, one per log that has it

    def evaluate(
        self, logs: dict[str, Any], step: int = 0, args: Any = None
    ) -> tuple[dict[str, tuple[bool | None, str]], dict[str, float]]:
        """Run every check on one log: each condition's ``(active, message)`` (``active`` None when not evaluated) and
        the ``health/kl_ratio`` / ``health/entropy_ratio`` metrics. ``args`` only enriches messages."""
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
        return results, metrics

    def _non_finite(self, logs: dict[str, Any], args: Any) -> tuple[bool | None, str]:
        """Divergence: a watched metric is NaN or inf. Nothing later in the run can be trusted."""
        seen = {key: _value(logs, key) for key in self.thresholds.non_finite_keys}
        seen = {key: value for key, value in seen.items() if value is not None}
        if not seen:
            return None, ""
        bad = {key: value for key, value in seen.items() if not math.isfinite(value)}
        stop = ""
        if self.thresholds.stop_on_non_finite and self.thresholds.save_on_non_finite:
            stop = (
                "Stopping and saving a checkpoint for a post-mortem (it may hold non-finite weights: resume from the "
                "one before). "
            )
        elif self.thresholds.stop_on_non_finite:
            stop = "Stopping without saving (the earlier checkpoints are kept; resume from the last of them). "
        listed = ", ".join(f"{key}={value}" for key, value in bad.items())
        return bool(bad), (
            f"non-finite {listed}: training diverged. {stop}Lower learning_rate{_hint(args, 'learning_rate')}, keep "
            f"gradient clipping on (max_grad_norm{_hint(args, 'max_grad_norm')}), check bf16/fp16, and check that "
            "no reward function returns inf."
        )

    def _kl_spike(self, logs: dict[str, Any], args: Any, metrics: dict[str, float]) -> tuple[bool | None, str]:
        """KL to the reference jumps above its running level: the policy moved much further in one log than
        before, the usual prelude to a collapse. The level is an EMA (a sustained new level stops counting as a
        jump), floored at ``kl_min`` (near-zero KL at the start makes any ratio large)."""
        kl, th = _finite(logs, "kl"), self.thresholds
        if kl is None:
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
        entropy, th = _finite(logs, "entropy"), self.thresholds
        if entropy is None:
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
        clip, th = _finite(logs, key), self.thresholds
        if clip is None:
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
        the batch and dynamic sampling generates about ``1 / kept`` groups per trained group. The all-max / all-min
        split tells whether the prompts became too easy or are too hard."""
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
        trunc, th = _finite(logs, "completions/clipped_ratio"), self.thresholds
        if trunc is None:
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
        ratio = _finite(logs, "sampling/importance_sampling_ratio/mean")
        gap = _finite(logs, "sampling/sampling_logp_difference/mean")
        if ratio is None and gap is None:
            return None, ""
        th = self.thresholds
        off = (ratio is not None and abs(ratio - 1.0) > th.is_ratio_tolerance) or (
            gap is not None and gap > th.logp_gap_max
        )
        active = self._sustained("sampling_mismatch", off, th.sampling_patience)
        seen = []
        if ratio is not None:
            low = _value(logs, "sampling/importance_sampling_ratio/min")
            high = _value(logs, "sampling/importance_sampling_ratio/max")
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
        staleness = _value(logs, "async/staleness")
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
        """The optimizer keeps changing the loss but the reward does not rise: updates are not paying off (a reward
        that misreads the answers, a too-hard or too-easy dataset, a bad learning rate). The window spans at least
        ``stall_window`` logs and ``stall_steps`` steps: 20 single-step logs of a healthy run often show no rise."""
        reward, loss, th = _finite(logs, "reward"), _finite(logs, "loss"), self.thresholds
        if reward is None or loss is None:
            return None, ""
        size = th.stall_window
        logging_steps = getattr(args, "logging_steps", None)
        if isinstance(logging_steps, int | float) and logging_steps >= 1:
            size = max(size, math.ceil(th.stall_steps / logging_steps))
        self._window.append([reward, loss])
        del self._window[:-size]
        if len(self._window) < size:
            return None, ""
        rewards, losses = zip(*self._window, strict=True)
        n = len(rewards)
        r_mean = sum(rewards) / n
        rise, loss_range = _rise(rewards), max(losses) - min(losses)
        at_ceiling = th.reward_ceiling is not None and r_mean >= th.reward_ceiling
        active = rise < th.reward_stall_delta and loss_range > th.loss_move_delta and not at_ceiling
        return active, (
            f"reward stalled: it changed by {rise:+.4f} over the last {n} logs (mean {r_mean:.3f}, threshold "
            f"{th.reward_stall_delta:g}) while the loss moved over a range of {loss_range:.4g}. Check a sample of "
            "completions against the reward functions, the dataset's difficulty (run trl-ext probe), "
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
