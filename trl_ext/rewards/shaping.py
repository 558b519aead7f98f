"""Shaping rewards: the mark that tells a reward that shapes behaviour (length, repetition) from the task's accuracy.

DAPO's dynamic sampling (arXiv 2503.14476, section 3.2, Eq. 11) keeps a group when 0 < #correct < G: it filters on
the task's accuracy. A shaping term such as the soft overlong punishment (Eq. 13) varies inside a group whose answers
are all right, so it must not make that group informative. What a reward *is* decides this, not its name: a shaping
reward carries ``shaping_reward = True``; mark your own with ``mark_shaping(my_penalty)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

SHAPING_ATTRIBUTE = "shaping_reward"
F = TypeVar("F", bound=Callable)


def mark_shaping(func: F) -> F:
    """Mark ``func`` as a shaping reward (left out of dynamic sampling's default accuracy metric); returns it."""
    setattr(func, SHAPING_ATTRIBUTE, True)
    return func


def is_shaping_reward(func: object) -> bool:
    """Whether ``func``, or a function it wraps (``.func``, a few levels deep), is marked as a shaping reward."""
    for _ in range(8):  # wrappers nest a few levels at most; a bound keeps a self-referencing object from looping
        if func is None:
            return False
        if getattr(func, SHAPING_ATTRIBUTE, False) is True:
            return True
        func = getattr(func, "func", None)
    return False
