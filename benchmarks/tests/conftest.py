"""The benchmarks' own tests (``python -m pytest benchmarks/tests``; CI runs them once, on trl 1.12, the release of the
committed results). The package's tests under ``tests/`` never import from ``benchmarks/``; these do, by the plain
module names the benchmarks use among themselves (``import reproduce``), so ``benchmarks/`` goes on ``sys.path`` here
(and reaches the worker processes a benchmark spawns). No network, as in ``tests/``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
