"""Does it learn faster? GRPO, Dr. GRPO, DAPO (with and without dynamic sampling) and GSPO on the demo task, from
the same warm-start checkpoint, with the same budget of generated completions, side by side in one run.

    python benchmarks/sample_efficiency.py           # full: 3 seeds x 38,400 completions each, ~35-45 min on 2 cores
    python benchmarks/sample_efficiency.py --quick   # 1 seed x 2,048 completions, under 2 minutes
    python benchmarks/sample_efficiency.py --render benchmarks/results/sample_efficiency.json   # report only

Every algorithm is its preset (``trl_ext.get_preset``) on the demo's tuned RL setting (``recipes/configs/demo/
dapo.yaml``: 16 prompts x 8 completions per step, max 6 tokens, lr 5e-4 constant, the arithmetic reward) and is
trained by the class the recipes use (``trainer_class_for``):

- ``grpo``: ``get_preset("grpo")``: per-sequence loss, KL beta 0.04 (DeepSeekMath).
- ``dr_grpo``: ``get_preset("dr_grpo")``: constant normalizer, no std scaling, beta 0.
- ``dapo_no_ds``: ``get_preset("dapo", dynamic_sampling=False)``: clip-higher, token-level loss, soft overlong
  punishment (buffer 2 tokens, the demo's), beta 0.
- ``dapo``: the same with dynamic sampling (a budget of 4 generation batches per step, the demo's setting;
  right-sized refills, surplus carried over since the demo's DAPO has 2 minibatches per rollout).
- ``dapo_skip``: ``dapo`` with ``dynamic_sampling_skip_predicted`` (GRESO pre-rollout skipping).
- ``dapo_select``: ``dapo`` with ``dynamic_sampling_select_prompts`` (the posterior prompt selector, its defaults).
- ``gspo``: ``get_preset("gspo")``: sequence-level ratio clipped at 3e-4/4e-4, 4 minibatches per rollout, so one
  generation of 64 prompts x 8 feeds 4 optimizer steps (each completion is still trained on once).

**Same budget** means the same number of generated completions, counted where every completion passes: the reward
function (so dynamic sampling's refill rounds count, dropped groups included). A run stops at the end of the first
generation cycle at which the count reaches ``--budget``. Held-out greedy accuracy (``trl_ext.demo.greedy_accuracy``,
the 240 held-out problems) is measured before training and after the first cycle at or past every ``--eval-every``
completions; it is deterministic (greedy decoding), so it does not disturb the training's random stream.

**Per optimizer step**: accuracy after the fewest optimizer steps any run made within the budget (dynamic
sampling's, since its refills eat into the budget), interpolated between evaluations: the test of DAPO's claim that
dynamic sampling reaches a given accuracy in fewer steps. **Time to target**: the first evaluation at which the mean of the last three evaluations reaches ``--target`` (the
mean damps the evaluation noise of 240 problems, about +-3 points); its optimizer steps, completions and training
seconds are reported. **Wall clock**: the algorithms of one seed run in parallel worker processes that take turns one
optimizer step at a time (``_common.run_lockstep``), so every algorithm trains under the same machine load; a
step's time (generation, loss, backward, optimizer update, log) is measured while its worker holds the turn and the
evaluations are subtracted. The ratio to GRPO is per seed, then the median over seeds.

**Kept-group fraction**: the fraction of generated groups whose rewards are not all equal, ``1 - frac_reward_zero_std``
as TRL logs it for every algorithm (with dynamic sampling it is ``dynamic_sampling/kept_group_frac``: the
informative fraction of all groups generated, refills included; the trained batch itself is then all informative).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402

ALGORITHMS = {  # name: (label, preset, overrides)
    "grpo": ("GRPO", "grpo", {}),
    "dr_grpo": ("Dr. GRPO", "dr_grpo", {}),
    "dapo_no_ds": ("DAPO (no dynamic sampling)", "dapo", {"dynamic_sampling": False}),
    "dapo": ("DAPO (dynamic sampling)", "dapo", {}),
    "dapo_skip": ("DAPO (dynamic sampling + GRESO skipping)", "dapo", {"dynamic_sampling_skip_predicted": True}),
    "dapo_select": ("DAPO (dynamic sampling + prompt selector)", "dapo", {"dynamic_sampling_select_prompts": True}),
    "gspo": ("GSPO", "gspo", {}),
}
TRAILING = 3  # evaluations averaged for "time to target"
TASKS = common.TASKS  # --task
#: Default ``--target-gain`` per task: the target of a run is its warm start's own held-out accuracy plus this gain
#: (warm starts from different SFT seeds start at different accuracies, so one absolute target would favour the
#: best-started one). ``hard``: 0.05, the gain of the first single-warm-start report (0.121 -> 0.17), fixed before any
#: run with several warm starts; ``demo``: 0.08 (0.28 -> 0.36 in that report).
TARGET_GAINS = {"demo": 0.08, "hard": 0.05, "mixed": 0.08}


class CountingArithmetic:
    """The demo's arithmetic reward, counting the completions it scores (= completions generated in training) and
    their tokens."""

    __name__ = "arithmetic_reward"

    def __init__(self):
        self.completions = 0
        self.tokens = 0

    def __call__(self, prompts, completions, answer, completion_ids, **kwargs):
        from trl_ext.rewards.arithmetic import arithmetic_reward

        self.completions += len(completions)
        self.tokens += sum(len(ids) for ids in completion_ids)
        return arithmetic_reward(prompts, completions, answer)


def make_args(name: str, output_dir: str, seed: int, max_steps: int, prompts_per_step: int | None):
    from trl_ext.grpo.presets import get_preset

    _, preset, overrides = ALGORITHMS[name]
    rl, dapo = common.demo_settings(prompts_per_step)
    extra = dapo if preset == "dapo" else {}
    return get_preset(
        preset, **common.run_args(output_dir, seed=seed, max_steps=max_steps), **rl, **extra, **overrides
    )


def budget_callback(counter, options, tokenizer, held_out, steps_per_generation):
    from transformers import TrainerCallback

    from trl_ext.demo import greedy_accuracy

    class Budget(TrainerCallback):
        """Evaluates at the end of generation cycles every ``eval_every`` completions; stops at the budget."""

        def __init__(self):
            self.evals: list[dict] = []  # step, completions, accuracy, seconds spent evaluating
            self.logs: list[dict] = []
            self.next_eval = options.eval_every

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % steps_per_generation:
                return
            done = counter.completions >= options.budget
            if counter.completions >= self.next_eval or done:
                started = time.perf_counter()
                accuracy = greedy_accuracy(model, tokenizer, held_out)
                self.evals.append(
                    {
                        "step": state.global_step,
                        "completions": counter.completions,
                        "tokens": counter.tokens,
                        "accuracy": accuracy,
                        "eval_seconds": time.perf_counter() - started,
                    }
                )
                self.next_eval = (counter.completions // options.eval_every + 1) * options.eval_every
            if done:
                control.should_training_stop = True

        def on_log(self, args, state, control, logs=None, **kwargs):
            keep = ("frac_reward_zero_std", "dynamic_sampling/rounds", "dynamic_sampling/kept_group_frac", "reward")
            row = {k: logs[k] for k in keep if k in (logs or {})}
            if row:
                self.logs.append({"step": state.global_step, "completions": counter.completions, **row})

    return Budget()


def worker(me: int, baton, name: str, units: list[tuple[int, int]], options):
    """One algorithm in its own process: one run per (warm start, RL seed), taking turns with the other algorithms
    step by step."""
    common.setup(options.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ext.demo import greedy_accuracy, warm_start_record
    from trl_ext.grpo.presets import trainer_class_for

    train, held_out = common.task_problems(options.task)
    with tempfile.TemporaryDirectory() as workdir:
        for index, (warm, seed) in enumerate(units):
            path = common.warm_start_path(options.warm_start_steps, options.cache_dir, warm)
            tokenizer = AutoTokenizer.from_pretrained(path)
            probe = make_args(name, workdir, seed, 1, options.prompts_per_step)
            per_step = probe.per_device_train_batch_size
            max_steps = options.budget // per_step + 2 * probe.steps_per_generation  # the budget stops it first
            args = make_args(
                name, os.path.join(workdir, f"{name}-{warm}-{seed}"), seed, max_steps, options.prompts_per_step
            )
            model = AutoModelForCausalLM.from_pretrained(path)
            start_accuracy = greedy_accuracy(model, tokenizer, held_out)
            counter = CountingArithmetic()
            clock = common.lockstep(baton, me)
            budget = budget_callback(counter, options, tokenizer, held_out, args.steps_per_generation)
            trainer = trainer_class_for(args)(
                model=model,
                reward_funcs=[counter],
                args=args,
                train_dataset=train,
                processing_class=tokenizer,
                callbacks=[clock, budget],
            )
            common.silence(trainer)
            baton.start(me, first=index % baton.parties)  # rotate which algorithm takes the first step
            trainer.train()
            yield {
                "name": name,
                "warm_start": warm,
                "warm_start_key": warm_start_record(path)["key_hash"],
                "seed": seed,
                "start_accuracy": start_accuracy,
                "evals": budget.evals,
                "logs": budget.logs,
                "step_seconds": clock.step_seconds(),
                "completions": counter.completions,
                "tokens": counter.tokens,
                "steps": trainer.state.global_step,
                "completions_per_step": per_step,
            }
            del trainer, model
            gc.collect()


# -- analysis ---------------------------------------------------------------------------------------------------------


def train_seconds(run: dict, step: int) -> float:
    """Training seconds through optimizer step ``step`` (its evaluations subtracted)."""
    evals = sum(e["eval_seconds"] for e in run["evals"] if e["step"] <= step)
    return sum(run["step_seconds"][:step]) - evals


def at_completions(run: dict, completions: float) -> dict | None:
    """The first evaluation at or past ``completions`` generated completions."""
    return next((e for e in run["evals"] if e["completions"] >= completions), None)


def accuracy_at_step(run: dict, step: float) -> float:
    """Held-out accuracy after ``step`` optimizer steps, linearly interpolated between the evaluations around it."""
    points = [(0, run["start_accuracy"])] + [(e["step"], e["accuracy"]) for e in run["evals"]]
    for (s0, a0), (s1, a1) in zip(points, points[1:], strict=False):
        if s0 <= step <= s1:
            return a0 if s1 == s0 else a0 + (a1 - a0) * (step - s0) / (s1 - s0)
    return points[-1][1]


def unit(run: dict) -> tuple[int, int]:
    """The (warm start, RL seed) a run trained from (reports saved before warm starts were varied: warm start 0)."""
    return run.get("warm_start", 0), run["seed"]


def target_of(run: dict, options) -> float:
    """The run's target accuracy: ``--target`` if given, else its own warm start's accuracy + ``--target-gain``."""
    if options.target is not None:
        return options.target
    return round(run["start_accuracy"] + options.target_gain, 6)


def reach(run: dict, options) -> dict | None:
    """The first evaluation at which the mean of the last ``TRAILING`` evaluations reaches the run's target."""
    target = target_of(run, options)
    accuracies = [run["start_accuracy"]] + [e["accuracy"] for e in run["evals"]]
    for i, e in enumerate(run["evals"], start=1):
        window = accuracies[max(0, i - TRAILING + 1) : i + 1]
        if sum(window) / len(window) >= target:
            return {**e, "seconds": train_seconds(run, e["step"])}
    return None


