"""Reproduce the README's figures from a clean cache and say which came back within their stated noise.

    python benchmarks/reproduce.py                      # every part, ~10 min on 2 idle cores
    python benchmarks/reproduce.py --parts ds_cost      # the quickest part (~2 min; what CI runs)
    python benchmarks/reproduce.py --update --demo-warm-starts 0,1,2   # (maintainers) new demo figures + noise
    python benchmarks/reproduce.py --render-readme      # rewrite the README's generated blocks, nothing measured

Parts, each run in a fresh temporary folder (a clean warm-start cache: every SFT warm start is trained again):

- ``demo``: ``python recipes/dapo.py`` exactly as the README says, then ``python recipes/eval.py --num_samples 8``
  (both from a working directory with no ``outputs/``). Compared with ``results/reproduce.json``, the demo figures
  this command measured with ``--update`` for the same TRL release. Noise: two standard deviations over the demo's
  warm starts (``--demo-warm-starts``: the same demo from SFT seeds 0, 1, 2), and never less than two binomial
  standard errors of a rate over the 240 held-out problems: what moves when another machine trains another warm
  start. Held as well to the demo's own bar, whatever was committed: +15 held-out points, and at most 5 minutes of
  wall clock for that first run from nothing (an empty warm-start cache, so the SFT warm start is trained again).
- ``overhead``: ``overhead.py --quick`` (5 lock-stepped pairs x 4 steps). Compared with ``results/overhead.figures
  .json`` (the full run): the median step-time ratio ours / TRL, within the wider of the two runs' interquartile
  ranges of per-pair ratios; the final weights of both arms must be identical, as in the full run.
- ``ds_cost``: ``dynamic_sampling.py`` for on-policy DAPO at p = 0, 0.5, 0.75, 1 repetition of the full run's 12
  steps. Compared with ``results/dynamic_sampling.figures.json``: groups generated per kept group, within 10% of
  the ideal 1/(1-p) (the claim's own bar) of the committed figure. The counts depend only on which prompts are drawn
  (the reward's uninformative prompts are fixed by a hash), not on the warm start's weights, so they come back
  exactly on any machine; the full run's repetitions replay the same draws.
- ``sample_efficiency``: ``sample_efficiency.py --task hard`` for DAPO with and without dynamic sampling from
  warm start 0 with RL seed 3, stopped at 10,240 generated completions (the full run's 8th evaluation). Compared
  with ``results/sample_efficiency.figures.json``, the same run in the full benchmark: each algorithm's held-out
  gain over its warm start at that evaluation, and dynamic sampling minus without, within two standard deviations
  over all of the full run's warm starts and seeds (at least one evaluation's binomial noise). Gains, not absolute
  accuracies: another machine trains another warm start from the same seed.

On the machine that measured the committed figures a part reproduces exactly (training is deterministic there);
another machine of the same kind can train other warm starts, which is what the noise allows for. Exit status:
0 when every figure reproduced, 1 otherwise. ``--update`` (after the full benchmarks) makes this run's demo figures
the committed ones and rewrites the README's generated blocks (``readme_blocks``); a test checks that the README's
blocks are exactly what the committed files render, so no figure in them is copied by hand.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402
import readme_blocks  # noqa: E402

ROOT, RESULTS = common.ROOT, common.RESULTS
COMMITTED = RESULTS / "reproduce.json"  # the demo's figures per TRL release (written by --update)
CURVES = ROOT / "docs" / "demo_curves.png"  # the README's plot: the demo's curves.png on readme_blocks.CONSOLE_RELEASE
HELD_OUT = 240  # the demo's held-out problems
EVAL_FIGURES = ("pass@1 (greedy)", "avg@8", "pass@8", "maj@8")
SE_BUDGET, SE_UNIT = 10_240, (0, 3)  # the reduced sample-efficiency run: warm start 0, RL seed 3
PARTS = ("demo", "overhead", "ds_cost", "sample_efficiency")  # the default run
EXTRA_PARTS = ("learned_reward",)  # named explicitly (6 more minutes)
#: The demo's own bar (a first run, SFT warm start included, on 2 cores): +15 held-out points within 5 minutes
DEMO_BAR = {"gain": 15.0, "wall_s": 300.0}
PAIRS_NOISE = 451  # the demo reward model's held-out pairs


def trl_version() -> str:
    import trl

    return trl.__version__


def binomial_noise(rate: float, n: int = HELD_OUT) -> float:
    """Two standard errors of a rate measured on ``n`` problems."""
    return 2 * math.sqrt(max(rate * (1 - rate), 1 / n) / n)


def figure(part: str, name: str, committed: float | None, measured: float, noise: float, source: str) -> dict:
    """One compared figure; ``reproduced`` when the measured value is within ``noise`` of the committed one."""
    ok = committed is not None and abs(measured - committed) <= noise + 1e-9
    return {
        "part": part,
        "figure": name,
        "committed": committed,
        "measured": measured,
        "noise": noise,
        "reproduced": ok,
        "exact": committed is not None and abs(measured - committed) < 1e-9,
        "source": source,
    }


def bar(part: str, name: str, measured: float, limit: float, at_most: bool) -> dict:
    """One figure held to a fixed bar rather than to a committed figure: ``reproduced`` when it meets the bar."""
    return {
        "part": part,
        "figure": name,
        "committed": None,
        "measured": measured,
        "noise": 0.0,
        "reproduced": measured <= limit if at_most else measured >= limit,
        "exact": False,
        "source": f"bar: {'at most' if at_most else 'at least'} {limit:g}",
    }


def run(command: list[str], cwd: Path, log: Path, **env_vars: str) -> float:
    """Run ``command`` in ``cwd`` (``env_vars`` added to its environment), its stdout into ``log`` and its stderr
    (progress bars) into ``log.err``; its wall seconds. A failure stops with the end of both."""
    started = time.time()
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **env_vars}
    with open(log, "w") as out, open(f"{log}.err", "w") as err:
        done = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=err)
    if done.returncode != 0:
        tail = log.read_text()[-2000:] + Path(f"{log}.err").read_text()[-2000:]
        raise SystemExit(f"[reproduce] `{' '.join(command)}` failed (exit {done.returncode}); its log ends:\n{tail}")
    return time.time() - started


def bench(script: str, work: Path, name: str, *args: str) -> dict:
    """Run ``benchmarks/<script> *args`` into ``work/name`` on the shared clean warm-start cache ``work/cache``;
    the ``*.figures.json`` it wrote."""
    out = work / name
    command = [sys.executable, str(ROOT / "benchmarks" / script), *args, "--out", str(out)]
    run([*command, "--cache-dir", str(work / "cache")], ROOT, work / f"{name}.log")
    return json.loads((out / f"{Path(script).stem}.figures.json").read_text())


# -- the parts ---------------------------------------------------------------------------------------------------------


def demo_once(work: Path, seed: int, evaluate: bool) -> dict[str, Any]:
    """The README's demo command (and ``trl-ext eval`` after it) in a clean folder; its figures."""
    folder = work / f"demo-ws{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(ROOT / "recipes" / "dapo.py")]
    if seed != 0:
        command += ["--demo_warm_start_seed", str(seed)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    cache = {"TRL_EXT_CACHE": str(folder / "cache")}  # an empty warm-start cache: the SFT warm start is trained again
    wall = run(command, folder, folder / "dapo.log", **cache)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    summary = json.loads((folder / "outputs" / "dapo-demo" / "summary.json").read_text())
    rows = [json.loads(line) for line in (folder / "outputs" / "dapo-demo" / "metrics.jsonl").read_text().splitlines()]
    clipped = [r["clip_ratio/region_mean"] for r in rows if "clip_ratio/region_mean" in r]
    out = {
        "seed": seed,
        "accuracy_before": summary["accuracy_before"],
        "accuracy_after": summary["accuracy_after"],
        "gain": summary["accuracy_after"] - summary["accuracy_before"],
        "reward_first": summary["mean_reward_first_log"],
        "reward_last": summary["mean_reward_last_log"],
        "rounds": summary["dynamic_sampling_rounds_mean"],
        "clipped_mean": statistics.mean(clipped) if clipped else None,
        "clipped_range": [min(clipped), max(clipped)] if clipped else None,
        "wall_s": wall,
        "peak_mb": peak / 1024 if peak > before else None,  # ru_maxrss is in KiB on Linux
        "console": console_excerpt((folder / "dapo.log").read_text().splitlines()),
    }
    if evaluate:
        run(
            [sys.executable, str(ROOT / "recipes" / "eval.py"), "--num_samples", "8"],
            folder,
            folder / "eval.log",
            **cache,
        )
        models = json.loads((folder / "outputs" / "eval" / "eval.json").read_text())["models"]
        out["eval"] = {m["name"]: {k: m["figures"][k] for k in EVAL_FIGURES} for m in models}
    return out


def console_excerpt(lines: list[str]) -> list[str]:
    """The demo's console (stdout: bars go to stderr) cut to what the README shows: the opening line, the first and
    last SFT logs, the accuracy before RL, the first two and the last RL logs, and the summary table; ``...`` where
    logs were left out."""
    lines = [line.rstrip() for line in lines if line.strip()]
    logs = [i for i, line in enumerate(lines) if line.startswith("warm start (SFT) step") or " (RL) step " in line]
    sft = [i for i in logs if lines[i].startswith("warm start")]
    rl = [i for i in logs if i not in sft]
    summary = next((i for i, line in enumerate(lines) if line.startswith("== ")), len(lines))
    before = [i for i, line in enumerate(lines) if "held-out greedy accuracy before RL" in line]
    keep = sorted({0, *sft[:1], *sft[-1:], *before, *rl[:2], *rl[-1:]})
    out, last = [], None
    for i in keep:
        if last is not None and any(last < j < i for j in logs):
            out.append("...")
        out.append(lines[i])
        last = i
    return out + lines[summary:]


def demo_record(runs: list[dict]) -> dict[str, Any]:
    """What ``--update`` commits for one TRL release: seed 0's figures, the warm starts' spread and the noise."""
    main = next(r for r in runs if r["seed"] == 0)
    record = {"figures": main, "warm_starts": {str(r["seed"]): r for r in runs}, "noise": {}}
    for key in ("accuracy_before", "accuracy_after", "gain"):
        values = [r[key] for r in runs]
        spread = 2 * statistics.stdev(values) if len(values) > 1 else 0.0
        record["noise"][key] = max(spread, binomial_noise(main[key] if key != "gain" else main["accuracy_after"]))
    return record


def part_demo(work: Path, options, committed: dict) -> tuple[list[dict], dict]:
    seeds = options.demo_warm_starts if options.update else [0]
    runs = [demo_once(work, seed, evaluate=seed == 0) for seed in seeds]
    record = demo_record(runs) if options.update else None
    if record is not None and trl_version().startswith(readme_blocks.CONSOLE_RELEASE):
        shutil.copy(work / "demo-ws0" / "outputs" / "dapo-demo" / "curves.png", CURVES)  # the README's plot
    reference = committed.get("demo", {}).get(trl_version())
    source = f"results/reproduce.json, trl {trl_version()}"
    figures = []
    if reference is None:
        print(f"[reproduce] no committed demo figures for trl {trl_version()} (run --update on it first)")
    main = runs[0]
    ref, noise = (reference or {}).get("figures", {}), (reference or {}).get("noise", {})
    for key in ("accuracy_before", "accuracy_after", "gain"):
        figures.append(figure("demo", key, ref.get(key), main[key], noise.get(key, 0.0), source))
    figures.append(bar("demo", "bar: held-out gain, points", 100 * main["gain"], DEMO_BAR["gain"], at_most=False))
    figures.append(bar("demo", "bar: wall clock, first run from nothing, s", main["wall_s"], DEMO_BAR["wall_s"], True))
    for model, values in main.get("eval", {}).items():
        warm = "warm start" in model
        base = noise.get("accuracy_before" if warm else "accuracy_after", 0.0)
        for key, value in values.items():
            committed_value = ref.get("eval", {}).get(model, {}).get(key)
            if value is None:
                continue
            figures.append(
                figure(
                    "demo", f"eval {model}: {key}", committed_value, value, max(base, binomial_noise(value)), source
                )
            )
    return figures, record


def part_learned_reward(work: Path, options, committed: dict) -> tuple[list[dict], dict]:
    """``trl-ext pipeline --learned_reward true`` (SFT -> reward model -> DAPO against it): the README's figures of
    the learned-reward path. Noise: two binomial standard errors (451 held-out pairs, 240 held-out problems)."""
    folder = work / "learned"
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(ROOT / "recipes" / "pipeline.py"), "--learned_reward", "true"]
    wall = run(command, folder, folder / "pipeline.log")
    summary = json.loads((folder / "outputs" / "pipeline" / "summary.json").read_text())
    log = (folder / "pipeline.log").read_text() + Path(f"{folder / 'pipeline.log'}.err").read_text()
    warning = next((line.strip() for line in log.splitlines() if "reward over-optimization:" in line), None)
    rm, accuracies = summary["reward_model"], summary["accuracies"]
    measured = {
        "rm_accuracy_before": rm["accuracy_before"],
        "rm_accuracy_after": rm["accuracy_after"],
        "train_pairs": rm["train_pairs"],
        "held_out_pairs": rm["held_out_pairs"],
        "sft_accuracy": accuracies["1. SFT warm start"],
        "dapo_vs_rm_accuracy": accuracies["3. DAPO against the reward model"],
        "warning": warning,
        "wall_s": wall,
    }
    ref = committed.get("learned_reward", {}).get(trl_version(), {}).get("figures", {})
    source = f"results/reproduce.json, trl {trl_version()}"
    figures = []
    for key, n in (("rm_accuracy_before", PAIRS_NOISE), ("rm_accuracy_after", PAIRS_NOISE)):
        figures.append(
            figure("learned_reward", key, ref.get(key), measured[key], binomial_noise(measured[key], n), source)
        )
    value = measured["dapo_vs_rm_accuracy"]
    figures.append(
        figure(
            "learned_reward",
            "DAPO against it: held-out accuracy",
            ref.get("dapo_vs_rm_accuracy"),
            value,
            binomial_noise(value),
            source,
        )
    )
    fired = float(warning is not None)
    figures.append(
        figure(
            "learned_reward",
            "over-optimization warning fired",
            float(ref["warning"] is not None) if ref else None,
            fired,
            0.0,
            source,
        )
    )
    return figures, {"figures": measured} if options.update else None


