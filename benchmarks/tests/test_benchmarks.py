"""The trainer benchmarks run end to end with their smallest settings (so they cannot rot), and their pure parts
match hand-computed values. Each benchmark writes into a temporary directory, never over benchmarks/results/."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
# 2 prompts x 8 completions per step and a 5-step SFT warm start: the code paths of the full runs, in seconds.
SMALL = ["--quick", "--prompts-per-step", "2", "--warm-start-steps", "5"]


def _load(name: str):
    """A benchmark module by its plain name (conftest.py puts ``benchmarks/`` on the path, so that the worker
    processes it spawns import it again by that name)."""
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("warm-start"))


def _run(script: str, out: Path, cache: str, *args: str) -> str:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    command = [sys.executable, str(BENCH / script), *SMALL, "--cache-dir", cache, "--out", str(out), *args]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _table(text: str, heading: str) -> list[list[str]]:
    """Rows (cells stripped, header and rule excluded) of the first markdown table after ``heading``."""
    lines = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip().strip("*`") for cell in line.strip("|").split("|")])
    return rows


def _provenance(text: str) -> None:
    for field in ("- date:", "- command: `python benchmarks/", "--quick", "- machine:", "- versions:", "- threads:"):
        assert field in text


# -- end to end (slow) ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_overhead_quick_writes_ratios_and_both_arms_do_identical_work(tmp_path, warm_cache):
    _run("overhead.py", tmp_path, warm_cache, "--pairs", "2", "--steps", "1")
    text = (tmp_path / "overhead.md").read_text()
    _provenance(text)
    assert (tmp_path / "overhead.png").stat().st_size > 0
    rows = {row[0]: row for row in _table(text, "## Step-time ratio")}
    assert set(rows) == {"dapo", "gspo"}
    for row in rows.values():
        assert row[3] == "2 x 1" if row[0] == "dapo" else row[3] == "2 x 4"  # GSPO: whole 4-step cycles
        assert 0.2 < float(row[4]) < 5
        assert row[-1] == "yes"  # DAPOTrainer with nothing to filter / GSPOTrainer: TRL's exact weights
    assert len(_table(text, "## Every pair")) == 4


@pytest.mark.slow
def test_sample_efficiency_quick_counts_the_budget(tmp_path, warm_cache):
    _run("sample_efficiency.py", tmp_path, warm_cache, "--seeds", "0", "--budget", "64", "--eval-every", "32")
    text = (tmp_path / "sample_efficiency.md").read_text()
    _provenance(text)
    assert (tmp_path / "sample_efficiency.png").stat().st_size > 0
    summary = {row[0]: row for row in _table(text, "## At the same budget")}
    assert list(summary) == [
        "GRPO",
        "Dr. GRPO",
        "DAPO (no dynamic sampling)",
        "DAPO (dynamic sampling)",
        "DAPO (dynamic sampling + GRESO skipping)",
        "DAPO (dynamic sampling + prompt selector)",
        "GSPO",
    ]
    assert summary["GRPO"][8] == "1.00"  # time ratio of GRPO to itself
    runs = {row[0]: row for row in _table(text, "## Every run")}
    # columns: algorithm, warm start, seed, start accuracy, optimizer steps, completions, final accuracy, ...
    # 16 completions per step: exactly 4 steps for the budget of 64, GSPO in one 4-step cycle of 64 completions
    for name in ("GRPO", "Dr. GRPO", "DAPO (no dynamic sampling)", "GSPO"):
        assert (runs[name][1], runs[name][2], runs[name][4], runs[name][5]) == ("0", "0", "4", "64")
    for name in (
        "DAPO (dynamic sampling)",
        "DAPO (dynamic sampling + GRESO skipping)",
        "DAPO (dynamic sampling + prompt selector)",
    ):
        steps, completions = int(runs[name][4]), int(runs[name][5])
        assert completions >= 64 and steps <= 4 and completions % 8 == 0  # refill rounds (whole groups) count
    assert all(0.0 <= float(row[6]) <= 1.0 for row in runs.values())
    figures = json.loads((tmp_path / "sample_efficiency.figures.json").read_text())
    release = figures["releases"][0]
    assert figures["trl"] == release["trl"] and len(release["runs"]) == 7
    # against dynamic sampling: the DAPO arms' cost per trained group, DS's own ratio 1
    costs = {row[0]: row for row in _table(text, "## What dynamic sampling costs, against its prompt predictors")}
    assert costs["DAPO (dynamic sampling)"][2] == "1.00" and "DAPO (dynamic sampling + prompt selector)" in costs
    assert "GRPO" not in costs
    assert release["warm_starts"]["0"]["key"] in text  # the report names the warm start's cache key


@pytest.mark.slow
def test_sample_efficiency_subset_without_grpo_reports(tmp_path, warm_cache):
    """Issue 14: ``--algorithms dapo_no_ds,dapo`` used to crash in the findings on GRPO's missing time ratio."""
    _run(
        "sample_efficiency.py", tmp_path, warm_cache, "--seeds", "0", "--budget", "64", "--eval-every", "32",
        "--algorithms", "dapo_no_ds,dapo", "--task", "hard",
    )  # fmt: skip
    text = (tmp_path / "sample_efficiency.md").read_text()
    summary = {row[0]: row for row in _table(text, "## At the same budget")}
    assert list(summary) == ["DAPO (no dynamic sampling)", "DAPO (dynamic sampling)"]
    assert "- Dynamic sampling. DAPO's claim" in text and "need GRPO in --algorithms" in text
    assert "task `hard`" in text
    # warm starts are a factor: two SFT seeds, each with its own cache key and row
    _run(
        "sample_efficiency.py", tmp_path, warm_cache, "--seeds", "0", "--budget", "32", "--eval-every", "32",
        "--algorithms", "dapo_no_ds,dapo", "--warm-starts", "0,1",
    )  # fmt: skip
    text = (tmp_path / "sample_efficiency.md").read_text()
    per_warm = _table(text, "## Per warm start")
    assert [row[0] for row in per_warm] == ["0", "1"] and per_warm[0][1] != per_warm[1][1]
    assert "2 warm start(s) (SFT seeds [0, 1]) x 1 RL seed(s) [0]" in text


