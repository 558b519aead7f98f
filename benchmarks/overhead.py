"""Is the layer free? trl-ext's trainers against TRL's ``GRPOTrainer`` with the same config, seed and data, interleaved.

    python benchmarks/overhead.py            # full: 16 pairs x 16 measured steps per arm, ~15 min on 2 loaded cores
    python benchmarks/overhead.py --quick    # 5 pairs x 4 measured steps, under 2 minutes
    python benchmarks/overhead.py --render benchmarks/results/overhead.json   # rebuild the report from raw data

Two comparisons, each "ours / TRL", both arms built from the same config fields:

- ``dapo``: ``trl_ext.DAPOTrainer`` with dynamic sampling **on** against ``trl.GRPOTrainer``, both on
  ``get_preset("dapo")`` with ``soft_overlong_punishment=False`` (with it on, DAPOTrainer adds one more reward
  function, which would be a different training run, not overhead). The reward is the demo's arithmetic correctness
  plus 1e-3 x (the completion's index in its group), so every group has distinct rewards: dynamic sampling inspects
  every group, drops none and returns TRL's own output (its "nothing to filter" path). What is timed is therefore
  exactly what the layer adds: the reward bookkeeping, the group check and the ``dynamic_sampling/*`` metrics.
- ``gspo``: ``trl_ext.GSPOTrainer`` against ``trl.GRPOTrainer`` on ``get_preset("gspo")`` (sequence-level ratio,
  eps 3e-4/4e-4, 4 minibatches per rollout), i.e. TRL's ``GRPOTrainer(importance_sampling_level="sequence")``.

Both arms train the demo's SFT warm start on the demo's RL setting (``recipes/configs/demo/dapo/config_demo.yaml``: 16 prompts x
8 completions per step, 6 tokens, lr 5e-4). The model is tiny (0.6M parameters), so a step is mostly Python and
generation overhead: the place where a layer's own cost shows most; on a real model the ratio can only be closer to 1.

Method. The two arms run in two worker processes (same imports and settings; neither arm's allocations or caches can
leak into the other's) that take turns one optimizer step at a time: ours step 1, TRL step 1, ours step 2, ...
(``_common.run_lockstep``). Every step of one arm is thus measured right next to the same step of the other, under
the same machine load, which matters on a shared 2-core machine where the load moves the step time by 2x within
minutes; whole runs interleaved A B A B would see different loads. Which worker runs which arm, and which takes the
first step, rotate over every 4 pairs, so that neither a process's nor the order's effect biases the ratio. Each
worker uses one thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``). After one untimed warm-up run per
comparison, each pair builds a fresh trainer in each worker from the same checkpoint, config fields and seed and
trains ``warm-up + measured + 1`` steps; a step's time runs from its start to the start of the next step
(generation, loss, backward, optimizer update and log included; the warm-up is one generation cycle: 1 step for
DAPO, 4 for GSPO). Per pair: the ratio of the summed measured step times, ours / TRL, in wall clock and in process
CPU time; reported: the median over pairs, quartiles and range. TRL's own ``step_time`` metric (which leaves out the
optimizer update and the log) gives one more ratio. The final weights of the two arms are compared: identical
weights prove that both did the same numerical work, so the ratio is the layer's overhead and nothing else.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402

TARGET = 1.02
ARMS = ("ours", "trl")
COMPARISONS = {
    "dapo": ("DAPOTrainer, dynamic sampling on, nothing to filter", "trl.GRPOTrainer"),
    "gspo": ("GSPOTrainer", 'trl.GRPOTrainer(importance_sampling_level="sequence")'),
}


class TieBrokenArithmetic:
    """Arithmetic correctness (0/1) plus 1e-3 x the completion's index in its group: every group is informative."""

    __name__ = "arithmetic_tiebroken_reward"

    def __init__(self, num_generations: int):
        self.num_generations = num_generations

    def __call__(self, prompts, completions, answer, **kwargs):
        from trl_ext.rewards.arithmetic import arithmetic_reward

        base = arithmetic_reward(prompts, completions, answer)
        return [r + 1e-3 * (i % self.num_generations) for i, r in enumerate(base)]