def target_label(options) -> str:
    return f"{options.target}" if options.target is not None else f"start + {options.target_gain:g}"


def mean_sd(values: list[float], fmt: str = "{:.3f}") -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.mean(values))} ± {fmt.format(statistics.stdev(values))}"


def informative_fraction(run: dict, lo: float, hi: float) -> float | None:
    rows = [
        1 - r["frac_reward_zero_std"]
        for r in run["logs"]
        if "frac_reward_zero_std" in r and lo < r["completions"] <= hi
    ]
    return statistics.mean(rows) if rows else None


def summarize(runs: list[dict], options) -> dict:
    """Every figure of the report, over all (warm start, RL seed) units of each algorithm, and per warm start."""
    by = {name: sorted((r for r in runs if r["name"] == name), key=unit) for name in options.algorithms}
    grpo = {unit(r): r for r in by.get("grpo", [])}
    common_steps = min(r["steps"] for r in runs)  # the fewest optimizer steps any run made within the budget
    summary: dict = {"common_steps": common_steps, "warm_starts": {}}
    for r in runs:
        summary["warm_starts"].setdefault(
            r.get("warm_start", 0), {"key": r.get("warm_start_key", "–"), "start": r["start_accuracy"]}
        )
    for name, rs in by.items():
        hits = [reach(r, options) for r in rs]
        full_time = [train_seconds(r, r["steps"]) for r in rs]
        ratios = [
            train_seconds(r, r["steps"]) / train_seconds(grpo[unit(r)], grpo[unit(r)]["steps"])
            for r in rs
            if unit(r) in grpo
        ]
        target_ratios = []
        for r, hit in zip(rs, hits, strict=True):
            base = reach(grpo[unit(r)], options) if unit(r) in grpo else None
            if hit and base:
                target_ratios.append(hit["seconds"] / base["seconds"])
        rounds = [x["dynamic_sampling/rounds"] for r in rs for x in r["logs"] if "dynamic_sampling/rounds" in x]
        tenth = options.budget / 10
        summary[name] = {
            "seeds": len(rs),
            "units": [unit(r) for r in rs],
            "start": statistics.mean(r["start_accuracy"] for r in rs),
            "final": [r["evals"][-1]["accuracy"] for r in rs],
            "final_completions": [r["evals"][-1]["completions"] for r in rs],
            "half": [at_completions(r, options.budget / 2)["accuracy"] for r in rs],
            "steps": [r["steps"] for r in rs],
            "reached": [h for h in hits if h],
            "at_common_steps": [accuracy_at_step(r, common_steps) for r in rs],
            "reached_by_common_steps": sum(1 for h in hits if h and h["step"] <= common_steps),
            "time_ratio": statistics.median(ratios) if ratios else None,
            "time_ratios": ratios,
            "target_time_ratio": statistics.median(target_ratios) if target_ratios else None,
            "seconds_per_1k": statistics.median(
                [1000 * t / r["completions"] for t, r in zip(full_time, rs, strict=True)]
            ),
            "kept_first": [f for r in rs if (f := informative_fraction(r, 0, tenth)) is not None],
            "kept_last": [
                f for r in rs if (f := informative_fraction(r, options.budget - tenth, math.inf)) is not None
            ],
            "kept_all": [f for r in rs if (f := informative_fraction(r, 0, math.inf)) is not None],
            "rounds": statistics.mean(rounds) if rounds else None,
        }
    return summary