def part_overhead(work: Path, options, committed: dict) -> tuple[list[dict], None]:
    measured = bench("overhead.py", work, "overhead", "--quick")
    reference = committed_figures("overhead")
    source = f"results/overhead.figures.json (trl {reference['trl'] if reference else '-'}; full run)"
    figures = []
    for name, m in measured["comparisons"].items():
        c = reference["comparisons"].get(name) if reference else None
        width = max(m["ratio"]["q3"] - m["ratio"]["q1"], (c["ratio"]["q3"] - c["ratio"]["q1"]) if c else 0.0)
        ratio = c["ratio"]["median"] if c else None
        same = float(c["identical"]) if c else None
        figures.append(
            figure("overhead", f"{name}: step-time ratio ours/TRL", ratio, m["ratio"]["median"], width, source)
        )
        figures.append(
            figure("overhead", f"{name}: identical final weights", same, float(m["identical"]), 0.0, source)
        )
    return figures, None


def part_ds_cost(work: Path, options, committed: dict) -> tuple[list[dict], None]:
    args = ("--configs", "dapo", "--ps", "0,0.5,0.75", "--reps", "1", "--steps", "12")
    measured = bench("dynamic_sampling.py", work, "ds_cost", *args)
    reference = committed_figures("dynamic_sampling")
    ref_rows = {(r["config"], r["p"]): r for r in (reference or {}).get("rows", [])}
    source = f"results/dynamic_sampling.figures.json (trl {reference['trl'] if reference else '-'}; full run)"
    figures = []
    for row in measured["rows"]:
        c = ref_rows.get((row["config"], row["p"]))
        name = f"{row['config']} p={row['p']:g}: groups generated per kept group (ideal {row['ideal']:.2f})"
        value = c["generated_per_kept"] if c else None
        figures.append(figure("ds_cost", name, value, row["generated_per_kept"], 0.10 * row["ideal"], source))
    return figures, None


