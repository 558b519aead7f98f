"""The demo pipeline in one command: SFT warm start -> DAPO -> DPO for style, each stage's held-out accuracy printed.

    python recipes/pipeline.py                                   # ~2 min on 2 CPU cores, outputs/pipeline
    python recipes/pipeline.py --learned_reward true             # SFT -> reward model -> DAPO against it
    python recipes/pipeline.py --dapo_overrides max_steps=100 --dpo_overrides mining_rounds=1
    python recipes/pipeline.py --config my_pipeline.yaml         # any PipelineArguments field; CLI flags override

Each stage runs its recipe's own code path and YAML from the previous stage's saved model. The final table and
``outputs/pipeline/summary.json`` hold the accuracies, the DPO rounds' mining statistics and each stage's wall time.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from dataclasses import asdict
from typing import Any

from datasets import Dataset, load_dataset
from transformers import AutoModelForCausalLM, PreTrainedModel
from trl import ModelConfig, RewardConfig

from trl_ext.console import opening_line, quiet_libraries
from trl_ext.demo import DemoTaskConfig, WarmStartConfig, build_tokenizer, greedy_accuracy, make_problems, warm_start
from trl_ext.dpo.trainer import DPOConfig
from trl_ext.recipe.args import DPOScriptArguments, PipelineArguments, RewardScriptArguments
from trl_ext.recipe.grpo import parse as parse_grpo
from trl_ext.recipe.grpo import read_metrics
from trl_ext.recipe.models import demo_threads, fresh_demo_policy
from trl_ext.recipe.parsing import check_flags, make_parser, parse
from trl_ext.recipe.paths import DEMO_CONFIG_DIR, demo_config_path
from trl_ext.recipe.report import write_summary
from trl_ext.recipe.steps import run
from trl_ext.reward_model import load_reward_model, pairwise_accuracy, score_pairs
from trl_ext.scoring import generate_groups
from trl_ext.scripts import dapo as dapo_recipe
from trl_ext.scripts import dpo as dpo_recipe
from trl_ext.scripts import reward as reward_recipe


def _recipe_argv(config: str, model: str, output_dir: str, seed: int, overrides: list[str], *extra: str) -> list[str]:
    """A stage's command line: its YAML, the previous stage's model, its output folder, the seed, then overrides."""
    argv = ["--config", config, "--model_name_or_path", model, *extra, "--output_dir", output_dir, "--seed", str(seed)]
    return argv + _flags(overrides)


def _flags(overrides: list[str]) -> list[str]:
    flags = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override {item!r} is not key=value; write e.g. max_steps=100.")
        flags += [f"--{key}", *value.split(",")] if "," in value else [f"--{key}", value]
    return flags


def main(args: PipelineArguments) -> dict[str, Any]:
    """SFT warm start -> DAPO -> DPO for style on the demo task; prints and returns each stage's accuracy."""
    quiet_libraries()
    start = time.time()
    stages = "reward model -> DAPO against it" if args.learned_reward else "DAPO -> DPO for style"
    stages = f"SFT warm start -> {stages}"
    lines = [stages, "model demo model, random init", "data built-in arithmetic demo", f"outputs in {args.output_dir}"]
    print(opening_line("pipeline", lines), flush=True)
    demo_threads(demo=True)
    timings: dict[str, float] = {}
    accuracies: dict[str, float] = {}
    _, held_out = make_problems(DemoTaskConfig())
    tokenizer = build_tokenizer()

    # 0. The random initialisation, for reference.
    model, _ = fresh_demo_policy()
    accuracies["0. random init"] = greedy_accuracy(model, tokenizer, held_out)

    # 1. SFT warm start (cached under output_dir/sft/<hash of the settings>).
    t = time.time()
    sft_dir = warm_start(os.path.join(args.output_dir, "sft"), sft=WarmStartConfig(max_steps=args.sft_max_steps))
    accuracies["1. SFT warm start"] = greedy_accuracy(
        AutoModelForCausalLM.from_pretrained(sft_dir), tokenizer, held_out
    )
    timings["sft"] = time.time() - t
    print(f"[pipeline] 1. SFT warm start: held-out accuracy {accuracies['1. SFT warm start']:.3f}", flush=True)

    if args.learned_reward:
        return learned_reward_stages(args, sft_dir, accuracies, timings, start)

    # 2. DAPO from the warm start: recipes/dapo.py's code path and YAML.
    t = time.time()
    dapo_dir = os.path.join(args.output_dir, "dapo")
    dapo_config = args.dapo_config or demo_config_path("dapo")
    argv = _recipe_argv(dapo_config, sft_dir, dapo_dir, args.seed, args.dapo_overrides)
    dapo = dapo_recipe.main(*parse_grpo("dapo", argv=argv))
    accuracies["2. DAPO"] = dapo["accuracy_after"]
    timings["dapo"] = time.time() - t
    print(f"[pipeline] 2. DAPO: held-out accuracy {accuracies['2. DAPO']:.3f}", flush=True)

    # 3. DPO for style from the DAPO policy: recipes/dpo.py's code path, style YAML.
    t = time.time()
    dpo_dir = os.path.join(args.output_dir, "dpo")
    dpo_config = args.dpo_config or os.path.join(DEMO_CONFIG_DIR, "dpo", "config_style.yaml")
    argv = _recipe_argv(dpo_config, dapo_dir, dpo_dir, args.seed, args.dpo_overrides)
    dpo = dpo_recipe.main(*parse((DPOScriptArguments, DPOConfig, ModelConfig), "dpo", argv=argv))
    accuracies["3. DPO for style"] = dpo["accuracy_after"]
    timings["dpo"] = time.time() - t
    style = {
        "after DAPO": style_report(AutoModelForCausalLM.from_pretrained(dapo_dir), tokenizer, held_out),
        "after DPO": style_report(AutoModelForCausalLM.from_pretrained(dpo_dir), tokenizer, held_out),
    }

    total = time.time() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime  # independent of other jobs sharing the cores
    lines = stage_table(accuracies, "held-out accuracy")
    lines.append(
        f"\nwall time {total / 60:.1f} min (sft {timings['sft']:.0f} s, dapo {timings['dapo']:.0f} s, "
        f"dpo {timings['dpo']:.0f} s), CPU time {cpu / 60:.1f} min. Greedy answers that are exactly '<number><eos>': "
        f"{style['after DAPO']['clean_frac']:.3f} after DAPO, {style['after DPO']['clean_frac']:.3f} after DPO; "
        f"mean completion tokens {style['after DAPO']['mean_tokens']:.2f} -> {style['after DPO']['mean_tokens']:.2f}"
    )
    print("\n".join(lines), flush=True)
    summary = {
        "accuracies": accuracies,
        "timings_s": timings,
        "wall_time_s": total,
        "cpu_time_s": cpu,
        "dpo_rounds": dpo["rounds"],
        "style": style,
        "args": asdict(args),
    }
    write_summary(args.output_dir, summary)
    return summary


