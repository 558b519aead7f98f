"""The GRPO-family parts of the recipes: ``parse`` (any preset of the table), the output folder and ``metrics.jsonl``,
the opening line, the monitors around TRL's trainer, and the closing report (``summary.json``, ``curves.png``)."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from datasets import Dataset
from transformers import TrainerCallback
from trl import ModelConfig
from trl.trainer.utils import get_callable_name

from trl_ext.console import format_duration, generation_backend, precision_label, summary_table, use_console
from trl_ext.data import TaskData
from trl_ext.diagnostics.health import HealthMonitor, HealthThresholds
from trl_ext.diagnostics.held_out import HELD_OUT_KEY, HeldOutEvaluation
from trl_ext.errors import UserError, as_user_errors
from trl_ext.grpo.configs import GRPOFamilyConfig
from trl_ext.grpo.presets import PRESETS, lookup
from trl_ext.recipe import parsing, report
from trl_ext.recipe.args import RLScriptArguments
from trl_ext.recipe.paths import demo_config_path
from trl_ext.reliability import checks
from trl_ext.reliability.checkpoints import (
    check_fresh_output_dir,
    last_complete_checkpoint,
    recover_interrupted_publish,
)
from trl_ext.reliability.zero_reward import ZeroRewardWatch
from trl_ext.reward_model import is_reward_model, reward_model_name

logger = logging.getLogger(__name__)


def _preset_name(argv: list[str]) -> str | None:
    """``--preset NAME`` / ``--preset=NAME`` on the command line, else ``preset:`` in the ``--config`` YAML."""
    for i, arg in enumerate(argv):
        if arg == "--preset" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--preset="):
            return arg.split("=", 1)[1]
    preset = parsing.config_yaml(argv).get("preset")
    return str(preset) if preset else None


def _demo_preset(name: str) -> str:
    """The preset whose demo YAML ``name`` uses: its own, else the first row's with the same config class."""
    if os.path.exists(demo_config_path(name)):
        return name
    config = PRESETS[name].config
    return next((other for other, row in PRESETS.items() if row.config is config), name)


def parse(
    preset: str | type[GRPOFamilyConfig], recipe: str | None = None, argv: list[str] | None = None
) -> tuple[RLScriptArguments, GRPOFamilyConfig, ModelConfig]:
    """``(script_args, training_args, model_args)`` of a GRPO-family run. ``preset``: the recipe's own, by name or
    config class (``recipe`` then names its demo YAML); ``--preset NAME`` or a YAML ``preset:`` picks another row of
    the table, whose fixed fields (``gspo_token``) apply unless given."""
    argv = list(sys.argv[1:] if argv is None else argv)
    name = _preset_name(argv)
    if name is None and isinstance(preset, str):
        name = preset
    row = None
    if name is not None:
        with as_user_errors(ValueError):
            row = lookup(name)  # an unknown name fails here, listing the known ones
        name = name.lower().replace("-", "_")
        # A row's fixed fields become flags unless given: the YAML cannot undo them, a flag can
        for key, value in row.overrides.items():
            if f"--{key}" not in argv:
                argv += [f"--{key}", str(value)]
    config_class = row.config if row is not None else preset
    recipe = recipe or _demo_preset(name)
    script_args, training_args, model_args = parsing.parse(
        (RLScriptArguments, config_class, ModelConfig), recipe, argv
    )
    script_args.preset = name or recipe
    return script_args, training_args, model_args


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
    """The training picture from logged rows (``metrics.jsonl`` or ``log_history``), one colour per run: held-out
    accuracy (warm start dashed), reward, kept-group fraction and rounds per step, clip fraction, entropy."""
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
        return [p[0] for p in points], [p[1] for p in points]

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


def resolve_checkpoint(value: str | None, output_dir: str) -> str | bool | None:
    if value == "latest":
        return True
    if value is not None and not os.path.isdir(value):
        raise FileNotFoundError(
            f"resume_from_checkpoint={value!r}: no such directory. Give a checkpoint-N folder "
            f"under {output_dir}, or 'latest'."
        )
    return value


#: What a run leaves in its output_dir besides checkpoints: another run there would write over it.
RUN_OUTPUTS = ("summary.json", "metrics.jsonl", "config.json", "adapter_config.json")