def per_warm_start(summary: dict, name: str, key: str) -> dict[int, list[float]]:
    """``summary[name][key]`` (one value per unit) grouped by warm start."""
    out: dict[int, list[float]] = {}
    for (warm, _), value in zip(summary[name]["units"], summary[name][key], strict=True):
        out.setdefault(warm, []).append(value)
    return out


def paired(summary: dict, a: str, b: str, key: str) -> dict[tuple[int, int], float]:
    """``a - b`` of ``summary[*][key]`` on every (warm start, RL seed) unit both ran."""
    values_b = dict(zip(summary[b]["units"], summary[b][key], strict=True))
    return {u: v - values_b[u] for u, v in zip(summary[a]["units"], summary[a][key], strict=True) if u in values_b}


def plot(runs: list[dict], options, out: Path) -> Path:
    import numpy as np

    plt = common.plt()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    grid = np.linspace(0, options.budget, 41)
    for i, name in enumerate(options.algorithms):
        rs = [r for r in runs if r["name"] == name]
        color = f"C{i}"
        label = ALGORITHMS[name][0]
        # accuracy against completions and against optimizer steps: each seed interpolated on a common grid
        for ax, key, xs in ((axes[0], "completions", grid), (axes[1], "step", None)):
            if xs is None:
                xs = np.linspace(0, max(r["steps"] for r in rs), 41)
            curves = np.array(
                [
                    np.interp(
                        xs,
                        [0] + [e[key] for e in r["evals"]],
                        [0.0] + [e["accuracy"] - r["start_accuracy"] for e in r["evals"]],
                    )
                    for r in rs
                ]
            )
            ax.plot(xs, curves.mean(axis=0), color=color, label=label)
            if len(rs) > 1:
                ax.fill_between(xs, curves.min(axis=0), curves.max(axis=0), color=color, alpha=0.15)
        # informative (kept) group fraction over the budget, binned
        edges = np.linspace(0, options.budget, 11)
        centers, means, lows, highs = [], [], [], []
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            per_run = [f for r in rs if (f := informative_fraction(r, lo, hi)) is not None]
            if per_run:
                centers.append((lo + hi) / 2)
                means.append(np.mean(per_run))
                lows.append(min(per_run))
                highs.append(max(per_run))
        axes[2].plot(centers, means, "o-", color=color, label=label, ms=3)
        if len(rs) > 1:
            axes[2].fill_between(centers, lows, highs, color=color, alpha=0.15)
    axes[1].axvline(min(r["steps"] for r in runs), color="grey", ls="--", lw=0.8)
    for ax in axes[:2]:
        if options.target is None:
            ax.axhline(options.target_gain, color="grey", ls=":", lw=0.8)
        ax.set_ylabel("held-out accuracy gain over the warm start")
    axes[0].set(xlabel="generated completions", title="gain vs generation budget (mean, min-max over runs)")
    axes[1].set(xlabel="optimizer steps", title="gain vs optimizer steps (dashed: fewest steps of any run)")
    axes[2].set(
        xlabel="generated completions",
        ylabel="informative (kept) group fraction",
        title="kept-group fraction of generated groups",
    )
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def describe_units(options) -> str:
    return (
        f"{len(options.warm_starts)} warm start(s) (SFT seeds {options.warm_starts}) x {len(options.seeds)} RL "
        f"seed(s) {options.seeds}"
    )


