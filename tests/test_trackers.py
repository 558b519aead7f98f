"""Trackers, from the recipes: ``report_to`` TensorBoard, W&B (offline) and Trackio (local) receive the
dynamic-sampling and GSPO metrics, and completion samples arrive as tables.

What TRL 1.12 does with ``log_completions=True`` (``GRPOTrainer.log``, main process, every log): it writes
``output_dir/completions/completions_<step>.parquet`` whatever the tracker; it logs a ``completions`` table to W&B
(``report_to`` has wandb and a run is active) and to Trackio (``report_to`` has trackio); TensorBoard gets no table.
The table holds the last ``generation_batch_size`` completions generated, so with dynamic sampling it shows the last
round of the step.

The recipes run in-process (``runpy``, exactly as ``python recipes/<algo>.py ...``) except for Trackio, which fixes
its storage directory (``TRACKIO_DIR``) at import time and so runs in a subprocess. W&B and Trackio tests are skipped
when the package is not installed (extras ``wandb`` / ``trackio``).
"""

from __future__ import annotations

import glob
import json
import os
import runpy
import sqlite3
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DYNAMIC_SAMPLING_KEYS = ["dynamic_sampling/kept_group_frac", "dynamic_sampling/rounds", "dynamic_sampling/limit_hit"]
GSPO_KEYS = ["clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"]  # per sequence under GSPO


@pytest.fixture(scope="module")
def recipe_argv(tmp_path_factory):
    """Arguments for a two-step recipe run on the demo's SFT warm start (informative groups, some dropped)."""
    from trl_ext.demo import make_problems, warm_start

    model_dir = os.path.abspath(warm_start())  # cached under outputs/demo-warm-start
    train, _ = make_problems()
    data = tmp_path_factory.mktemp("data") / "train.jsonl"  # no held-out split (none below): faster
    rows = zip(train["prompt"], train["answer"], strict=True)
    data.write_text("\n".join(json.dumps({"prompt": p, "answer": a}) for p, a in rows))
    return [
        "--model_name_or_path", model_dir, "--dataset_name", str(data), "--dataset_test_split", "none",
        "--reward_funcs", "arithmetic",
        "--num_generations", "4", "--per_device_train_batch_size", "8", "--max_completion_length", "4",
        "--max_steps", "2", "--logging_steps", "1", "--learning_rate", "1e-3", "--seed", "0",
        "--use_cpu", "true", "--bf16", "false", "--save_strategy", "no", "--disable_tqdm", "true",
        "--log_completions", "true", "--num_completions_to_print", "0",
    ]  # fmt: skip


# DAPOConfig splits a rollout into 16 optimizer steps; these two-step runs generate at each step (dynamic sampling
# metrics are logged at the steps that generate).
ONE_ROLLOUT_PER_STEP = ["--num_minibatches", "1"]


def report_to(tmp_path, *trackers: str) -> list[str]:
    """``--config`` with ``report_to: [...]``: several trackers are a YAML list (transformers' ``--report_to`` takes
    one name on the command line)."""
    path = tmp_path / "trackers.yaml"
    path.write_text(f"report_to: [{', '.join(trackers)}]\n")
    return ["--config", str(path)]


