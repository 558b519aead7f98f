"""Shaping rewards: the mark that tells a reward that shapes behaviour (length, repetition) from the task's accuracy.

DAPO's dynamic sampling (arXiv 2503.14476, section 3.2, Eq. 11) keeps a group when 0 < #correct < G: it filters on
the task's accuracy, and verl's recipe on ``acc``. A shaping term such as the soft overlong punishment (Eq. 13) varies
inside a group whose answers are all right (different lengths), so it must not make that group informative.

What a reward *is* decides this, not its name: every shaping reward carries the attribute ``shaping_reward = True``
(the length rewards of ``trl_ext.rewards.length`` and ``KimiLength`` as a class attribute, DAPO's trainer-added
overlong term through :func:`mark_shaping`). A reward of your own is marked the same way::

    mark_shaping(my_length_penalty)   # or: my_length_penalty.shaping_reward = True

:func:`is_shaping_reward` also looks through the package's wrappers (the reward guard, the zero-reward watch), which
keep the function they wrap in ``.func``.
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
