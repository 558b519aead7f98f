"""Format rewards: ``<think>...</think>`` then an answer (strict and lenient), partial credit for the process and tags.

DeepSeek-R1's format reward (arXiv 2501.12948, section 2.2.2; TRL's ``think_format_reward``): **strict** is open-r1's
``format_reward`` shape; **lenient** lets the opening ``<think>`` be missing, because chat templates of reasoning
models (DeepSeek-R1, Qwen3) put it into the *prompt*. Rules: ``rewards/README.md``, "Format, process, length".
"""

from __future__ import annotations

import re

from trl_ext.rewards.extract import extract_answer
from trl_ext.rewards.text import TextReward

_STRICT = re.compile(r"<think>\n(?P<reasoning>.*?)\n</think>\n(?P<answer>.*)", re.DOTALL)
_ANSWER_STRICT = re.compile(r"<answer>\n(?P<inner>.*?)\n</answer>\s*", re.DOTALL)
_ANSWER_LENIENT = re.compile(r"<answer>(?P<inner>.*?)</answer>", re.DOTALL)
THINK_MARKERS = ("<think>\n", "\n</think>\n")
ANSWER_MARKERS = ("\n<answer>\n", "\n</answer>")
_STEP = re.compile(
    r"^\s*(?:step\s*\d+\b|\d+[.)]\s|[-*]\s|(?:first|second|third|next|then|finally)\b,?)", re.IGNORECASE | re.MULTILINE
)


def _strict_ok(text: str, answer_tags: bool) -> bool:
    if text.count("<think>") != 1 or text.count("</think>") != 1:
        return False
    match = _STRICT.fullmatch(text)
    if not match or not match.group("reasoning").strip() or not match.group("answer").strip():
        return False
    if answer_tags:
        answer = _ANSWER_STRICT.fullmatch(match.group("answer"))
        return bool(answer and answer.group("inner").strip()) and match.group("answer").count("<answer>") == 1
    return True


def _lenient_ok(text: str, answer_tags: bool) -> bool:
    if text.count("</think>") != 1 or text.count("<think>") > 1:
        return False
    before, answer = text.split("</think>")
    head, _, reasoning = before.rpartition("<think>")  # head is "" without an opening tag
    if head.strip() or "<think>" in answer or not reasoning.strip() or not answer.strip():
        return False
    if answer_tags:
        inner = _ANSWER_LENIENT.search(answer)
        return bool(inner and inner.group("inner").strip())
    return True


class ThinkFormat(TextReward):
    """1.0 when the completion is a think block followed by an answer, else 0.0 (strict or lenient, see module)."""

    def __init__(self, strict: bool = True, answer_tags: bool = False, name: str | None = None):
        self.strict = strict
        self.answer_tags = answer_tags
        self.__name__ = name or ("format_strict" if strict else "format_lenient")

    def score(self, text: str) -> float:
        check = _strict_ok if self.strict else _lenient_ok
        return 1.0 if check(text, self.answer_tags) else 0.0


def count_steps(reasoning: str) -> int:
    """Lines of ``reasoning`` that start like a step (``Step 2``, ``2.``, ``2)``, ``-``, ``*``, ``First,`` ...)."""
    return len(_STEP.findall(reasoning))


class ProcessReward(TextReward):
    """Partial credit in [0, 1] for a well-formed reasoning process: four parts of 0.25 (after open-r1's
    ``tag_count_reward`` and ``reasoning_steps_reward``)."""

    def __init__(self, min_steps: int = 3, name: str = "process"):
        if min_steps < 1:
            raise ValueError(f"min_steps must be >= 1, got {min_steps}")
        self.min_steps = min_steps
        self.__name__ = name

    def score(self, text: str) -> float:
        closed = text.count("</think>") == 1 and text.count("<think>") <= 1
        before, after = text.split("</think>", 1) if closed else (text, "")
        if closed and "<think>" in after:
            closed, before, after = False, text, ""
        reasoning = before.split("<think>", 1)[-1]
        credit = 0.25 if closed else 0.0
        if reasoning.strip():
            credit += 0.25
        credit += 0.25 * min(1.0, count_steps(reasoning) / self.min_steps)
        if closed and extract_answer(after)[0] is not None:
            credit += 0.25
        return credit


class TagCount(TextReward):
    """open-r1's ``tag_count_reward``, a dense signal toward the strict format with answer tags: ``(markers present
    exactly once) / (markers counted)``, quarters with answer tags, halves without; a repeated marker earns nothing."""

    def __init__(self, answer_tags: bool = True, name: str = "tag_count"):
        self.answer_tags = answer_tags
        self.markers = THINK_MARKERS + (ANSWER_MARKERS if answer_tags else ())
        self.__name__ = name

    def score(self, text: str) -> float:
        return sum(text.count(marker) == 1 for marker in self.markers) / len(self.markers)
