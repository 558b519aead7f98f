"""Reproducible evidence: the reproduction command's comparisons are right against hand-computed cases, the
sample-efficiency verdicts hold only across warm starts, and the READMEs' figures are exactly what the committed
result files render. (The warm-start cache key, package logic, is tested in tests/test_warm_start_key.py.)"""

from __future__ import annotations

import importlib
import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    return importlib.import_module(name)  # conftest.py puts benchmarks/ on the path


# -- the reproduction command ------------------------------------------------------------------------------------------


def test_figure_is_reproduced_within_its_noise_only():
    reproduce = _load("reproduce")
    assert reproduce.figure("p", "x", 0.30, 0.35, 0.05, "s")["reproduced"]
    assert not reproduce.figure("p", "x", 0.30, 0.36, 0.05, "s")["reproduced"]
    assert reproduce.figure("p", "x", 0.30, 0.30, 0.0, "s")["exact"]
    missing = reproduce.figure("p", "x", None, 0.30, 1.0, "s")
    assert not missing["reproduced"] and not missing["exact"]  # no committed figure: never "reproduced"


def test_demo_noise_is_two_sd_over_warm_starts_or_the_binomial_floor():
    reproduce = _load("reproduce")
    runs = [
        {"seed": s, "accuracy_before": b, "accuracy_after": a, "gain": a - b}
        for s, b, a in ((0, 0.10, 0.30), (1, 0.20, 0.40), (2, 0.30, 0.50))
    ]
    record = reproduce.demo_record(runs)
    assert record["figures"]["seed"] == 0
    assert record["noise"]["accuracy_after"] == pytest.approx(0.2)  # 2 x sd(0.3, 0.4, 0.5) = 2 x 0.1
    assert record["noise"]["accuracy_before"] == pytest.approx(0.2)
    # one warm start only: two binomial standard errors of 0.30 on 240 problems, 2 sqrt(0.3 x 0.7 / 240)
    single = reproduce.demo_record(runs[:1])
    assert single["noise"]["accuracy_after"] == pytest.approx(2 * (0.3 * 0.7 / 240) ** 0.5)


def test_reduced_sample_efficiency_reads_the_evaluation_at_the_budget():
    reproduce = _load("reproduce")
    evals = [[1280, 10, 0.1], [10240, 80, 0.2], [10368, 81, 0.3]]
    assert reproduce.at_budget(evals) == 0.2
    assert reproduce.at_budget([[1280, 10, 0.1]]) is None


def test_reduced_sample_efficiency_compares_gains_and_the_difference_not_absolute_accuracy():
    reproduce = _load("reproduce")

    def run(name, warm, seed, start, end):
        return {"name": name, "warm_start": warm, "seed": seed, "start": start, "evals": [[10240, 80, end]]}

    full = {
        "warm_starts": {"0": {"start": 0.10}, "1": {"start": 0.20}},
        "runs": [
            run("dapo_no_ds", 0, 3, 0.10, 0.12),
            run("dapo", 0, 3, 0.10, 0.15),
            run("dapo_no_ds", 1, 3, 0.20, 0.20),
            run("dapo", 1, 3, 0.20, 0.21),
        ],
    }
    labels = {"dapo_no_ds": {"label": "off"}, "dapo": {"label": "on"}}
    # another machine's warm start 0 is 0.30: every accuracy is 0.20 higher, the gains the same
    mine = {"algorithms": labels, "runs": [run("dapo_no_ds", 0, 3, 0.30, 0.32), run("dapo", 0, 3, 0.30, 0.35)]}
    start, off, on, diff = reproduce.sample_efficiency_figures(mine, full, "s")
    assert (start["committed"], start["measured"]) == (0.10, 0.30)
    assert off["committed"] == pytest.approx(0.02) and off["measured"] == pytest.approx(0.02) and off["reproduced"]
    assert on["committed"] == pytest.approx(0.05) and on["measured"] == pytest.approx(0.05)
    # the wider of 2 sd of the full run's gains of "on" (0.05, 0.01) and 2 binomial standard errors at 0.35
    assert on["noise"] == pytest.approx(max(2 * statistics.stdev([0.05, 0.01]), 2 * (0.35 * 0.65 / 240) ** 0.5))
    # dynamic sampling minus without: 0.03 committed (0.15 - 0.12), 0.03 measured; across warm starts 0.03 and 0.01
    assert diff["committed"] == pytest.approx(0.03) and diff["measured"] == pytest.approx(0.03)
    assert diff["noise"] == pytest.approx(max(2 * statistics.stdev([0.03, 0.01]), 2 * (0.35 * 0.65 / 240) ** 0.5))
    # a gain far from the full run's is not reproduced
    worse = {"algorithms": labels, "runs": [run("dapo_no_ds", 0, 3, 0.30, 0.20), run("dapo", 0, 3, 0.30, 0.35)]}
    assert not reproduce.sample_efficiency_figures(worse, full, "s")[1]["reproduced"]


# -- sample efficiency: conclusions only as far as they hold across warm starts ------------------------------------------


