"""Math accuracy: extract the final answer, then let math-verify judge equivalence, without ever hanging.

The rule-based outcome reward of DeepSeek-R1 (arXiv 2501.12948, section 2.2.2) and DAPO (arXiv 2503.14476, section
2.4). math-verify's ``signal.alarm`` timeouts only work in the main thread, so elsewhere backend ``"process"`` scores
in helper processes and kills one that overruns ``hard_timeout`` (also a hang in C code, which alarms cannot stop).
Reward: 1.0 correct; 0.0 wrong, no answer or timed out; ``None`` when the *reference* cannot be scored. Rules:
``rewards/README.md``, "Math accuracy".
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import selectors
import signal
import subprocess
import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from functools import cache, lru_cache
from typing import Any

from trl_ext.rewards.extract import braces_balanced, extract_answer, gold_answer, parse_strategies
from trl_ext.rewards.text import column, completion_texts

BACKENDS = ("auto", "signal", "process")
_LATEX_MARKUP = re.compile(r"[\\{}^_]")
# a math-verification helper imports its loop by module name, so it is notebook- and script-safe
WORKER_COMMAND = [sys.executable, "-c", "from trl_ext.rewards.math import worker_main; worker_main()"]


@cache
def _quiet_math_verify() -> None:
    """math-verify logs a warning per timeout; we count timeouts ourselves and report them through ``log_metric``."""
    for name in ("math_verify.parser", "math_verify.grader", "math_verify"):
        logging.getLogger(name).setLevel(logging.ERROR)


def signals_usable() -> bool:
    """True when math-verify's ``signal.alarm`` timeouts can work here: main thread, SIGALRM exists, and no
    ``ITIMER_REAL`` armed by someone else (``signal.alarm`` would silently replace it)."""
    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        return False
    return signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def is_reference(solution: Any) -> bool:
    """Whether ``solution`` can be a reference answer at all: non-empty text or a number. A dict (e.g. DAPO-Math's
    ``reward_model`` column given whole), a list or ``None`` cannot; their text would be parsed into some number."""
    if isinstance(solution, bool):
        return False
    if isinstance(solution, int | float):
        return True
    return isinstance(solution, str) and bool(solution.strip())


def _parse(latex: str, timeout: int) -> tuple:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    return tuple(parse(latex, extraction_config=config, parsing_timeout=timeout))


_parse_gold = lru_cache(maxsize=4096)(_parse)


def reference_unscorable(gold: str, parsed: Sequence[Any]) -> bool:
    """Whether the reference ``gold`` (``parsed`` by math-verify) cannot be scored, so that the example teaches
    nothing rather than 0.0 from a broken label: nothing parsed; unbalanced braces (cut-off LaTeX, even where
    math-verify reads a prefix); LaTeX markup but no expression (only a completion repeating the broken text could
    score); no letter, digit or math symbol. Other text math-verify reads no expression from (``C++``) is compared
    as text."""
    if not parsed or not braces_balanced(gold):
        return True
    if any(not isinstance(item, str) for item in parsed):
        return False
    return bool(_LATEX_MARKUP.search(gold)) or not any(_comparable(char) for char in gold)


def _comparable(char: str) -> bool:
    """A letter, a digit or a math symbol (Unicode L*, N*, Sm: ``x``, ``7``, ``∞``, ``+``), not punctuation."""
    category = unicodedata.category(char)
    return category[0] in "LN" or category == "Sm"


def score_one(
    solution: Any,
    text: str,
    extraction: str | Sequence[str] = "auto",
    multiple_boxed: str = "last",
    parse_timeout: int = 5,
    verify_timeout: int = 5,
) -> tuple[float | None, str]:
    """Score one completion in this thread with math-verify's signal timeouts (only where :func:`signals_usable`).
    Returns ``(reward, status)``, status one of ``correct``, ``wrong``, ``no_answer``, ``timeout``, ``gold_unparseable``.
    """
    _quiet_math_verify()
    if extraction == "math_verify":
        from trl.rewards import accuracy_reward

        start = time.monotonic()
        reward = accuracy_reward([[{"role": "assistant", "content": text}]], [str(solution)])[0]
        if reward is None:
            return None, "gold_unparseable"
        if not reward and time.monotonic() - start >= min(parse_timeout, verify_timeout, 5):
            return 0.0, "timeout"
        return float(reward), "correct" if reward else "wrong"

    from math_verify import verify

    latex = gold_answer(solution)
    gold = _parse_gold(latex, parse_timeout)
    if reference_unscorable(latex, gold):
        return None, "gold_unparseable"
    answer, _ = extract_answer(text, extraction, multiple_boxed)
    if answer is None:
        return 0.0, "no_answer"
    start = time.monotonic()
    predicted = list(_parse(answer, parse_timeout))
    if not predicted:
        timed_out = parse_timeout and time.monotonic() - start >= parse_timeout
        return 0.0, "timeout" if timed_out else "no_answer"
    start = time.monotonic()
    correct = verify(list(gold), predicted, timeout_seconds=verify_timeout)
    if not correct and verify_timeout and time.monotonic() - start >= verify_timeout:
        return 0.0, "timeout"
    return (1.0, "correct") if correct else (0.0, "wrong")


class _Worker:
    """One helper process speaking JSON lines (:func:`worker_main`); killed and replaced on overrun."""

    def __init__(self, command: list[str], startup_timeout: float = 120.0):
        self.command = command
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None

    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a Ctrl-C in a notebook or terminal interrupts the trainer, not the helper
        )
        if self._readline(self.startup_timeout) != {"ready": True}:
            self.kill()
            raise RuntimeError(f"math verification helper failed to start: {self.command}")

    def _readline(self, timeout: float) -> Any:
        assert self.proc is not None and self.proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def request(self, message: dict, timeout: float) -> Any:
        """Send one request and wait ``timeout`` seconds for its answer; on overrun kill the helper, return None."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
            reply = self._readline(timeout)
        except (OSError, ValueError):
            reply = None
        if reply is None:
            self.kill()
        return reply

    def kill(self) -> None:
        if self.proc is not None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            with suppress(OSError):  # a request left unflushed in a broken pipe fails again on close
                self.proc.stdin.close()
            self.proc.stdout.close()
            self.proc = None


