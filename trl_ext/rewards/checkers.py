"""Comparison rules of the input/output layouts: is a case's output the expected one, as the dataset's checker says.

Read from APPS ``eval/testing_util.py``, LiveCodeBench ``lcb_runner/evaluation/testing_util.py`` and open-r1
``src/open_r1/rewards.py`` (table in ``rewards/README.md``); where we differ it is stricter: no APPS order-insensitive
token-set checks, and open-r1's zipped line comparison also requires equal line counts.
"""

from __future__ import annotations

import json
import math
import operator
from decimal import Decimal, InvalidOperation
from typing import Any

from trl_ext.rewards.io_tests import IOTests


def _nonempty_stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _float(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _apps_token_equal(got: str, want: str) -> bool:
    if got == want:
        return True
    a, b = _float(got), _float(want)
    if a is None or b is None:
        return False
    return abs(a - b) <= 1e-8 + 1e-5 * abs(b) or round(a, 3) == round(b, 3)


def apps_stdout(output: str, expected: str) -> bool:
    """APPS's stdin rule (module doc)."""
    got, want = _nonempty_stripped_lines(output), _nonempty_stripped_lines(expected)
    if len(got) != len(want):
        return False
    tokens = [(a.split(), b.split()) for a, b in zip(got, want, strict=True)]
    return all(len(a) == len(b) and all(map(_apps_token_equal, a, b)) for a, b in tokens)


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except InvalidOperation:
        return None


def livecodebench_stdout(output: str, expected: str) -> bool:
    """LiveCodeBench's stdin rule (module doc)."""
    got, want = _stripped_lines(output), _stripped_lines(expected)
    if len(got) != len(want):
        return False
    # a line matches as text or as numbers: equal Decimal lists, and (chained) not None, i.e. both lines are numbers
    return all(a == b or _decimals(a) == _decimals(b) is not None for a, b in zip(got, want, strict=True))


def open_r1_stdout(output: str, expected: str) -> bool:
    """open-r1's rule (module doc), with the line counts checked."""
    return _stripped_lines(output) == _stripped_lines(expected)


def apps_call(result: Any, expected: Any) -> bool:
    """APPS's call-based rule (module doc)."""
    return result == expected or (isinstance(expected, list) and bool(expected) and result == expected[0])


livecodebench_call = operator.eq  # LiveCodeBench's functional rule: the return value == the JSON output


_STDOUT = {"apps": apps_stdout, "livecodebench": livecodebench_stdout, "open-r1": open_r1_stdout}
_CALL = {"apps": apps_call, "livecodebench": livecodebench_call}


def case_passed(tests: IOTests, index: int, status: str, output: str | None) -> bool:
    """Whether case ``index`` passed: it ran to the end (``ok``) and its output matches by the layout's rule."""
    if status != "ok" or output is None:
        return False
    expected = tests.outputs[index]
    if tests.fn_name is None:
        return _STDOUT[tests.layout](output, expected)
    try:
        result = json.loads(output)
    except (json.JSONDecodeError, RecursionError):
        return False
    return _CALL[tests.layout](result, expected)


def judge(tests: IOTests, statuses: tuple[str, ...], outputs: tuple[str | None, ...]) -> tuple[bool, ...]:
    """Pass/fail of every case of a program's run (a case that never ran fails)."""
    return tuple(
        case_passed(tests, index, statuses[index] if index < len(statuses) else "", output)
        for index, output in enumerate(outputs if outputs else (None,) * len(tests))
    )
