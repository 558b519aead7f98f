"""The report of ``trl-ext eval``: the side-by-side table, ``eval.json`` and ``per_problem.jsonl``, and
:func:`recompute`, which rebuilds every model's figures from ``per_problem.jsonl`` and ``eval.json``'s settings."""

from __future__ import annotations

import contextlib
import json
import os
import platform
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

from trl.trainer.utils import get_callable_name

from trl_ext.console import format_duration
from trl_ext.diagnostics.evaluation import EvalSettings, ModelEvaluation, summarize

EVAL_FILE = "eval.json"
PER_PROBLEM_FILE = "per_problem.jsonl"
_PERCENT = ("truncated", "unscorable")


def versions() -> dict[str, str]:
    """The versions that change generation and scoring: Python and the libraries on the path."""
    found = {"python": platform.python_version()}
    for package in ("trl-ext", "trl", "transformers", "torch", "math-verify", "vllm"):
        with contextlib.suppress(metadata.PackageNotFoundError):  # not installed: not listed
            found[package] = metadata.version(package)
    return found


def _cell(key: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    if key in _PERCENT:
        return f"{100 * value:.1f}%"
    if key == "mean length":
        return f"{value:.1f}"
    return f"{value:.3f}"


def report_table(evaluations: Sequence[ModelEvaluation]) -> str:
    """Figures as rows, models as columns (``n/a``: a figure the reward cannot give, e.g. maj@K for code)."""
    keys = list(evaluations[0].figures)
    header = ["", *(e.name for e in evaluations)]
    rows = [[key, *(_cell(key, e.figures.get(key)) for e in evaluations)] for key in keys]
    rows.append(["eval time", *(format_duration(e.seconds) for e in evaluations)])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  "
        + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        for row in [header, *rows]
    )


def print_report(evaluations: Sequence[ModelEvaluation], settings: EvalSettings) -> None:
    """The table, under a title naming K and the sampling."""
    title = (
        f"== eval: {settings.num_samples} samples per problem, temperature {settings.temperature}, "
        f"top-p {settings.top_p}, seed {settings.seed} =="
    )
    print(title + "\n" + report_table(evaluations), flush=True)


def write_report(
    output_dir: str,
    evaluations: Sequence[ModelEvaluation],
    settings: EvalSettings,
    data: Any,
    split: str,
    reward: Callable,
    wall_seconds: float,
) -> dict[str, Any]:
    """``eval.json`` (figures, settings, data, reward, versions, times) and ``per_problem.jsonl`` (one line per model
    and problem) in ``output_dir``; returns what ``eval.json`` holds."""
    os.makedirs(output_dir, exist_ok=True)
    result = {
        "models": [{"name": e.name, "figures": e.figures, "eval_seconds": round(e.seconds, 2)} for e in evaluations],
        "settings": settings.as_dict(),
        "data": {"layout": data.describe(), "split": split, "problems": len(evaluations[0].records)},
        "reward": get_callable_name(reward),
        "versions": versions(),
        "wall_time_s": round(wall_seconds, 1),
        "per_problem": PER_PROBLEM_FILE,
    }
    with open(os.path.join(output_dir, EVAL_FILE), "w") as f:
        json.dump(result, f, indent=2, default=str)
    with open(os.path.join(output_dir, PER_PROBLEM_FILE), "w") as f:
        for evaluation in evaluations:
            for record in evaluation.records:
                f.write(json.dumps(record, default=str) + "\n")
    print(f"[eval] {os.path.join(output_dir, EVAL_FILE)}, {os.path.join(output_dir, PER_PROBLEM_FILE)}", flush=True)
    return result


def recompute(output_dir: str) -> dict[str, dict[str, float | None]]:
    """Every model's figures rebuilt from ``per_problem.jsonl`` with the settings in ``eval.json``."""
    with open(os.path.join(output_dir, EVAL_FILE)) as f:
        saved = json.load(f)
    settings = EvalSettings(**saved["settings"])
    records: dict[str, list[dict[str, Any]]] = {}
    with open(os.path.join(output_dir, PER_PROBLEM_FILE)) as f:
        for line in f:
            record = json.loads(line)
            records.setdefault(record["model"], []).append(record)
    return {name: summarize(rows, settings) for name, rows in records.items()}
