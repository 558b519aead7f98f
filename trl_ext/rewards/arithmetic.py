"""Reward of the arithmetic demo task (``trl_ext.demo``: ``"17+25="`` answered ``"42"``): DAPO's rule-based reward
(arXiv 2503.14476, section 2.4) on a 0/1 scale instead of +1/-1, which group-normalized advantages make equivalent.
"""

from __future__ import annotations

import re
from typing import Any

from trl_ext.rewards.text import completion_text

_INT = re.compile(r"-?\d+")


def parse_first_int(text: str) -> int | None:
    """The first integer in ``text`` (leading spaces allowed), or None."""
    match = _INT.search(text)
    return int(match.group()) if match else None


def arithmetic_reward(prompts: list, completions: list, answer: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion's first integer equals ``answer``, else 0.0. Never raises on model output."""
    rewards = []
    for completion, target in zip(completions, answer, strict=True):
        try:  # int() refuses over 4300 digits (CVE-2020-10735 guard): a digit flood is garbled output, not a crash
            value = parse_first_int(completion_text(completion).strip())
            rewards.append(1.0 if value is not None and value == int(target) else 0.0)
        except (TypeError, ValueError):
            rewards.append(0.0)
    return rewards
