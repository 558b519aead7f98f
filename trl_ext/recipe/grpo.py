"""The body of the GRPO-family recipes (``recipes/grpo.py``, ``dapo.py``, ``gspo.py``): parse, then call ``run``.

Reads top to bottom like open-r1's ``grpo.py``: seed, data, model and tokenizer, rewards, trainer, train, save,
report. With no ``--model_name_or_path`` / ``--dataset_name`` it runs the built-in demo task: the SFT warm start
(cached), then RL.

What it prints (``trl_ext.console``): one opening line (trainer, preset, model, data, steps, precision, output
folder), a progress bar per phase (warm start, held-out evaluation, RL) whose postfix carries the live figures, one
compact line per log, and a summary table at the end. Held-out greedy accuracy (``trl_ext.diagnostics.held_out``: the task
reward of the greedy completion on the test split) is measured before RL, during RL every ``held_out_eval_steps``
(adaptive by default: under 5% of the run) and after. Every run writes ``metrics.jsonl`` (every logged metric, as it
goes, with ``held_out/accuracy``), ``curves.png`` (accuracy over steps with the warm-start level marked, then reward,
kept-group fraction and rounds, clip fraction, entropy), ``summary.json`` (the summary table's content) and the final
model under ``output_dir``.
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

from trl_ext.grpo.configs import GRPOFamilyConfig
from trl_ext.grpo.presets import trainer_class_for

DEMO_MODEL = "demo model + SFT warm start (cached after a first run)"
DEMO_CONFIG_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes", "configs", "demo"
)


@dataclass
class RLScriptArguments:
    """Data, rewards and run options of the GRPO-family recipes (the training options are the preset's config)."""

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Hub dataset, local folder (train.jsonl / test.jsonl, ...) or .json/.jsonl/.csv/.parquet file "
            "with a 'prompt' column. None: the built-in arithmetic demo."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset configuration name."})
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    dataset_test_split: str = field(
        default="test",
        metadata={"help": "Held-out split, or a local file of held-out problems (demo: 240 problems)."},
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["arithmetic"],
        metadata={"help": "Reward functions by registry name (see rewards.available_rewards())."},
    )
    reward_options: str | None = field(
        default=None, metadata={"help": 'JSON options per reward, e.g. \'{"accuracy": {"extraction": "boxed"}}\'.'}
    )
    health_monitor: bool = field(default=True, metadata={"help": "Warn on KL blow-up, entropy collapse, etc."})
    held_out_eval_steps: int | None = field(
        default=None,
        metadata={
            "help": "Held-out greedy accuracy every N optimizer steps during RL (rounded up to a multiple of "
            "logging_steps), logged as held_out/accuracy. None: adaptive, starting at logging_steps and widening "
            "so that evaluating costs under 5% of the run. 0: only before and after."
        },
    )


def parse(preset_config: type[GRPOFamilyConfig], recipe: str, argv: list[str] | None = None):
    """Parse ``(script_args, training_args, model_args)``. With no model and no config given, the demo's YAML
    (``recipes/configs/demo/<recipe>.yaml``) supplies the defaults; CLI flags still override it. Unless ``bf16`` is
    set, it is turned off where the hardware lacks it (``trl_ext.recipe.common.supported_precision``)."""
    from trl_ext.recipe.common import supported_precision

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--config" not in argv and not any(a.startswith("--model_name_or_path") for a in argv):
        argv = ["--config", os.path.join(DEMO_CONFIG_DIR, f"{recipe}.yaml"), *argv]
    if "--config" in argv:
        from trl_ext.reliability.checks import check_config_keys

        check_config_keys(argv[argv.index("--config") + 1], [RLScriptArguments, preset_config, ModelConfig])
    parser = TrlParser((RLScriptArguments, preset_config, ModelConfig))
    return parser.parse_args_and_config(args=supported_precision(argv))


class MetricsFileCallback(TrainerCallback):
    """Appends every log dict (with its step) to ``output_dir/metrics.jsonl`` as training goes."""

    def __init__(self, path: str):
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or not state.is_world_process_zero:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": state.global_step, **logs}) + "\n")


def read_metrics(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def plot_curves(
    runs: dict[str, list[dict[str, Any]]], out_path: str | None = None, warm_start: float | None = None
) -> Any:
    """The training picture, from logged rows (``metrics.jsonl`` lines or ``trainer.state.log_history``), one colour
    per run: held-out accuracy over steps (large, the warm-start level as a dashed line), then reward, kept-group
    fraction (dynamic sampling; without it the share of groups with any signal, ``1 - frac_reward_zero_std``) with
    the rounds per step, clip fraction and entropy. Saves to ``out_path`` when given; returns the figure."""
    import matplotlib

    if out_path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(13, 5.2))
    grid = fig.add_gridspec(2, 4, width_ratios=[1.6, 1.6, 1, 1])
    accuracy_ax = fig.add_subplot(grid[:, :2])
    axes = [fig.add_subplot(grid[r, c]) for r, c in ((0, 2), (0, 3), (1, 2), (1, 3))]
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]

    def series(rows: list[dict], key: str, transform=lambda v: v) -> tuple[list, list]:
        points = [(r["step"], transform(r[key])) for r in rows if isinstance(r.get(key), int | float)]
        return ([p[0] for p in points], [p[1] for p in points]) if points else ([], [])

    rounds_ax = None
    for (name, rows), color in zip(runs.items(), colors, strict=False):
        label = name if len(runs) > 1 else None
        steps, values = series(rows, "held_out/accuracy")
        if warm_start is not None and steps and steps[0] != 0:
            steps, values = [0, *steps], [warm_start, *values]
        accuracy_ax.plot(steps, values, marker="o", markersize=3, color=color, label=name)
        axes[0].plot(*series(rows, "reward"), color=color, label=label)
        if any("dynamic_sampling/kept_group_frac" in r for r in rows):
            axes[1].plot(*series(rows, "dynamic_sampling/kept_group_frac"), color=color, label=label)
            rounds_ax = rounds_ax or axes[1].twinx()
            rounds_ax.plot(*series(rows, "dynamic_sampling/rounds"), color=color, linestyle=":", alpha=0.5)
        else:
            axes[1].plot(*series(rows, "frac_reward_zero_std", lambda v: 1 - v), color=color, label=label)
        axes[2].plot(*series(rows, "clip_ratio/region_mean"), color=color, label=label)
        axes[3].plot(*series(rows, "entropy"), color=color, label=label)
    if warm_start is not None:
        accuracy_ax.axhline(warm_start, color="gray", linestyle="--", linewidth=1)
        accuracy_ax.annotate(
            f"warm start {warm_start:.3f}",
            xy=(0, warm_start),
            xytext=(4, 4),
            textcoords="offset points",
            color="gray",
            fontsize=9,
        )
    accuracy_ax.set_title("held-out greedy accuracy")
    accuracy_ax.set_xlabel("optimizer step")
    accuracy_ax.grid(alpha=0.3)
    if len(runs) > 1:
        accuracy_ax.legend()
    titles = ["reward", "kept-group fraction", "clip fraction", "entropy"]
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title, fontsize=10)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[2:]:
        ax.set_xlabel("optimizer step", fontsize=9)
    if rounds_ax is not None:
        rounds_ax.tick_params(labelsize=8)
        rounds_ax.set_ylabel("rounds per step (dotted)", fontsize=8)
    fig.tight_layout()
    if out_path is not None:
        fig.savefig(out_path, dpi=90)
        plt.close(fig)
    return fig