def stage_table(accuracies: dict[str, float], header: str) -> list[str]:
    """The final table's lines: one row per stage with its held-out accuracy."""
    return ["", f"| stage | {header} |", "|---|---|", *(f"| {k} | {v:.3f} |" for k, v in accuracies.items())]


#: DAPO against a learned reward, before the user's ``dapo_overrides``: a KL penalty to the warm start (InstructGPT's
#: beta; DAPO drops it for rule rewards); rewards normalized over the batch, not within each group (a group of wrong
#: answers differs only by the reward model's noise, which a per-group std would blow up to full-size advantages);
#: held-out accuracy every 20 steps, the gold figure the health monitor watches the learned reward against (Gao et
#: al. 2022).
LEARNED_REWARD_DAPO = ["beta=0.04", "scale_rewards=batch", "held_out_eval_steps=20", "logging_steps=20"]


def learned_reward_stages(
    args: PipelineArguments, sft_dir: str, accuracies: dict[str, float], timings: dict[str, float], start: float
) -> dict[str, Any]:
    """RLHF with a learned reward (Ouyang et al. 2022): reward models on the warm start's rule-labelled rollouts, then
    DAPO against their mean score; held-out accuracy is the rule reward's, showing how well the learned reward stands
    in for it."""
    # 2. Reward models (an ensemble of seeds): recipes/reward.py's code path and YAML.
    t = time.time()
    if args.reward_models < 1:
        raise ValueError(f"reward_models={args.reward_models}: train at least 1 reward model.")
    rm_dirs = [os.path.join(args.output_dir, "reward" if k == 0 else f"reward-{k}") for k in range(args.reward_models)]
    rewards = []
    for k, rm_dir in enumerate(rm_dirs):
        argv = _recipe_argv(demo_config_path("reward"), sft_dir, rm_dir, args.seed + k, args.reward_overrides)
        rewards.append(reward_recipe.main(*parse((RewardScriptArguments, RewardConfig, ModelConfig), "reward", argv)))
    reward = rewards[0]
    if len(rewards) > 1:  # the ensemble's own figure: the mean score, as DAPO sums the models' scores
        reward = dict(reward, accuracy_after=ensemble_pairwise_accuracy(rm_dirs), members=rewards)
    timings["reward"] = time.time() - t
    print(f"[pipeline] 2. reward model: held-out pairwise accuracy {reward['accuracy_after']:.3f}", flush=True)

    # 3. DAPO from the warm start against the reward models (rule reward for held-out accuracy only).
    t = time.time()
    dapo_dir = os.path.join(args.output_dir, "dapo-rm")
    dapo_config = args.dapo_config or demo_config_path("dapo")
    overrides = [*LEARNED_REWARD_DAPO, *args.dapo_overrides]
    argv = _recipe_argv(dapo_config, sft_dir, dapo_dir, args.seed, overrides, "--reward_funcs", *rm_dirs)
    dapo = dapo_recipe.main(*parse_grpo("dapo", argv=argv))
    accuracies["3. DAPO against the reward model"] = dapo["accuracy_after"]
    timings["dapo"] = time.time() - t
    curve = held_out_curve(dapo_dir)
    alert = next((w for w in dapo.get("health_warnings") or [] if w["kind"] == "reward_overoptimized"), None)
    total = time.time() - start
    lines = stage_table(accuracies, "held-out accuracy (rule reward)")
    lines.append(
        f"\nreward model: held-out pairwise accuracy {reward['accuracy_before']:.3f} -> {reward['accuracy_after']:.3f} "
        f"({reward['held_out_pairs']} pairs). Wall time {total / 60:.1f} min (sft {timings['sft']:.0f} s, reward "
        f"{timings['reward']:.0f} s, dapo {timings['dapo']:.0f} s). Over-optimization alert: "
        + (f"step {alert['step']}" if alert else "none")
    )
    print("\n".join(lines), flush=True)
    keys = ("accuracy_before", "accuracy_after", "train_pairs", "held_out_pairs")
    summary = {
        "accuracies": accuracies,
        "reward_model": {k: reward[k] for k in keys}
        | ({"members": [{k: r[k] for k in keys} for r in rewards]} if len(rewards) > 1 else {}),
        "held_out_curve": curve,
        "overoptimization_alert": alert,
        "timings_s": timings,
        "wall_time_s": total,
        "args": asdict(args),
    }
    write_summary(args.output_dir, summary)
    return summary


