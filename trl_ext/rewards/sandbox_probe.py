"""Which sandbox isolation this host allows: try each plan of the fallback ladder, strongest first, with a self-test
program that checks what the plan promises, and keep the first that passes (cached for the process)."""

from __future__ import annotations

import logging
import os
import threading

from trl_ext.rewards.sandbox_isolation import ROOT_PLANS, USER_PLANS, Isolation
from trl_ext.rewards.sandbox_limits import Limits
from trl_ext.rewards.sandbox_process import launch_program

logger = logging.getLogger("trl_ext.rewards.sandbox")  # the name the sandbox's warnings have always been logged under

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
_REQUIRED = {
    "user_ns": (),
    "pid_ns": ("pid_namespace",),
    "net_ns": ("no_network",),
    "mount_ns": ("private_tmp",),
}

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
            result = launch_program(_PROBE_CODE, [_PROBE_TESTS[n] for n in names], limits, candidate)
            if result.status == "sandbox_error" or result.status not in ("ok",):
                rejected.append((plan.name, f"{result.status}: {result.detail}"))
                continue
            checks = dict(zip(names, result.passed, strict=True))
            required = ["stdlib_importable", "capabilities_dropped"] + (["not_root"] if euid == 0 else [])
            for flag, needs in _REQUIRED.items():
                if getattr(plan, flag):
                    required += list(needs)
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
