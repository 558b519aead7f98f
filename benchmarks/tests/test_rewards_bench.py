"""The rewards benchmark runs end to end (smallest settings) and its numbers match hand-computed means."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "rewards_bench.py"


@pytest.mark.slow
def test_quick_benchmark_writes_its_table(tmp_path):
    spec = importlib.util.spec_from_file_location("rewards_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "rewards.md"
    argv = ["--quick", "--math-n", "12", "--code-n", "16", "--io-n", "16", "--io-cases", "4", "--workers", "2"]
    assert bench.main([*argv, "--out", str(out)]) == 0
    text = out.read_text()
    for field in ("command:", "date:", "machine:", "versions:", "sandbox:", "completions/s"):
        assert field in text
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| math") or line.startswith("| code")]
    means = {(row[1].strip(), row[2].strip().split(",")[0]): float(row[6]) for row in rows}
    # math: 9 of the 12 templated completions are right (see MATH_ITEMS)
    assert means[("math", "signal backend (main thread")] == pytest.approx(0.75, abs=1e-3)
    assert means[("math", "process backend")] == pytest.approx(0.75, abs=1e-3)
    # code, one prompt (add): 10 right, 2 wrong at 1/4, 2 partial at 3/4, syntax error and endless loop at 0
    assert means[("code", "2 workers")] == pytest.approx((10 + 2 * 0.25 + 2 * 0.75) / 16, abs=1e-3)
    assert means[("code", "1 worker")] == pytest.approx(0.75, abs=1e-3)
    assert all(float(row[5]) > 0 for row in rows)  # completions per second
    # input/output: per 16 programs 12 right, 2 wrong, 2 right on half of the 4 cases -> (12 + 1) / 16, both paths
    io_rows = [line.split("|") for line in text.splitlines() if line.startswith(("| CodeReward", "| anchor"))]
    assert len(io_rows) == 4  # ours and the anchor, with 2 workers and with 1
    for row in io_rows:
        assert (int(row[3]), int(row[4])) == (16, 64) and float(row[8]) == pytest.approx(13 / 16, abs=1e-3)
    assert {float(row[9]) for row in io_rows if row[1].startswith(" anchor")} == {1.0}
