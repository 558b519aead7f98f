"""Run untrusted Python against tests in isolated processes: probe what the host allows, fall back in order, report.

Threat model
------------
The adversary is a policy under RL that writes code which is then executed: mostly it writes buggy code (infinite
loops, memory blow-ups, runaway recursion, stray prints, ``sys.exit()``), sometimes code that is hostile by
accident or by reward hacking (forking, deleting files, killing processes, faking a passing run). The goals are:
the trainer process survives, every call returns within its time limit, the host and the other programs are left
as they were, secrets in the trainer's environment stay secret, and a pass is only counted when the test really ran
and passed.

Mechanisms, in the order the probe tries them (:func:`probe_isolation`; :func:`sandbox_report` says what is in force)
-----------------------------------------------------------------------------------------------------------------
Every program runs in a fresh process (the launcher, ``_sandbox_child.py``, started with ``python -I -S`` in its
own session with an environment of only ``PATH``/``LANG``) that forks a runner which:

* lives in new **PID, network and mount namespaces** (``unshare``): PID 1 of its namespace, so when it ends, or is
  killed at the wall-clock limit, the kernel kills everything it spawned, ``setsid()`` daemons included; a network
  namespace with only a downed loopback (no connection anywhere, not even to ``127.0.0.1`` listeners); a fresh
  ``/proc`` (host processes are invisible) and private, size-capped tmpfs over ``/tmp``, ``/var/tmp``, ``/dev/shm``,
  ``/run/lock`` (the working directory ``/tmp/work`` vanishes with the namespace);
* has **resource limits**: ``RLIMIT_CPU`` (ceil of the time limit), ``RLIMIT_AS`` (memory), ``RLIMIT_NPROC``,
  ``RLIMIT_FSIZE``, ``RLIMIT_NOFILE``, ``RLIMIT_CORE=0``, plus the launcher's wall-clock deadline;
* when the trainer runs as **root**: runs as an unprivileged uid of its own (one per worker slot, from 50000 up,
  so ``RLIMIT_NPROC`` is enforced, since the kernel does not enforce it for root, and programs cannot signal each
  other), no groups, all capabilities dropped, ``no_new_privs``; Python directories under an untraversable home
  (pyenv under ``/root``) are bind-mounted read-only, the rest of that home stays hidden;
* when not root: a **user namespace** (mapping only the user's own uid) gives the same PID/network/mount namespaces
  without privileges; capabilities inside it are dropped before the program runs.

Fallbacks when the kernel or a container's seccomp profile refuses namespaces: as root, the unprivileged uid plus
rlimits, with a kill of every process of that uid after each run (``kill(-1)`` as that uid: catches ``setsid()``
daemons too) but with network access and a shared ``/tmp``; as a normal user, rlimits and a process-group kill
only (a daemon that calls ``setsid()`` can outlive its run, network is open). The report says which; a weak plan
is logged as a warning. As root, a plan that cannot drop root is never used: :func:`probe_isolation` raises.

What this does not stop (use a container, gVisor/Firecracker or a remote sandbox such as E2B for these)
------------------------------------------------------------------------------------------------------------
* **Kernel exploits.** There is no seccomp filter: the program can make any system call, so a kernel bug is an
  escape. Adversarial code, or models trained to attack, belong in a VM-grade sandbox.
* **Reading world-readable files** (``/etc``, the project tree, datasets with mode 644): only homes that are not
  traversable are hidden. Do not leave secrets in world-readable files on a training host.
* **Memory pressure.** ``RLIMIT_AS`` caps each program (default 1 GiB), not the sum: ``num_workers`` programs may
  use ``num_workers`` GiB together. There is no cgroup, so no cap on page cache or kernel memory either.
* **Shared CPU.** Programs compete with the trainer for cores; the time limit is wall-clock.
* **Reward hacking inside the verdict.** Tests run in the same interpreter as the solution. An object whose
  ``__eq__`` always returns True passes ``assert f(x) == y``; a program that walks the interpreter's frames can find
  the verdict nonce and forge pass records. Neither escapes the sandbox, but both fake a reward: write tests that
  check types (``assert type(r) is int and r == 3``) and audit suspicious jumps in pass rate.
* **Weaker fallbacks** (above) lose the guarantees that rely on namespaces.

Modules
-------
This module is the public entry point (:func:`run_program`, :class:`SandboxPool`, :func:`probe_isolation`,
:func:`sandbox_report` and the data classes are all importable from here). The pieces, one job each:
:mod:`~trl_ext.rewards.sandbox_limits` (limits and input cases), :mod:`~trl_ext.rewards.sandbox_isolation` (the
fallback ladder and the report), :mod:`~trl_ext.rewards.sandbox_probe` (choosing a plan),
:mod:`~trl_ext.rewards.sandbox_process` (starting, reading and killing one launcher) and
:mod:`~trl_ext.rewards.sandbox_verdicts` (the verdict protocol and :class:`ProgramResult`).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from trl_ext.rewards.sandbox_isolation import NOBODY, ROOT_PLANS, USER_PLANS, Isolation, Plan
from trl_ext.rewards.sandbox_limits import Cases, Limits
from trl_ext.rewards.sandbox_probe import _PROBE_CODE as _PROBE_CODE  # the sandbox tests run the probe's self-test
from trl_ext.rewards.sandbox_probe import _PROBE_TESTS as _PROBE_TESTS
from trl_ext.rewards.sandbox_probe import probe_isolation, sandbox_report
from trl_ext.rewards.sandbox_process import CHILD, MAX_SLOTS, launch_program
from trl_ext.rewards.sandbox_process import _uid_base as _uid_base  # the sandbox tests look for the slots' processes
from trl_ext.rewards.sandbox_verdicts import ProgramResult

__all__ = [
    "CHILD",
    "MAX_SLOTS",
    "NOBODY",
    "ROOT_PLANS",
    "USER_PLANS",
    "Cases",
    "Isolation",
    "Limits",
    "Plan",
    "ProgramResult",
    "SandboxPool",
    "probe_isolation",
    "run_program",
    "sandbox_report",
]


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
    """Run ``code`` then each of ``tests`` in the sandbox; one pass/fail per test. Never raises on program behaviour.

    With ``cases`` (input/output tests; ``tests`` is then ignored), the program runs once per case on that case's
    stdin (or called with its arguments) and the result carries each case's output and status, to be judged by the
    caller; ``limits.timeout`` bounds all cases together.

    Args:
        code: the solution source.
        tests: test sources, run in order in the solution's namespace (typically ``assert`` statements).
        limits: resource limits (defaults: 1 s, 1 GiB, 32 processes, 16 MiB files, 64 open files).
        slot: worker slot (0 to 63); selects this run's unprivileged uid when running as root.
        isolation: plan to use; default the probed one (:func:`probe_isolation`).
        site_packages: let the program import the trainer's site-packages (numpy ...); default stdlib only.
        nproc_share: how many programs may share one uid at a time (plans with a shared uid scale NPROC by it).
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