def markdown(runs, summary, options, prov, level: str = "##") -> tuple[list[str], list[str]]:
    """The provenance block and the report body of one measurement (one TRL release); ``level`` is the heading
    level of its sections (one deeper when several releases share the report)."""
    rl, dapo = common.demo_settings(options.prompts_per_step)
    prompts = rl["per_device_train_batch_size"] // rl["num_generations"]
    head = common.header(prov)
    head.append(
        f"- setting: task `{options.task}` {TASKS[options.task] or ''}, demo SFT warm starts "
        f"({describe_units(options)}), {prompts} prompts x {rl['num_generations']} completions per step, max "
        f"{rl['max_completion_length']} tokens, lr {rl['learning_rate']:g} constant; budget {options.budget:,} "
        f"generated completions; evaluation every {options.eval_every:,}; target accuracy {target_label(options)} "
        f"(mean of the last {TRAILING} evaluations); DAPO: soft overlong buffer {dapo['overlong_buffer_len']}, a "
        f"generation budget of {dapo['dynamic_sampling_max_generation_batches']} generation batches per step (right-sized "
        "refill rounds)"
    )
    n = len(runs) // len(options.algorithms)
    target = target_label(options)
    rows = []
    for name in options.algorithms:
        s = summary[name]
        reached = s["reached"]
        rows.append(
            [
                ALGORITHMS[name][0],
                f"**{mean_sd(s['final'])}**",
                mean_sd(s["half"]),
                mean_sd(s["at_common_steps"]),
                f"{len(reached)}/{n}",
                mean_sd([h["step"] for h in reached], "{:.0f}"),
                mean_sd([h["completions"] for h in reached], "{:,.0f}"),
                f"{s['target_time_ratio']:.2f}" if s["target_time_ratio"] is not None else "–",
                f"{s['time_ratio']:.2f}" if s["time_ratio"] is not None else "–",
                mean_sd(s["steps"], "{:.0f}"),
                f"{s['rounds']:.2f}" if s["rounds"] is not None else "1",
                mean_sd(s["kept_first"], "{:.2f}"),
                mean_sd(s["kept_last"], "{:.2f}"),
                mean_sd([h["seconds"] for h in reached], "{:.0f}"),
            ]
        )
    body = [
        f"{level} At the same budget ({options.budget:,} generated completions), {n} runs ({describe_units(options)}):"
        " mean ± sd over all of them",
        "",
    ]
    body += common.table(
        [
            "algorithm",
            "accuracy at budget",
            "accuracy at half budget",
            f"accuracy after {summary['common_steps']} optimizer steps",
            f"reached {target}",
            f"optimizer steps to {target}",
            f"completions to {target}",
            "train time to target / GRPO",
            "train time for budget / GRPO",
            "optimizer steps in budget",
            "generation rounds per step",
            "kept-group frac, first 10%",
            "kept-group frac, last 10%",
            f"train seconds to {target}",
        ],
        rows,
    )
    body += [
        "",
        f"Accuracy after {summary['common_steps']} optimizer steps (the fewest any run made within the "
        "budget): interpolated between the evaluations around that step, so every algorithm is compared at the "
        "same number of updates. Steps, completions and time to target: mean over the runs that reached it "
        "(how many did is in the column before); a run's target is its own warm start's accuracy plus the gain. "
        "Time ratios: per run against GRPO's run of the same warm start and seed (same turn-taking run), median; "
        "training time only (evaluations excluded).",
        "",
        f"{level} Per warm start (mean over its RL seeds)",
        "",
    ]
    body += warm_start_table(summary, options)
    body += ["", f"{level} Reading", ""]
    body += findings(summary, options)
    body += ["", f"{level} Every run", ""]
    run_rows = []
    for r in sorted(runs, key=lambda r: (options.algorithms.index(r["name"]), unit(r))):
        hit = reach(r, options)
        run_rows.append(
            [
                ALGORITHMS[r["name"]][0],
                r.get("warm_start", 0),
                r["seed"],
                f"{r['start_accuracy']:.3f}",
                r["steps"],
                f"{r['completions']:,}",
                f"{r['evals'][-1]['accuracy']:.3f}",
                hit["step"] if hit else "–",
                f"{hit['completions']:,}" if hit else "–",
                f"{train_seconds(r, r['steps']):.0f}",
            ]
        )
    body += common.table(
        [
            "algorithm",
            "warm start",
            "seed",
            "start accuracy",
            "optimizer steps",
            "completions",
            "final accuracy",
            "steps to target",
            "completions to target",
            "train seconds",
        ],
        run_rows,
    )
    body += selection_section(runs, options, level)
    return head, body