def prepare_output_dir(
    output_dir: str, resume: str | bool | None, is_main: bool = True, overwrite: bool = False
) -> str:
    """Create ``output_dir``, return its ``metrics.jsonl`` path (resuming continues it). A fresh run stops at another
    run's checkpoints or, unless ``overwrite``, outputs (``RUN_OUTPUTS``; old ``metrics.jsonl``: ``.previous``)."""
    os.makedirs(output_dir, exist_ok=True)
    metrics_path = os.path.join(output_dir, "metrics.jsonl")
    if not resume:
        check_fresh_output_dir(output_dir)
        found = [name for name in RUN_OUTPUTS if os.path.exists(os.path.join(output_dir, name))]
        if found and not overwrite:
            raise UserError(
                f"output_dir={output_dir!r} holds the output of an earlier run ({', '.join(found)}), which this run "
                "would write over. Give another --output_dir, or pass --overwrite_output_dir true to write over it."
            )
        if is_main and os.path.exists(metrics_path):
            os.replace(metrics_path, metrics_path + ".previous")
    elif is_main:
        recover_interrupted_publish(output_dir)  # a checkpoint a kill left set aside counts as the newest
        checkpoint = last_complete_checkpoint(output_dir) if resume is True else str(resume)
        if checkpoint is not None:
            continue_record(metrics_path, checkpoint)
    return metrics_path


def checkpoint_step(checkpoint: str) -> int | None:
    """The step a checkpoint was written at: its ``trainer_state.json``'s ``global_step``, else its name's N."""
    state = os.path.join(checkpoint, "trainer_state.json")
    if os.path.isfile(state):
        with open(state) as f:
            return int(json.load(f)["global_step"])
    match = re.search(r"checkpoint-(\d+)$", os.path.normpath(checkpoint))
    return int(match.group(1)) if match else None


def continue_record(metrics_path: str, checkpoint: str) -> str | None:
    """``metrics.jsonl`` continued where ``checkpoint`` left off: rows logged after its step, which the resumed run
    logs again, move to ``metrics.jsonl.after-checkpoint-<step>`` with a warning. Returns that path, or None."""
    step = checkpoint_step(checkpoint)
    if step is None or not os.path.exists(metrics_path):
        return None
    with open(metrics_path) as f:
        rows = [(json.loads(line).get("step", 0), line) for line in f if line.strip()]
    past = [line for row_step, line in rows if row_step > step]
    if not past:
        return None
    aside = f"{metrics_path}.after-checkpoint-{step}"
    with open(aside, "a") as f:
        f.writelines(past)
    tmp = metrics_path + ".tmp"
    with open(tmp, "w") as f:
        f.writelines(line for row_step, line in rows if row_step <= step)
    os.replace(tmp, metrics_path)
    steps = sorted({row_step for row_step, _ in rows if row_step > step})
    logger.warning(
        f"Resuming from {os.path.basename(os.path.normpath(checkpoint))}: {len(past)} row(s) of metrics.jsonl logged "
        f"after it (steps {steps[0]}-{steps[-1]}) moved to {aside}; the resumed run logs those steps again, once."
    )
    return aside


def steps_line(training_args: GRPOFamilyConfig) -> str:
    """The real batch: ``"<N> steps of <P> prompts x <G> completions"``, or the rollout when a step splits groups."""
    group = training_args.num_generations
    per_step = (
        training_args.per_device_train_batch_size
        * training_args.world_size
        * training_args.gradient_accumulation_steps
    )
    if training_args.max_steps > 0:
        steps = f"{training_args.max_steps} steps"
    else:
        steps = f"{training_args.num_train_epochs:g} epochs, steps"
    if per_step % group == 0:
        return f"{steps} of {per_step // group} prompts x {group} completions"
    rollout = training_args.generation_batch_size or per_step * training_args.steps_per_generation
    return (
        f"{steps} of {per_step} completions (rollouts of {rollout // group} prompts x {group} completions, "
        f"{training_args.steps_per_generation} steps each)"
    )


def announce(
    recipe: str,
    trainer_name: str,
    script_args: RLScriptArguments,
    training_args: GRPOFamilyConfig,
    model_args: ModelConfig,
    data: TaskData,
    rewards: list[str],
    model: str | None = None,
) -> None:
    """The opening line of a GRPO-family run (``model``: what runs when no model is named; None: the demo's); under it,
    when the user's own model runs at the preset's learning rate, a hint: the papers' setting (7B+ models, thousands of
    steps) can leave a small model's policy where it started."""
    report.announce(
        recipe,
        trainer_name,
        script_args,
        training_args,
        model_args,
        (data.train, data.held_out),
        steps_line(training_args),
        layout=data.layout,
        rewards=rewards,
        model=model,
    )
    chosen = "learning_rate" in getattr(script_args, "given_fields", set())
    if model_args.model_name_or_path is not None and not chosen and training_args.process_index == 0:
        print(
            f"[{recipe}] lr {training_args.learning_rate:g} is the preset's default, the papers' setting for 7B+ "
            "models trained for thousands of steps; on a smaller model or a shorter run it may barely move the "
            "policy: choose one with --learning_rate.",
            flush=True,
        )