def _resolve_checkpoint(value: str | None, output_dir: str) -> str | bool | None:
    if value == "latest":
        return True
    if value is not None and not os.path.isdir(value):
        raise FileNotFoundError(
            f"resume_from_checkpoint={value!r}: no such directory. Give a checkpoint-N folder "
            f"under {output_dir}, or 'latest'."
        )
    return value


def _describe_data(script_args: RLScriptArguments, train_dataset, eval_dataset) -> str:
    name = "built-in arithmetic demo" if script_args.dataset_name is None else script_args.dataset_name
    held_out = f"{len(eval_dataset)} held-out" if eval_dataset is not None else "no held-out split"
    return f"data {name} ({len(train_dataset)} train / {held_out})"


def run(
    script_args: RLScriptArguments, training_args: GRPOFamilyConfig, model_args: ModelConfig, recipe: str
) -> dict[str, Any]:
    """Train one GRPO-family run and report; returns the summary it prints and writes to ``summary.json``."""
    from trl_ext.console import format_duration, opening_line, precision_label, quiet_libraries, use_console
    from trl_ext.diagnostics.held_out import HeldOutEvaluation, held_out_accuracy
    from trl_ext.recipe.common import load_data, load_policy, reward_functions

    quiet_libraries()
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
        from trl_ext.reliability.checkpoints import check_fresh_output_dir

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

    trainer_class = trainer_class_for(training_args)
    world = training_args.world_size
    prompts = training_args.per_device_train_batch_size * world // training_args.num_generations
    is_main = training_args.process_index == 0
    if is_main:
        print(
            opening_line(
                recipe,
                [
                    f"{trainer_class.__name__} ({type(training_args).__name__})",
                    f"model {model_args.model_name_or_path or DEMO_MODEL}",
                    _describe_data(script_args, train_dataset, eval_dataset),
                    f"{training_args.max_steps} steps of {prompts} prompts x {training_args.num_generations} "
                    "completions",
                    precision_label(training_args),
                    f"outputs in {output_dir}",
                ],
            ),
            flush=True,
        )

    # Model and tokenizer: the demo's cached SFT warm start when no model is given.
    model, tokenizer, model_path = load_policy(model_args.model_name_or_path, model_args.dtype)

    # Held-out greedy accuracy: the first reward is the task reward (the demo: its own greedy_accuracy).
    task_reward = None if script_args.dataset_name is None else reward_funcs[0]

    def evaluate(policy, progress: bool | str = False) -> float | None:
        return held_out_accuracy(
            policy, tokenizer, eval_dataset, task_reward, training_args.max_completion_length, progress=progress
        )

    before = evaluate(model, progress="evaluation (before RL)" if is_main else False)
    if before is not None and is_main:
        print(
            f"[{recipe}] held-out greedy accuracy before RL: {before:.3f} ({len(eval_dataset)} problems)", flush=True
        )

    metrics_path = os.path.join(output_dir, "metrics.jsonl")
    if not resume and os.path.exists(metrics_path):
        os.replace(metrics_path, metrics_path + ".previous")  # keep the last run's log, never append to it
    trainer = trainer_class(
        model=model,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        callbacks=[MetricsFileCallback(metrics_path)],
    )
    use_console(trainer, f"{recipe} (RL)")
    held_out = None
    if before is not None and script_args.held_out_eval_steps != 0:
        held_out = HeldOutEvaluation(evaluate, every=script_args.held_out_eval_steps, start=before).attach(trainer)
    if script_args.health_monitor:
        from trl_ext.diagnostics.health import HealthMonitor

        HealthMonitor().attach(trainer)

    train_started = time.time()
    trainer.train(resume_from_checkpoint=resume)  # 'latest' = newest checkpoint in output_dir
    train_seconds = time.time() - train_started
    trainer.save_model(output_dir)
    if trainer.accelerator.is_main_process:
        tokenizer.save_pretrained(output_dir)

    final_step = trainer.state.global_step
    if held_out is not None and held_out.points and held_out.points[-1][0] == final_step:
        after = held_out.points[-1][1]  # evaluated at the last step, on the same weights
    else:
        after = evaluate(trainer.model, progress="evaluation (after RL)" if is_main else False)
    history = [h for h in trainer.state.log_history if "reward" in h]
    summary: dict[str, Any] = {
        "recipe": recipe,
        "trainer": type(trainer).__name__,
        "model": model_path,
        "precision": precision_label(training_args),
        "held_out_problems": len(eval_dataset) if before is not None else None,
        "accuracy_before": before,
        "accuracy_after": after,
        "accuracy_gain_points": round(100 * (after - before), 1) if before is not None else None,
        "held_out_eval_steps": held_out.every if held_out is not None else None,
        "held_out_eval_time_frac": round(held_out.cost_fraction(train_seconds), 4) if held_out else None,
        "mean_reward_first_log": history[0]["reward"] if history else None,
        "mean_reward_last_log": history[-1]["reward"] if history else None,
        "optimizer_steps": final_step,
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
        curves = os.path.join(output_dir, "curves.png")
        plot_curves({recipe: read_metrics(metrics_path)}, curves, warm_start=before)
        summary["outputs"] = {
            "folder": output_dir,
            "files": ["metrics.jsonl", "curves.png", "summary.json", "model.safetensors"],
        }
        summary["curves"] = curves
        with open(os.path.join(output_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        print(format_summary(summary, format_duration), flush=True)
    return summary


def format_summary(summary: dict[str, Any], format_duration) -> str:
    """The summary table (the same content as ``summary.json``)."""
    from trl_ext.console import summary_table

    before, after = summary["accuracy_before"], summary["accuracy_after"]
    rows: list[tuple[str, Any]] = []
    if before is not None:
        rows += [
            ("held-out greedy accuracy", f"{before:.3f} -> {after:.3f}  ({summary['held_out_problems']} problems)"),
            ("gain", f"{summary['accuracy_gain_points']:+.1f} points"),
        ]
    if summary["mean_reward_first_log"] is not None:
        rows.append(
            ("mean reward", f"{summary['mean_reward_first_log']:.3f} -> {summary['mean_reward_last_log']:.3f}")
        )
    rows += [
        ("optimizer steps", summary["optimizer_steps"]),
        ("wall time", format_duration(summary["wall_time_s"])),
    ]
    if summary.get("held_out_eval_steps"):
        rows.append(
            (
                "held-out evaluation",
                f"every {summary['held_out_eval_steps']} steps, "
                f"{100 * summary['held_out_eval_time_frac']:.1f}% of training time",
            )
        )
    if "dynamic_sampling_rounds_mean" in summary:
        generation, dropped = (
            summary["dynamic_sampling_generation_s_per_step"],
            summary["dynamic_sampling_dropped_s_per_step"],
        )
        rows += [
            ("dynamic sampling", f"{summary['dynamic_sampling_rounds_mean']:.2f} rounds/step"),
            ("kept-group fraction", f"{summary['dynamic_sampling_kept_group_frac_mean']:.2f}"),
            ("round limit hit", f"{summary['dynamic_sampling_limit_hit_frac']:.0%} of steps"),
            ("generation + scoring", f"{generation:.3f} s/step, {dropped:.3f} s of it on dropped groups"),
        ]
    outputs = summary["outputs"]
    rows.append(("outputs", f"{outputs['folder']}/: {', '.join(outputs['files'])}"))
    return summary_table(f"== {summary['recipe']} ({summary['trainer']}) ==", rows)