#: Student's t at 0.975 by degrees of freedom (a 95% interval of a mean of paired differences)
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def groups_per_kept(run: dict, options) -> float:
    """Groups generated per trained informative group over the run. With dynamic sampling every trained group is
    informative (fillers aside), so it is generated groups / (steps x prompts per step); without it, the informative
    share of each step's groups (``1 - frac_reward_zero_std``) is what trains."""
    rl, _ = common.demo_settings(options.prompts_per_step)
    size = rl["num_generations"]
    prompts = rl["per_device_train_batch_size"] // size
    trained = run["steps"] * prompts
    if run["name"] == "dapo_no_ds":
        fractions = [1 - row["frac_reward_zero_std"] for row in run["logs"] if "frac_reward_zero_std" in row]
        trained *= statistics.mean(fractions) if fractions else float("nan")
    return run["completions"] / size / trained


def smoothed(run: dict) -> list[tuple[dict, float]]:
    """Each evaluation with the mean of the last ``TRAILING`` accuracies (the start included), as ``reach`` reads."""
    accuracies = [run["start_accuracy"]] + [e["accuracy"] for e in run["evals"]]
    return [
        (e, statistics.mean(accuracies[max(0, i - TRAILING + 1) : i + 1])) for i, e in enumerate(run["evals"], start=1)
    ]


def tokens_to(run: dict, target: float) -> dict | None:
    """The first evaluation whose smoothed accuracy reaches ``target`` (tokens, completions, train seconds)."""
    for e, accuracy in smoothed(run):
        if accuracy >= target:
            return {**e, "seconds": train_seconds(run, e["step"])}
    return None


def selection_section(runs: list[dict], options, level: str) -> list[str]:
    """What dynamic sampling costs against its predictors (GRESO skipping, the posterior selector) and DAPO without
    it: groups and tokens generated per trained group, accuracy at DS's optimizer steps (paired), and the tokens and
    seconds to reach the accuracy DS reaches at 80% of its run."""
    if "dapo" not in options.algorithms or not {"dapo_select", "dapo_skip", "dapo_no_ds"} & set(options.algorithms):
        return []
    by = {(r["name"], unit(r)): r for r in runs}
    units = sorted({unit(r) for r in runs if r["name"] == "dapo"})
    targets = {}
    for u in units:
        ds = by[("dapo", u)]
        at = 0.8 * ds["completions"]
        before = [acc for e, acc in smoothed(ds) if e["completions"] <= at]
        targets[u] = before[-1] if before else ds["start_accuracy"]
    rows = []
    for name in options.algorithms:
        if not name.startswith("dapo"):
            continue
        mine = [by[(name, u)] for u in units if (name, u) in by]
        ratio = [groups_per_kept(r, options) / groups_per_kept(by[("dapo", unit(r))], options) for r in mine]
        per_kept_tokens = [
            r["tokens"] / (r["completions"] / groups_per_kept(r, options)) for r in mine if "tokens" in r
        ]
        diffs = [
            accuracy_at_step(r, min(r["steps"], by[("dapo", unit(r))]["steps"]))
            - accuracy_at_step(by[("dapo", unit(r))], min(r["steps"], by[("dapo", unit(r))]["steps"]))
            for r in mine
        ]
        mean = statistics.mean(diffs)
        half = (
            _T975.get(len(diffs) - 1, 1.96) * statistics.stdev(diffs) / math.sqrt(len(diffs))
            if len(diffs) > 1
            else math.inf
        )
        reached, token_ratio, second_ratio = 0, [], []
        for r in mine:
            hit, ds_hit = tokens_to(r, targets[unit(r)]), tokens_to(by[("dapo", unit(r))], targets[unit(r)])
            reached += hit is not None
            if hit is not None and ds_hit is not None and "tokens" in hit:
                token_ratio.append(hit["tokens"] / ds_hit["tokens"])
                second_ratio.append(hit["seconds"] / max(ds_hit["seconds"], 1e-9))
        rows.append(
            [
                ALGORITHMS[name][0],
                mean_sd([groups_per_kept(r, options) for r in mine], "{:.2f}"),
                f"{statistics.mean(ratio):.2f}",
                mean_sd(per_kept_tokens, "{:.1f}") if per_kept_tokens else "–",
                f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]",
                f"{reached}/{len(mine)}",
                f"{statistics.median(token_ratio):.2f}" if token_ratio else "–",
                f"{statistics.median(second_ratio):.2f}" if second_ratio else "–",
            ]
        )
    return [
        "",
        f"{level} What dynamic sampling costs, against its prompt predictors",
        "",
        "Per (warm start, RL seed) unit, paired with DAPO with dynamic sampling (DS) of the same unit. Groups per "
        "trained group: generated groups / trained informative groups over the whole run. Accuracy difference: at "
        "the optimizer steps both runs made (DS's, the fewer), interpolated, with the 95% interval of the mean of the "
        f"paired differences (Student's t, {len(units)} units). Target: the accuracy DS reached at 80% of its "
        f"completions (mean of the last {TRAILING} evaluations); tokens and train seconds to reach it, median ratio "
        "against DS over the units where both reached it.",
        "",
        *common.table(
            [
                "algorithm",
                "groups per trained group",
                "/ DS (mean of paired ratios)",
                "tokens per trained group",
                "accuracy - DS at DS's steps [95% CI]",
                "reached DS's 80% accuracy",
                "tokens to it / DS",
                "train seconds to it / DS",
            ],
            rows,
        ),
    ]