def part_sample_efficiency(work: Path, options, committed: dict) -> tuple[list[dict], None]:
    warm, seed = SE_UNIT
    args = ("--task", "hard", "--algorithms", "dapo_no_ds,dapo", "--warm-starts", str(warm), "--seeds", str(seed))
    measured = bench("sample_efficiency.py", work, "sample_efficiency", *args, "--budget", str(SE_BUDGET))
    reference = committed_figures("sample_efficiency")
    ref = {r["trl"]: r for r in (reference or {}).get("releases", [])}.get(trl_version(), {})
    if not ref:
        print(f"[reproduce] no committed sample-efficiency figures for trl {trl_version()}")
    source = f"results/sample_efficiency.figures.json (trl {trl_version()}; full run, same warm start and seed)"
    return sample_efficiency_figures(measured["releases"][0], ref, source), None


def sample_efficiency_figures(measured: dict, ref: dict, source: str) -> list[dict]:
    """The reduced run's figures against the full run's: the warm start's accuracy, each algorithm's gain over its
    warm start at ``SE_BUDGET`` completions, and dynamic sampling minus without at that budget (the benchmark's
    per-warm-start comparison). Gains and differences, not absolute accuracies: another machine trains another warm
    start from the same seed, and the claim is what RL adds to it. Noise: two standard deviations of the same figure
    over all of the full run's warm starts and seeds, at least the binomial noise of one evaluation."""
    warm, seed = SE_UNIT
    starts = {int(k): v["start"] for k, v in ref.get("warm_starts", {}).items()}
    start = measured["runs"][0]["start"]
    spread = 2 * statistics.stdev(starts.values()) if len(starts) > 1 else 0.0
    name = f"hard task: warm start {warm} accuracy"
    figures = [figure("sample_efficiency", name, starts.get(warm), start, max(spread, binomial_noise(start)), source)]

    def gains(runs: list[dict]) -> dict[tuple[str, int, int], tuple[float, float]]:
        """(algorithm, warm start, seed) -> (gain over the warm start, accuracy) at the budget."""
        found = {}
        for r in runs:
            value = at_budget(r["evals"])
            if value is not None:
                found[(r["name"], r["warm_start"], r["seed"])] = (value - r["start"], value)
        return found

    mine, full = gains(measured["runs"]), gains(ref.get("runs", []))
    names = [r["name"] for r in measured["runs"]]
    for name in names:
        gain, accuracy = mine[(name, warm, seed)]
        others = [g for (n, _, _), (g, _) in full.items() if n == name]
        noise = max(2 * statistics.stdev(others) if len(others) > 1 else 0.0, binomial_noise(accuracy))
        same = full.get((name, warm, seed), (None,))[0]
        label = f"hard task: {measured['algorithms'][name]['label']}, gain over the warm start at {SE_BUDGET:,}"
        figures.append(figure("sample_efficiency", label, same, gain, noise, source))
    if {"dapo", "dapo_no_ds"} <= set(names):

        def difference(table: dict, w: int, s: int) -> float | None:
            if ("dapo", w, s) not in table or ("dapo_no_ds", w, s) not in table:
                return None
            return table[("dapo", w, s)][1] - table[("dapo_no_ds", w, s)][1]

        value = difference(mine, warm, seed)
        others = [d for (n, w, s) in full if n == "dapo" and (d := difference(full, w, s)) is not None]
        noise = max(
            2 * statistics.stdev(others) if len(others) > 1 else 0.0, binomial_noise(mine[("dapo", warm, seed)][1])
        )
        label = f"hard task: dynamic sampling - without, accuracy at {SE_BUDGET:,} completions"
        figures.append(figure("sample_efficiency", label, difference(full, warm, seed), value, noise, source))
    return figures