def worker_main() -> None:
    """The ``process`` backend's helper: :func:`score_one` in its own main thread, one JSON request per stdin line
    (``solution``, ``text``, options), one JSON reply (``reward``, ``status``) per line."""
    _quiet_math_verify()
    import math_verify  # noqa: F401  - pay the sympy import before announcing readiness

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            reward, status = score_one(request.pop("solution"), request.pop("text"), **request)
        except Exception as error:  # a malformed request must not take the helper down
            reward, status = 0.0, f"error: {type(error).__name__}"
        print(json.dumps({"reward": reward, "status": status}), flush=True)


class MathAccuracy:
    """Math accuracy reward: 1.0 if the completion's final answer equals the reference (math-verify), else 0.0.

    ``extraction``: ``"auto"``, a strategy of :mod:`trl_ext.rewards.extract`, a list of them tried in order, or
    ``"math_verify"`` for exactly ``trl.rewards.accuracy_reward``. ``solution_column``: ``None`` uses ``answer`` if
    present, else ``solution`` (a full GSM8K or MATH solution works). ``parse_timeout``, ``verify_timeout``:
    math-verify's per-call limits, whole seconds (``signal.alarm``). ``hard_timeout``: wall-clock seconds per
    completion in the process backend before the helper is killed and replaced; ``num_workers``: its helpers."""

    _lock = threading.Lock()  # guards the helpers' one-time start; one for all instances, so nothing to pickle

    def __init__(
        self,
        extraction: str | Sequence[str] = "auto",
        multiple_boxed: str = "last",
        solution_column: str | None = None,
        timeout_backend: str = "auto",
        parse_timeout: int = 5,
        verify_timeout: int = 5,
        hard_timeout: float | None = None,
        num_workers: int = 1,
        name: str = "accuracy",
    ):
        if extraction != "math_verify":
            parse_strategies(extraction)
        if isinstance(extraction, list):
            extraction = tuple(extraction)
        if multiple_boxed not in ("last", "all"):
            raise ValueError(f"multiple_boxed must be 'last' or 'all', got {multiple_boxed!r}")
        if timeout_backend not in BACKENDS:
            raise ValueError(f"timeout_backend must be one of {BACKENDS}, got {timeout_backend!r}")
        for label, value in (("parse_timeout", parse_timeout), ("verify_timeout", verify_timeout)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be a whole number of seconds >= 1 (signal.alarm), got {value!r}")
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.extraction = extraction
        self.multiple_boxed = multiple_boxed
        self.solution_column = solution_column
        self.timeout_backend = timeout_backend
        self.parse_timeout = parse_timeout
        self.verify_timeout = verify_timeout
        self.hard_timeout = hard_timeout or 2 * parse_timeout + 2 * verify_timeout + 2
        self.num_workers = num_workers
        self.__name__ = name
        self._workers: queue.Queue[_Worker] | None = None
        self.last_statuses: list[str] = []

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_workers"] = None
        return state

    def backend(self) -> str:
        """The backend a call from the current thread would use."""
        if self.timeout_backend != "auto":
            return self.timeout_backend
        return "signal" if signals_usable() else "process"

    def __call__(
        self,
        prompts: list | None = None,
        completions: list | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        texts = completion_texts(completions or [])
        name = self.solution_column or ("answer" if "answer" in kwargs else "solution")
        solutions = column(kwargs, name, len(texts), self.__name__)
        backend = self.backend()
        if backend == "signal" and not signals_usable():
            raise RuntimeError(
                f"reward {self.__name__!r}: timeout_backend='signal' needs the main thread and a free SIGALRM; "
                "use timeout_backend='auto' or 'process' here."
            )
        scorer = self._score_signal if backend == "signal" else self._score_process

        def score(solution: Any, text: str) -> tuple[float | None, str]:
            return scorer(solution, text) if is_reference(solution) else (None, "gold_unparseable")

        if backend == "process" and self.num_workers > 1 and len(texts) > 1:
            with ThreadPoolExecutor(self.num_workers) as pool:
                results = list(pool.map(score, solutions, texts))
        else:
            results = [score(solution, text) for solution, text in zip(solutions, texts, strict=True)]
        self.last_statuses = [status for _, status in results]
        if log_metric is not None and texts:
            labels = {"no_answer": "no_answer", "timeout": "timeout", "gold_unparseable": "unscorable"}
            for status, label in labels.items():
                log_metric(f"{self.__name__}/{label}_frac", self.last_statuses.count(status) / len(texts))
        return [reward for reward, _ in results]

    def _options(self) -> dict:
        return {
            "extraction": self.extraction,  # a tuple goes to the helper as a JSON list
            "multiple_boxed": self.multiple_boxed,
            "parse_timeout": self.parse_timeout,
            "verify_timeout": self.verify_timeout,
        }

    def _score_signal(self, solution: Any, text: str) -> tuple[float | None, str]:
        try:
            return score_one(solution, text, **self._options())
        except Exception:  # math-verify swallows its own errors; this is a last line of defence
            return 0.0, "error"

    def _score_process(self, solution: Any, text: str) -> tuple[float | None, str]:
        with self._lock:
            if self._workers is None:
                self._workers = queue.Queue()
                for _ in range(self.num_workers):
                    self._workers.put(_Worker(WORKER_COMMAND))
        worker = self._workers.get()
        try:
            reply = worker.request({"solution": str(solution), "text": text, **self._options()}, self.hard_timeout)
        finally:
            self._workers.put(worker)
        if reply is None:
            return 0.0, "timeout"
        return reply["reward"], reply["status"]

    def close(self) -> None:
        """Stop the helper processes (they also exit on their own when this process exits)."""
        if self._workers is not None:
            while not self._workers.empty():
                self._workers.get().kill()
            self._workers = None

    def __del__(self) -> None:
        with suppress(Exception):
            self.close()