def warm_start_table(summary: dict, options) -> list[str]:
    """One row per warm start: its cache key, its accuracy, each algorithm's accuracy at the budget and after the
    common number of steps, and dynamic sampling's paired difference there."""
    names = options.algorithms
    columns = ["warm start (SFT seed)", "cache key", "start accuracy"]
    columns += [f"{ALGORITHMS[a][0]}: at budget / after {summary['common_steps']} steps" for a in names]
    both = "dapo" in names and "dapo_no_ds" in names
    if both:
        columns += ["dynamic sampling - without: after the same steps", "at the budget"]
    rows = []
    for warm, info in sorted(summary["warm_starts"].items()):
        row = [warm, f"`{info['key']}`", f"{info['start']:.3f}"]
        for a in names:
            final = per_warm_start(summary, a, "final").get(warm, [])
            steps = per_warm_start(summary, a, "at_common_steps").get(warm, [])
            row.append(f"{statistics.mean(final):.3f} / {statistics.mean(steps):.3f}" if final else "–")
        if both:
            for key in ("at_common_steps", "final"):
                diffs = [d for (w, _), d in paired(summary, "dapo", "dapo_no_ds", key).items() if w == warm]
                row.append(f"{statistics.mean(diffs):+.3f}" if diffs else "–")
        rows.append(row)
    return common.table(columns, rows)


def _noise(a: list[float], b: list[float]) -> float:
    """Two standard errors of the difference of two means over runs (from the run-to-run spread, which includes
    the warm starts', the seeds' and the evaluation noise; with one run, the binomial noise of one evaluation on
    240 problems)."""

    def var(x):
        return statistics.variance(x) if len(x) > 1 else 0.35 * 0.65 / 240

    return 2 * math.sqrt(var(a) / len(a) + var(b) / len(b))


def _compare(a: list[float], b: list[float]) -> str:
    difference, noise = statistics.mean(a) - statistics.mean(b), _noise(a, b)
    detail = f"difference {difference:+.3f}, noise +-{noise:.3f}"
    if difference > noise:
        return f"higher ({detail})"
    if -difference > noise:
        return f"lower ({detail})"
    return f"no different beyond the noise ({detail})"


def paired_verdict(diffs: dict[tuple[int, int], float]) -> tuple[str, str]:
    """``(verdict, detail)`` of paired differences over units: the mean against two standard errors of it, and in
    how many warm starts the per-warm-start mean has the same sign. A verdict of "higher" or "lower" is given only
    when the overall difference is beyond its noise *and* every warm start agrees on its sign."""
    values = list(diffs.values())
    mean = statistics.mean(values)
    noise = 2 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.inf
    warm = {}
    for (w, _), d in diffs.items():
        warm.setdefault(w, []).append(d)
    signs = [statistics.mean(v) for v in warm.values()]
    agree = sum(1 for m in signs if (m > 0) == (mean > 0) and m != 0)
    detail = (
        f"paired difference {mean:+.3f} ± {noise:.3f} (two standard errors over {len(values)} runs); same sign in "
        f"{agree} of {len(warm)} warm starts"
    )
    if abs(mean) > noise and agree == len(warm):
        return ("higher" if mean > 0 else "lower"), detail
    if abs(mean) > noise:
        return "mixed", detail
    return "tied", detail


def findings(summary: dict, options) -> list[str]:
    """Plain statements of what was measured, including where the papers' claims do not hold here; a conclusion
    about two algorithms is stated only as far as it holds in every warm start."""
    out = []
    mean = statistics.mean
    finals = {a: mean(summary[a]["final"]) for a in options.algorithms}
    ranked = sorted(options.algorithms, key=finals.get, reverse=True)
    n = len(summary[ranked[0]]["final"])
    noise = (
        statistics.median(_noise(summary[a]["final"], summary[b]["final"]) for a in ranked for b in ranked if a < b)
        if len(ranked) > 1
        else 0.0
    )
    starts = [w["start"] for w in summary["warm_starts"].values()]
    out.append(
        "- Accuracy at the budget, best first: "
        + ", ".join(f"{ALGORITHMS[a][0]} {finals[a]:.3f}" for a in ranked)
        + f" (warm starts {', '.join(f'{x:.3f}' for x in starts)}). Over {n} runs ({describe_units(options)}), a "
        f"difference between two algorithms' means needs to exceed about {noise:.3f} (two standard errors, from the "
        "run-to-run spread, warm starts included) to be more than noise; paired differences (same warm start and "
        "seed) are tighter."
    )
    always = [a for a in options.algorithms if len(summary[a]["reached"]) == n]
    if always:
        fastest = min(always, key=lambda a: mean(h["completions"] for h in summary[a]["reached"]))
        out.append(
            f"- Reached the target ({target_label(options)}) in every run: "
            + ", ".join(ALGORITHMS[a][0] for a in always)
            + f"; the fewest generated completions to get there: {ALGORITHMS[fastest][0]} "
            f"({mean(h['completions'] for h in summary[fastest]['reached']):,.0f} on average)."
        )
    ds, no_ds = summary.get("dapo"), summary.get("dapo_no_ds")
    if ds and no_ds and ds["rounds"]:
        k = summary["common_steps"]
        step_verdict, step_detail = paired_verdict(paired(summary, "dapo", "dapo_no_ds", "at_common_steps"))
        budget_verdict, budget_detail = paired_verdict(paired(summary, "dapo", "dapo_no_ds", "final"))
        claim = {
            "higher": "holds here, in every warm start",
            "lower": "does not hold here: it is behind in every warm start",
            "mixed": "holds on average but not in every warm start (not stated as a conclusion)",
            "tied": "is not confirmed here",
        }[step_verdict]
        at_budget = {
            "higher": "ahead in every warm start",
            "lower": "behind in every warm start",
            "mixed": "different on average, but the warm starts disagree on the sign",
            "tied": "tied",
        }[budget_verdict]
        out.append(
            f"- Dynamic sampling. DAPO's claim: a given accuracy in fewer optimizer steps despite the extra "
            f"generation. After the same {k} optimizer steps, DAPO with dynamic sampling was at "
            f"{mean(ds['at_common_steps']):.3f} and without it at {mean(no_ds['at_common_steps']):.3f} "
            f"({step_detail}), so the claim {claim}. Target: reached by step {k} in {ds['reached_by_common_steps']}/"
            f"{n} runs with dynamic sampling and {no_ds['reached_by_common_steps']}/{n} without (without it, "
            f"{len(no_ds['reached'])}/{n} by the end of its {mean(no_ds['steps']):.0f} steps). At the same "
            f"generation budget: {mean(ds['final']):.3f} against {mean(no_ds['final']):.3f} ({budget_detail}): "
            f"{at_budget}. Each of its steps generated {ds['rounds']:.2f} rounds (right-sized refills: only about "
            f"the missing groups), which left {mean(ds['steps']):.0f} optimizer steps in the budget instead of "
            f"{mean(no_ds['steps']):.0f}"
            + (
                f"; it used {ds['time_ratio']:.2f}x GRPO's training time for the budget against "
                f"{no_ds['time_ratio']:.2f}x without dynamic sampling (fewer backward passes)."
                if ds["time_ratio"] is not None and no_ds["time_ratio"] is not None
                else " (training-time ratios need GRPO in --algorithms)."
            )
        )
    skip = summary.get("dapo_skip")
    if skip and ds:
        verdict, detail = paired_verdict(paired(summary, "dapo_skip", "dapo", "final"))
        out.append(
            f"- GRESO skipping on top of dynamic sampling: accuracy at the budget {mean(skip['final']):.3f} against "
            f"{mean(ds['final']):.3f} ({verdict}: {detail}); after {summary['common_steps']} steps "
            f"{mean(skip['at_common_steps']):.3f} against {mean(ds['at_common_steps']):.3f}; "
            f"{mean(skip['steps']):.0f} optimizer steps in the budget against {mean(ds['steps']):.0f}; "
            f"{skip['rounds']:.2f} rounds per step against {ds['rounds']:.2f}."
        )
    kept = {a: mean(summary[a]["kept_all"]) for a in options.algorithms if summary[a]["kept_all"]}
    if kept:
        low, high = min(kept.values()), max(kept.values())
        out.append(
            f"- Informative (kept) group fraction of generated groups over the whole run: {low:.2f} to "
            f"{high:.2f} across algorithms ("
            + ", ".join(f"{ALGORITHMS[a][0]} {v:.2f}" for a, v in kept.items())
            + f"). On this task {1 - high:.0%}-{1 - low:.0%} of the groups are uninformative; dynamic sampling "
            "replaces them with right-sized refill rounds (cost against p: "
            "benchmarks/results/dynamic_sampling.md)."
        )
    return out