def make_args(comparison: str, output_dir: str, max_steps: int, prompts_per_step: int | None):
    from trl_ext.grpo.presets import get_preset

    rl, dapo = common.demo_settings(prompts_per_step)
    shared = common.run_args(output_dir, max_steps=max_steps, **rl)
    if comparison == "dapo":
        return get_preset("dapo", **shared, **dapo, dynamic_sampling=True, soft_overlong_punishment=False)
    return get_preset("gspo", **shared)


def trainer_classes(comparison: str):
    import trl

    from trl_ext.grpo.trainers import DAPOTrainer, GSPOTrainer

    return {"ours": DAPOTrainer if comparison == "dapo" else GSPOTrainer, "trl": trl.GRPOTrainer}


def run_arm(comparison, arm, path, tokenizer, train, warmup, measured, options, clock, workdir) -> dict:
    from transformers import AutoModelForCausalLM

    total = warmup + measured + 1
    args = make_args(comparison, os.path.join(workdir, f"{comparison}-{arm}"), total, options.prompts_per_step)
    trainer = trainer_classes(comparison)[arm](
        model=AutoModelForCausalLM.from_pretrained(path),
        reward_funcs=[TieBrokenArithmetic(args.num_generations)],
        args=args,
        train_dataset=train,
        processing_class=tokenizer,
        callbacks=[clock],
    )
    common.silence(trainer)
    gc.collect()
    trainer.train()
    steps = clock.step_seconds()[warmup : warmup + measured]
    cpu = clock.step_seconds(cpu=True)[warmup : warmup + measured]
    history = trainer.state.log_history
    trl_step = sum(h["step_time"] for h in history if "step_time" in h and warmup < h["step"] <= warmup + measured)
    ds_rounds = [h["dynamic_sampling/rounds"] for h in history if "dynamic_sampling/rounds" in h]
    weights = hashlib.sha256()
    for p in trainer.model.parameters():
        weights.update(p.detach().cpu().numpy().tobytes())
    del trainer
    gc.collect()
    return {
        "per_step": sum(steps) / measured,
        "steps": steps,
        "cpu_per_step": sum(cpu) / measured,
        "trl_step_time": trl_step / measured,
        "weights": weights.hexdigest(),
        "ds_rounds": ds_rounds,
    }


def worker(me: int, baton, jobs: list, options):
    """Worker ``me`` in its own process: in each job it trains the arm the job gives it ("ours" or "trl")."""
    common.setup(options.threads)
    from trl_ext.demo import make_problems

    _, tokenizer, path = common.load_policy(options.warm_start_steps, options.cache_dir)
    train, _ = make_problems()
    with tempfile.TemporaryDirectory() as workdir:
        for comparison, arms, first, warmup, measured in jobs:
            baton.start(me, first)
            result = run_arm(
                comparison,
                arms[me],
                path,
                tokenizer,
                train,
                warmup,
                measured,
                options,
                common.lockstep(baton, me),
                workdir,
            )
            yield {**result, "arm": arms[me], "worker": me}


