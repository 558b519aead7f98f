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
import json
import logging
import os
import secrets
import selectors
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from trl_ext.rewards.sandbox_isolation import NOBODY, ROOT_PLANS, USER_PLANS, Isolation
from trl_ext.rewards.sandbox_limits import Cases, Limits
from trl_ext.rewards.sandbox_verdicts import ProgramResult, RecordFilter, parse_verdicts

__all__ = ["Cases", "Limits", "ProgramResult", "SandboxPool", "probe_isolation", "run_program", "sandbox_report"]

logger = logging.getLogger(__name__)

CHILD = Path(__file__).with_name("_sandbox_child.py")
MAX_SLOTS = 64
_GRACE = 5.0  # seconds the host waits beyond the launcher's own deadline before killing the launcher


def _uid_base() -> int:
    """First uid of this process's slots: 50000 + 64 * (pid mod 150), below 60000 so that containers with a
    65536-uid map accept it, and distinct between concurrent trainer processes in most cases."""
    return 50000 + MAX_SLOTS * (os.getpid() % 150)


def _processes_of(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        try:
            count += entry.name.isdigit() and entry.stat().st_uid == uid
        except OSError:
            pass
    return count


def _site_paths() -> list[str]:
    paths = [p for p in sys.path if p and ("site-packages" in p or "dist-packages" in p) and os.path.isdir(p)]
    try:
        paths += [p for p in site.getsitepackages() if os.path.isdir(p) and p not in paths]
    except AttributeError:
        pass
    return paths


def _read_until_eof(proc: subprocess.Popen, deadline: float, verdicts: RecordFilter) -> tuple[bytes, bool]:
    """Filter the launcher's stdout (the program's verdict channel) and keep the tail of its stderr (the launcher's
    own records) until both close or ``deadline``; then kill the launcher's process group."""
    err = b""
    killed = False
    with selectors.DefaultSelector() as selector:
        for stream in (proc.stdout, proc.stderr):
            os.set_blocking(stream.fileno(), False)
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                if killed:
                    break
                _kill_group(proc.pid)
                killed = True
                deadline = time.monotonic() + 1.0
                continue
            for key, _ in selector.select(left):
                try:
                    chunk = os.read(key.fileobj.fileno(), 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(key.fileobj)
                elif key.fileobj is proc.stdout:
                    verdicts.feed(chunk)
                else:
                    err = (err + chunk)[-16384:]
    return err, killed


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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
    limits = limits or Limits()
    isolation = isolation or probe_isolation()
    if not 0 <= slot < MAX_SLOTS:
        raise ValueError(f"slot must be in [0, {MAX_SLOTS}), got {slot}")
    plan = isolation.plan
    uid = {"slot": _uid_base() + slot, "nobody": NOBODY, "self": None}[plan.uid]
    if plan.uid == "slot":
        nproc = limits.max_processes
    elif plan.uid == "nobody":
        nproc = limits.max_processes * max(1, nproc_share)
    else:
        nproc = _processes_of(os.geteuid()) + limits.max_processes
    tests = [] if cases is not None else [str(test) for test in tests]
    n_records = len(cases.inputs) if cases is not None else len(tests)
    nonce = secrets.token_hex(16)
    workdir = None if plan.mount_ns else tempfile.mkdtemp(prefix="rewards-sandbox-")
    config = {
        "code": str(code),
        "tests": tests,
        "limits": limits.to_child(),
        "plan": plan.to_child(),
        "nonce": nonce,
        "uid": uid,
        "nproc": nproc,
        "workdir": workdir,
        "extra_paths": _site_paths() if site_packages else [],
        "io": cases.to_child() if cases is not None else None,
    }
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", str(CHILD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            cwd="/",
            start_new_session=True,
            close_fds=True,
        )
    except OSError as error:
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        return ProgramResult("sandbox_error", (False,) * n_records, 0.0, detail=f"launch failed: {error}")
    try:
        try:
            proc.stdin.write(json.dumps(config).encode())
            proc.stdin.close()
        except OSError:
            pass
        record_bytes = 4096 if cases is None else 4 * cases.max_output_bytes // 3 + 4096
        verdicts = RecordFilter((nonce + " ").encode(), 2 * n_records + 16, record_bytes)
        stderr, killed = _read_until_eof(proc, start + limits.timeout + _GRACE, verdicts)
        _kill_group(proc.pid)  # stragglers of weak plans; the launcher is not reaped yet, so the id is still ours
        proc.wait()
    finally:
        for stream in (proc.stdout, proc.stderr):
            stream.close()
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    wall = time.monotonic() - start
    return parse_verdicts(verdicts.close(), stderr, nonce, n_records, wall, killed, io=cases is not None)


_PROBE_CODE = r"""
import os, socket, time

def capabilities_dropped():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16) == 0
    return False

def no_network():
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(0.2)
        s.connect(("127.0.0.1", 9))
    except OSError as error:
        return error.errno in (101, 99)  # ENETUNREACH, EADDRNOTAVAIL: no usable interface at all
    return False

def nproc_enforced(limit):
    children = []
    try:
        for _ in range(limit + 8):
            pid = os.fork()
            if pid == 0:
                time.sleep(3)
                os._exit(0)
            children.append(pid)
    except BlockingIOError:
        return True
    finally:
        for pid in children:
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except OSError:
                pass
    return False
"""

_PROBE_TESTS = {
    "not_root": "assert os.getuid() != 0 and os.geteuid() != 0",
    "capabilities_dropped": "assert capabilities_dropped()",
    "stdlib_importable": "import fractions, decimal, json, collections",
    "pid_namespace": "assert os.getpid() == 1",
    "no_network": "assert no_network()",
    "private_tmp": "assert os.getcwd() == '/tmp/work' and os.listdir('/tmp') == ['work']",
    "nproc_enforced": "assert nproc_enforced(8)",
}
_REQUIRED = {"pid_ns": "pid_namespace", "net_ns": "no_network", "mount_ns": "private_tmp"}  # checks of a namespace

_isolation: Isolation | None = None
_probe_lock = threading.Lock()


def probe_isolation(refresh: bool = False) -> Isolation:
    """Find the strongest plan this host allows by running a self-test program under each in turn (cached).

    A plan is accepted when its launcher starts and the self-test verifies what the plan promises: not root and no
    capabilities (when started as root), the standard library importable, and PID namespace, no network and a
    private ``/tmp`` for plans that use those namespaces. ``RLIMIT_NPROC`` enforcement is measured and reported.
    Raises ``RuntimeError`` if running as root and no plan can drop root.
    """
    global _isolation
    with _probe_lock:
        if _isolation is not None and not refresh:
            return _isolation
        euid = os.geteuid()
        plans = ROOT_PLANS if euid == 0 else USER_PLANS
        rejected: list[tuple[str, str]] = []
        names = list(_PROBE_TESTS)
        limits = Limits(timeout=15.0, max_processes=8)
        for plan in plans:
            candidate = Isolation(plan, euid=euid)
            result = run_program(_PROBE_CODE, [_PROBE_TESTS[n] for n in names], limits, isolation=candidate)
            if result.status != "ok":
                rejected.append((plan.name, f"{result.status}: {result.detail}"))
                continue
            checks = dict(zip(names, result.passed, strict=True))
            required = ["stdlib_importable", "capabilities_dropped"] + (["not_root"] if euid == 0 else [])
            required += [check for flag, check in _REQUIRED.items() if getattr(plan, flag)]
            missing = [name for name in required if not checks[name]]
            if missing:
                rejected.append((plan.name, f"checks failed: {missing}"))
                continue
            relevant = set(required) | {"nproc_enforced"}
            candidate.checks = {k: v for k, v in checks.items() if k in relevant}
            candidate.rejected = rejected
            _isolation = candidate
            if not candidate.strong:
                logger.warning("code sandbox runs with a weak isolation plan:\n%s", candidate.describe())
            return candidate
        raise RuntimeError(
            "no sandbox plan works on this host"
            + (" (running as root and unable to drop to an unprivileged uid)" if euid == 0 else "")
            + ": "
            + "; ".join(f"{name}: {reason}" for name, reason in rejected)
            + ". Run code rewards in a container or a remote sandbox."
        )


def sandbox_report() -> str:
    """Which isolation mechanisms are in force on this host (runs the probe on first use)."""
    return probe_isolation().describe()


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