def _sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def headline(runs: list[dict], summary: dict, options, prov: dict) -> dict:
    """The figures other tools read (``benchmarks/reproduce.py``, the README's generated blocks): per algorithm the
    mean and sd over runs at the budget and after the common steps, the dynamic-sampling verdicts, and every run's
    evaluation curve (so a reduced rerun of one warm start and seed can be compared with the same run's value at
    the same point)."""
    out: dict = {
        "trl": common.trl_release(prov),
        "versions": prov["versions"],
        "task": options.task,
        "budget": options.budget,
        "eval_every": options.eval_every,
        "units": describe_units(options),
        "common_steps": summary["common_steps"],
        "warm_starts": {str(w): v for w, v in summary["warm_starts"].items()},
        "algorithms": {},
        "runs": [
            {
                "name": r["name"],
                "warm_start": r.get("warm_start", 0),
                "seed": r["seed"],
                "start": r["start_accuracy"],
                "evals": [[e["completions"], e["step"], e["accuracy"]] for e in r["evals"]],
            }
            for r in runs
        ],
    }
    for name in options.algorithms:
        s = summary[name]
        out["algorithms"][name] = {
            "label": ALGORITHMS[name][0],
            "final": [statistics.mean(s["final"]), _sd(s["final"])],
            "at_common_steps": [statistics.mean(s["at_common_steps"]), _sd(s["at_common_steps"])],
            "steps": statistics.mean(s["steps"]),
            "rounds": s["rounds"],
            "reached": len(s["reached"]),
            "runs": s["seeds"],
        }
    if "dapo" in summary and "dapo_no_ds" in summary:
        for key in ("at_common_steps", "final"):
            verdict, detail = paired_verdict(paired(summary, "dapo", "dapo_no_ds", key))
            out[f"dynamic_sampling_{key}"] = {"verdict": verdict, "detail": detail}
    return out


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 warm start x 1 seed x 2,048 completions (under 2 min)")
    parser.add_argument("--seeds", help="comma-separated RL seeds (full: 0,1,2; quick: 0)")
    parser.add_argument(
        "--warm-starts",
        help="comma-separated SFT seeds of the warm starts each algorithm runs from (full: 0,1,2; quick: 0)",
    )
    parser.add_argument("--budget", type=int, help="generated completions per run (full 38400 = 300 GRPO steps)")
    parser.add_argument("--eval-every", type=int, help="completions between evaluations (full 1280, quick 512)")
    parser.add_argument("--target", type=float, help="an absolute target accuracy for every run (default: a gain)")
    parser.add_argument(
        "--target-gain",
        type=float,
        help=f"target = each run's warm-start accuracy + this (default per task: {TARGET_GAINS})",
    )
    parser.add_argument(
        "--task",
        choices=sorted(TASKS),
        default="demo",
        help="demo: the demo's problems; hard: operands 0..49 (at least half the groups uninformative); mixed: 200 "
        "of the demo's problems and 200 with an operand of 30..49, held out on the demo's",
    )
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help=f"subset of {list(ALGORITHMS)}")
    parser.add_argument(
        "--also",
        nargs="*",
        default=[],
        help="saved runs (sample_efficiency.json) of other TRL releases to report side by side with this one",
    )
    common.add_run_options(parser, "sample_efficiency")
    options = parser.parse_args(argv)
    options.seeds = [int(s) for s in (options.seeds or ("0" if options.quick else "0,1,2")).split(",")]
    options.warm_starts = [int(s) for s in (options.warm_starts or ("0" if options.quick else "0,1,2")).split(",")]
    options.budget = options.budget or (2048 if options.quick else 38400)
    options.eval_every = options.eval_every or (512 if options.quick else 1280)
    if options.target_gain is None:
        options.target_gain = TARGET_GAINS[options.task]
    options.algorithms = [a.strip() for a in options.algorithms.split(",") if a.strip()]
    unknown = sorted(set(options.algorithms) - set(ALGORITHMS))
    if unknown:
        parser.error(f"--algorithms: unknown {unknown}; choose from {list(ALGORITHMS)}")
    return options


