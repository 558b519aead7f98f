"""Dynamic sampling at scale (``benchmarks/ds_scale.py``): on 2, 4 and 8 gloo processes every process's batch holds
the same rows as the batch one process assembles from the same rounds, and the bytes every ``torch.distributed``
collective sends (counted by wrapping them) stay within 2x the batch a process trains, for the assembly alone and for
a whole DAPO run with dynamic sampling, TRL's own round reported apart."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _bytes(name, *args, world=4, rank=1, **kwargs):
    return importlib.import_module("ds_scale").CollectiveMeter._bytes(name, args, kwargs, world, rank)


def test_bytes_sent_hand_computed():
    rows = torch.zeros(10, 3, dtype=torch.int64)  # 24 bytes a row
    # all_to_all_single(output, input, output_split_sizes, input_split_sizes): the rows for the other processes
    assert _bytes("all_to_all_single", None, rows, None, [2, 5, 1, 2]) == (2 + 1 + 2) * 24
    assert _bytes("all_gather", None, torch.zeros(4, dtype=torch.float32)) == 16 * 3  # to 3 other processes
    assert _bytes("all_reduce", torch.zeros(2, dtype=torch.int64)) == 16
    obj = {"a": [1, 2, 3]}
    import pickle

    assert _bytes("all_gather_object", None, obj) == len(pickle.dumps(obj)) * 3


@pytest.mark.slow
def test_every_process_trains_the_rows_one_process_would_and_moves_under_twice_its_batch(tmp_path):
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "ds_scale.py"),
        "--check",
        "--world-sizes", "1,2,4,8",
        "--rows", "256",
        "--completion", "32",
        "--repeats", "1",
        "--trainer-worlds", "2,8",
        "--trainer-steps", "2",
        "--out", str(tmp_path),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    saved = json.loads((tmp_path / "ds_scale.json").read_text())["data"]
    for ranks in saved["assembly"]:
        world = ranks[0]["world"]
        assert ranks[0]["check"] == "same rows as one process", ranks[0]
        assert len({r["rows_trained"] for r in ranks}) == 1  # TRL's number of rows on every process
        for r in ranks:
            sent = r["sent_bytes"].get("dynamic_sampling", 0)
            assert sent <= 2 * r["batch_bytes"], (world, r)
            if world == 1:
                assert sent == 0
    for ranks in saved["trainer"]:
        assert {r["world"] for r in ranks} == {len(ranks)} and len(ranks) in (2, 8)
        for r in ranks:
            assert r["steps"] == 2 and r["rounds"]
            everything = sum(r["sent_bytes"].values())
            assert r["sent_bytes"].get("dynamic_sampling", 0) <= 2 * r["batch_bytes"], r
            assert everything <= 2 * r["batch_bytes"], r  # TRL's round included
    report = (tmp_path / "ds_scale.md").read_text()
    assert "## A DAPO run with dynamic sampling" in report and (tmp_path / "ds_scale.png").exists()
