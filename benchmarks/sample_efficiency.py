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
    "gspo": ("GSPO", "gspo", {}),
}
TRAILING = 3  # evaluations averaged for "time to target"
#: ``--task``: the demo's problems (operands 0..29), or a harder variant with operands 0..49 from the same warm start
#: (trained on the demo's problems): many more groups are all wrong, so at least half of them are uninformative.
TASKS = {"demo": {}, "hard": {"max_operand": 49}}
#: Default ``--target`` per task: the demo's 0.36; for ``hard``, fixed from the warm start's held-out accuracy on it
#: (0.121, measured before any RL run: ``--quick --task hard``) plus 0.05, fixed before any full run was seen.
TARGETS = {"demo": 0.36, "hard": 0.17}


class CountingArithmetic:
    """The demo's arithmetic reward, counting the completions it scores (= completions generated in training)."""

    __name__ = "arithmetic_reward"

    def __init__(self):
        self.completions = 0

    def __call__(self, prompts, completions, answer, **kwargs):
        from trl_ext.rewards.arithmetic import arithmetic_reward

        self.completions += len(completions)
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


def worker(me: int, baton, name: str, seeds: list[int], options):
    """One algorithm in its own process: one run per seed, taking turns with the other algorithms step by step."""
    common.setup(options.threads)
    from transformers import AutoModelForCausalLM

    from trl_ext.demo import DemoTaskConfig, greedy_accuracy, make_problems
    from trl_ext.grpo.presets import trainer_class_for

    _, tokenizer, path = common.load_policy(options.warm_start_steps, options.cache_dir)
    train, held_out = make_problems(DemoTaskConfig(**TASKS[options.task]))
    with tempfile.TemporaryDirectory() as workdir:
        for index, seed in enumerate(seeds):
            probe = make_args(name, workdir, seed, 1, options.prompts_per_step)
            per_step = probe.per_device_train_batch_size
            max_steps = options.budget // per_step + 2 * probe.steps_per_generation  # the budget stops it first
            args = make_args(name, os.path.join(workdir, f"{name}-{seed}"), seed, max_steps, options.prompts_per_step)
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
                "seed": seed,
                "start_accuracy": start_accuracy,
                "evals": budget.evals,
                "logs": budget.logs,
                "step_seconds": clock.step_seconds(),
                "completions": counter.completions,
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