def schedule(pair: int) -> tuple[tuple[str, str], int]:
    """Pair i: which worker runs which arm, and which worker takes the first step. Over any 4 consecutive pairs
    each arm runs in each worker and goes first once in each, so neither a worker's nor the order's effect biases."""
    arms = ARMS if (pair // 2) % 2 == 0 else ARMS[::-1]
    return arms, pair % 2


def measure(options) -> dict:
    """Untimed warm-up runs, then ``options.pairs`` lock-stepped pairs per comparison, in two worker processes."""
    common.load_policy(options.warm_start_steps, options.cache_dir)  # build the cached warm start once, up front
    plan = {}
    with tempfile.TemporaryDirectory() as workdir:
        for name in options.comparisons:
            spg = make_args(name, workdir, 1, options.prompts_per_step).steps_per_generation
            plan[name] = (spg, -(-options.steps // spg) * spg)  # whole generation cycles
    jobs = [(name, ARMS, 0, plan[name][0], plan[name][0]) for name in options.comparisons]  # warm-up runs
    slots = []
    for pair in range(options.pairs):
        for name in options.comparisons:
            slots.append((name, pair))
            jobs.append((name, *schedule(pair), *plan[name]))
    warm = len(options.comparisons)
    seen: dict[int, dict] = {}

    def progress(me, index, result):
        seen.setdefault(index, {})[result["arm"]] = result
        if index >= warm and len(seen[index]) == 2:
            (name, pair), runs = slots[index - warm], seen[index]
            print(
                f"[overhead] pair {pair + 1}/{options.pairs} {name}: ours {runs['ours']['per_step']:.3f} s/step, "
                f"TRL {runs['trl']['per_step']:.3f} s/step, ratio "
                f"{runs['ours']['per_step'] / runs['trl']['per_step']:.3f}",
                flush=True,
            )

    by_worker = common.run_lockstep(worker, [(jobs, options), (jobs, options)], on_result=progress)
    results = {name: [] for name in options.comparisons}
    for offset, (name, pair) in enumerate(slots):
        runs = {run["arm"]: run for run in (by_worker[0][warm + offset], by_worker[1][warm + offset])}
        arms, first = schedule(pair)
        results[name].append({"pair": pair, "order": (arms[first], arms[1 - first]), **runs})
    return {"results": results, "plan": plan}


def summarize(data: dict) -> dict:
    summary = {}
    for name, pairs in data["results"].items():
        ratios = [p["ours"]["per_step"] / p["trl"]["per_step"] for p in pairs]
        step_ratios = [a / b for p in pairs for a, b in zip(p["ours"]["steps"], p["trl"]["steps"], strict=True)]
        rounds = [r for p in pairs for r in p["ours"]["ds_rounds"]]
        summary[name] = {
            "ratio": common.spread(ratios),
            "ratios": ratios,
            "cpu_ratio": common.spread([p["ours"]["cpu_per_step"] / p["trl"]["cpu_per_step"] for p in pairs]),
            "step_ratio": common.spread(step_ratios),
            "trl_step_time_ratio": common.spread(
                [p["ours"]["trl_step_time"] / p["trl"]["trl_step_time"] for p in pairs]
            ),
            "ours": common.spread([p["ours"]["per_step"] for p in pairs])["median"],
            "trl": common.spread([p["trl"]["per_step"] for p in pairs])["median"],
            "identical": all(p["ours"]["weights"] == p["trl"]["weights"] for p in pairs),
            "max_rounds": max(rounds) if rounds else None,
            "pairs": len(pairs),
            "steps": len(pairs[0]["ours"]["steps"]),
        }
    return summary


def plot(data: dict, summary: dict, out: Path) -> Path:
    plt = common.plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    colors = {"dapo": "tab:blue", "gspo": "tab:orange"}
    for name, pairs in data["results"].items():
        x = [p["pair"] + 1 for p in pairs]
        left.plot(x, summary[name]["ratios"], "o", color=colors.get(name), label=f"{name}: wall clock")
        left.plot(
            x,
            [p["ours"]["cpu_per_step"] / p["trl"]["cpu_per_step"] for p in pairs],
            "x",
            color=colors.get(name),
            label=f"{name}: CPU time",
        )
        left.axhline(summary[name]["ratio"]["median"], color=colors.get(name), lw=1, ls="--")
        right.plot(x, [p["ours"]["per_step"] for p in pairs], "o-", color=colors.get(name), label=f"{name} ours")
        right.plot(x, [p["trl"]["per_step"] for p in pairs], "x--", color=colors.get(name), label=f"{name} TRL")
    left.axhline(1.0, color="grey", lw=0.8)
    left.axhline(TARGET, color="red", lw=0.8, ls=":", label=f"target {TARGET}")
    left.set(
        xlabel="pair (lock-stepped; arms rotate over workers)",
        ylabel="step-time ratio ours / TRL",
        title="ours / TRL per pair (dashed: median wall-clock ratio)",
    )
    right.set(xlabel="pair", ylabel="s / step", title="per-step wall time of each arm (machine load drifts)")
    left.legend(fontsize=8)
    right.legend(fontsize=7, ncol=2)
    return common.save_figure(fig, out)


def markdown(data, summary, options, prov) -> tuple[list[str], list[str]]:
    rl, _, prompts = common.demo_batch(options.prompts_per_step)
    head = common.header(prov)
    head.append(
        f"- setting: demo SFT warm start (0.6M-parameter Qwen2-style model), {prompts} prompts x "
        f"{rl['num_generations']} completions per step, max {rl['max_completion_length']} tokens, lr "
        f"{rl['learning_rate']:g}; reward = arithmetic correctness + 1e-3 x index in group (every group informative); "
        f"DAPO arm: soft_overlong_punishment=False in both arms; {options.pairs} lock-stepped pairs; measured steps per "
        + ", ".join(f"{n}: {data['plan'][n][1]} after a warm-up of {data['plan'][n][0]}" for n in options.comparisons)
    )

    def fmt(x):
        return f"{x['median']:.3f} [{x['q1']:.3f}, {x['q3']:.3f}] ({x['min']:.3f} – {x['max']:.3f})"

    rows, details = [], []
    for name in options.comparisons:
        s = summary[name]
        rows.append(
            [
                f"`{name}`",
                COMPARISONS[name][0],
                COMPARISONS[name][1],
                f"{s['pairs']} x {s['steps']}",
                f"**{s['ratio']['median']:.3f}**",
                fmt(s["ratio"]),
                fmt(s["cpu_ratio"]),
                "yes" if s["identical"] else "**no**",
            ]
        )
        details.append(
            [f"`{name}`", f"{s['ours']:.3f}", f"{s['trl']:.3f}", fmt(s["step_ratio"]), fmt(s["trl_step_time_ratio"])]
        )
    body = ["## Step-time ratio, ours / TRL (target: at most 1.02)", ""]
    body += common.table(
        [
            "comparison",
            "ours",
            "TRL",
            "pairs x measured steps",
            "wall-clock ratio (median over pairs)",
            "wall-clock ratio: median [IQR] (min – max)",
            "CPU-time ratio: median [IQR] (min – max)",
            "identical final weights",
        ],
        rows,
        align="llllrrrl",
    )
    body += [
        "",
        "Wall clock: each pair's summed step times, ours / TRL. CPU time: the same with each worker process's CPU "
        "seconds (only the worker holding the turn computes, so this does not depend on how much of the machine "
        "other jobs take).",
        "",
        "| comparison | ours s/step (median) | TRL s/step (median) | per-step ratio over all steps: median [IQR] "
        "(min – max) | ratio of TRL's own `step_time` metric |",
        "|---|---:|---:|---:|---:|",
        *["| " + " | ".join(row) + " |" for row in details],
    ]
    body += ["", "## Reading", ""]
    for name in options.comparisons:
        s = summary[name]
        wall, cpu = s["ratio"]["median"], s["cpu_ratio"]["median"]
        verdict = "within" if wall <= TARGET else "**above**"
        body.append(
            f"- `{name}`: wall-clock ratio {wall:.3f} (IQR {s['ratio']['q1']:.3f}–{s['ratio']['q3']:.3f}, "
            f"{s['pairs']} pairs), {verdict} the {TARGET} target; CPU-time ratio {cpu:.3f} "
            f"(IQR {s['cpu_ratio']['q1']:.3f}–{s['cpu_ratio']['q3']:.3f}); final weights "
            + (
                "identical in every pair, so both arms did the same numerical work"
                if s["identical"]
                else "differ between arms: the arms did not do the same work, investigate"
            )
            + (
                f"; dynamic sampling used {s['max_rounds']:.0f} round per step at most (nothing was dropped)."
                if s["max_rounds"] is not None
                else "."
            )
        )
    for name in options.comparisons:
        pairs = data["results"][name]
        by_worker = {
            w: [p["ours"]["per_step"] / p["trl"]["per_step"] for p in pairs if p["ours"]["worker"] == w]
            for w in (0, 1)
        }
        if by_worker[0] and by_worker[1]:
            logs = [math.log(p["ours"]["per_step"] / p["trl"]["per_step"]) for p in pairs]
            body.append(
                f"- `{name}`, by worker process: mean wall-clock ratio {statistics.mean(by_worker[0]):.3f} when ours ran "
                f"in worker 0 and {statistics.mean(by_worker[1]):.3f} when it ran in worker 1, i.e. one of two "
                "identical worker processes is a little slower; the rotation puts each arm in each worker equally "
                f"often, and the geometric mean over all pairs, {math.exp(statistics.mean(logs)):.3f}, cancels it."
            )
    body += [
        "- The spread of the wall-clock ratio comes from other jobs on the shared machine (right panel of the plot: "
        "the per-step times of both arms move together with the load, their ratio much less); the median over "
        "lock-stepped pairs is the estimate, its IQR the uncertainty. The CPU-time ratio is the tighter measure of "
        "the work the layer adds.",
        "",
        "## Every pair",
        "",
    ]
    pair_rows = []
    for name in options.comparisons:
        for p in data["results"][name]:
            ours, theirs = p["ours"], p["trl"]
            pair_rows.append(
                [
                    f"`{name}`",
                    p["pair"] + 1,
                    " then ".join(p["order"]),
                    f"{ours['per_step']:.3f}",
                    f"{theirs['per_step']:.3f}",
                    f"{ours['per_step'] / theirs['per_step']:.3f}",
                    f"{ours['cpu_per_step']:.3f}",
                    f"{theirs['cpu_per_step']:.3f}",
                    f"{ours['cpu_per_step'] / theirs['cpu_per_step']:.3f}",
                ]
            )
    body += common.table(
        [
            "comparison",
            "pair",
            "step order",
            "ours s/step",
            "TRL s/step",
            "wall ratio",
            "ours CPU s/step",
            "TRL CPU s/step",
            "CPU ratio",
        ],
        pair_rows,
    )
    body += ["", "![per-pair ratios](overhead.png)"]
    return head, body


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 pairs x 4 measured steps (under 2 minutes)")
    parser.add_argument("--pairs", type=int, help="lock-stepped pairs (full 16, quick 5)")
    parser.add_argument("--steps", type=int, help="measured steps per arm, rounded up to whole generation cycles")
    parser.add_argument("--comparisons", default="dapo,gspo", help="comma-separated subset of: dapo, gspo")
    common.add_run_options(parser, "overhead")
    options = parser.parse_args(argv)
    options.pairs = options.pairs or (5 if options.quick else 16)
    options.steps = options.steps or (4 if options.quick else 16)
    options.comparisons = common.names_option(parser, "--comparisons", options.comparisons, COMPARISONS)
    return options


def report(data: dict, options, prov: dict, out: Path) -> None:
    summary = summarize(data)
    plot(data, summary, out / "overhead.png")
    head, body = markdown(data, summary, options, prov)
    path = common.write_markdown(
        out / "overhead.md", "Overhead of the layer: trl-ext trainers against TRL, side by side", head, body
    )
    figures = {
        name: {
            "ratio": s["ratio"],
            "cpu_ratio": s["cpu_ratio"],
            "identical": s["identical"],
            "pairs": s["pairs"],
            "steps": s["steps"],
        }
        for name, s in summary.items()
    }
    common.write_figures(out / "overhead.figures.json", prov, {"comparisons": figures})
    print("\n".join(body[: body.index("## Reading")]))
    print(f"[overhead] wrote {path}, {out / 'overhead.png'} and overhead.figures.json")


def main(argv: list[str] | None = None) -> int:
    return common.bench_main("overhead.py", argv, parse, measure, report)


if __name__ == "__main__":
    raise SystemExit(main())
