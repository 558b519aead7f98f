"""Run untrusted Python against tests in isolated processes: probe what the host allows, fall back in order, report.

The adversary is a policy under RL whose code is executed: mostly buggy (endless loops, memory blow-ups, stray
prints, ``sys.exit()``), sometimes hostile by accident or by reward hacking (forking, deleting files, killing
processes, faking a pass). The goals: the trainer survives, every call returns within its limit, the host is left as
it was, the trainer's secrets stay secret, and a pass counts only when the test really ran and passed.

Each program runs in a fresh launcher (``_sandbox_child.py``, ``python -I -S``) whose runner lives in new PID,
network and mount namespaces (everything it spawns dies with it; no network; private ``/proc`` and ``/tmp``), under
rlimits, as an unprivileged uid when the trainer is root (a user namespace otherwise), with no capabilities and
``no_new_privs``. When the kernel refuses namespaces, weaker plans are used and logged (:func:`sandbox_report`).

What it does not stop (kernel exploits: there is no seccomp filter; world-readable files; total memory; shared CPU;
reward hacking inside the verdict, e.g. an ``__eq__`` that always returns True) and the full mechanism table are in
``rewards/README.md``, "Isolation" and "Threat model and its limits".
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from trl_ext.rewards.sandbox_isolation import Isolation
from trl_ext.rewards.sandbox_limits import Cases, Limits
from trl_ext.rewards.sandbox_probe import probe_isolation, sandbox_report
from trl_ext.rewards.sandbox_process import MAX_SLOTS, launch_program
from trl_ext.rewards.sandbox_verdicts import ProgramResult

__all__ = ["Cases", "Limits", "ProgramResult", "SandboxPool", "probe_isolation", "run_program", "sandbox_report"]


def run_program(
    code: str,
    tests: Sequence[str],
    limits: Limits | None = None,
    *,
    slot: int = 0,
    isolation: Isolation | None = None,
    site_packages: bool = False,
    nproc_share: int = 1,
    cases: Cases | None = None,
) -> ProgramResult:
    """Run ``code`` then each of ``tests`` (run in the solution's namespace) in the sandbox; one pass/fail per test.
    Never raises on program behaviour.

    With ``cases`` (input/output tests; ``tests`` is then ignored), the program runs once per case and the result
    carries each case's output and status, for the caller to judge; ``limits.timeout`` bounds all cases together.
    ``slot`` (0 to 63) selects the unprivileged uid when running as root; ``isolation`` defaults to the probed plan;
    ``site_packages`` lets the program import the trainer's site-packages; ``nproc_share``: programs sharing one uid.
    """
    return launch_program(
        code,
        tests,
        limits or Limits(),
        isolation or probe_isolation(),
        slot=slot,
        site_packages=site_packages,
        nproc_share=nproc_share,
        cases=cases,
    )


class SandboxPool:
    """Runs many programs in parallel: ``num_workers`` threads, each launching one sandboxed process at a time.

    Threads, not processes, hold the slots: nothing is pickled or re-imported, so it works unchanged in notebooks
    and scripts without an ``if __name__ == "__main__"`` guard. Each slot has its own unprivileged uid (as root).
    """

    def __init__(self, num_workers: int | None = None, limits: Limits | None = None, site_packages: bool = False):
        if num_workers is None:
            num_workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        if not 1 <= num_workers <= MAX_SLOTS:
            raise ValueError(f"num_workers must be in [1, {MAX_SLOTS}], got {num_workers}")
        self.num_workers = num_workers
        self.limits = limits or Limits()
        self.site_packages = site_packages
        self.isolation = probe_isolation()

    def run(self, programs: Sequence[tuple]) -> list[ProgramResult]:
        """Run ``(code, tests)`` pairs, or ``(code, (), cases, timeout)`` input/output programs (``timeout``: the
        program's wall-clock budget, all cases together); results in input order."""
        slots: list[int] = list(range(self.num_workers))
        lock = threading.Lock()

        def one(program: tuple) -> ProgramResult:
            cases = program[2] if len(program) > 2 else None
            limits = self.limits if cases is None else dataclasses.replace(self.limits, timeout=program[3])
            with lock:
                slot = slots.pop()
            try:
                return run_program(
                    program[0],
                    program[1],
                    limits,
                    slot=slot,
                    isolation=self.isolation,
                    site_packages=self.site_packages,
                    nproc_share=self.num_workers,
                    cases=cases,
                )
            finally:
                with lock:
                    slots.append(slot)

        if self.num_workers == 1 or len(programs) <= 1:
            return [one(program) for program in programs]
        with ThreadPoolExecutor(self.num_workers, thread_name_prefix="sandbox") as pool:
            return list(pool.map(one, programs))