def at_budget(evals: list[list[float]]) -> float | None:
    """Accuracy at the first evaluation at or past ``SE_BUDGET`` completions (``[completions, step, accuracy]``)."""
    return next((e[2] for e in evals if e[0] >= SE_BUDGET), None)


def committed_figures(name: str) -> dict | None:
    path = RESULTS / f"{name}.figures.json"
    return json.loads(path.read_text()) if path.exists() else None


# -- report --------------------------------------------------------------------------------------------------------------


def header(prov: dict) -> list[str]:
    """The provenance block (each part pins its own threads: the demo runs as a user runs it, the benchmarks on 1)."""
    lines = common.header(prov)[:-1]
    return lines + [
        f"- load: 1-minute load average {prov['load'][0]:.1f} at the start, {prov['load'][1]:.1f} at the end; threads: "
        "the demo as a user runs it (torch's default), the benchmarks torch.set_num_threads(1)"
    ]


def render(figures: list[dict]) -> list[str]:
    rows = []
    for f in figures:
        committed = "–" if f["committed"] is None else f"{f['committed']:.3f}"
        verdict = "exact" if f["exact"] else ("yes" if f["reproduced"] else "**no**")
        noise = "–" if f["source"].startswith("bar:") else f"±{f['noise']:.3f}"
        rows.append([f["part"], f["figure"], committed, f"{f['measured']:.3f}", noise, verdict, f["source"]])
    lines = common.table(
        ["part", "figure", "committed", "measured", "noise", "reproduced", "committed figure from"], rows
    )
    done = sum(f["reproduced"] for f in figures)  # a bar counts as reproduced when it is met
    lines += [
        "",
        f"{done} of {len(figures)} figures reproduced within their noise ({sum(f['exact'] for f in figures)} exactly).",
    ]
    return lines


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated subset of {list(PARTS + EXTRA_PARTS)}"
    )
    parser.add_argument(
        "--update", action="store_true", help="commit this run's demo figures, rewrite the README blocks"
    )
    parser.add_argument(
        "--demo-warm-starts", default="0,1,2", help="with --update: SFT seeds of the demo runs that give its noise"
    )
    parser.add_argument("--render-readme", action="store_true", help="only rewrite the README's generated blocks")
    parser.add_argument("--report", help="also write the comparison as Markdown here (e.g. results/reproduce.md)")
    parser.add_argument("--keep", help="work in this folder and keep it (default: a temporary folder, removed)")
    options = parser.parse_args(argv)
    options.parts = common.names_option(parser, "--parts", options.parts, PARTS + EXTRA_PARTS)
    options.demo_warm_starts = [int(s) for s in options.demo_warm_starts.split(",")]
    if 0 not in options.demo_warm_starts:
        parser.error("--demo-warm-starts must include 0, the demo's own warm start")
    return options


