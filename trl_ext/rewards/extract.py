"""Final-answer extraction from model text, the part math-verify leaves to the caller: one strategy per convention
(``STRATEGIES``, tabled in ``rewards/README.md``). Only the text after the last ``</think>`` is searched (as TRL's
``reasoning_accuracy_reward``). All scanning is linear-time, so a pathological completion cannot stall the trainer.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence

STRATEGIES = ("boxed", "gsm8k", "answer_is", "last_number")  # also the order "auto" tries them in

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")
_ANSWER_IS = re.compile(r"(?i)\banswer(?:\s*\*\*)?\s*(?:is\b\s*:?|:|=)")
_NUMBER = re.compile(
    r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?(?:\s*/\s*\d+)?(?:\s*%)?(?!\w|\.\d)"
)
_LEADING_WORDS = re.compile(r"^(?:[A-Za-z']+,?\s+)+(?=[-+\d$\\(])")
_SENTENCE_END = re.compile(r"\.(?=\s|$)|\n")
_SCIENTIFIC = re.compile(r"^(-?\d+(?:\.\d+)?)[eE]([+-]?\d+)$")
_CURRENCY = re.compile(r"^\\?\$\s*(?=[\d.,]+\s*[A-Za-z]*\s*$)")
_MATH_DELIMITERS = ("$", "\\(", "\\[")


def answer_region(text: str) -> str | None:
    """The text after the last ``</think>``; the whole text if there is no think block; None if it never closes."""
    close = text.rfind("</think>")
    if close >= 0:
        return text[close + len("</think>") :]
    return None if "<think>" in text else text


def _match_braces(text: str) -> tuple[dict[int, int], bool]:
    """Index of the matching ``}`` for every ``{`` that has one (escaped braces skipped), and whether they balance."""
    closing: dict[int, int] = {}
    stack: list[int] = []
    stray = False
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "{":
            stack.append(i)
        elif char == "}":
            if stack:
                closing[stack.pop()] = i
            else:
                stray = True
        i += 1
    return closing, not stack and not stray


def braces_balanced(text: str) -> bool:
    """Whether the unescaped braces of ``text`` balance (``\\{`` is a set brace, not a group): a LaTeX answer whose
    groups do not is cut off or malformed."""
    return _match_braces(text)[1]


def boxed_contents(text: str) -> list[str]:
    """Contents of every balanced ``\\boxed{...}`` / ``\\fbox{...}`` (or ``\\boxed 5``) in order, in linear time."""
    found: list[str] = []
    closing: dict[int, int] | None = None
    for match in _BOXED.finditer(text):
        start = match.end()
        if start < len(text) and text[start] == "{":
            if closing is None:
                closing = _match_braces(text)[0]
            end = closing.get(start)
            if end is not None:
                found.append(text[start + 1 : end].strip())
        elif match.group().endswith((" ", "\t")):  # "\\boxed 5": one token
            token = re.match(r"[^\s$]+", text[start:])
            if token:
                found.append(token.group())
    return [content for content in found if content]


def gsm8k_answer(text: str) -> str | None:
    """The rest of the line after the last ``####`` (GSM8K solutions end with ``#### 72``)."""
    mark = text.rfind("####")
    if mark < 0:
        return None
    line = text[mark + 4 :].split("\n", 1)[0].strip()
    return line or None


def answer_is(text: str) -> str | None:
    """The rest of the sentence after the last "answer is" / "Answer:" / "final answer =" (case-insensitive)."""
    last = deque(_ANSWER_IS.finditer(text), maxlen=1)
    if not last:
        return None
    rest = text[last[0].end() :].lstrip(" *:\t")
    end = _SENTENCE_END.search(rest)
    segment = rest[: end.start()] if end else rest
    return _LEADING_WORDS.sub("", segment.strip()) or None


def last_number(text: str) -> str | None:
    """The last number in ``text``: integers, negatives, decimals, ``1,000``, ``3/4``, ``50%``."""
    last = deque(_NUMBER.finditer(text), maxlen=1)
    return last[0].group().strip() if last else None


def clean_answer(answer: str) -> str:
    """Light clean-up before math-verify: markdown bold, trailing punctuation, ``$5`` currency, ``1.5e3``."""
    answer = answer.strip().strip("*").strip()
    answer = answer.rstrip(".,;:!").strip()
    if answer.startswith("\\text{") and answer.endswith("}"):
        answer = answer[len("\\text{") : -1].strip()
    if answer.count("$") == 1:
        answer = _CURRENCY.sub("", answer)
    scientific = _SCIENTIFIC.match(answer)
    if scientific:
        answer = f"{scientific.group(1)} \\times 10^{{{int(scientific.group(2))}}}"
    return answer


def as_latex(answer: str) -> str:
    """``answer`` wrapped in ``$...$`` unless it already carries math delimiters, so math-verify reads it as LaTeX."""
    if any(delimiter in answer for delimiter in _MATH_DELIMITERS):
        return answer
    return f"${answer}$"


def extract_answer(
    text: str, strategies: str | Sequence[str] = "auto", multiple_boxed: str = "last"
) -> tuple[str | None, str | None]:
    """``(answer, strategy)``: the final answer of ``text`` as LaTeX for ``math_verify.parse`` and the strategy that
    found it, or ``(None, None)``. ``multiple_boxed``: ``"last"`` (a model that corrects itself is judged on its final
    word, and boxing several guesses does not help) or ``"all"`` (distinct boxed answers as one set, multi-answer)."""
    order = parse_strategies(strategies)
    if multiple_boxed not in ("last", "all"):
        raise ValueError(f"multiple_boxed must be 'last' or 'all', got {multiple_boxed!r}")
    region = answer_region(text)
    if region is None:
        return None, None
    for strategy in order:
        if strategy == "boxed":
            boxes = boxed_contents(region)
            if not boxes:
                continue
            if multiple_boxed == "all":
                distinct = list(dict.fromkeys(clean_answer(box) for box in boxes))
                return as_latex(", ".join(distinct)), strategy
            return as_latex(clean_answer(boxes[-1])), strategy
        found = {"gsm8k": gsm8k_answer, "answer_is": answer_is, "last_number": last_number}[strategy](region)
        if found:
            cleaned = clean_answer(found)
            if cleaned:
                return as_latex(cleaned), strategy
    return None, None


def parse_strategies(strategies: str | Sequence[str]) -> tuple[str, ...]:
    """Validate a strategy spec (``"auto"``, a name, or a list of names) into an ordered tuple."""
    if isinstance(strategies, str):
        order: tuple[str, ...] = STRATEGIES if strategies == "auto" else (strategies,)
    else:
        order = tuple(strategies)
    unknown = [name for name in order if name not in STRATEGIES]
    if unknown or not order:
        raise ValueError(f"unknown extraction strategy {unknown or order!r}; choose 'auto' or from {list(STRATEGIES)}")
    return order


def gold_answer(solution: str) -> str:
    """The reference answer of a solution column as LaTeX: a GSM8K or MATH solution's final answer, else the text."""
    text = str(solution)
    found = gsm8k_answer(text)
    if found:
        return as_latex(clean_answer(found))
    boxes = boxed_contents(text)
    if boxes:
        return as_latex(clean_answer(boxes[-1]))
    return as_latex(clean_answer(text))