def ensemble_pairwise_accuracy(rm_dirs: list[str]) -> float:
    """Held-out pairwise accuracy of the reward models' mean score on the demo's held-out pairs."""
    pairs = load_dataset("json", data_files=str(reward_recipe.HELD_OUT_PAIRS), split="train")
    scores = [score_pairs(load_reward_model(d), pairs) for d in rm_dirs]
    chosen, rejected = ([sum(values) for values in zip(*side, strict=True)] for side in zip(*scores, strict=True))
    return pairwise_accuracy(chosen, rejected)


def held_out_curve(run_dir: str) -> list[list[float]]:
    """``[step, held-out accuracy]`` of an RL run, from its ``metrics.jsonl``."""
    path = os.path.join(run_dir, "metrics.jsonl")
    rows = read_metrics(path) if os.path.exists(path) else []
    return [[r["step"], r["held_out/accuracy"]] for r in rows if "held_out/accuracy" in r and "step" in r]


def style_report(model: PreTrainedModel, tokenizer: Any, dataset: Dataset, max_new_tokens: int = 6) -> dict:
    """Greedy completions' style: the share that are exactly a number then EOS, and their mean length in tokens."""
    eos, prompts = tokenizer.eos_token_id, list(dataset["prompt"])
    ids, truncated = generate_groups(
        model, tokenizer, prompts, 1, max_new_tokens, len(prompts), [eos], tokenizer.pad_token_id, greedy=True
    )
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    clean = sum(not cut and text.lstrip("-").isdigit() for text, cut in zip(texts, truncated, strict=True))
    return {"clean_frac": clean / len(dataset), "mean_tokens": sum(map(len, ids)) / len(dataset)}


def cli(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the command line (``argv``, default ``sys.argv[1:]``) and run ``main``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = make_parser([PipelineArguments])  # no abbreviations, unknown flags named with the closest one
    check_flags(parser, argv)
    return run("pipeline", main, lambda: parser.parse_args_and_config(args=argv))


if __name__ == "__main__":
    cli()