def reach(run: dict, target: float) -> dict | None:
    """The first evaluation at which the mean of the last ``TRAILING`` evaluations reaches ``target``."""
    accuracies = [run["start_accuracy"]] + [e["accuracy"] for e in run["evals"]]
    for i, e in enumerate(run["evals"], start=1):
        window = accuracies[max(0, i - TRAILING + 1) : i + 1]
        if sum(window) / len(window) >= target:
            return {**e, "seconds": train_seconds(run, e["step"])}
    return None


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
    by = {name: sorted((r for r in runs if r["name"] == name), key=lambda r: r["seed"]) for name in options.algorithms}
    grpo = {r["seed"]: r for r in by.get("grpo", [])}
    common_steps = min(r["steps"] for r in runs)  # the fewest optimizer steps any run made within the budget
    summary = {"common_steps": common_steps}
    for name, rs in by.items():
        hits = [reach(r, options.target) for r in rs]
        full_time = [train_seconds(r, r["steps"]) for r in rs]
        ratios = [
            train_seconds(r, r["steps"]) / train_seconds(grpo[r["seed"]], grpo[r["seed"]]["steps"])
            for r in rs
            if r["seed"] in grpo
        ]
        target_ratios = []
        for r, hit in zip(rs, hits, strict=True):
            base = reach(grpo[r["seed"]], options.target) if r["seed"] in grpo else None
            if hit and base:
                target_ratios.append(hit["seconds"] / base["seconds"])
        rounds = [x["dynamic_sampling/rounds"] for r in rs for x in r["logs"] if "dynamic_sampling/rounds" in x]
        tenth = options.budget / 10
        summary[name] = {
            "seeds": len(rs),
            "start": rs[0]["start_accuracy"],
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
                        [r["start_accuracy"]] + [e["accuracy"] for e in r["evals"]],
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
            per_seed = [f for r in rs if (f := informative_fraction(r, lo, hi)) is not None]
            if per_seed:
                centers.append((lo + hi) / 2)
                means.append(np.mean(per_seed))
                lows.append(min(per_seed))
                highs.append(max(per_seed))
        axes[2].plot(centers, means, "o-", color=color, label=label, ms=3)
        if len(rs) > 1:
            axes[2].fill_between(centers, lows, highs, color=color, alpha=0.15)
    axes[1].axvline(min(r["steps"] for r in runs), color="grey", ls="--", lw=0.8)
    for ax in axes[:2]:
        ax.axhline(options.target, color="grey", ls=":", lw=0.8)
        ax.set_ylabel("held-out greedy accuracy (240)")
    axes[0].set(xlabel="generated completions", title="accuracy vs generation budget (mean, min-max over seeds)")
    axes[1].set(xlabel="optimizer steps", title="accuracy vs optimizer steps (dashed: fewest steps of any run)")
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


def markdown(runs, summary, options, prov) -> tuple[list[str], list[str]]:
    rl, dapo = common.demo_settings(options.prompts_per_step)
    prompts = rl["per_device_train_batch_size"] // rl["num_generations"]
    start = runs[0]["start_accuracy"]
    head = common.header(prov)
    head.append(
        f"- setting: task `{getattr(options, 'task', 'demo')}` {TASKS[getattr(options, 'task', 'demo')] or ''}, demo SFT "
        f"warm start (held-out greedy accuracy {start:.3f}), {prompts} prompts x "
        f"{rl['num_generations']} completions per step, max {rl['max_completion_length']} tokens, lr "
        f"{rl['learning_rate']:g} constant; seeds {options.seeds}; budget {options.budget:,} generated completions; "
        f"evaluation every {options.eval_every:,}; target accuracy {options.target} (mean of the last {TRAILING} "
        f"evaluations); DAPO: soft overlong buffer {dapo['overlong_buffer_len']}, a generation budget of "
        f"{dapo['dynamic_sampling_max_rounds']} generation batches per step (right-sized refill rounds)"
    )
    n = len(options.seeds)
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
    body = [f"## At the same budget ({options.budget:,} generated completions), {n} seed(s): mean ± sd", ""]
    body += common.table(
        [
            "algorithm",
            "accuracy at budget",
            "accuracy at half budget",
            f"accuracy after {summary['common_steps']} optimizer steps",
            f"reached {options.target}",
            f"optimizer steps to {options.target}",
            f"completions to {options.target}",
            "train time to target / GRPO",
            "train time for budget / GRPO",
            "optimizer steps in budget",
            "generation rounds per step",
            "kept-group frac, first 10%",
            "kept-group frac, last 10%",
            f"train seconds to {options.target}",
        ],
        rows,
    )
    body += [
        "",
        f"Accuracy after {summary['common_steps']} optimizer steps (the fewest any run made within the "
        "budget): interpolated between the evaluations around that step, so every algorithm is compared at the "
        "same number of updates. Steps, completions and time to target: mean over the seeds that reached it "
        "(how many did is in the column before). Time ratios: per seed against GRPO's run of the same seed "
        "(same turn-taking run), median over seeds; training time only (evaluations excluded).",
        "",
        "## Reading",
        "",
    ]
    body += findings(summary, options)
    body += ["", "## Every run", ""]
    run_rows = []
    for r in sorted(runs, key=lambda r: (options.algorithms.index(r["name"]), r["seed"])):
        hit = reach(r, options.target)
        run_rows.append(
            [
                ALGORITHMS[r["name"]][0],
                r["seed"],
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
            "seed",
            "optimizer steps",
            "completions",
            "final accuracy",
            "steps to target",
            "completions to target",
            "train seconds",
        ],
        run_rows,
    )
    body += ["", "![accuracy against completions and steps, kept-group fraction](sample_efficiency.png)"]
    return head, body


def _noise(a: list[float], b: list[float]) -> float:
    """Two standard errors of the difference of two means over seeds (from the seed-to-seed spread, which includes
    the evaluation noise; with one seed, the binomial noise of one evaluation on 240 problems)."""

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


def findings(summary: dict, options) -> list[str]:
    """Plain statements of what was measured, including where the papers' claims do not hold here."""
    out, n, target = [], len(options.seeds), options.target
    mean = statistics.mean
    finals = {a: mean(summary[a]["final"]) for a in options.algorithms}
    ranked = sorted(options.algorithms, key=finals.get, reverse=True)
    noise = (
        statistics.median(_noise(summary[a]["final"], summary[b]["final"]) for a in ranked for b in ranked if a < b)
        if len(ranked) > 1
        else 0.0
    )
    out.append(
        "- Accuracy at the budget, best first: "
        + ", ".join(f"{ALGORITHMS[a][0]} {finals[a]:.3f}" for a in ranked)
        + f" (start {summary[ranked[0]]['start']:.3f}). With {n} seed(s), a difference between two "
        f"algorithms needs to exceed about {noise:.3f} (two standard errors, from the seed-to-seed spread) to "
        "be more than noise."
    )
    always = [a for a in options.algorithms if len(summary[a]["reached"]) == n]
    if always:
        fastest = min(always, key=lambda a: mean(h["completions"] for h in summary[a]["reached"]))
        out.append(
            f"- Reached {target} in every seed: "
            + ", ".join(ALGORITHMS[a][0] for a in always)
            + f"; the fewest generated completions to get there: {ALGORITHMS[fastest][0]} "
            f"({mean(h['completions'] for h in summary[fastest]['reached']):,.0f} on average)."
        )
    ds, no_ds = summary.get("dapo"), summary.get("dapo_no_ds")
    if ds and no_ds and ds["rounds"]:
        k = summary["common_steps"]
        per_step = _compare(ds["at_common_steps"], no_ds["at_common_steps"])
        per_budget = _compare(ds["final"], no_ds["final"])
        holds = {"higher": "holds here", "lower": "does not hold here"}.get(
            per_step.split()[0], "is not confirmed here"
        )
        out.append(
            f"- Dynamic sampling. DAPO's claim: a given accuracy in fewer optimizer steps despite the extra "
            f"generation. After the same {k} optimizer steps, DAPO with dynamic sampling was at "
            f"{mean(ds['at_common_steps']):.3f} and without it at {mean(no_ds['at_common_steps']):.3f}: {per_step}, "
            f"so the claim {holds}. Target {target}: reached by step {k} in {ds['reached_by_common_steps']}/{n} seeds "
            f"with dynamic sampling and {no_ds['reached_by_common_steps']}/{n} without (without it, "
            f"{len(no_ds['reached'])}/{n} by the end of its {mean(no_ds['steps']):.0f} steps). At the same "
            f"generation budget its accuracy is {per_budget}: {mean(ds['final']):.3f} against "
            f"{mean(no_ds['final']):.3f}. Each of its steps generated {ds['rounds']:.2f} rounds (right-sized refills: "
            f"only about the missing groups), which left {mean(ds['steps']):.0f} optimizer steps in the budget "
            f"instead of {mean(no_ds['steps']):.0f}"
            + (
                f"; it used {ds['time_ratio']:.2f}x GRPO's training time for the budget against "
                f"{no_ds['time_ratio']:.2f}x without dynamic sampling (fewer backward passes)."
                if ds["time_ratio"] is not None and no_ds["time_ratio"] is not None
                else " (training-time ratios need GRPO in --algorithms)."
            )
        )
    skip = summary.get("dapo_skip")
    if skip and ds:
        out.append(
            f"- GRESO skipping on top of dynamic sampling: accuracy at the budget {mean(skip['final']):.3f} against "
            f"{mean(ds['final']):.3f} ({_compare(skip['final'], ds['final'])}); after {summary['common_steps']} "
            f"steps {mean(skip['at_common_steps']):.3f} against {mean(ds['at_common_steps']):.3f}; "
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


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 seed x 2,048 completions (under 2 minutes)")
    parser.add_argument("--seeds", help="comma-separated seeds (full: 0,1,2; quick: 0)")
    parser.add_argument("--budget", type=int, help="generated completions per run (full 38400 = 300 GRPO steps)")
    parser.add_argument("--eval-every", type=int, help="completions between evaluations (full 1280, quick 512)")
    parser.add_argument("--target", type=float, help=f"target held-out accuracy (default per task: {TARGETS})")
    parser.add_argument(
        "--task",
        choices=sorted(TASKS),
        default="demo",
        help="demo: the demo's problems; hard: operands 0..49 (at least half the groups uninformative)",
    )
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help=f"subset of {list(ALGORITHMS)}")
    common.add_run_options(parser, "sample_efficiency")
    options = parser.parse_args(argv)
    options.seeds = [int(s) for s in (options.seeds or ("0" if options.quick else "0,1,2")).split(",")]
    options.budget = options.budget or (2048 if options.quick else 38400)
    options.eval_every = options.eval_every or (512 if options.quick else 1280)
    options.target = options.target if options.target is not None else TARGETS[options.task]
    options.algorithms = [a.strip() for a in options.algorithms.split(",") if a.strip()]
    unknown = sorted(set(options.algorithms) - set(ALGORITHMS))
    if unknown:
        parser.error(f"--algorithms: unknown {unknown}; choose from {list(ALGORITHMS)}")
    return options


def measure(options) -> list[dict]:
    """Train every algorithm on every seed (one lock-stepped worker per algorithm); the runs' raw records."""
    common.load_policy(options.warm_start_steps, options.cache_dir)  # build the cached warm start once

    def progress(me, index, run):
        print(
            f"[sample_efficiency] {run['name']} seed {run['seed']}: {run['steps']} steps, "
            f"{run['completions']:,} completions, accuracy {run['start_accuracy']:.3f} -> "
            f"{run['evals'][-1]['accuracy']:.3f}",
            flush=True,
        )

    per_worker = common.run_lockstep(
        worker, [(name, options.seeds, options) for name in options.algorithms], on_result=progress
    )
    return [run for worker_runs in per_worker for run in worker_runs]


def report(runs: list[dict], options, prov: dict, out) -> None:
    summary = summarize(runs, options)
    plot(runs, options, out / "sample_efficiency.png")
    head, body = markdown(runs, summary, options, prov)
    path = common.write_markdown(
        out / "sample_efficiency.md",
        "Sample efficiency: GRPO, Dr. GRPO, DAPO and GSPO at the same generation budget",
        head,
        body,
    )
    print("\n".join(body[: body.index("## Reading")]))
    print(f"[sample_efficiency] wrote {path} and {out / 'sample_efficiency.png'}")


def main(argv: list[str] | None = None) -> int:
    return common.bench_main("sample_efficiency.py", argv, parse, measure, report)


if __name__ == "__main__":
    raise SystemExit(main())
