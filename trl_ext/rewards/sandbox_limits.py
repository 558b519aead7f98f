"""What one sandboxed program may use and what it is given: :class:`Limits` (time, memory, processes, files) and,
for input/output tests, :class:`Cases`; both validated at construction and sent to the launcher by ``to_child()``."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass


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

    def to_child(self) -> dict:
        return dataclasses.asdict(self) | {"inputs": list(self.inputs)}