def run_recipe(recipe: str, argv: list[str], monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", [f"recipes/{recipe}.py", *argv])
    runpy.run_path(os.path.join(REPO, "recipes", f"{recipe}.py"), run_name="__main__")


def jsonl_logs(output_dir) -> list[dict]:
    with open(os.path.join(output_dir, "metrics.jsonl")) as f:
        return [row for row in map(json.loads, f) if "loss" in row]


def tensorboard_scalars(output_dir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (run_dir,) = glob.glob(os.path.join(output_dir, "runs", "*"))
    events = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def finish_wandb() -> str | None:
    """Finish the active W&B run (the Trainer leaves it open) and return its offline run directory."""
    import wandb

    run_dir = os.path.dirname(wandb.run.dir) if wandb.run is not None else None
    wandb.finish()
    wandb.teardown()  # forget settings (WANDB_DIR) so that the next test's run goes to its own directory
    return run_dir


def wandb_records(run_dir) -> list[dict]:
    """History rows of an offline W&B run, read from its ``run-<id>.wandb`` file.

    The file is a LevelDB-style log (7-byte header ``:W&B`` + magic + version, then 32 KiB blocks of records each
    with a 7-byte header: CRC32C, length, type FULL=1 / FIRST=2 / MIDDLE=3 / LAST=4) of ``wandb_internal_pb2.Record``
    protobufs; W&B 0.2x+ no longer ships a Python reader for it.
    """
    from wandb.proto import wandb_internal_pb2

    (path,) = glob.glob(os.path.join(run_dir, "run-*.wandb"))
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B"
    rows, position, block, chunk = [], 7, 32768, b""
    while position + 7 <= len(data):
        if block - position % block < 7:  # the rest of a block too short for a header is padding
            position += block - position % block
            continue
        length, kind = int.from_bytes(data[position + 4 : position + 6], "little"), data[position + 6]
        chunk += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            chunk = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
    return rows


def assert_logged(series: dict[str, list[tuple[int, float]]], logs: list[dict], keys: list[str]) -> None:
    """Every key reached the tracker once per log step, with the value the trainer logged."""
    for key in keys:
        points = series[f"train/{key}"]
        assert [step for step, _ in points] == [log["step"] for log in logs], key
        assert [value for _, value in points] == pytest.approx([log[key] for log in logs], rel=1e-6, abs=1e-6), key


def wandb_series(rows: list[dict]) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for key, value in row.items():
            if key.startswith("train/") and isinstance(value, int | float):
                series.setdefault(key, []).append((row["train/global_step"], value))
    return series


@pytest.mark.slow
def test_dapo_recipe_reports_to_tensorboard_and_wandb(recipe_argv, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "dapo"
    argv = [
        *recipe_argv,
        *ONE_ROLLOUT_PER_STEP,
        "--output_dir",
        str(out),
        *report_to(tmp_path, "tensorboard", "wandb"),
    ]
    argv += ["--run_name", "dapo"]
    try:
        run_recipe("dapo", argv, monkeypatch)
    finally:
        run_dir = finish_wandb()
    logs = jsonl_logs(out)
    assert len(logs) == 2 and any(log["dynamic_sampling/kept_group_frac"] < 1.0 for log in logs)

    assert_logged(tensorboard_scalars(out), logs, [*DYNAMIC_SAMPLING_KEYS, "reward", "entropy"])
    assert run_dir.startswith(str(tmp_path))
    rows = wandb_records(run_dir)
    assert_logged(wandb_series(rows), logs, [*DYNAMIC_SAMPLING_KEYS, "reward", "entropy"])

    # Completion samples: a W&B table per log (its JSON in the run's media folder) and TRL's parquet file.
    tables = [row for row in rows if row.get("completions/_type") == "table-file"]
    assert len(tables) >= len(logs)
    with open(os.path.join(run_dir, "files", tables[0]["completions/path"])) as f:
        table = json.load(f)
    assert {"step", "prompt", "completion", "advantage"} <= set(table["columns"]) and table["data"]
    import pandas as pd

    parquet = pd.read_parquet(out / "completions" / "completions_00001.parquet")
    assert {"prompt", "completion", "arithmetic_reward", "advantage"} <= set(parquet.columns) and len(parquet) > 0


@pytest.mark.slow
def test_gspo_recipe_reports_sequence_clip_fractions(recipe_argv, tmp_path, monkeypatch):
    """GSPO with 4 minibatches per rollout: the second step is off-policy, so the sequence ratio is not 1."""
    out = tmp_path / "gspo"
    trackers = ["tensorboard", "wandb"] if _installed("wandb") else ["tensorboard"]
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    argv = [*recipe_argv, "--output_dir", str(out), *report_to(tmp_path, *trackers), "--run_name", "gspo"]
    try:
        run_recipe("gspo", argv, monkeypatch)
    finally:
        run_dir = finish_wandb() if "wandb" in trackers else None
    logs = jsonl_logs(out)
    assert len(logs) == 2
    assert_logged(tensorboard_scalars(out), logs, GSPO_KEYS)
    if "wandb" in trackers:
        assert_logged(wandb_series(wandb_records(run_dir)), logs, GSPO_KEYS)


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


@pytest.mark.slow
def test_trackio_receives_metrics_and_completion_table(recipe_argv, tmp_path):
    pytest.importorskip("trackio")
    out = tmp_path / "dapo"
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    argv = [*recipe_argv, *ONE_ROLLOUT_PER_STEP, "--output_dir", str(out), "--report_to", "trackio"]
    argv += ["--project", "trl-ext-tests"]
    command = [sys.executable, os.path.join(REPO, "recipes", "dapo.py"), *argv, "--run_name", "dapo-trackio"]
    result = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    logs = jsonl_logs(out)

    with sqlite3.connect(tmp_path / "trackio" / "trl-ext-tests.db") as db:
        rows = [json.loads(blob) for (blob,) in db.execute("SELECT metrics FROM metrics ORDER BY id")]
    series: dict[str, list[float]] = {}
    for row in rows:
        for key, value in row.items():
            if key.startswith("train/") and isinstance(value, int | float):
                series.setdefault(key, []).append(value)
    for key in DYNAMIC_SAMPLING_KEYS:
        assert series[f"train/{key}"] == pytest.approx([log[key] for log in logs]), key
    tables = [row["completions"] for row in rows if "completions" in row]
    assert tables and tables[0]["_type"] == "trackio.table"
    assert {"prompt", "completion", "advantage"} <= set(tables[0]["_value"][0])