def main(argv: list[str] | None = None) -> int:
    options = parse(sys.argv[1:] if argv is None else argv)
    if options.render_readme:
        print(f"[reproduce] {readme_blocks.update_readme()}")
        return 0
    committed = json.loads(COMMITTED.read_text()) if COMMITTED.exists() else {}
    work = Path(options.keep) if options.keep else Path(tempfile.mkdtemp(prefix="trl-ext-reproduce-"))
    work.mkdir(parents=True, exist_ok=True)
    started, load = time.time(), os.getloadavg()
    figures, records = [], {}
    try:
        for part in options.parts:
            print(f"[reproduce] {part} ...", flush=True)
            t0 = time.time()
            found, rec = globals()[f"part_{part}"](work, options, committed)
            figures += found
            if rec is not None:
                records[part] = rec
            print(
                f"[reproduce] {part}: {sum(f['reproduced'] for f in found)}/{len(found)} reproduced ({time.time() - t0:.0f} s)"
            )
    finally:
        if not options.keep:
            shutil.rmtree(work, ignore_errors=True)
    prov = common.provenance(common.command_line("reproduce.py", argv or sys.argv[1:]), time.time() - started, 1, load)
    head, body = header(prov), render(figures)
    print("\n".join(head + [""] + body))
    if options.report:
        common.write_markdown(Path(options.report), "Reproduction of the README's figures", head, body)
    if options.update:
        committed = json.loads(COMMITTED.read_text()) if COMMITTED.exists() else {}  # what another run wrote since
        for part, record in records.items():
            committed.setdefault(part, {})[trl_version()] = {**record, "provenance": prov}
        if records:
            COMMITTED.write_text(json.dumps(committed, indent=1, sort_keys=True) + "\n")
            print(f"[reproduce] wrote {COMMITTED} ({', '.join(records)})")
        print(f"[reproduce] {readme_blocks.update_readme()}")
    return 0 if all(f["reproduced"] for f in figures) else 1


if __name__ == "__main__":
    raise SystemExit(main())
