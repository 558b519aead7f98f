"""The body of the GRPO-family recipes (``recipes/grpo.py``, ``dapo.py``, ``gspo.py``): parse, then call ``run``.

Reads top to bottom like open-r1's ``grpo.py``: seed, data, model and tokenizer, rewards, trainer, train, save,
report. With no ``--model_name_or_path`` / ``--dataset_name`` it runs the built-in demo task: the SFT warm start
(cached), then RL, and prints held-out greedy accuracy before and after. Every run writes ``metrics.jsonl`` (one line
per log step, as it goes), ``curves.png`` and the final model under ``output_dir``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback, set_seed
from trl import ModelConfig, TrlParser, get_peft_config

from trl_ext.presets import GRPOFamilyConfig
from trl_ext.trainers import trainer_class_for

DEMO_CONFIG_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes", "configs", "demo"
)


@dataclass
class RLScriptArguments:
    """Data, rewards and run options of the GRPO-family recipes (the training options are the preset's config)."""

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Hub dataset or local .json/.jsonl/.csv/.parquet file with a 'prompt' column. "
            "None: the built-in arithmetic demo."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset configuration name."})
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    dataset_test_split: str = field(default="test", metadata={"help": "Held-out split (demo: 240 problems)."})
    reward_funcs: list[str] = field(
        default_factory=lambda: ["arithmetic"],
        metadata={"help": "Reward functions by registry name (see rewards.available_rewards())."},
    )
    reward_options: str | None = field(
        default=None, metadata={"help": 'JSON options per reward, e.g. \'{"accuracy": {"extraction": "boxed"}}\'.'}
    )
    health_monitor: bool = field(default=True, metadata={"help": "Warn on KL blow-up, entropy collapse, etc."})


def parse(preset_config: type[GRPOFamilyConfig], recipe: str, argv: list[str] | None = None):
    """Parse ``(script_args, training_args, model_args)``. With no model and no config given, the demo's YAML
    (``recipes/configs/demo/<recipe>.yaml``) supplies the defaults; CLI flags still override it."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--config" not in argv and not any(a.startswith("--model_name_or_path") for a in argv):
        argv = ["--config", os.path.join(DEMO_CONFIG_DIR, f"{recipe}.yaml"), *argv]
    if "--config" in argv:
        from trl_ext.preflight import check_config_keys

        check_config_keys(argv[argv.index("--config") + 1], [RLScriptArguments, preset_config, ModelConfig])
    parser = TrlParser((RLScriptArguments, preset_config, ModelConfig))
    return parser.parse_args_and_config(args=argv)


class MetricsFileCallback(TrainerCallback):
    """Appends every log dict (with its step) to ``output_dir/metrics.jsonl`` as training goes."""

    def __init__(self, path: str):
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or not state.is_world_process_zero:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": state.global_step, **logs}) + "\n")


def plot_curves(metrics_path: str, out_path: str) -> str | None:
    """Reward, kept-group fraction, entropy and clip fraction against step, from ``metrics.jsonl``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not os.path.exists(metrics_path):
        return None
    with open(metrics_path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    panels = [
        ("reward", "mean reward"),
        ("dynamic_sampling/kept_group_frac", "kept-group fraction"),
        ("entropy", "entropy"),
        ("clip_ratio/region_mean", "clip fraction"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3))
    for ax, (key, title) in zip(axes, panels, strict=True):
        points = [(r["step"], r[key]) for r in rows if key in r]
        if points:
            ax.plot(*zip(*points, strict=True), marker=".")
        ax.set_title(title)
        ax.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return out_path


def _resolve_checkpoint(value: str | None, output_dir: str) -> str | bool | None:
    if value == "latest":
        return True
    if value is not None and not os.path.isdir(value):
        raise FileNotFoundError(
            f"resume_from_checkpoint={value!r}: no such directory. Give a checkpoint-N folder "
            f"under {output_dir}, or 'latest'."
        )
    return value


def run(
    script_args: RLScriptArguments, training_args: GRPOFamilyConfig, model_args: ModelConfig, recipe: str
) -> dict[str, Any]:
    """Train one GRPO-family run and report; returns the summary it prints and writes to ``summary.json``."""
    from trl_ext.pipeline import held_out_accuracy, load_data, load_policy, reward_functions

    started = time.time()
    set_seed(training_args.seed)
    if model_args.model_name_or_path is None and "OMP_NUM_THREADS" not in os.environ:
        import torch

        # The 0.6M-parameter demo model gains nothing from intra-op threads, and on a busy machine they thrash.
        torch.set_num_threads(1)
    output_dir = training_args.output_dir
    os.makedirs(output_dir, exist_ok=True)

    # Rewards first, by registry name (YAML: reward_funcs / reward_weights): a typo fails before any download.
    reward_funcs = reward_functions(script_args.reward_funcs, script_args.reward_options)
    resume = _resolve_checkpoint(training_args.resume_from_checkpoint, output_dir)
    if not resume:
        from trl_ext.checkpointing import check_fresh_output_dir

        check_fresh_output_dir(output_dir)  # never mix two runs' checkpoints in one output_dir

    # Data: the demo's arithmetic problems, or the user's dataset (it needs a 'prompt' column).
    train_dataset, eval_dataset = load_data(
        script_args.dataset_name,
        script_args.dataset_config,
        script_args.dataset_train_split,
        script_args.dataset_test_split,
    )
    if "prompt" not in train_dataset.column_names:
        raise ValueError(
            f"The training set has no 'prompt' column (columns: {train_dataset.column_names}). "
            "Rename the column holding the prompts to 'prompt' (e.g. dataset.rename_column)."
        )

    # Model and tokenizer: the demo's cached SFT warm start when no model is given.
    model, tokenizer, model_path = load_policy(model_args.model_name_or_path, model_args.dtype)

    before = held_out_accuracy(model, tokenizer, eval_dataset)
    if before is not None:
        print(
            f"[{recipe}] held-out greedy accuracy before RL: {before:.3f} ({len(eval_dataset)} problems)", flush=True
        )

    metrics_path = os.path.join(output_dir, "metrics.jsonl")
    if not resume and os.path.exists(metrics_path):
        os.replace(metrics_path, metrics_path + ".previous")  # keep the last run's log, never append to it
    trainer_class = trainer_class_for(training_args)
    trainer = trainer_class(
        model=model,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        callbacks=[MetricsFileCallback(metrics_path)],
    )
    if script_args.health_monitor:
        from trl_ext.health import HealthMonitor

        HealthMonitor().attach(trainer)

    trainer.train(resume_from_checkpoint=resume)  # 'latest' = newest checkpoint in output_dir
    trainer.save_model(output_dir)
    if trainer.accelerator.is_main_process:
        tokenizer.save_pretrained(output_dir)

    after = held_out_accuracy(trainer.model, tokenizer, eval_dataset)
    history = [h for h in trainer.state.log_history if "reward" in h]
    summary: dict[str, Any] = {
        "recipe": recipe,
        "trainer": type(trainer).__name__,
        "model": model_path,
        "accuracy_before": before,
        "accuracy_after": after,
        "mean_reward_first_log": history[0]["reward"] if history else None,
        "mean_reward_last_log": history[-1]["reward"] if history else None,
        "optimizer_steps": trainer.state.global_step,
        "wall_time_s": round(time.time() - started, 1),
    }
    ds_logs = [h for h in trainer.state.log_history if "dynamic_sampling/rounds" in h]
    if ds_logs:
        mean = lambda key: sum(h[key] for h in ds_logs) / len(ds_logs)  # noqa: E731
        summary.update(
            {
                "dynamic_sampling_rounds_mean": round(mean("dynamic_sampling/rounds"), 3),
                "dynamic_sampling_kept_group_frac_mean": round(mean("dynamic_sampling/kept_group_frac"), 3),
                "dynamic_sampling_limit_hit_frac": round(mean("dynamic_sampling/limit_hit"), 3),
                # each log entry averages its window's steps: these are seconds per optimizer step
                "dynamic_sampling_generation_s_per_step": round(mean("dynamic_sampling/generation_time"), 4),
                "dynamic_sampling_dropped_s_per_step": round(mean("dynamic_sampling/dropped_time"), 4),
            }
        )
    if trainer.accelerator.is_main_process:
        summary["curves"] = plot_curves(metrics_path, os.path.join(output_dir, "curves.png"))
        with open(os.path.join(output_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        print_summary(summary)
    return summary


def print_summary(summary: dict[str, Any]) -> None:
    lines = [f"== {summary['recipe']} ({summary['trainer']}) =="]
    if summary["accuracy_before"] is not None:
        gain = 100 * (summary["accuracy_after"] - summary["accuracy_before"])
        lines.append(
            f"held-out greedy accuracy: {summary['accuracy_before']:.3f} -> {summary['accuracy_after']:.3f} "
            f"({gain:+.1f} points)"
        )
    if summary["mean_reward_first_log"] is not None:
        lines.append(
            f"mean reward: {summary['mean_reward_first_log']:.3f} (first log) -> "
            f"{summary['mean_reward_last_log']:.3f} (last log)"
        )
    if "dynamic_sampling_rounds_mean" in summary:
        lines.append(
            f"dynamic sampling: {summary['dynamic_sampling_rounds_mean']:.2f} rounds/step, kept-group fraction "
            f"{summary['dynamic_sampling_kept_group_frac_mean']:.2f}, round limit hit on "
            f"{summary['dynamic_sampling_limit_hit_frac']:.0%} of steps; generating and scoring took "
            f"{summary['dynamic_sampling_generation_s_per_step']:.3f} s/step, of which "
            f"{summary['dynamic_sampling_dropped_s_per_step']:.3f} s went to groups that were then dropped"
        )
    lines.append(
        f"{summary['optimizer_steps']} optimizer steps in {summary['wall_time_s']:.0f}s; "
        f"outputs: metrics.jsonl, curves.png, summary.json, model"
    )
    print("\n".join(lines), flush=True)
