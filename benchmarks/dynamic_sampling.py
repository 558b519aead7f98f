"""What does dynamic sampling cost? Generation rounds and wall time per kept group when a fraction p of groups is
uninformative, against the ideal 1/(1-p), and the time spent on groups that are then dropped.

    python benchmarks/dynamic_sampling.py           # full: p = 0, .25, .5, .75, .9; 3 configs x 3 repetitions
    python benchmarks/dynamic_sampling.py --quick   # the same grid, 1 repetition of 1 step, 8 prompts per step
    python benchmarks/dynamic_sampling.py --render benchmarks/results/dynamic_sampling.json   # rebuild the report from raw data

Synthetic reward: of the 600 training prompts of the demo, exactly round(p x 600) (the lowest SHA-256 of
``"seed:prompt"``) are uninformative: all their completions get reward 0. Every other prompt's completions get their
index in the group (0..G-1, all distinct), so those groups are always informative. Over the training set a fraction
p of groups is uninformative; per batch it varies as sampling does. The policy is the demo's warm start, trained
with learning rate 0 so that it, and with it completion lengths and generation cost, is the same for every p: what
changes with p is only dynamic sampling's work. Refill rounds are right-sized (missing / estimated informative rate x
``dynamic_sampling_refill_margin``, at most ``dynamic_sampling_max_round_size`` generation batches), and where surplus
groups are carried over the first round is oversampled the same way, within a budget of
``dynamic_sampling_max_rounds`` (20 here) generation batches. ``--before`` puts a run of the code before issue 14
(whole-batch refills) beside it. Beside the measured rounds: the probe's prediction for the same policy
(``trl_ext.grpo.dynamic_sampling.sizing.expected_refill_rounds``, a simulation at the configured p).

Three trainer configs, all with dynamic sampling on, the demo's 16 prompts x 8 completions per step, 6 tokens:

- ``dapo``: ``get_preset("dapo", soft_overlong_punishment=False)``: beta 0 and one on-policy step per generation,
  so TRL computes no old-policy or reference log-probs: a dropped group cost only its generation and scoring. (The
  overlong reward is off because it would make some all-zero groups informative.)
- ``grpo_kl``: ``get_preset("grpo", dynamic_sampling=True)``: beta 0.04, so TRL runs a reference-model forward pass
  over every generated group before the rewards are known, dropped ones included.
- ``gspo``: ``get_preset("gspo", dynamic_sampling=True)``: 4 minibatches per generation (a generation batch of 64
  prompts), so TRL runs an old-policy forward pass over every generated group.

Measured, with the turn-taking of ``_common.run_lockstep`` (one worker process per p, one optimizer step each in
turn, so every p is timed under the same machine load), over the measured steps after a warm-up generation cycle:
``dynamic_sampling/rounds``, ``generation_time`` and ``dropped_time`` as the trainer logs them, and per round, by
wrapping TRL's ``_generate``, ``_get_per_token_logps_and_entropies`` (no-grad calls: old/reference log-probs) and
``_calculate_rewards`` in a benchmark subclass: the seconds of generation, of log-prob forward passes and of
scoring, and how many of the round's groups were informative. Time on dropped groups = each round's time x its
uninformative fraction (the trainer's ``dropped_time``); informative groups generated in the last round beyond the
batch ("surplus") are discarded too and are reported on their own.

The expected number of rounds under whole-batch refills, E[R] = sum_{r>=0} P(Bin(r n, 1-p) < n) for n groups per
generation batch (capped at the round limit; ``trl_ext.grpo.dynamic_sampling.groups.expected_rounds``), is given beside the ideal
1/(1-p) of generating only what is needed.
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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402

CONFIGS = {  # name: (label, preset, overrides)
    "dapo": (
        "DAPO (beta 0, on-policy: no old/ref log-probs)",
        "dapo",
        {"soft_overlong_punishment": False, "num_minibatches": 1},
    ),
    "grpo_kl": ("GRPO beta 0.04 (+ reference log-probs)", "grpo", {"dynamic_sampling": True}),
    "gspo": ("GSPO, 4 minibatches (+ old-policy log-probs)", "gspo", {"dynamic_sampling": True}),
    "dapo_mb": (
        "DAPO, 4 minibatches (+ old-policy log-probs)",
        "dapo",
        {"soft_overlong_punishment": False, "num_minibatches": 4},
    ),
    "dapo_skip": (
        "DAPO + GRESO skipping (dynamic_sampling_skip_predicted)",
        "dapo",
        {"soft_overlong_punishment": False, "num_minibatches": 1, "dynamic_sampling_skip_predicted": True},
    ),
}
#: Skipping needs a history: ``dapo_skip`` first runs this many passes over the training set (at most 40 steps).
SKIP_WARMUP_EPOCHS = 1.5
PS = (0.0, 0.25, 0.5, 0.75, 0.9)


class PartlyUninformativeReward:
    """Reward 0 for every completion of the round(p x N) prompts with the lowest hash, else the completion's index in
    its group: a fraction p of the training prompts yields uninformative groups, the rest always informative ones."""

    __name__ = "synthetic_reward"

    def __init__(self, p: float, prompts: list[str], num_generations: int, seed: int = 0):
        ranked = sorted(set(prompts), key=lambda x: hashlib.sha256(f"{seed}:{x}".encode()).hexdigest())
        self.uninformative = set(ranked[: round(p * len(ranked))])
        self.num_generations = num_generations

    def __call__(self, prompts, completions, **kwargs):
        return [
            0.0 if prompt in self.uninformative else float(i % self.num_generations)
            for i, prompt in enumerate(prompts)
        ]


def make_args(
    name: str,
    output_dir: str,
    max_steps: int,
    max_rounds: int,
    prompts_per_step: int | None,
    refill_margin: float | None = None,
):
    from trl_ext.grpo.presets import get_preset

    _, preset, overrides = CONFIGS[name]
    rl, _ = common.demo_settings(prompts_per_step)
    rl["learning_rate"] = 0.0  # the policy stays the warm start: the same generation cost at every p
    if refill_margin is not None:  # --refill-margin (the code before issue 14 has no such field: left unset)
        overrides = {**overrides, "dynamic_sampling_refill_margin": refill_margin}
    return get_preset(
        preset,
        **common.run_args(output_dir, max_steps=max_steps),
        **rl,
        **overrides,
        dynamic_sampling_max_rounds=max_rounds,
    )


def instrumented(base):
    """``base`` trainer that records, per generation batch, each round's generation, log-prob and scoring seconds
    and its informative-group count (wraps TRL's methods, changes nothing they return)."""
    import torch

    from trl_ext.grpo.dynamic_sampling.groups import informative_groups

    class Instrumented(base):
        def _bench_reset(self):
            self._bench_current = {"generate": 0.0, "logps": 0.0}

        def _generate_and_score_completions(self, inputs):  # outermost: one call per generation batch
            self._bench_rounds = []
            self._bench_reset()
            output = super()._generate_and_score_completions(inputs)
            if self.model.training:
                # log-prob passes after the last round's rewards: computed for the trained rows only
                after = {**self._bench_current, "groups": 0, "informative": 0, "reward": 0.0, "after": True}
                self.bench_batches.append(self._bench_rounds + [after])
            return output

        def generate_and_score(self, inputs):  # bytes of the round's per-row tensors (what gathering them all moves)
            output, rewards = super().generate_and_score(inputs)
            self._bench_rounds[-1]["bytes"] = sum(
                v.numel() * v.element_size()
                for k, v in output.items()
                if isinstance(v, torch.Tensor) and v.dim() >= 1 and k != "advantages"
            )
            return output, rewards

        def _generate(self, prompts):
            started = time.perf_counter()
            output = super()._generate(prompts)
            self._bench_current["generate"] += time.perf_counter() - started
            return output

        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            if torch.is_grad_enabled():  # the training forward pass, not a rollout's old/ref log-probs
                return super()._get_per_token_logps_and_entropies(*args, **kwargs)
            started = time.perf_counter()
            output = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            self._bench_current["logps"] += time.perf_counter() - started
            self._bench_current["logps_rows"] = self._bench_current.get("logps_rows", 0) + args[1].size(0)
            return output

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            started = time.perf_counter()
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            seconds = time.perf_counter() - started
            total = (rewards * self.reward_weights.to(rewards.device).unsqueeze(0)).nansum(dim=1)
            keep = informative_groups(total, self.num_generations, self.args.dynamic_sampling_atol)
            self._bench_rounds.append(
                {**self._bench_current, "reward": seconds, "groups": keep.numel(), "informative": int(keep.sum())}
            )
            self._bench_reset()
            return rewards

    Instrumented.__name__ = f"Instrumented{base.__name__}"
    return Instrumented


def worker(me: int, baton, p: float, jobs: list, options):
    """One value of p in its own process: its run of every (config, repetition) job, in turn with the other p's."""
    common.setup(options.threads)
    from transformers import AutoModelForCausalLM

    from trl_ext.demo import make_problems
    from trl_ext.grpo.presets import trainer_class_for

    _, tokenizer, path = common.load_policy(options.warm_start_steps, options.cache_dir)
    train, _ = make_problems()
    with tempfile.TemporaryDirectory() as workdir:
        for index, (name, rep) in enumerate(jobs):
            margin = getattr(options, "refill_margin", None)
            probe = make_args(name, workdir, 1, options.max_rounds, options.prompts_per_step, margin)
            spg = probe.steps_per_generation
            measured = -(-options.steps // spg) * spg
            warm = 1  # warm-up generation cycles
            if name == "dapo_skip":
                prompts = probe.generation_batch_size // probe.num_generations
                warm += min(40, math.ceil(SKIP_WARMUP_EPOCHS * len(train) * (1 - p) / prompts)) // spg
            total = spg * warm + measured + 1
            args = make_args(
                name,
                os.path.join(workdir, f"{name}-{rep}"),
                total,
                options.max_rounds,
                options.prompts_per_step,
                margin,
            )
            reward = PartlyUninformativeReward(p, train["prompt"], args.num_generations, seed=options.seed)
            clock = common.lockstep(baton, me)
            trainer = instrumented(trainer_class_for(args))(
                model=AutoModelForCausalLM.from_pretrained(path),
                reward_funcs=[reward],
                args=args,
                train_dataset=train,
                processing_class=tokenizer,
                callbacks=[clock],
            )
            trainer.bench_batches = []
            common.silence(trainer)
            baton.start(me, first=index % baton.parties)
            trainer.train()
            batches = slice(warm, warm + measured // spg)  # warm-up cycles first, the last the closing step's
            logs = [h for h in trainer.state.log_history if "dynamic_sampling/rounds" in h][batches]
            yield {
                "p": p,
                "config": name,
                "rep": rep,
                "spg": spg,
                "measured": measured,
                "groups": args.generation_batch_size // args.num_generations,
                "step_wall": clock.step_seconds()[spg * warm : spg * warm + measured],
                "step_cpu": clock.step_seconds(cpu=True)[spg * warm : spg * warm + measured],
                "rounds": trainer.bench_batches[batches],
                "code": options.label,
                "policy": _policy(trainer),
                "logs": [{k: v for k, v in h.items() if k.startswith("dynamic_sampling/")} for h in logs],
            }
            del trainer
            gc.collect()


def _policy(trainer) -> dict | None:
    """The refill policy in force (margin, round size), for the prediction; None for code without it."""
    sampler = getattr(trainer, "dynamic_sampler", None)
    if sampler is None:
        return None
    return {"margin": sampler.margin, "max_round_size": sampler.max_round_size}


def predicted_rounds(p: float, groups: int, max_rounds: int, policy: dict | None) -> float | None:
    """Rounds per generation batch that the probe predicts for this policy at uninformative fraction ``p``."""
    if policy is None:
        return None
    from trl_ext.grpo.dynamic_sampling.sizing import expected_refill_rounds

    known = {k: v for k, v in policy.items() if k in ("margin", "max_round_size")}  # a run of older code had more
    return expected_refill_rounds(1 - p, groups, max_rounds, steps=2000, **known)["rounds"]


# -- analysis ---------------------------------------------------------------------------------------------------------


def _num_rounds(batch: list[dict]) -> int:
    return sum(1 for r in batch if not r.get("after"))


def run_figures(run: dict) -> dict:
    """Per-run totals over the measured steps. A round's full time (the trainer's ``generation_time``, split over
    the batch's rounds in proportion to the benchmark's timers) is charged to dropped (uninformative) and surplus
    groups by their share of the round's groups; with this split "dropped" equals the trainer's ``dropped_time``."""
    groups = run["groups"]
    kept = surplus_s = generate = generate_dropped = logps = logps_dropped = 0.0
    rows = rows_dropped = 0.0
    for batch, log in zip(run["rounds"], run["logs"], strict=True):
        timed = sum(r["generate"] + r["logps"] + r["reward"] for r in batch)
        scale = log["dynamic_sampling/generation_time"] / timed if timed else 0.0
        need = groups
        for r in batch:
            dropped = (r["groups"] - r["informative"]) / r["groups"] if r["groups"] else 0.0
            rows += r.get("logps_rows", 0)
            rows_dropped += r.get("logps_rows", 0) * dropped
            used = min(r["informative"], need)
            need -= used
            kept += used
            if r["groups"]:
                surplus_s += (
                    scale * (r["generate"] + r["logps"] + r["reward"]) * (r["informative"] - used) / r["groups"]
                )
            generate += r["generate"]
            generate_dropped += r["generate"] * dropped
            logps += r["logps"]
            logps_dropped += r["logps"] * dropped
    wall, cpu = sum(run["step_wall"]), sum(run["step_cpu"])
    logs = run["logs"]
    # groups trained: the batch less its zero-weight fillers, counted for the groups generated in the window: the
    # groups carried into its first step were generated before it, and those carried out of its last step are
    # trained right after it (a carried group is trained first at the next step)
    kept = sum(groups - h["dynamic_sampling/filler_groups"] for h in logs)
    kept += logs[-1].get("dynamic_sampling/carried_groups_out", 0.0) - logs[0].get(
        "dynamic_sampling/carried_groups_used", 0.0
    )
    # bytes gathered per step: the trainer's metric when it logs one; else (code before it) every round's tensors
    # whenever the batch had more than one round, as that code gathered them all to every rank
    gathered = [h.get("dynamic_sampling/gathered_bytes") for h in logs]
    if any(g is None for g in gathered):
        gathered = []
        for batch in run["rounds"]:
            per_round = [r.get("bytes", 0) for r in batch if not r.get("after")]
            gathered.append(sum(per_round) if len(per_round) > 1 else 0)
    return {
        "carried_per_step": statistics.mean(h.get("dynamic_sampling/carried_groups_used", 0.0) for h in logs),
        "skipped_per_step": statistics.mean(h.get("dynamic_sampling/skipped_prompts", 0.0) for h in logs),
        "generated_groups_per_step": sum(r["groups"] for b in run["rounds"] for r in b) / len(run["rounds"]),
        "gathered_mb_per_step": statistics.mean(gathered) / 2**20 if gathered else 0.0,
        "logps_rows_dropped_frac": rows_dropped / rows if rows else None,
        "rounds": statistics.mean(_num_rounds(b) for b in run["rounds"]),
        "generated_per_kept": sum(r["groups"] for b in run["rounds"] for r in b) / max(kept, 1),
        "limit_hit": statistics.mean(h["dynamic_sampling/limit_hit"] for h in logs),
        "wall_per_kept": wall / max(kept, 1),
        "cpu_per_kept": cpu / max(kept, 1),
        "wall": wall,
        "generation_share": sum(h["dynamic_sampling/generation_time"] for h in logs) / wall,
        "dropped_share": sum(h["dynamic_sampling/dropped_time"] for h in logs) / wall,
        "surplus_share": surplus_s / wall,
        "generate_share": generate / wall,
        "generate_dropped_share": generate_dropped / wall,
        "logps_per_step": logps / run["measured"],
        "logps_share": logps / wall,
        "logps_dropped_share": logps_dropped / wall,
        "logps_dropped_frac": logps_dropped / logps if logps else None,
    }


def summarize(runs: list[dict], options) -> dict:
    from trl_ext.grpo.dynamic_sampling.groups import expected_rounds as whole_batch_rounds

    figures = {(r["config"], r["p"], r["rep"]): run_figures(r) for r in runs}
    summary = {}
    for name in options.configs:
        groups = next(r["groups"] for r in runs if r["config"] == name)
        policy = next(r.get("policy") for r in runs if r["config"] == name)
        for p in options.ps:
            reps = [figures[(name, p, rep)] for rep in range(options.reps)]
            rel = [
                figures[(name, p, rep)]["wall_per_kept"] / figures[(name, options.ps[0], rep)]["wall_per_kept"]
                for rep in range(options.reps)
            ]
            rel_cpu = [
                figures[(name, p, rep)]["cpu_per_kept"] / figures[(name, options.ps[0], rep)]["cpu_per_kept"]
                for rep in range(options.reps)
            ]

            def mean(key, reps=reps):
                values = [f[key] for f in reps if f[key] is not None]
                return statistics.mean(values) if values else None

            summary[(name, p)] = {
                "groups": groups,
                "expected_rounds": whole_batch_rounds(1 - p, options.max_rounds, groups),
                "predicted_rounds": predicted_rounds(p, groups, options.max_rounds, policy),
                "ideal": 1 / (1 - p),
                "rel_wall": statistics.median(rel),
                "rel_wall_range": (min(rel), max(rel)),
                "rel_cpu": statistics.median(rel_cpu),
                **{key: mean(key) for key in reps[0]},
            }
    return summary


def plot(summary: dict, options, out: Path) -> Path:
    plt = common.plt()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    ps = list(options.ps)
    axes[0].plot(ps, [1 / (1 - p) for p in ps], "k--", label="ideal 1/(1-p)")
    for i, name in enumerate(options.configs):
        color = f"C{i}"
        rows = [summary[(name, p)] for p in ps]
        axes[0].plot(ps, [r["rounds"] for r in rows], "o-", color=color, label=f"{name}: measured rounds")
        axes[0].plot(
            ps, [r["expected_rounds"] for r in rows], ":", color=color, label=f"{name}: expected (whole batches)"
        )
        axes[1].plot(ps, [r["rel_wall"] for r in rows], "o-", color=color, label=f"{name} (wall)")
        axes[1].fill_between(
            ps, [r["rel_wall_range"][0] for r in rows], [r["rel_wall_range"][1] for r in rows], color=color, alpha=0.15
        )
        axes[1].plot(ps, [r["rel_cpu"] for r in rows], "x:", color=color, label=f"{name} (CPU)")
        axes[2].plot(
            ps,
            [100 * r["dropped_share"] for r in rows],
            "o-",
            color=color,
            label=f"{name}: dropped groups (dropped_time)",
        )
        axes[2].plot(
            ps,
            [100 * (r["dropped_share"] + r["surplus_share"]) for r in rows],
            "x:",
            color=color,
            label=f"{name}: + surplus informative groups",
        )
        axes[2].plot(
            ps,
            [100 * r["logps_dropped_share"] for r in rows],
            "s--",
            color=color,
            ms=3,
            label=f"{name}: old/ref forward over dropped",
        )
    axes[1].plot(ps, [1 / (1 - p) for p in ps], "k--", label="1/(1-p)")
    axes[0].set(
        xlabel="uninformative fraction p",
        ylabel="generation rounds per generation batch",
        title="rounds per step",
        yscale="log",
    )
    axes[1].set(
        xlabel="uninformative fraction p", ylabel="relative to p = 0", title="time per kept group", yscale="log"
    )
    axes[2].set(
        xlabel="uninformative fraction p", ylabel="% of step wall time", title="time on groups that are not trained on"
    )
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def markdown(summary, options, prov) -> tuple[list[str], list[str]]:
    rl, _ = common.demo_settings(options.prompts_per_step)
    prompts = rl["per_device_train_batch_size"] // rl["num_generations"]
    head = common.header(prov)
    head.append(
        f"- setting: demo SFT warm start, lr 0 (fixed policy), {prompts} prompts x {rl['num_generations']} "
        f"completions per step, max {rl['max_completion_length']} tokens, dynamic_sampling_max_rounds "
        f"{options.max_rounds}; {options.reps} repetition(s) of {options.steps} measured step(s) per config and p "
        "(GSPO: whole generation cycles of 4 steps) after a warm-up cycle; synthetic reward, a fraction p of the "
        "training prompts uninformative"
    )
    rows, cost = [], []
    for name in options.configs:
        for p in options.ps:
            s = summary[(name, p)]
            rows.append(
                [
                    f"`{name}`",
                    f"{p:g}",
                    s["groups"],
                    f"**{s['rounds']:.2f}**",
                    f"{s['predicted_rounds']:.2f}" if s.get("predicted_rounds") is not None else "–",
                    f"{s['expected_rounds']:.2f}",
                    f"{s['ideal']:.2f}",
                    f"{s['generated_per_kept']:.2f}",
                    f"{s['limit_hit']:.0%}",
                    f"{1000 * s['wall_per_kept']:.0f}",
                    f"**{s['rel_wall']:.2f}** ({s['rel_wall_range'][0]:.2f}–{s['rel_wall_range'][1]:.2f})",
                    f"{s['rel_cpu']:.2f}",
                ]
            )
            cost.append(
                [
                    f"`{name}`",
                    f"{p:g}",
                    f"{100 * s['generation_share']:.0f}%",
                    f"**{100 * s['dropped_share']:.0f}%**",
                    f"{100 * s['surplus_share']:.0f}%",
                    f"{100 * s['generate_share']:.0f}%",
                    f"{100 * s['generate_dropped_share']:.0f}%",
                    f"{1000 * s['logps_per_step']:.0f}",
                    f"{100 * s['logps_share']:.1f}%",
                    f"{100 * s['logps_dropped_share']:.1f}%",
                    f"{s['logps_dropped_frac']:.0%}" if s["logps_dropped_frac"] is not None else "–",
                ]
            )
    body = ["## Generation rounds and time per kept group", ""]
    body += common.table(
        [
            "config",
            "p",
            "groups per generation batch",
            "rounds per batch (measured)",
            "rounds predicted (probe's simulation of this policy)",
            "expected rounds (whole-batch refills)",
            "ideal 1/(1-p)",
            "groups generated per kept group",
            "steps at the round limit",
            "wall ms per kept group",
            "wall per kept group / p=0: median (range)",
            "CPU per kept group / p=0",
        ],
        rows,
        align="lrrrrrrrrrrr",
    )
    body += ["", "## Where the time goes (shares of the measured steps' wall time)", ""]
    body += common.table(
        [
            "config",
            "p",
            "generation rounds (`generation_time`)",
            "groups then dropped (`dropped_time`)",
            "surplus informative groups (discarded, or carried over where the config carries)",
            "sampling (generate) forward passes, all groups",
            "sampling forward passes over dropped groups",
            "old/ref log-prob forward, ms per step",
            "old/ref forward, all groups",
            "old/ref forward over dropped groups",
            "share of old/ref forward spent on dropped groups",
        ],
        cost,
        align="lrrrrrrrrrr",
    )
    body += [
        "",
        "A generation round is TRL's whole `_generate_and_score_completions`: sampling, old/ref log-prob "
        "forward passes (only with beta > 0 or several steps per generation), decoding, scoring, advantages. "
        "`generation_time` and `dropped_time` are the trainer's own metrics (`dropped_time`: each round's seconds "
        "times its uninformative fraction). The other columns come from the benchmark's timers around TRL's "
        "`_generate`, no-grad `_get_per_token_logps_and_entropies` and `_calculate_rewards`, per round; surplus "
        "= informative groups of the last round beyond what the batch needed (carried to the next step where the "
        "config carries, else discarded).",
        "",
        "## Reading",
        "",
    ]
    body += findings(summary, options)
    body += ["", "![rounds, time per kept group and wasted time against p](dynamic_sampling.png)"]
    return head, body


def before_after(before: dict, after: dict, options, before_options=None) -> list[str]:
    """Side-by-side table of the code before issue 14 (whole-batch refills, old/ref log-probs for every generated row,
    every round's tensors gathered) and this code, measured with the same benchmark and options."""
    rows, within = [], []
    for name in options.configs:
        for p in options.ps:
            b, a = before.get((name, p)), after[(name, p)]
            if b is None:
                b = {k: None for k in a}
            ideal = 1 / (1 - p)
            within.append((name, p, a["generated_per_kept"] / ideal))

            def frac(x):
                return f"{x:.0%}" if x is not None else "– (no pass)"

            def num(x, fmt="{:.2f}"):
                return fmt.format(x) if x is not None else "(not run)"

            rows.append(
                [
                    f"`{name}`",
                    f"{p:g}",
                    f"{ideal:.2f}",
                    num(b["generated_per_kept"]),
                    f"**{a['generated_per_kept']:.2f}**",
                    f"{a['generated_per_kept'] / ideal:.2f}",
                    num(b["rounds"]),
                    f"{a['rounds']:.2f}",
                    frac(b["logps_rows_dropped_frac"]) if b["rounds"] is not None else "(not run)",
                    f"**{frac(a['logps_rows_dropped_frac'])}**",
                    num(b["gathered_mb_per_step"], "{:.3f}"),
                    f"**{a['gathered_mb_per_step']:.3f}**",
                    num(b["wall_per_kept"] and b["wall_per_kept"] * 1000, "{:.0f}"),
                    f"{a['wall_per_kept'] * 1000:.0f}",
                    f"{a['carried_per_step']:.2f}",
                    f"{a['skipped_per_step']:.1f}",
                ]
            )
    runs = f"after: {options.reps} x {options.steps} measured steps per config and p"
    if before_options is not None:
        runs = f"before: {before_options.reps} x {before_options.steps}, " + runs
    out = [
        f"## Before / after issue 14 (same benchmark and settings; before = main's code at the issue's start; {runs})",
        "",
    ]
    out += common.table(
        [
            "config",
            "p",
            "ideal 1/(1-p)",
            "groups generated per kept group: before",
            "after",
            "after / ideal",
            "rounds per generation batch: before",
            "after",
            "old/ref forward rows on dropped groups: before",
            "after",
            "MB gathered per generation batch: before",
            "after",
            "wall ms per kept group: before",
            "after",
            "carried groups trained per generation batch (after)",
            "prompts skipped per generation batch (after)",
        ],
        rows,
        align="lrrrrrrrrrrrrrrr",
    )
    worst = max(within, key=lambda t: t[2]) if within else None
    if worst:
        out += [
            "",
            f"- Generated groups per kept group over the ideal 1/(1-p), worst case: `{worst[0]}` at p = "
            f"{worst[1]:g}, x{worst[2]:.3f} (the issue's bar: within 10%, i.e. at most x1.10).",
        ]
    out += [
        "- Groups generated per kept group: every group generated in the measured steps over the groups trained "
        "from them (where groups are carried over, those carried into the first measured step were generated "
        "before it and are left out, and those carried out of the last one are counted: they are trained first "
        "at the next step). Repetitions replay the same sampling (same seeds): they repeat the timing, not the counts."
    ]
    out += [
        "- MB gathered per generation batch (one per step, except `gspo` and `dapo_mb`: one per 4 steps): bytes of "
        "the per-row tensors assembled on each rank when a generation batch needed more "
        "than one round (the trainer's `dynamic_sampling/gathered_bytes`; for the code before it, every round's "
        "tensors, which it gathered to every rank). With W processes, (W-1)/W of it crosses the interconnect; "
        "this run has one process, so it is what would move."
    ]
    return out


def findings(summary: dict, options) -> list[str]:
    out = []
    for name in options.configs:
        rows = {p: summary[(name, p)] for p in options.ps}
        top = max(options.ps)
        s = rows[top]
        out.append(
            f"- `{name}` at p = {top:g}: {s['rounds']:.2f} rounds per generation batch (ideal {s['ideal']:.2f}, "
            f"expected with whole-batch refills {s['expected_rounds']:.2f}); time per kept group x{s['rel_wall']:.2f} "
            f"that of p = 0 (CPU x{s['rel_cpu']:.2f}); {100 * s['dropped_share']:.0f}% of the step time went to "
            f"generating and scoring groups then dropped (sampling forward passes over them: "
            f"{100 * s['generate_dropped_share']:.0f}%) and {100 * s['surplus_share']:.0f}% to surplus informative "
            "groups"
            + (
                f"; old/ref log-prob forward passes took {100 * s['logps_share']:.1f}% of the step time, "
                f"{s['logps_dropped_frac']:.0%} of them over dropped groups ({100 * s['logps_dropped_share']:.1f}% of "
                "the step time)."
                if s["logps_dropped_frac"] is not None and s["logps_share"] > 0.001
                else "; no old/ref log-prob forward passes (beta 0, on-policy), so a dropped group cost only its "
                "sampling and scoring."
            )
        )
    mid = [p for p in options.ps if 0 < p < 0.5]
    if mid and "dapo" in options.configs:
        s = summary[("dapo", mid[0])]
        out.append(
            f"- At p = {mid[0]:g} the ideal is {s['ideal']:.2f} groups generated per kept group; right-sized refills "
            f"generated {s['generated_per_kept']:.2f} in {s['rounds']:.2f} rounds per step (whole-batch refills: "
            f"{s['expected_rounds']:.2f} batches expected)."
        )
    out.append(
        "- The time per kept group grows more slowly than the rounds because a step's training part "
        "(loss, backward, optimizer) does not grow with p; generation on this tiny model is cheap, so on a "
        "real model, where generation dominates, the time ratio moves toward the rounds ratio."
    )
    return out


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="1 repetition of 1 measured step, 8 prompts (under 2 minutes)"
    )
    parser.add_argument("--ps", default=",".join(f"{p:g}" for p in PS), help="uninformative fractions, first = base")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"subset of {list(CONFIGS)}")
    parser.add_argument("--steps", type=int, help="measured steps per run (full 6, quick 1; GSPO: whole cycles)")
    parser.add_argument("--reps", type=int, help="repetitions (full 3, quick 1)")
    parser.add_argument("--max-rounds", type=int, default=20, help="dynamic_sampling_max_rounds (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the uninformative-prompt hash")
    common.add_run_options(parser, "dynamic_sampling", "prompts per step (default: the demo's 16; quick 8)")
    parser.add_argument(
        "--refill-margin", type=float, help="dynamic_sampling_refill_margin (default: the config's, 1.25)"
    )
    parser.add_argument("--label", default="after", help="name of the code measured (e.g. 'before' at main's commit)")
    parser.add_argument(
        "--before",
        help="a dynamic_sampling.json measured on the code before issue 14 (same options), shown side by side",
    )
    options = parser.parse_args(argv)
    options.ps = [float(p) for p in options.ps.split(",")]
    if any(not 0 <= p < 1 for p in options.ps):
        parser.error(f"--ps: every p must be in [0, 1), got {options.ps}")
    options.configs = [c.strip() for c in options.configs.split(",") if c.strip()]
    unknown = sorted(set(options.configs) - set(CONFIGS))
    if unknown:
        parser.error(f"--configs: unknown {unknown}; choose from {list(CONFIGS)}")
    options.steps = options.steps or (1 if options.quick else 6)
    options.reps = options.reps or (1 if options.quick else 3)
    if options.quick and options.prompts_per_step is None:
        options.prompts_per_step = 8
    return options


def measure(options) -> list[dict]:
    """Every config at every p, ``--reps`` times (one lock-stepped worker per p); the runs' raw records."""
    common.load_policy(options.warm_start_steps, options.cache_dir)  # build the cached warm start once
    jobs = [(name, rep) for rep in range(options.reps) for name in options.configs]

    def progress(me, index, run):
        rounds = statistics.mean(_num_rounds(b) for b in run["rounds"])
        print(
            f"[dynamic_sampling] {run['config']} p={run['p']:g} rep {run['rep']}: {rounds:.2f} rounds/batch, "
            f"{sum(run['step_wall']) / run['measured']:.2f} s/step",
            flush=True,
        )

    per_worker = common.run_lockstep(worker, [(p, jobs, options) for p in options.ps], on_result=progress)
    return [run for worker_runs in per_worker for run in worker_runs]


def report(runs: list[dict], options, prov: dict, out, before_path: str | None = None) -> None:
    summary = summarize(runs, options)
    plot(summary, options, out / "dynamic_sampling.png")
    head, body = markdown(summary, options, prov)
    if before_path:
        before_options, _, before_runs = common.load_raw(before_path, options)
        before = summarize(before_runs, before_options)
        body = before_after(before, summary, options, before_options) + [""] + body
    path = common.write_markdown(
        out / "dynamic_sampling.md", "Cost of dynamic sampling against the uninformative fraction p", head, body
    )
    rows = [
        {
            "config": name,
            "p": p,
            "ideal": s["ideal"],
            "generated_per_kept": s["generated_per_kept"],
            "rounds": s["rounds"],
            "groups": s["groups"],
        }
        for (name, p), s in summary.items()
    ]
    worst = max((r for r in rows if r["p"] > 0), key=lambda r: r["generated_per_kept"] / r["ideal"], default=None)
    common.write_figures(out / "dynamic_sampling.figures.json", prov, {"rows": rows, "worst": worst})
    print("\n".join(body[: body.index("## Reading")]))
    print(f"[dynamic_sampling] wrote {path}, {out / 'dynamic_sampling.png'} and dynamic_sampling.figures.json")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    before_path = parse(argv).before  # a saved "before" run, shown side by side (kept when --render loads options)
    return common.bench_main(
        "dynamic_sampling.py",
        argv,
        parse,
        measure,
        lambda runs, options, prov, out: report(runs, options, prov, out, before_path),
    )


if __name__ == "__main__":
    raise SystemExit(main())
