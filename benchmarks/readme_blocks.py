"""The READMEs' figures, rendered from the committed result files (never typed by hand).

Each block of ``READMES`` between ``<!-- BEGIN generated: NAME ... -->`` and ``<!-- END generated: NAME -->`` is
the output of ``BLOCKS[NAME]`` over ``benchmarks/results/``: ``reproduce.json`` (the demo's figures per TRL release,
measured by ``benchmarks/reproduce.py --update``) and the ``*.figures.json`` written by the full benchmark runs
beside their reports. ``README.md`` carries the short blocks (``demo-headline``, ``headlines``); the full tables
and reports live in ``docs/`` and ``benchmarks/README.md``. ``python benchmarks/reproduce.py --render-readme``
rewrites them all; ``benchmarks/tests/test_reproduce.py`` fails when a block differs from what the committed files
render.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from collections.abc import Callable
from pathlib import Path

from trl_ext.console import format_duration

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: The files whose generated blocks this module writes.
READMES = (
    README,
    ROOT / "benchmarks" / "README.md",
    DOCS / "REPRODUCE.md",
    DOCS / "EVALUATION.md",
    DOCS / "REWARD_MODELS.md",
)


def _load(name: str) -> dict:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else {}


def release_key(version: str) -> tuple[int, ...]:
    """``"1.16.0"`` -> ``(1, 16, 0)``: TRL releases in order."""
    return tuple(int(x) for x in version.split(".")[:3])


def _releases(record: dict) -> list[str]:
    return sorted(record, key=release_key)


def demo_table() -> list[str]:
    """The demo's figures per TRL release, and how far they move with the SFT seed of the warm start."""
    demo = _load("reproduce.json").get("demo", {})
    rows = [
        "| TRL | warm start (held-out) | after DAPO | gain | mean reward (first -> last log) | clipped tokens "
        "(mean, min-max per log) | rounds per rollout | wall clock | peak memory | other SFT seeds: warm start -> "
        "after DAPO |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for trl in _releases(demo):
        f = demo[trl]["figures"]
        others = [w for s, w in sorted(demo[trl]["warm_starts"].items()) if s != "0"]
        spread = ", ".join(
            f"seed {w['seed']}: {w['accuracy_before']:.3f} -> {w['accuracy_after']:.3f}" for w in others
        )
        clipped = (
            f"{100 * f['clipped_mean']:.1f}%, {100 * f['clipped_range'][0]:.1f}-{100 * f['clipped_range'][1]:.1f}%"
            if f.get("clipped_mean") is not None
            else "–"
        )
        peak = f"{f['peak_mb']:.0f} MB" if f.get("peak_mb") else "–"
        rows.append(
            f"| {trl} | {f['accuracy_before']:.3f} | **{f['accuracy_after']:.3f}** | +{100 * f['gain']:.1f} points | "
            f"{f['reward_first']:.3f} -> {f['reward_last']:.3f} | {clipped} | {f['rounds']:.2f} | "
            f"{format_duration(f['wall_s'])} | {peak} | {spread or '–'} |"
        )
    noise = []
    for trl in _releases(demo):
        n = demo[trl]["noise"]
        seeds = len(demo[trl]["warm_starts"])
        gains = [w["gain"] for w in demo[trl]["warm_starts"].values()]
        noise.append(
            f"trl {trl}: gain {100 * statistics.mean(gains):+.1f} points on average over {seeds} SFT seeds (min "
            f"{100 * min(gains):+.1f}); noise of the seed-0 figures ±{n['accuracy_before']:.3f} (warm start), "
            f"±{n['accuracy_after']:.3f} (after DAPO)"
        )
    prov = {trl: demo[trl].get("provenance", {}) for trl in demo}
    machines = sorted({p.get("machine", "?") for p in prov.values()})
    dates = sorted({p.get("date", "?") for p in prov.values()})
    return rows + [
        "",
        "Measured by `python benchmarks/reproduce.py --update --demo-warm-starts 0,1,2` in the virtual environment of "
        f"each TRL release ({', '.join(dates)}; {'; '.join(machines)}): the demo command above from a folder with no "
        "cached warm start, then the same demo from two other SFT seeds of the warm start (the noise). "
        + "; ".join(noise)
        + ".",
    ]


EVAL_ORDER = ("pass@1 (greedy)", "avg@8", "pass@8", "maj@8")  # the order of the README's eval table


def eval_table() -> list[str]:
    """``trl-ext eval --num_samples 8`` after the demo, per TRL release, and which figures RL raised."""
    demo = _load("reproduce.json").get("demo", {})
    releases = _releases(demo)
    head = [
        "| figure | " + " | ".join(f"trl {t}: warm start | trl {t}: after `trl-ext dapo`" for t in releases) + " |"
    ]
    head.append("|---|" + "---:|" * (2 * len(releases)))
    pairs = {}
    for trl in releases:
        models = demo[trl]["figures"].get("eval", {})
        warm = next((v for k, v in models.items() if "warm start" in k), {})
        trained = next((v for k, v in models.items() if "warm start" not in k), {})
        pairs[trl] = (warm, trained)
    present = next(iter(pairs.values()), ({}, {}))[0]
    keys = [k for k in EVAL_ORDER if k in present] + [k for k in present if k not in EVAL_ORDER]
    rows = []
    for key in keys:
        cells = []
        for trl in releases:
            warm, trained = pairs[trl]
            cells += [f"{warm[key]:.3f}", f"{trained[key]:.3f}" if trained.get(key) is not None else "–"]
        rows.append(f"| {key} | " + " | ".join(cells) + " |")
    lines = head + rows
    for trl in releases:
        warm, trained = pairs[trl]
        up = [k for k in keys if trained.get(k) is not None and trained[k] > warm[k]]
        down = [k for k in keys if trained.get(k) is not None and trained[k] < warm[k]]
        lines.append("")
        lines.append(
            f"trl {trl}: RL raised {', '.join(up) or 'none of the figures'}"
            + (f" and lowered {', '.join(down)}" if down else "")
            + "."
        )
    return lines


#: The TRL release whose demo console and curves the README shows (that of its test command, the one with PPO).
CONSOLE_RELEASE = "1.12."


def demo_console() -> list[str]:
    """The console of the demo run on ``CONSOLE_RELEASE`` (what ``trl-ext dapo`` prints)."""
    demo = _load("reproduce.json").get("demo", {})
    release = next((r for r in _releases(demo) if r.startswith(CONSOLE_RELEASE)), None)
    if release is None:
        return ["```", "```"]
    return ["```", *demo[release]["figures"].get("console", []), "```"]


#: The sample-efficiency reports: the hard task (the full run the reduced rerun compares with), and the demo's task.
SAMPLE_EFFICIENCY = ("sample_efficiency.figures.json", "sample_efficiency_demo_task/sample_efficiency.figures.json")


def benchmark_headlines() -> list[str]:
    """One line per full benchmark: what it measured, from its committed ``*.figures.json``."""
    lines = []
    overhead = _load("overhead.figures.json")
    for name, c in overhead.get("comparisons", {}).items():
        label = {
            "dapo": "`DAPOTrainer` (nothing to filter) / `trl.GRPOTrainer`",
            "gspo": "`GSPOTrainer` / TRL's sequence-level `GRPOTrainer`",
        }.get(name, name)
        r = c["ratio"]
        lines.append(
            f"- Overhead (trl {overhead['trl']}, {c['pairs']} lock-stepped pairs x {c['steps']} steps): {label} step "
            f"time **{r['median']:.3f}** [{r['q1']:.3f}, {r['q3']:.3f}] (median [IQR]), final weights "
            f"{'identical in every pair' if c['identical'] else 'NOT identical'} "
            "([overhead.md](benchmarks/results/overhead.md))."
        )
    ds = _load("dynamic_sampling.figures.json")
    if ds.get("worst"):
        w = ds["worst"]
        within = all(r["generated_per_kept"] <= 1.10 * r["ideal"] for r in ds["rows"])
        lines.append(
            f"- Dynamic-sampling cost (trl {ds['trl']}): groups generated per kept group against the ideal 1/(1-p), "
            f"worst `{w['config']}` at p = {w['p']:g}: {w['generated_per_kept']:.2f} for {w['ideal']:.2f} "
            f"(**{w['generated_per_kept'] / w['ideal']:.3f}x**); "
            f"{'every configuration within 10%' if within else 'NOT every configuration within 10%'} "
            "([dynamic_sampling.md](benchmarks/results/dynamic_sampling.md))."
        )
    releases = [(r, name) for name in SAMPLE_EFFICIENCY for r in _load(name).get("releases", [])]
    for release, name in releases:
        algorithms = release["algorithms"]
        if "dapo" not in algorithms or "dapo_no_ds" not in algorithms:
            continue
        ds_, no = algorithms["dapo"], algorithms["dapo_no_ds"]
        starts = ", ".join(f"{v['start']:.3f}" for _, v in sorted(release["warm_starts"].items()))
        steps_v = release["dynamic_sampling_at_common_steps"]
        budget_v = release["dynamic_sampling_final"]
        mean_start = statistics.mean(r["start"] for r in release["runs"])
        report = name.replace(".figures.json", ".md")
        lines.append(
            f"- Sample efficiency (trl {release['trl']}, `--task {release['task']}`, {release['units']}; warm starts "
            f"at {starts}, mean {mean_start:.3f}; target reached in {ds_['reached']}/{ds_['runs']} runs with dynamic "
            f"sampling, {no['reached']}/{no['runs']} without): after {release['common_steps']} optimizer steps DAPO with dynamic sampling "
            f"{ds_['at_common_steps'][0]:.3f} ± {ds_['at_common_steps'][1]:.3f} vs without "
            f"{no['at_common_steps'][0]:.3f} ± {no['at_common_steps'][1]:.3f} (**{steps_v['verdict']}**: "
            f"{steps_v['detail']}); at the budget of {release['budget']:,} completions {ds_['final'][0]:.3f} vs "
            f"{no['final'][0]:.3f} (**{budget_v['verdict']}**: {budget_v['detail']}), with {ds_['steps']:.0f} optimizer "
            f"steps against {no['steps']:.0f} ([report](benchmarks/results/{report}))."
        )
    return lines


#: The overlapped-generation reports: trl 1.12 (the README's release) and the newest release.
ASYNC_GENERATION = ("async_generation.figures.json", "async_generation_trl1.16/async_generation.figures.json")


def async_generation_headline() -> list[str]:
    """``benchmarks/async_generation.py``: overlapped step time against the physical limit, and accuracy at equal
    steps against the synchronous runs' noise, per task and dynamic-sampling setting, one line per TRL release."""
    lines = []
    for name in ASYNC_GENERATION:
        record = _load(name)
        if not record.get("rows"):
            continue
        parts = []
        for r, v in zip(record["rows"], record["verdicts"], strict=True):
            parts.append(
                f"{r['task']} {'with' if r['dynamic_sampling'] else 'without'} dynamic sampling "
                f"**{r['over_limit']:.2f}** (speed-up {r['speedup']:.2f}x of at most {1 / r['limit_ratio']:.2f}x; "
                f"accuracy {r['accuracy_sync']:.3f} -> {r['accuracy_overlapped']:.3f}, {v['accuracy_gap']:+.3f} "
                f"against a noise of {r['noise']:.3f})"
            )
        within = all(v["step_within"] and v["accuracy_within"] for v in record["verdicts"])
        bar = "within 15% of the limit and within 2 sd of the noise"
        verdict = f"every setting {bar}" if within else f"NOT every setting {bar}"
        lines.append(
            f"- Overlapped generation (trl {record['trl']}, engine in its own process, {record['seeds']} seeds x "
            f"{record['steps']} steps, {record['micro_steps']} micro-steps per rollout; `async_generation=True` "
            f"against synchronous), overlapped step / physical limit max(generation, training): {'; '.join(parts)}; "
            f"{verdict} ([report](benchmarks/results/{name.replace('.figures.json', '.md')}))."
        )
    return lines


def learned_reward() -> list[str]:
    """``trl-ext pipeline --learned_reward true`` on the demo, per TRL release measured."""
    record = _load("reproduce.json")
    lines = []
    for trl in _releases(record.get("learned_reward", {})):
        f = record["learned_reward"][trl]["figures"]
        rule = record.get("demo", {}).get(trl, {}).get("figures", {}).get("accuracy_after")
        warned = "the health monitor did not warn"
        if f["warning"]:
            where, _, said = f["warning"].partition("reward over-optimization: ")
            step = where.rsplit("step ", 1)[-1].split(",")[0].rstrip(": ") if "step " in where else "?"
            warned = f'the health monitor warns at step {step}: "{said.split(" (Gao et al.")[0]}"'

        lines.append(
            f"Measured on the demo (trl {trl}, `trl-ext pipeline --learned_reward true` run by `python "
            f"benchmarks/reproduce.py --parts learned_reward`, {format_duration(f['wall_s'])}): the reward model ranks "
            f"{f['rm_accuracy_before']:.3f} -> {f['rm_accuracy_after']:.3f} of {f['held_out_pairs']} held-out pairs "
            f"right (trained on {f['train_pairs']:,} pairs), and DAPO against it takes held-out accuracy from "
            f"{f['sft_accuracy']:.3f} to **{f['dapo_vs_rm_accuracy']:.3f}**; {warned}."
            + (
                f" From the same warm start, DAPO with the rule reward (`trl-ext dapo`, 1000 steps) reaches {rule:.3f}."
                if rule is not None
                else ""
            )
        )
    return lines


def demo_headline() -> list[str]:
    """README: the demo's held-out accuracy before and after, per TRL release, with the other SFT seeds (the noise)."""
    demo = _load("reproduce.json").get("demo", {})
    rows = [
        "| TRL | held-out accuracy: warm start -> after `trl-ext dapo` | other SFT seeds of the warm start | wall clock |",
        "|---|---|---|---|",
    ]
    for trl in _releases(demo):
        f = demo[trl]["figures"]
        others = [w for s, w in sorted(demo[trl]["warm_starts"].items()) if s != "0"]
        spread = ", ".join(f"{w['accuracy_before']:.3f} -> {w['accuracy_after']:.3f}" for w in others)
        rows.append(
            f"| {trl} | {f['accuracy_before']:.3f} -> **{f['accuracy_after']:.3f}** | {spread or '–'} | "
            f"{format_duration(f['wall_s'])} |"
        )
    return rows


def _span(values: list[float], fmt: str) -> str:
    low, high = min(values), max(values)
    return format(low, fmt) if format(low, fmt) == format(high, fmt) else f"{low:{fmt}}-{high:{fmt}}"


def headlines() -> list[str]:
    """README: one short line per measured claim; the full lines are ``benchmark_headlines`` and
    ``async_generation_headline`` (benchmarks/README.md)."""
    lines = []
    overhead = _load("overhead.figures.json")
    comparisons = overhead.get("comparisons", {})
    if comparisons:
        label = {"dapo": "`DAPOTrainer` / `trl.GRPOTrainer`", "gspo": "`GSPOTrainer` / TRL's sequence-level GRPO"}
        parts = [f"{label.get(n, n)} **{c['ratio']['median']:.3f}**" for n, c in comparisons.items()]
        identical = all(c["identical"] for c in comparisons.values())
        lines.append(
            f"- Overhead against TRL (trl {overhead['trl']}, median step-time ratio): {', '.join(parts)}; final "
            f"weights {'identical' if identical else 'NOT identical'} "
            "([overhead.md](benchmarks/results/overhead.md))."
        )
    ds = _load("dynamic_sampling.figures.json")
    if ds.get("worst"):
        w = ds["worst"]
        lines.append(
            f"- Dynamic-sampling cost (trl {ds['trl']}): at worst **{w['generated_per_kept'] / w['ideal']:.3f}x** the "
            "ideal 1/(1-p) groups generated per kept group "
            "([dynamic_sampling.md](benchmarks/results/dynamic_sampling.md))."
        )
    verdicts = []
    for name in SAMPLE_EFFICIENCY:
        for release in _load(name).get("releases", []):
            if "dapo" in release["algorithms"] and "dapo_no_ds" in release["algorithms"]:
                verdicts.append(
                    f"trl {release['trl']} `--task {release['task']}` "
                    f"{release['dynamic_sampling_at_common_steps']['verdict']} / "
                    f"{release['dynamic_sampling_final']['verdict']}"
                )
    if verdicts:
        lines.append(
            "- Sample efficiency, DAPO with dynamic sampling against without (at equal optimizer steps / at an equal "
            f"budget of completions, across warm starts): {'; '.join(verdicts)} "
            "([report](benchmarks/results/sample_efficiency.md))."
        )
    spans = []
    for name in ASYNC_GENERATION:
        record = _load(name)
        if record.get("rows"):
            ratios = _span([r["over_limit"] for r in record["rows"]], ".2f")
            within = all(v["accuracy_within"] for v in record["verdicts"])
            spans.append(
                f"trl {record['trl']} **{ratios}** "
                f"(accuracy {'within' if within else 'NOT within'} 2 sd of the synchronous runs)"
            )
    if spans:
        lines.append(
            "- Overlapped generation, step time / max(generation, training): "
            f"{'; '.join(spans)} ([report](benchmarks/results/async_generation.md))."
        )
    return lines


BLOCKS: dict[str, Callable[[], list[str]]] = {
    "demo-headline": demo_headline,
    "headlines": headlines,
    "learned-reward": learned_reward,
    "demo-table": demo_table,
    "eval-table": eval_table,
    "demo-console": demo_console,
    "benchmark-headlines": benchmark_headlines,
    "async-generation": async_generation_headline,
}
_BLOCK = re.compile(
    r"(<!-- BEGIN generated: (?P<name>[\w-]+) [^>]*-->\n)(?P<body>.*?)(<!-- END generated: (?P=name) -->)", re.S
)


def render_readme(text: str, links_from: Path = README) -> str:
    """``text`` with every generated block replaced by what the committed files render (links written relative to
    the folder of ``links_from``, the file the text is in)."""

    def replace(match: re.Match) -> str:
        name = match["name"]
        if name not in BLOCKS:
            raise KeyError(
                f"README block {name!r} has no renderer in benchmarks/readme_blocks.py (known: {list(BLOCKS)})"
            )
        body = "\n".join(BLOCKS[name]())
        if links_from.parent != ROOT:  # the blocks link from the repository's root
            body = body.replace("](benchmarks/", "](" + os.path.relpath(ROOT / "benchmarks", links_from.parent) + "/")
        return match.group(1) + body + "\n" + match.group(4)

    return _BLOCK.sub(replace, text)


def blocks_in(text: str) -> list[str]:
    return [m["name"] for m in _BLOCK.finditer(text)]


def update_readme(paths: tuple[Path, ...] | Path = READMES) -> str:
    """Rewrite the generated blocks of ``paths``; what changed, in words."""
    said = []
    for path in (paths,) if isinstance(paths, Path) else paths:
        text = path.read_text()
        new = render_readme(text, path)
        names = ", ".join(blocks_in(text))
        if new == text:
            said.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}: up to date ({names})")
        else:
            path.write_text(new)
            said.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}: rewrote {names}")
    return "; ".join(said)
