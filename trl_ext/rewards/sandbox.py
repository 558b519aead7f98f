"""Run untrusted Python against tests in isolated processes: probe what the host allows, fall back in order, report.

Each program runs in a fresh launcher (``_sandbox_child.py``) whose runner lives in new PID, network and mount
namespaces, under rlimits, as an unprivileged uid when the trainer is root (a user namespace otherwise), with no
capabilities and ``no_new_privs``; when the kernel refuses namespaces, weaker plans are used and logged
(:func:`sandbox_report`). What it does not stop (no seccomp filter, world-readable files, total memory, reward
hacking inside the verdict): ``rewards/README.md``, "Isolation" and "Threat model and its limits".
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import queue
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
from contextlib import suppress
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

__all__ = ["Cases", "Limits", "ProgramResult", "SandboxPool", "probe_isolation", "run_program", "sandbox_report"]

logger = logging.getLogger(__name__)

CHILD = Path(__file__).with_name("_sandbox_child.py")
MAX_SLOTS = 64
_GRACE = 5.0  # seconds the host waits beyond the launcher's own deadline before killing the launcher


@dataclass(frozen=True)
class Limits:
    """Per-program limits. ``timeout`` is wall-clock seconds; ``cpu_seconds`` defaults to ``ceil(timeout)``."""

    timeout: float = 1.0
    cpu_seconds: int | None = None
    memory_mb: int = 1024
    max_processes: int = 32
    max_file_mb: int = 16
    max_open_files: int = 64
    tmpfs_mb: int = 64

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {self.timeout}")
        for name in ("memory_mb", "max_processes", "max_file_mb", "max_open_files", "tmpfs_mb"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_open_files < 8:
            raise ValueError(f"max_open_files must be >= 8 (Python itself needs a few), got {self.max_open_files}")

    def to_child(self) -> dict:
        data = asdict(self)
        data["cpu_seconds"] = self.cpu_seconds or max(1, math.ceil(self.timeout))
        return data


@dataclass(frozen=True)
class Cases:
    """Input/output cases of one program, inputs only: the expected outputs stay on the host. ``inputs``: each case's
    stdin, or (``fn_name`` set) the JSON text of its arguments; ``Limits.timeout`` bounds all cases together."""

    inputs: tuple[str, ...]
    fn_name: str | None = None
    case_timeout: float = 1.0
    max_output_bytes: int = 256 << 10

    def __post_init__(self) -> None:
        if not self.case_timeout > 0:
            raise ValueError(f"case_timeout must be > 0 seconds, got {self.case_timeout}")
        if self.max_output_bytes < 1:
            raise ValueError(f"max_output_bytes must be >= 1, got {self.max_output_bytes}")


NOBODY = 65534


@dataclass(frozen=True)
class Plan:
    """One rung of the fallback ladder: which namespaces, which uid, whether to sweep the uid after each run."""

    name: str
    user_ns: bool
    pid_ns: bool
    net_ns: bool
    mount_ns: bool
    uid: str  # "slot": a fresh unprivileged uid per worker slot; "nobody": 65534 shared; "self": no change
    uid_sweep: bool


# the fallback ladders, strongest plan first
ROOT_PLANS = (
    Plan("namespaces+uid", False, True, True, True, "slot", False),
    Plan("namespaces+nobody", False, True, True, True, "nobody", False),
    Plan("uid+sweep", False, False, False, False, "slot", True),
    Plan("nobody", False, False, False, False, "nobody", False),
)
USER_PLANS = (
    Plan("user-namespaces", True, True, True, True, "self", False),
    Plan("rlimits-only", False, False, False, False, "self", False),
)


@dataclass
class Isolation:
    """What the probe found: the plan in force, the checks it verified, and the plans it had to reject."""

    plan: Plan
    checks: dict[str, bool] = field(default_factory=dict)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    euid: int = 0

    def describe(self) -> str:
        """Human-readable report of the mechanisms in force."""
        plan = self.plan
        user = {
            "slot": "own unprivileged uid per worker slot (setuid from root), no groups, no capabilities",
            "nobody": f"uid {NOBODY} (nobody), shared by all workers, no groups, no capabilities",
            "self": f"the trainer's own uid {self.euid}, no capabilities",
        }[plan.uid]
        lines = [
            f"sandbox plan: {plan.name} (euid {self.euid})",
            f"  user: {user}",
            f"  user namespace: {'yes' if plan.user_ns else 'no'}",
            f"  PID namespace: {'yes: everything dies with the program' if plan.pid_ns else 'no'}"
            + ("" if plan.pid_ns else (" (kill(-1) sweep of the uid)" if plan.uid_sweep else " (process group kill)")),
            f"  network namespace: {'yes: no network at all' if plan.net_ns else 'NO: network is reachable'}",
            f"  mount namespace: {'yes: private /proc and tmpfs /tmp' if plan.mount_ns else 'NO: host /tmp shared'}",
            (
                "  imports: standard library and site-packages (if enabled) bind-mounted read-only"
                if plan.mount_ns
                else "  imports: common standard modules preloaded before the uid drop; others may be unreadable"
                if plan.uid != "self"
                else "  imports: whatever the trainer's uid can read"
            ),
            "  rlimits: CPU, AS, FSIZE, NOFILE, CORE=0"
            + (", NPROC (enforced)" if self.checks.get("nproc_enforced") else ", NPROC (set, not verified)"),
            "  verified: " + ", ".join(f"{k}={'ok' if v else 'FAILED'}" for k, v in sorted(self.checks.items())),
        ]
        lines += [f"  rejected plan {name}: {reason}" for name, reason in self.rejected]
        return "\n".join(lines)

    @property
    def strong(self) -> bool:
        return self.plan.pid_ns and self.plan.net_ns and self.plan.mount_ns


@dataclass
class ProgramResult:
    """Outcome of one program. ``status``: ok, timeout, crashed, syntax_error, solution_error, sandbox_error. For
    input/output cases ``outputs`` holds each case's stdout (or JSON return value), ``errors`` its status (ok, error,
    timeout, output_limit, crashed; ``""``: never ran), and ``passed`` stays all False until the host judges the
    outputs (``trl_ext.rewards.checkers``)."""

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
    """Keeps the lines of a stream that start with ``prefix`` (the run's secret nonce: the records); the program's own
    output, lines without it, is dropped as it streams (bounded memory)."""

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
        elif kind in ("syntax_error", "solution_error", "done"):
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
    elif "syntax_error" in program or "solution_error" in program:
        kind = "syntax_error" if "syntax_error" in program else "solution_error"
        result.status, result.detail = kind, " ".join(program[kind])
    elif launcher["exit"][1:2] == ["1"] or launcher["exit"][0] == str(-signal.SIGXCPU):
        # the wall-clock deadline or RLIMIT_CPU's SIGXCPU (signal N reported as -N): which comes first depends on load
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
    except ValueError:  # binascii.Error included
        return None


def _uid_base() -> int:
    """First uid of this process's slots: below 60000 so that containers with a 65536-uid map accept it, and
    distinct between concurrent trainer processes in most cases."""
    return 50000 + MAX_SLOTS * (os.getpid() % 150)


def _processes_of(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        with suppress(OSError):
            count += entry.name.isdigit() and entry.stat().st_uid == uid
    return count


def _site_paths() -> list[str]:
    paths = [p for p in sys.path if p and ("site-packages" in p or "dist-packages" in p) and os.path.isdir(p)]
    return paths + [p for p in site.getsitepackages() if os.path.isdir(p) and p not in paths]


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
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


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
    """Run ``code`` then each of ``tests`` in its namespace (one pass/fail each), or once per case of ``cases``
    (outputs left for the caller to judge). Never raises on program behaviour. ``slot`` picks the unprivileged uid
    as root; ``nproc_share``: programs sharing one uid."""
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
        "plan": asdict(plan),
        "nonce": nonce,
        "uid": uid,
        "nproc": nproc,
        "workdir": workdir,
        "extra_paths": _site_paths() if site_packages else [],
        "io": asdict(cases) if cases is not None else None,  # (JSON writes the tuple of inputs as a list)
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
        with suppress(OSError):
            proc.stdin.write(json.dumps(config).encode())
            proc.stdin.close()
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
    """The strongest plan whose self-test (``_PROBE_TESTS``) verifies what it promises on this host (cached).
    Raises ``RuntimeError`` when no plan works, e.g. as root with no way to drop root."""
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
    """Runs programs in parallel: ``num_workers`` threads, each launching one sandboxed process at a time (threads,
    so nothing is pickled: notebook-safe, no ``__main__`` guard). Each slot has its own unprivileged uid (as root)."""

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
        slots: queue.SimpleQueue[int] = queue.SimpleQueue()
        for slot in range(self.num_workers):
            slots.put(slot)

        def one(program: tuple) -> ProgramResult:
            cases = program[2] if len(program) > 2 else None
            limits = self.limits if cases is None else replace(self.limits, timeout=program[3])
            slot = slots.get()
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
                slots.put(slot)

        if self.num_workers == 1 or len(programs) <= 1:
            return [one(program) for program in programs]
        with ThreadPoolExecutor(self.num_workers, thread_name_prefix="sandbox") as pool:
            return list(pool.map(one, programs))
