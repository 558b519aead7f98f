"""Code rewards: the pass fraction of the completion's Python on the example's tests, run in the sandbox; its format.

The unit-test reward of DeepSeek-R1 (arXiv 2501.12948, section 2.2.2), with open-r1's partial credit, on assert tests
or input/output cases (APPS/TACO, LiveCodeBench/DeepCoder, open-r1); structured data in no known layout is never run
as a test program. ``None`` when the example cannot be scored or the sandbox failed. Rules: ``rewards/README.md``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any

from trl_ext.rewards.checkers import judge
from trl_ext.rewards.extract import answer_region
from trl_ext.rewards.format import ThinkFormat
from trl_ext.rewards.io_tests import LAYOUTS, IOTests, decode, is_structured, parse_io_tests
from trl_ext.rewards.sandbox import Cases, Limits, ProgramResult, SandboxPool, sandbox_report
from trl_ext.rewards.text import TextReward, column, completion_texts

__all__ = ["CodeFormat", "CodeReward", "extract_code", "normalize_tests", "read_tests", "sandbox_report"]
TESTS_FORMATS = ("auto", "asserts", *LAYOUTS)

FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
PYTHON_LABELS = {"", "python", "py", "python3", "py3"}


def extract_code(text: str, code_block: str = "last") -> str | None:
    """Python source of a completion: the last (or all) fenced Python blocks after ``</think>``, else the text; None
    when ``<think>`` never closes or there is no code."""
    if code_block not in ("last", "all"):
        raise ValueError(f"code_block must be 'last' or 'all', got {code_block!r}")
    region = answer_region(text)
    if region is None:
        return None
    blocks = [body for label, body in FENCE.findall(region) if label.lower() in PYTHON_LABELS]
    if blocks:
        code = blocks[-1] if code_block == "last" else "\n\n".join(blocks)
    elif "```" in region:
        return None  # fenced, but only in other languages
    else:
        code = region
    return code if code.strip() else None


def normalize_tests(tests: Any) -> list[str] | None:
    """The tests of one example as a list of test sources, or None when they cannot be used (see module doc)."""
    if tests is None:
        return None
    if isinstance(tests, (list, tuple)):
        items = [str(test) for test in tests if test is not None and str(test).strip()]
        return items or None
    if not isinstance(tests, str) or not tests.strip():
        return None
    try:
        tree = ast.parse(tests)
    except (SyntaxError, ValueError):
        return None
    lines = tests.splitlines()
    ends = [node.end_lineno for node in tree.body if isinstance(node, ast.Assert)]
    if not ends:
        # a program that checks nothing (a literal, JSON text that happens to be Python) would pass any solution
        checks = any(isinstance(node, (ast.Call, ast.Assert, ast.Raise)) for node in ast.walk(tree))
        return [tests] if checks else None
    if "\n".join(lines[ends[-1] :]).strip():
        ends[-1] = len(lines)  # lines after the last assert belong to the last test
    return ["\n".join(lines[start:end]) for start, end in zip([0, *ends], ends, strict=False)]


def read_tests(value: Any, tests_format: str = "auto") -> list[str] | IOTests | None:
    """One example's tests: assert sources, input/output cases, or None when the value is not tests (module doc).
    ``"auto"``: structured data is read as cases, never as an assert program; a JSON list of strings is asserts."""
    if tests_format not in TESTS_FORMATS:
        raise ValueError(f"tests_format must be one of {TESTS_FORMATS}, got {tests_format!r}")
    if tests_format == "asserts":
        return normalize_tests(value)
    if tests_format != "auto":
        return parse_io_tests(value, tests_format)
    decoded = decode(value)
    if is_structured(decoded):
        return parse_io_tests(decoded)
    return normalize_tests(decoded)


class CodeReward:
    """Fraction of the example's tests that the completion's code passes, run in the sandbox. Seconds: ``timeout`` per assert program, or per input/output case (``case_timeout``); ``program_timeout`` for all
    cases of a program (default ``case_timeout`` per case + 1). ``site_packages``: programs may import the trainer's."""

    def __init__(
        self,
        tests_column: str = "tests",
        tests_format: str = "auto",
        timeout: float = 1.0,
        case_timeout: float | None = None,
        program_timeout: float | None = None,
        max_output_kb: int = 256,
        memory_mb: int = 1024,
        max_processes: int = 32,
        max_file_mb: int = 16,
        max_open_files: int = 64,
        num_workers: int | None = None,
        code_block: str = "last",
        site_packages: bool = False,
        name: str = "code",
    ):
        if code_block not in ("last", "all"):
            raise ValueError(f"code_block must be 'last' or 'all', got {code_block!r}")
        if tests_format not in TESTS_FORMATS:
            raise ValueError(f"tests_format must be one of {TESTS_FORMATS}, got {tests_format!r}")
        for option, value in (("case_timeout", case_timeout), ("program_timeout", program_timeout)):
            if value is not None and not value > 0:
                raise ValueError(f"{option} must be > 0 seconds, got {value}")
        if max_output_kb < 1:
            raise ValueError(f"max_output_kb must be >= 1, got {max_output_kb}")
        self.tests_column = tests_column
        self.tests_format = tests_format
        self.case_timeout = case_timeout or timeout
        self.program_timeout = program_timeout
        self.max_output_kb = max_output_kb
        self.limits = Limits(
            timeout=timeout,
            memory_mb=memory_mb,
            max_processes=max_processes,
            max_file_mb=max_file_mb,
            max_open_files=max_open_files,
        )
        self.code_block = code_block
        self.site_packages = site_packages
        self.__name__ = name
        self.pool = SandboxPool(num_workers, self.limits, site_packages)  # probes the host now: fail at construction
        self.last_results: list[ProgramResult | None] = []

    def __call__(
        self,
        prompts: list | None = None,
        completions: list | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        log_extra: Callable[[str, list], None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        texts = completion_texts(completions or [])
        tests_per_example = column(kwargs, self.tests_column, len(texts), self.__name__)
        jobs: list[tuple[int, list[str] | IOTests, tuple]] = []
        rewards: list[float | None] = [None] * len(texts)
        statuses = ["unscorable"] * len(texts)
        for index, (text, raw_tests) in enumerate(zip(texts, tests_per_example, strict=True)):
            tests = read_tests(raw_tests, self.tests_format)
            if tests is None:
                continue
            code = extract_code(text, self.code_block)
            if code is None:
                rewards[index], statuses[index] = 0.0, "no_code"
                continue
            jobs.append((index, tests, self._program(code, tests)))
        results = self.pool.run([program for _, _, program in jobs])
        self.last_results = [None] * len(texts)
        for (index, tests, _), result in zip(jobs, results, strict=True):
            if isinstance(tests, IOTests) and result.status != "sandbox_error":
                result.passed = judge(tests, result.errors, result.outputs)
            rewards[index], statuses[index] = result.pass_fraction, result.status
            self.last_results[index] = result
        if log_metric is not None and texts:
            groups = {"timeout": ["timeout"], "error": ["syntax_error", "solution_error"]}
            for label in ("timeout", "error", "sandbox_error", "unscorable"):
                count = sum(map(statuses.count, groups.get(label, [label])))
                log_metric(f"{self.__name__}/{label}_frac", count / len(texts))
        if log_extra is not None:
            log_extra(f"{self.__name__}_status", statuses)
        return rewards

    def _program(self, code: str, tests: list[str] | IOTests) -> tuple:
        """What the pool runs: ``(code, asserts)``, or ``(code, (), cases, program timeout)`` for input/output cases."""
        if not isinstance(tests, IOTests):
            return (code, tests)
        cases = Cases(tests.inputs, tests.fn_name, self.case_timeout, self.max_output_kb << 10)
        budget = self.program_timeout or self.case_timeout * len(tests) + 1.0
        return (code, (), cases, budget)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["last_results"] = []
        return state


class CodeFormat(TextReward):
    """Code-format reward (open-r1's ``get_code_format_reward``), checking what the code reward will run: 1.0 when the
    answer (after ``</think>``) has a block fenced in ``language`` (``python``: also ``py``, ``python3``, ``py3``)
    and, for Python, the last one parses; else 0.0. ``think_format=True`` also requires the strict think format."""

    def __init__(self, language: str = "python", think_format: bool = False, name: str = "code_format"):
        if not language or not language.replace("+", "").replace("#", "").isalnum():
            raise ValueError(f"language must be a fence label such as 'python' or 'cpp', got {language!r}")
        self.language = language.lower()
        self.labels = PYTHON_LABELS - {""} if self.language in PYTHON_LABELS else {self.language}
        self.think_format = ThinkFormat(strict=True) if think_format else None
        self.__name__ = name

    def score(self, text: str) -> float:
        region = answer_region(text)
        if region is None:
            return 0.0
        if self.think_format is not None and self.think_format.score(text) != 1.0:
            return 0.0
        blocks = [body for label, body in FENCE.findall(region) if label.lower() in self.labels]
        if not blocks or not blocks[-1].strip():
            return 0.0
        if self.labels & PYTHON_LABELS:
            try:
                ast.parse(blocks[-1])
            except (SyntaxError, ValueError):
                return 0.0
        return 1.0