def measure(options) -> list[dict]:
    """Train every algorithm from every warm start with every seed (one lock-stepped worker per algorithm); the
    runs' raw records."""
    for warm in options.warm_starts:  # build the cached warm starts once, up front
        common.warm_start_path(options.warm_start_steps, options.cache_dir, warm)

    def progress(me, index, run):
        print(
            f"[sample_efficiency] {run['name']} warm start {run['warm_start']} seed {run['seed']}: {run['steps']} "
            f"steps, {run['completions']:,} completions, accuracy {run['start_accuracy']:.3f} -> "
            f"{run['evals'][-1]['accuracy']:.3f}",
            flush=True,
        )

    units = [(warm, seed) for warm in options.warm_starts for seed in options.seeds]
    per_worker = common.run_lockstep(
        worker, [(name, units, options) for name in options.algorithms], on_result=progress
    )
    return [run for worker_runs in per_worker for run in worker_runs]


def _load_options(raw: dict, options):
    """A saved run's options (older saves lack the warm-start fields)."""
    import argparse as _argparse

    saved = {**{"warm_starts": [0], "target_gain": None, "target": None, "task": "demo"}, **raw["options"]}
    merged = _argparse.Namespace(**saved)
    if merged.target is None and merged.target_gain is None:
        merged.target_gain = TARGET_GAINS[merged.task]
    return merged


def side_by_side(measurements: list[tuple[list[dict], object, dict, dict]]) -> list[str]:
    """The headline figures of each TRL release (``(runs, options, provenance, summary)``) next to each other."""
    rows = []
    for _, options, prov, summary in measurements:
        trl = common.trl_release(prov)
        starts = ", ".join(f"{w['start']:.3f}" for _, w in sorted(summary["warm_starts"].items()))
        for name in options.algorithms:
            s = summary[name]
            rows.append(
                [
                    trl,
                    starts,
                    ALGORITHMS[name][0],
                    mean_sd(s["final"]),
                    mean_sd(s["at_common_steps"]),
                    f"{len(s['reached'])}/{s['seeds']}",
                    mean_sd(s["steps"], "{:.0f}"),
                    f"{s['rounds']:.2f}" if s["rounds"] is not None else "1",
                ]
            )
    steps = ", ".join(str(summary["common_steps"]) for *_, summary in measurements)
    return common.table(
        [
            "TRL",
            "warm starts (held-out accuracy)",
            "algorithm",
            "accuracy at budget",
            f"accuracy after the common steps ({steps})",
            "reached target",
            "optimizer steps in budget",
            "rounds per step",
        ],
        rows,
    )


def report(runs: list[dict], options, prov: dict, out) -> None:
    import json

    measurements = [(runs, options, prov)]
    for path in options.also or []:
        raw = json.loads(Path(path).read_text())
        measurements.append((raw["data"], _load_options(raw, options), raw["provenance"]))
    measurements = [(r, o, p, summarize(r, o)) for r, o, p in measurements]  # once per measurement
    title = "Sample efficiency: GRPO, Dr. GRPO, DAPO and GSPO at the same generation budget"
    figures = []
    if len(measurements) == 1:
        plot(runs, options, out / "sample_efficiency.png")
        summary = measurements[0][3]
        head, body = markdown(runs, summary, options, prov)
        body += ["", "![accuracy against completions and steps, kept-group fraction](sample_efficiency.png)"]
        figures.append(headline(runs, summary, options, prov))
    else:
        head = [
            "Each TRL release below was measured by its own run of the same command in its own virtual environment "
            "(the provenance of each is at the top of its section); the side-by-side table is rendered from their "
            "saved measurements (`--also`).",
        ]
        body = ["## Both TRL releases side by side", ""] + side_by_side(measurements) + [""]
        for i, (m_runs, m_options, m_prov, m_summary) in enumerate(measurements):
            trl = common.trl_release(m_prov)
            image = "sample_efficiency.png" if i == 0 else f"sample_efficiency-trl{trl}.png"
            plot(m_runs, m_options, out / image)
            m_head, m_body = markdown(m_runs, m_summary, m_options, m_prov, level="###")
            body += [
                f"## trl {trl}",
                "",
                *m_head,
                "",
                *m_body,
                "",
                f"![trl {trl}: accuracy gain, kept groups]({image})",
                "",
            ]
            figures.append(headline(m_runs, m_summary, m_options, m_prov))
    path = common.write_markdown(out / "sample_efficiency.md", title, head, body)
    common.write_figures(out / "sample_efficiency.figures.json", prov, {"releases": figures})
    print("\n".join(body[: next(i for i, line in enumerate(body) if line.endswith("Reading"))]))
    print(f"[sample_efficiency] wrote {path}, {out / 'sample_efficiency.figures.json'} and the plot(s)")


def main(argv: list[str] | None = None) -> int:
    return common.bench_main("sample_efficiency.py", argv, parse, measure, report)


if __name__ == "__main__":
    raise SystemExit(main())
