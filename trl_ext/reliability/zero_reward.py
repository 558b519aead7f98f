"""No silent zeros: one warning when the task reward is 0 or unscorable on every completion of the first steps.

A task reward that reads the wrong column, or a reference it cannot parse, trains on zero and exits 0; a person can
tell that from a model that cannot solve anything yet, given one reference and one completion side by side.
:class:`ZeroRewardWatch` wraps the task reward (the recipes wrap the first of ``reward_funcs``) and, after ``calls``
training calls (those carrying ``trainer_state``) where no completion scored above 0, warns once naming the function,
the column it read and one reference/completion pair. Values pass through unchanged.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from trl.trainer.utils import get_callable_name

from trl_ext.reliability.reward_guard import _short, reward_columns
from trl_ext.rewards.text import completion_text

logger = logging.getLogger(__name__)
REFERENCE_COLUMNS = ("answer", "solution", "tests")  # where the package's rewards look when no column is named


class ZeroRewardWatch:
    """``func`` with the module docstring's warning. ``column``: the reference column the warning names (None: the
    first of ``REFERENCE_COLUMNS`` the call carries)."""

    def __init__(self, func: Callable, column: str | None, calls: int = 3):
        self.func = func
        self.column = column
        self.calls = calls
        self.__name__ = get_callable_name(func)
        self.required_columns = reward_columns(func)
        self.seen_calls = 0
        self.seen_completions = 0
        self.unscorable = 0
        self.armed = True
        self.warned = False
        self.example: tuple[Any, str] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> list:
        values = self.func(*args, **kwargs)
        state = kwargs.get("trainer_state")
        if self.armed and state is not None:
            self._observe(values, kwargs, state)
        return values

    def _observe(self, values: Any, kwargs: dict[str, Any], state: Any) -> None:
        values = list(values)
        scored = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
        if any(v > 0 for v in scored):
            self.armed = False
            return
        self.seen_calls += 1
        self.seen_completions += len(values)
        self.unscorable += len(values) - len(scored)
        if self.column is None:
            self.column = next((c for c in REFERENCE_COLUMNS if c in kwargs), None)
        if self.example is None and values:
            references = kwargs.get(self.column) if self.column else None
            reference = references[0] if isinstance(references, list | tuple) and references else None
            completion = completion_text((kwargs.get("completions") or [""])[0])
            self.example = (reference, completion)
        if self.seen_calls >= self.calls:
            self.armed = False
            if getattr(state, "is_world_process_zero", True):
                self.warned = True
                logger.warning(self.message())

    def message(self) -> str:
        reference, completion = self.example or (None, "")
        unscorable = (
            f", {self.unscorable} of them unscorable (reward None: the reference could not be read)"
            if self.unscorable
            else ""
        )
        column = f"the column {self.column!r}" if self.column else "no reference column"
        return (
            f"reward {self.__name__!r} gave 0 to every one of the {self.seen_completions} completions of the first "
            f"{self.seen_calls} generation rounds{unscorable}. It reads {column}; one pair: reference "
            f"{_short(reference)}, completion {_short(completion)}. If the reference is right and the completion "
            "wrong, the model cannot solve these prompts yet (warm start it with SFT, or train on easier data); if "
            "the reference is not the final answer, map it with --dataset_answer_column (a dotted path reaches a "
            "nested field), and if the reward does not fit the task, choose one with --reward_funcs."
        )