@pytest.mark.slow
def test_dynamic_sampling_quick_reports_rounds_against_p(tmp_path, warm_cache):
    _run("dynamic_sampling.py", tmp_path, warm_cache, "--ps", "0,0.5", "--configs", "dapo,gspo", "--steps", "1")
    text = (tmp_path / "dynamic_sampling.md").read_text()
    _provenance(text)
    assert (tmp_path / "dynamic_sampling.png").stat().st_size > 0
    rows = {(row[0], row[1]): row for row in _table(text, "## Generation rounds")}
    assert set(rows) == {("dapo", "0"), ("dapo", "0.5"), ("gspo", "0"), ("gspo", "0.5")}
    for config in ("dapo", "gspo"):
        assert rows[(config, "0")][3] == "1.00" and rows[(config, "0")][10].startswith("1.00")  # nothing dropped
        assert rows[(config, "0")][4] == "1.00"  # predicted: one round when nothing is dropped
        assert rows[(config, "0.5")][6] == "2.00"  # ideal 1/(1-p)
        assert float(rows[(config, "0.5")][3]) >= 1.0
    cost = {(row[0], row[1]): row for row in _table(text, "## Where the time goes")}
    assert cost[("dapo", "0")][3] == "0%"  # no dropped time without uninformative groups
    assert cost[("dapo", "0.5")][7] == "0"  # DAPO: beta 0, on-policy: no old/ref log-prob forward pass
    assert float(cost[("gspo", "0")][7]) > 0  # GSPO's 4 minibatches: an old-policy forward pass per round
    assert cost[("gspo", "0")][9] == "0.0%"  # ... none of it over dropped groups when nothing is dropped


@pytest.mark.slow
def test_async_generation_quick_reports_the_limit_and_the_staleness(tmp_path, warm_cache):
    """The engine in its own process and the trainer in another, synchronous and overlapped: the report has the
    step split, the limit, the bar, staleness 1 under overlap, and the figures the README's headline reads."""
    _run("async_generation.py", tmp_path, warm_cache, "--tasks", "demo", "--steps", "4", "--seeds", "2")
    text = (tmp_path / "async_generation.md").read_text()
    _provenance(text)
    rows = {(row[0], row[1]): row for row in _table(text, "across seeds.")}
    assert set(rows) == {("demo", "off"), ("demo", "on")}
    for row in rows.values():
        sync, generation, training, limit = (float(x) for x in row[2:6])
        assert generation > 0 and training > 0 and limit == max(generation, training)
        assert float(row[8]) > 0 and row[-1] == "1"  # overlapped / limit measured; one generation batch stale
    assert rows[("demo", "off")][-2] == "1.00, 1.00"  # without dynamic sampling: one round per rollout
    figures = json.loads((tmp_path / "async_generation.figures.json").read_text())
    assert [v["task"] for v in figures["verdicts"]] == ["demo", "demo"] and figures["micro_steps"] == 4
    assert "## Issue 24's bar" in text


