"""Running one program in the sandbox: start the launcher (``_sandbox_child.py``, ``python -I -S -B`` in its own
session with only ``PATH``/``LANG``), hand it the program, read its verdict channel until it ends or its deadline
passes, and kill what is left. The uids of the worker slots are chosen here."""

from __future__ import annotations

import json
import os
import secrets
import selectors
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from trl_ext.rewards.sandbox_isolation import NOBODY, Isolation
from trl_ext.rewards.sandbox_limits import Cases, Limits
from trl_ext.rewards.sandbox_verdicts import ProgramResult, RecordFilter, parse_verdicts

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
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += 1
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


def launch_program(
    code: str,
    tests: Sequence[str],
    limits: Limits,
    isolation: Isolation,
    *,
    slot: int = 0,
    site_packages: bool = False,
    nproc_share: int = 1,
    cases: Cases | None = None,
) -> ProgramResult:
    """Run ``code`` then each of ``tests`` (or, with ``cases``, the program once per case) under ``isolation``, in
    worker ``slot``; what :func:`trl_ext.rewards.sandbox.run_program` does once its defaults are filled in (its
    docstring explains the arguments). Never raises on program behaviour."""
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
