"""Held-out greedy accuracy as every recipe measures it (before, during and after training): ``trl-ext eval``'s
``pass@1 (greedy)``, scored by the run's rule reward, on completions that fit the model's context."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from datasets import Dataset

from trl_ext.data import Layout
from trl_ext.diagnostics.held_out import held_out_accuracy
from trl_ext.recipe.rewards import evaluation_reward
from trl_ext.reliability.checks import context_length, longest_prompt


def completion_budget(model: Any, longest: tuple[int, Any] | None, max_new_tokens: int) -> int:
    """``max_new_tokens``, cut so that the longest prompt plus the completion fits the model's context; at least 1."""
    context = context_length(getattr(model, "config", None))
    room = context - longest[0] if context is not None and longest is not None else max_new_tokens
    return max(1, min(max_new_tokens, room))


def held_out_evaluator(
    script_args: Any,
    layout: Layout,
    tokenizer: Any,
    eval_dataset: Dataset | None,
    max_new_tokens: int,
    reward: Callable | None = None,
    is_main: bool = True,
) -> Callable[..., float | None]:
    """``evaluate(model, phase=False)``: held-out greedy accuracy scored by ``evaluation_reward``, completions within
    ``completion_budget`` (``phase``, e.g. ``"before RL"``, titles a progress bar); None when nothing can be scored."""
    reward = evaluation_reward(script_args, layout, reward)
    if reward is None:
        return lambda model, phase=False: None
    longest = longest_prompt(eval_dataset, tokenizer)

    def evaluate(model: Any, phase: str | bool = False) -> float | None:
        label = f"evaluation ({phase})" if is_main and isinstance(phase, str) else False
        length = completion_budget(model, longest, max_new_tokens)
        return held_out_accuracy(model, tokenizer, eval_dataset, reward, length, progress=label)

    return evaluate
