"""The sandbox's fallback ladder (:class:`Plan`, ``ROOT_PLANS`` / ``USER_PLANS``, strongest first) and the isolation
in force (:class:`Isolation`: the plan the probe accepted, the checks it verified, the plans it rejected, the report).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

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

    def to_child(self) -> dict:
        return asdict(self)


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
