"""Reading what a sandboxed program reported: every record is one line that starts with the run's secret nonce (test,
case and progress records on the program's stdout, ``exit`` and ``sandbox_error`` on the launcher's stderr); lines
without the nonce are the program's own output, dropped as they stream (:class:`RecordFilter`, bounded memory)."""

from __future__ import annotations

import base64
import binascii
import signal
from dataclasses import dataclass


@dataclass
class ProgramResult:
    """Outcome of one program. ``status``: ok, timeout, crashed, syntax_error, solution_error, sandbox_error.

    For input/output cases, ``outputs`` holds each case's stdout (or JSON return value) and ``errors`` its status
    (``ok``, ``error``, ``timeout``, ``output_limit``, ``crashed``; ``""`` when it never ran); ``passed`` is all False
    until the host judges the outputs (``trl_ext.rewards.checkers``)."""

    status: str
    passed: tuple[bool, ...]
    wall_s: float
    errors: tuple[str, ...] = ()
    detail: str = ""
    outputs: tuple[str | None, ...] = ()

    @property
    def pass_fraction(self) -> float | None:
        """Fraction of tests with a pass record; None when the sandbox itself failed (nothing was judged)."""
        if self.status == "sandbox_error":
            return None
        return sum(self.passed) / len(self.passed) if self.passed else 0.0


class RecordFilter:
    """Keeps the lines of a stream that start with ``prefix``; drops the rest as it goes (bounded memory)."""

    def __init__(self, prefix: bytes, max_records: int, max_record_bytes: int = 4096):
        self.prefix, self.max_records, self.max_record_bytes = prefix, max_records, max_record_bytes
        self.records: list[bytes] = []
        self.partial = b""

    def feed(self, chunk: bytes) -> None:
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()[-self.max_record_bytes :]  # a longer unfinished line is junk
        for line in lines:
            if line.startswith(self.prefix) and len(self.records) < self.max_records:
                self.records.append(line)

    def close(self) -> list[bytes]:
        self.feed(b"\n")
        return self.records


def parse_verdicts(
    verdicts: list[bytes], stderr: bytes, nonce: str, n_tests: int, wall: float, killed: bool, io: bool = False
) -> ProgramResult:
    """Build the result: test and progress records from the verdict channel, exit records from the launcher's."""
    prefix = nonce + " "
    program: dict[str, list[str]] = {}
    passed, errors, seen = [False] * n_tests, [""] * n_tests, set()
    outputs: list[str | None] = [None] * n_tests
    for raw in verdicts:
        kind, *args = raw.decode("utf-8", "replace")[len(prefix) :].split(" ")
        if kind == "case" and len(args) == 3 and args[0].isdigit() and int(args[0]) < n_tests:
            index = int(args[0])
            if index not in seen:
                seen.add(index)
                errors[index] = args[1]
                outputs[index] = _decode_output(args[2])
        elif kind == "test" and len(args) >= 2 and args[0].isdigit():
            index = int(args[0])
            if index < n_tests and index not in seen:
                seen.add(index)
                passed[index] = args[1] == "pass"
                errors[index] = args[2] if len(args) > 2 else ""
        elif kind in ("started", "syntax_error", "solution_error", "done"):
            program.setdefault(kind, args)
    launcher: dict[str, list[str]] = {}
    for line in stderr.decode("utf-8", "replace").splitlines():
        if line.startswith(prefix):
            kind, *args = line[len(prefix) :].split(" ")
            launcher.setdefault(kind, args)
    result = ProgramResult("ok", tuple(passed), wall, tuple(errors), outputs=tuple(outputs) if io else ())
    if "sandbox_error" in launcher:
        result.status, result.detail = "sandbox_error", " ".join(launcher["sandbox_error"])
    elif "exit" not in launcher:
        result.status = "sandbox_error"
        result.detail = "launcher gave no exit record" + (" (killed by host)" if killed else "")
        tail = [line for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
        if tail:
            result.detail += f": {tail[-1][:300]}"
    elif "syntax_error" in program:
        result.status, result.detail = "syntax_error", " ".join(program["syntax_error"])
    elif "solution_error" in program:
        result.status, result.detail = "solution_error", " ".join(program["solution_error"])
    elif launcher["exit"][1:2] == ["1"] or launcher["exit"][0] == str(-signal.SIGXCPU):
        # the wall-clock deadline, or RLIMIT_CPU's SIGXCPU (the launcher reports death by signal N as -N): which
        # strikes first depends on the machine's load, so both count as a timeout
        result.status = "timeout"
    elif "done" not in program:
        result.status, result.detail = "crashed", f"exit status {launcher['exit'][0]}"
    elif "timeout" in errors:
        result.status = "timeout"  # a case ran past its own limit; the cases before and after it still count
    return result


def _decode_output(field_text: str) -> str | None:
    if field_text == "-":
        return ""
    try:
        return base64.b64decode(field_text, validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return None