def test_paired_verdict_needs_every_warm_start_to_agree():
    se = _load("sample_efficiency")
    agree = {(0, 0): 0.05, (0, 1): 0.06, (1, 0): 0.04, (1, 1): 0.05, (2, 0): 0.06, (2, 1): 0.05}
    verdict, detail = se.paired_verdict(agree)
    assert verdict == "higher" and "same sign in 3 of 3 warm starts" in detail
    values = list(agree.values())
    noise = 2 * statistics.stdev(values) / len(values) ** 0.5
    assert f"{statistics.mean(values):+.3f} ± {noise:.3f}" in detail
    # ahead on average and beyond the noise, but one warm start is behind: not a conclusion
    mixed = {(0, 0): 0.10, (0, 1): 0.11, (1, 0): 0.09, (1, 1): 0.10, (2, 0): -0.01, (2, 1): -0.01}
    assert se.paired_verdict(mixed)[0] == "mixed"
    assert se.paired_verdict({(0, 0): 0.01, (0, 1): -0.01, (1, 0): 0.02, (1, 1): -0.015})[0] == "tied"
    assert se.paired_verdict({(0, 0): -0.05, (0, 1): -0.04, (1, 0): -0.06})[0] == "lower"


def test_each_run_targets_its_own_warm_start_plus_the_gain():
    import argparse

    se = _load("sample_efficiency")
    options = argparse.Namespace(target=None, target_gain=0.05)
    run = {"start_accuracy": 0.10, "evals": [{"step": 5, "accuracy": 0.2, "completions": 80, "eval_seconds": 0}]}
    run["step_seconds"] = [1.0] * 5
    assert se.target_of(run, options) == pytest.approx(0.15)
    # the mean of the last 3 evaluations (start included): (0.10 + 0.20) / 2 = 0.15 reaches 0.15
    assert se.reach(run, options)["step"] == 5
    assert se.target_of(run, argparse.Namespace(target=0.5, target_gain=0.05)) == 0.5


# -- the README's figures ----------------------------------------------------------------------------------------------


def test_readme_figures_are_exactly_what_the_committed_results_render():
    blocks = _load("readme_blocks")
    # the README carries the short blocks; the full tables live in docs/ and benchmarks/README.md
    assert blocks.blocks_in((ROOT / "README.md").read_text()) == ["demo-headline", "headlines"]
    everywhere = [name for path in blocks.READMES for name in blocks.blocks_in(path.read_text())]
    assert sorted(everywhere) == sorted(blocks.BLOCKS)  # every block rendered somewhere, and once
    for path in blocks.READMES:
        text = path.read_text()
        assert blocks.blocks_in(text), path
        assert blocks.render_readme(text, path) == text, (
            f"{path.name}'s generated blocks differ from what benchmarks/results/ renders: run "
            "`python benchmarks/reproduce.py --render-readme` (never edit a generated block by hand)"
        )


def test_readme_blocks_follow_the_committed_files(tmp_path, monkeypatch):
    blocks = _load("readme_blocks")
    figures = {
        "trl": "1.12.0",
        "comparisons": {
            "dapo": {"ratio": {"median": 1.5, "q1": 1.4, "q3": 1.6}, "identical": True, "pairs": 3, "steps": 2}
        },
    }
    (tmp_path / "overhead.figures.json").write_text(json.dumps(figures))
    monkeypatch.setattr(blocks, "RESULTS", tmp_path)
    monkeypatch.setattr(blocks, "ROOT", tmp_path)  # a README at the root: links stay as rendered
    lines = blocks.benchmark_headlines()
    assert lines == [
        "- Overhead (trl 1.12.0, 3 lock-stepped pairs x 2 steps): `DAPOTrainer` (nothing to filter) / "
        "`trl.GRPOTrainer` step time **1.500** [1.400, 1.600] (median [IQR]), final weights identical in every pair "
        "([overhead.md](benchmarks/results/overhead.md))."
    ]
    readme = tmp_path / "README.md"
    readme.write_text(
        "a\n<!-- BEGIN generated: benchmark-headlines (do not edit) -->\nold 9.99\n"
        "<!-- END generated: benchmark-headlines -->\nb\n"
    )
    blocks.update_readme(readme)
    assert readme.read_text() == (
        "a\n<!-- BEGIN generated: benchmark-headlines (do not edit) -->\n"
        + lines[0]
        + "\n<!-- END generated: benchmark-headlines -->\nb\n"
    )


def test_readme_short_headlines_follow_the_committed_files(tmp_path, monkeypatch):
    blocks = _load("readme_blocks")
    (tmp_path / "overhead.figures.json").write_text(
        json.dumps(
            {
                "trl": "1.12.0",
                "comparisons": {
                    "dapo": {"ratio": {"median": 1.5, "q1": 1.4, "q3": 1.6}, "identical": True, "pairs": 3, "steps": 2}
                },
            }
        )
    )
    rows = [{"over_limit": x} for x in (1.031, 0.884, 1.06)]
    verdicts = [{"accuracy_within": True, "step_within": True}] * 3
    (tmp_path / "async_generation.figures.json").write_text(
        json.dumps({"trl": "1.12.0", "rows": rows, "verdicts": verdicts})
    )
    monkeypatch.setattr(blocks, "RESULTS", tmp_path)
    assert blocks.headlines() == [
        "- Overhead against TRL (trl 1.12.0, median step-time ratio): `DAPOTrainer` / `trl.GRPOTrainer` **1.500**; "
        "final weights identical ([overhead.md](benchmarks/results/overhead.md)).",
        "- Overlapped generation, step time / max(generation, training): trl 1.12.0 **0.88-1.06** (accuracy within 2 "
        "sd of the synchronous runs) ([report](benchmarks/results/async_generation.md)).",
    ]
    assert blocks.demo_headline()[2:] == []  # no demo figures committed: the header only