def fit_to_model(
    recipe: str, training_args: GRPOFamilyConfig, model: Any, tokenizer: Any, train_dataset: Dataset, script_args: Any
) -> str | None:
    """Unless set, ``max_completion_length`` cut to the model's context minus the longest prompt (DAPO's overlong
    buffer to 20% of it unless set); says so on the main process and returns the line (None: nothing changed)."""
    given = getattr(script_args, "given_fields", set())
    context = checks.context_length(getattr(model, "config", None))
    if context is None or "max_completion_length" in given or training_args.max_completion_length is None:
        return None
    longest = checks.longest_prompt(train_dataset, tokenizer)
    room = context - (longest[0] if longest else 0)
    old = training_args.max_completion_length
    if room <= 0 or old <= room:
        return None  # nothing to fit, or a prompt fills the context: the trainer's check says so
    training_args.max_completion_length = room
    if getattr(training_args, "overlong_buffer_len", None) is not None and "overlong_buffer_len" not in given:
        training_args.overlong_buffer_len = max(1, int(0.2 * room))
    line = (
        f"[{recipe}] max_completion_length {old} -> {room}: the model's context is {context} tokens and the longest "
        f"prompt {context - room} (set --max_completion_length to choose)"
    )
    if training_args.process_index == 0:
        print(line, flush=True)
    return line


def attach_monitors(
    trainer: Any,
    recipe: str,
    script_args: RLScriptArguments,
    evaluate: Callable,
    before: float | None,
    reward_funcs: Sequence[Any] = (),
) -> HeldOutEvaluation | None:
    """The console, held-out evaluation during RL and the health monitor (its warnings go to ``summarize``); a reward
    model among ``reward_funcs`` is watched against the gold figures (held-out accuracy, the first rule reward)."""
    evaluates = before is not None and script_args.held_out_eval_steps != 0
    use_console(trainer, f"{recipe} (RL)", held_out=evaluates)
    if script_args.health_monitor:
        models = [f"rewards/{reward_model_name(f)}/mean" for f in reward_funcs if is_reward_model(f)]
        rules = [f"rewards/{get_callable_name(f)}/mean" for f in reward_funcs if not is_reward_model(f)]
        thresholds = HealthThresholds(proxy_metrics=models or None, gold_metrics=[HELD_OUT_KEY, *rules[:1]])
        HealthMonitor(thresholds, summary_at_end=False).attach(trainer)
    held_out = None
    if evaluates:
        # attached last, so first: its held_out/accuracy is in the log before the health monitor reads it
        held_out = HeldOutEvaluation(evaluate, every=script_args.held_out_eval_steps, start=before).attach(trainer)
    return held_out


def accuracy_after(trainer: Any, evaluate: Callable, held_out: HeldOutEvaluation | None) -> float | None:
    """Held-out accuracy after RL; reused when the last in-training evaluation was at the final step (same weights)."""
    if held_out is not None and held_out.points and held_out.points[-1][0] == trainer.state.global_step:
        return held_out.points[-1][1]
    return evaluate(trainer.model, "after RL" if trainer.accelerator.is_main_process else False)


def health_warnings(trainer: Any) -> list[dict[str, Any]] | None:
    """The run's warnings, one entry per kind: the health monitor's (``HealthMonitor.warnings_by_kind``), then the
    reward watches' (a task reward that scored 0 everywhere in the first rounds, rewards that returned None); None
    without a monitor."""
    monitor = next((cb for cb in trainer.callback_handler.callbacks if isinstance(cb, HealthMonitor)), None)
    if monitor is None:
        return None
    warnings = monitor.warnings_by_kind()
    for watch in _zero_reward_watches(getattr(trainer, "reward_funcs", None) or []):
        if watch.warned:
            warnings.append({"kind": "zero_reward", "count": 1, "step": None, "message": watch.message()})
    unscorable = getattr(trainer, "unscorable_watch", None)
    if unscorable is not None and unscorable.warned:
        message = (
            "reward functions returned None/NaN on training rounds (the first warning above names them); "
            "rewards/<name>/none_frac in metrics.jsonl logs every round."
        )
        warnings.append({"kind": "unscorable_rewards", "count": 1, "step": None, "message": message})
    return warnings


def _zero_reward_watches(funcs: Sequence[Any]) -> list[ZeroRewardWatch]:
    """The ``ZeroRewardWatch`` among ``funcs``, found through the wrappers that keep the function as ``.func``."""
    found = []
    for func in funcs:
        while func is not None and not isinstance(func, ZeroRewardWatch):
            func = getattr(func, "func", None)
        if func is not None:
            found.append(func)
    return found


