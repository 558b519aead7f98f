"""Held-out greedy accuracy before, during and after training, and the callback that logs it as ``held_out/accuracy``.

The metric is ``trl-ext eval``'s ``pass@1 (greedy)``, computed by the same function: the fraction of held-out prompts
whose greedy completion the run's task reward scores 1.0 (partial credit and None are wrong). With ``every=None``
:class:`HeldOutEvaluation`'s interval starts at ``logging_steps`` and widens whenever evaluating has taken more than
``target_frac`` of the run.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import Any

from datasets import Dataset

from trl_ext.console import HELD_OUT_KEY
from trl_ext.diagnostics.evaluation import greedy_accuracy
from trl_ext.diagnostics.health import FirstCallback
from trl_ext.rewards.arithmetic import arithmetic_reward


def held_out_accuracy(
    model: Any,
    tokenizer: Any,
    eval_dataset: Dataset | None,
    reward_func: Callable | None = None,
    max_new_tokens: int = 4,
    progress: bool | str = False,
) -> float | None:
    """Greedy held-out accuracy (module docstring); None when there is nothing to evaluate on."""
    if eval_dataset is None or "prompt" not in eval_dataset.column_names or len(eval_dataset) == 0:
        return None
    has_answer = "answer" in eval_dataset.column_names
    if reward_func is None and not has_answer:
        return None
    demo = has_answer and (reward_func is None or getattr(reward_func, "__name__", "") == "arithmetic_reward")
    from transformers.integrations import is_deepspeed_zero3_enabled

    # the demo's own check (trl_ext.demo.greedy_accuracy): the answer is the first integer in 4 tokens
    reward, length = (arithmetic_reward, 4) if demo else (reward_func, max_new_tokens)
    evaluate = functools.partial(greedy_accuracy, model, tokenizer, eval_dataset, reward, length, progress=progress)

    if is_deepspeed_zero3_enabled():  # sharded weights must be gathered (on every rank) before generate
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(model.parameters())):
            return evaluate()
    return evaluate()


class HeldOutEvaluation(FirstCallback):
    """Logs ``held_out/accuracy`` every ``every`` steps (rounded up to a multiple of ``logging_steps``, to land in a
    regular log) and at the last step (module docstring). ``points`` holds ``(step, accuracy)``, from ``start``."""

    def __init__(
        self,
        evaluate: Callable[[Any], float | None],
        every: int | None = None,
        start: float | None = None,
        target_frac: float = 0.05,
    ):
        self.evaluate = evaluate
        self.requested = every
        self.every = every
        self.target_frac = target_frac
        self.points: list[tuple[int, float]] = [] if start is None else [(0, start)]
        self.eval_seconds = 0.0
        self.evaluations = 0
        self._pending: float | None = None
        self._train_started = 0.0
        self._first_step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self._logging_steps = logging_steps = max(int(state.logging_steps or 1), 1)
        self.every = (
            logging_steps if self.requested is None else logging_steps * math.ceil(self.requested / logging_steps)
        )
        self._train_started = time.time()
        self._first_step = state.global_step

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if not (step % self.every == 0 or step >= state.max_steps):
            return
        started = time.time()
        value = self.evaluate(model)
        seconds = time.time() - started
        if value is None:
            return
        self.eval_seconds += seconds
        self.evaluations += 1
        self.points.append((step, value))
        self._pending = value
        control.should_log = True  # already set on a logging step; at the last step it flushes the window
        if self.requested is None:
            self._adapt(seconds, step)

    def _adapt(self, seconds: float, step: int) -> None:
        elapsed = time.time() - self._train_started
        steps_done = step - self._first_step
        if steps_done <= 0 or self.eval_seconds <= self.target_frac * elapsed:
            return
        step_seconds = max(elapsed - self.eval_seconds, 1e-9) / steps_done
        needed = seconds / (self.target_frac * step_seconds)
        self.every = max(self.every, self._logging_steps * math.ceil(needed / self._logging_steps))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._pending is None or logs is None or "train_runtime" in logs:
            return
        self.add_to_log(state, logs, {HELD_OUT_KEY: self._pending})
        self._pending = None

    def cost_fraction(self, train_seconds: float) -> float:
        """Seconds spent evaluating during training over the training's wall time."""
        return self.eval_seconds / train_seconds if train_seconds > 0 else 0.0
