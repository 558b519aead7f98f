"""Input/output test cases of the code datasets, read from a dataset value: APPS/TACO, LiveCodeBench/DeepCoder, open-r1.

A value that is not tests in the layout reads as ``None`` (the code reward scores the example ``None``, never as a
passing test). Layouts: ``rewards/README.md``, "Input/output tests". As the datasets' own runners: an APPS input given
as a list of lines is joined (``run_test``); a LiveCodeBench functional input holds one JSON argument per line
(``grade_call_based``), its function name from ``metadata.func_name`` or ``fn_name``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LAYOUTS = ("apps", "livecodebench", "open-r1")


@dataclass(frozen=True)
class IOTests:
    """One example's cases. ``inputs``: stdin text, or (``fn_name`` set) the JSON text of the argument list;
    ``outputs``: the expected stdout text, or the expected return value (decoded JSON)."""

    layout: str
    inputs: tuple[str, ...]
    outputs: tuple[Any, ...]
    fn_name: str | None = None

    def __len__(self) -> int:
        return len(self.inputs)


def decode(value: Any) -> Any:
    """A JSON text that opens with ``{`` or ``[`` decoded; anything else (or text that is not JSON) unchanged."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value
    return value


def is_structured(value: Any) -> bool:
    """Whether a value is data rather than assert tests: a mapping, or a list holding anything but strings."""
    return isinstance(value, Mapping) or (
        isinstance(value, (list, tuple)) and any(not isinstance(item, str) for item in value)
    )


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value)
    return None


def _apps(value: Any) -> IOTests | None:
    if not isinstance(value, Mapping):
        return None
    inputs, outputs, fn_name = value.get("inputs"), value.get("outputs"), value.get("fn_name")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not inputs or len(inputs) != len(outputs):
        return None
    if fn_name is not None:
        if not isinstance(fn_name, str) or not fn_name.isidentifier():
            return None
        args = [json.dumps(item if isinstance(item, list) else [item]) for item in inputs]
        return IOTests("apps", tuple(args), tuple(outputs), fn_name)
    texts, expected = [_text(item) for item in inputs], [_text(item) for item in outputs]
    if any(item is None for item in texts + expected):
        return None
    return IOTests("apps", tuple(texts), tuple(expected))


def _case_list(value: Any) -> list[Mapping] | None:
    if not isinstance(value, (list, tuple)) or not value:
        return None
    fields_are_text = (isinstance(c.get("input"), str) and isinstance(c.get("output"), str) for c in value)
    return list(value) if all(isinstance(c, Mapping) for c in value) and all(fields_are_text) else None


def _function_name(case: Mapping) -> str | None:
    metadata = decode(case.get("metadata"))
    name = metadata.get("func_name") if isinstance(metadata, Mapping) else None
    name = name or case.get("fn_name")
    return name if isinstance(name, str) and name.isidentifier() else None


def _livecodebench(value: Any) -> IOTests | None:
    cases = _case_list(value)
    if cases is None:
        return None
    kinds = {case.get("testtype", "stdin") for case in cases}
    if kinds == {"stdin"}:
        return IOTests("livecodebench", tuple(c["input"] for c in cases), tuple(c["output"] for c in cases))
    if kinds != {"functional"}:
        return None
    names = {_function_name(case) for case in cases}
    if len(names) != 1 or None in names:
        return None
    try:
        args = [json.dumps([json.loads(line) for line in case["input"].split("\n")]) for case in cases]
        outputs = [json.loads(case["output"]) for case in cases]
    except (json.JSONDecodeError, RecursionError):
        return None
    return IOTests("livecodebench", tuple(args), tuple(outputs), names.pop())


def _open_r1(value: Any) -> IOTests | None:
    if isinstance(value, Mapping):
        if str(value.get("language", "python")).lower() not in ("python", "python3", "py"):
            return None
        value = decode(value.get("test_cases"))
    cases = _case_list(value)
    if cases is None or any(case.get("type", "stdin_stdout") != "stdin_stdout" for case in cases):
        return None
    return IOTests("open-r1", tuple(c["input"] for c in cases), tuple(c["output"] for c in cases))


_PARSERS = {"apps": _apps, "livecodebench": _livecodebench, "open-r1": _open_r1}


def detect_layout(value: Any) -> str | None:
    """The layout a (decoded) value is in, recognized from its keys, or None."""
    if isinstance(value, Mapping):
        if "inputs" in value or "outputs" in value:
            return "apps"
        if "test_cases" in value:
            return "open-r1"
        return None
    if isinstance(value, (list, tuple)) and value and all(isinstance(case, Mapping) for case in value):
        return "open-r1" if any("type" in case and "testtype" not in case for case in value) else "livecodebench"
    return None


def parse_io_tests(value: Any, layout: str = "auto") -> IOTests | None:
    """One example's test column as :class:`IOTests`, or None when it is not tests in ``layout`` (module doc)."""
    if layout != "auto" and layout not in _PARSERS:
        raise ValueError(f"layout must be 'auto' or one of {LAYOUTS}, got {layout!r}")
    value = decode(value)
    name = detect_layout(value) if layout == "auto" else layout
    return _PARSERS[name](value) if name is not None else None