# -- pure parts (fast) ------------------------------------------------------------------------------------------------


def test_expected_rounds_matches_hand_computation():
    """The whole-batch rounds the benchmark reports beside its measurements: ``group_filter.expected_rounds`` at the
    informative fraction 1 - p (p: the benchmark's uninformative fraction)."""
    from trl_ext.grpo.dynamic_sampling.groups import expected_rounds

    assert expected_rounds(1 - 0.0, 20, 16) == 1.0
    # one group per batch: rounds are geometric, E = sum_{r<20} p^r
    assert expected_rounds(1 - 0.5, 20, 1) == pytest.approx(sum(0.5**r for r in range(20)))
    # two groups, p = 0.5: P(R > 1) = P(Bin(2, .5) < 2) = 3/4; P(R > 2) = P(Bin(4, .5) < 2) = 5/16; capped at 3
    assert expected_rounds(1 - 0.5, 3, 2) == pytest.approx(1 + 3 / 4 + 5 / 16)


def test_synthetic_reward_makes_exactly_p_of_the_prompts_uninformative():
    ds = _load("dynamic_sampling")
    prompts = [f"{a}+{b}=" for a in range(20) for b in range(10)]
    reward = ds.PartlyUninformativeReward(0.25, prompts, num_generations=4)
    assert len(reward.uninformative) == 50
    rows = [p for p in prompts[:10] for _ in range(4)]
    values = reward(rows, ["x"] * len(rows))
    for g, prompt in enumerate(prompts[:10]):
        group = values[4 * g : 4 * g + 4]
        assert group == ([0.0] * 4 if prompt in reward.uninformative else [0.0, 1.0, 2.0, 3.0])


def _turns(me, baton, steps):
    """A stand-in for a trainer: records when it holds the turn."""
    baton.start(me)
    baton.wait(me)
    stamps = []
    for step in range(steps[me]):
        stamps.append(time.perf_counter())
        baton.give(me, finished=step == steps[me] - 1)
        if step < steps[me] - 1:
            baton.wait(me)
    yield stamps


def test_lockstep_workers_take_turns_one_step_each():
    common = _load("_common")
    steps = [3, 2, 4]
    stamps = common.run_lockstep(_turns, [(steps,)] * 3, timeout=120)
    order = [me for _, me in sorted((t, me) for me, runs in enumerate(stamps) for t in runs[0])]
    assert order == [0, 1, 2, 0, 1, 2, 0, 2, 2]  # a ring over the workers still running


def test_quick_runs_never_write_over_the_committed_results(monkeypatch, tmp_path):
    common = _load("_common")
    root = Path(common.ROOT)
    assert common.results_dir(None, quick=True) == root / "outputs" / "benchmarks-quick"
    assert common.results_dir(None, quick=False) == root / "benchmarks" / "results"
    assert common.results_dir("/tmp/x", quick=True) == Path("/tmp/x")  # --out says so
    for name in ("overhead", "sample_efficiency", "dynamic_sampling"):
        options = _load(name).parse(["--quick"])
        assert common.results_dir(options.out, options.quick) == common.QUICK_RESULTS, name
    # the rewards benchmark (its scoring stubbed out): --quick writes under outputs/, a full run under results/
    bench = _load("rewards_bench")
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    monkeypatch.setattr(bench, "bench_math", lambda n, workers: [])
    monkeypatch.setattr(bench, "bench_code", lambda n, workers, timeout, serial: [])
    monkeypatch.setattr(bench, "table", lambda math_rows, code_rows: "table")
    assert bench.main(["--quick"]) == 0
    assert (tmp_path / "outputs" / "benchmarks-quick" / "rewards.md").exists()
    assert not (tmp_path / "benchmarks").exists()
    # the memory benchmark resolves its default the same way (not run here: it trains five methods)
    import inspect

    assert '"outputs/benchmarks-quick/memory.md" if args.quick' in inspect.getsource(_load("memory").main)