def summarize(
    recipe: str,
    trainer: Any,
    model_path: str,
    eval_dataset: Dataset | None,
    before: float | None,
    after: float | None,
    held_out: HeldOutEvaluation | None,
    started: float,
    train_seconds: float,
) -> dict[str, Any]:
    """The run's summary; on the main process also ``summary.json``, ``curves.png`` and the printed table."""
    training_args, output_dir = trainer.args, trainer.args.output_dir
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
        "optimizer_steps": trainer.state.global_step,
        "wall_time_s": round(time.time() - started, 1),
        "health_warnings": health_warnings(trainer),
    }
    ds_logs = [h for h in trainer.state.log_history if "dynamic_sampling/rounds" in h]
    summary["generation"] = {"backend": generation_backend(training_args), "s_per_step": None, "share_of_step": None}
    if ds_logs:
        # Generation and scoring are timed by dynamic sampling, once per rollout, which feeds steps_per_generation x
        # num_iterations optimizer steps; a step's time is the training time less held-out evaluation, per step.
        per_rollout = training_args.steps_per_generation * training_args.num_iterations
        step_s = train_seconds * (1 - (summary["held_out_eval_time_frac"] or 0)) / max(trainer.state.global_step, 1)
        generation_s = sum(h["dynamic_sampling/generation_time"] for h in ds_logs) / len(ds_logs) / per_rollout
        summary["generation"].update(
            s_per_step=round(generation_s, 4), share_of_step=round(min(generation_s / step_s, 1.0), 3)
        )
        mean = lambda key: sum(h[key] for h in ds_logs) / len(ds_logs)  # noqa: E731
        summary.update(
            {
                "dynamic_sampling_rounds_mean": round(mean("dynamic_sampling/rounds"), 3),
                "dynamic_sampling_kept_group_frac_mean": round(mean("dynamic_sampling/kept_group_frac"), 3),
                "dynamic_sampling_limit_hit_frac": round(mean("dynamic_sampling/limit_hit"), 3),
                "dynamic_sampling_dropped_s_per_step": round(mean("dynamic_sampling/dropped_time") / per_rollout, 4),
            }
        )
    if trainer.accelerator.is_main_process:
        curves = os.path.join(output_dir, "curves.png")
        plot_curves({recipe: read_metrics(os.path.join(output_dir, "metrics.jsonl"))}, curves, warm_start=before)
        summary["outputs"] = {"folder": output_dir, "files": report.written_files(output_dir)}
        summary["curves"] = curves
        report.write_summary(output_dir, summary)
        print(format_summary(summary), flush=True)
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    """The summary table (the same content as ``summary.json``)."""
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
    generation = summary["generation"]
    if generation["s_per_step"] is None:
        rows.append(("generation", f"{generation['backend']} (timed when dynamic sampling is on)"))
    else:
        rows.append(
            (
                "generation + scoring",
                f"{generation['backend']}: {generation['s_per_step']:.3f} s/step, {generation['share_of_step']:.0%} "
                f"of the step; {summary['dynamic_sampling_dropped_s_per_step']:.3f} s on dropped groups",
            )
        )
    if "dynamic_sampling_rounds_mean" in summary:
        rows += [
            ("dynamic sampling", f"{summary['dynamic_sampling_rounds_mean']:.2f} rounds/step"),
            ("kept-group fraction", f"{summary['dynamic_sampling_kept_group_frac_mean']:.2f}"),
            ("round limit hit", f"{summary['dynamic_sampling_limit_hit_frac']:.0%} of steps"),
        ]
    warnings = summary.get("health_warnings")
    if warnings is not None:
        rows.append(("health", health_row(warnings)))
    outputs = summary["outputs"]
    rows.append(("outputs", f"{outputs['folder']}/: {', '.join(outputs['files'])}"))
    table = summary_table(f"== {summary['recipe']} ({summary['trainer']}) ==", rows)
    return "\n".join([table, *health_block(warnings or [])])


def health_row(warnings: Sequence[dict[str, Any]]) -> str:
    """``"no warnings"`` or ``"3 warnings: reward_stall x3 (first at step 240)"``."""
    if not warnings:
        return "no warnings"
    total = sum(w["count"] for w in warnings)
    kinds = ", ".join(f"{w['kind']} x{w['count']} ({_when(w['step'])})" for w in warnings)
    return f"{total} warning{'s' if total > 1 else ''}: {kinds}"


def _when(step: int | None) -> str:
    """``first at step 240``; a reward watch's warning has no step (it fires in the first generation rounds)."""
    return "in the first rounds" if step is None else f"first at step {step}"


def health_block(warnings: Sequence[dict[str, Any]]) -> list[str]:
    """Each kind of health warning once after the table, with its fix: mid-run advice scrolls away in a long run."""
    if not warnings:
        return []
    return ["health warnings (the first of each kind, with what to do):"] + [
        f"  {w['kind']} {_when(w['step']).removeprefix('first ')}: {w['message']}" for w in warnings
    ]
