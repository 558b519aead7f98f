"""benchmarks/memory.py --quick: one subprocess per method, a table with every method as a ratio to PPO."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("trl.experimental.ppo", reason='PPO, the baseline, needs trl 1.12: pip install "trl-ext[ppo]"')

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_quick_benchmark_writes_the_table(tmp_path):
    output = tmp_path / "memory.md"
    done = subprocess.run(
        [sys.executable, "benchmarks/memory.py", "--quick", "--jobs", "3", "--output", str(output)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    table = output.read_text()
    assert "python benchmarks/memory.py --quick --jobs 3" in table and "trl 1.12.0" in table
    rows = [line for line in table.splitlines() if line.startswith("| ") and "MiB" not in line]
    assert [row.split(" | ")[0][2:] for row in rows] == [
        "PPO (rule reward)",
        "PPO (reward model)",
        "GRPO (beta 0.04)",
        "GRPO (beta 0.04, reward model)",
        "DAPO",
        "GSPO",
        "DPO",
    ]
    ratios = [float(row.split(" | ")[5]) for row in rows]
    assert ratios[0] == 1.0 and all(r > 0 for r in ratios)
