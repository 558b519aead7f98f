"""What a recipe prints and writes about itself: the opening line, the summary table and ``summary.json``."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any

from trl_ext.console import (
    format_duration,
    generation_backend,
    opening_line,
    precision_label,
    quiet_libraries,
    summary_table,
)
from trl_ext.data import Layout, TaskData, held_out_label
from trl_ext.demo import cache_dir, warm_start_is_cached
from trl_ext.recipe.models import demo_warm_start_config
from trl_ext.reliability.checkpoints import list_checkpoints

SUMMARY_FILE = "summary.json"


def written_files(output_dir: str) -> list[str]:
    """What a run left in ``output_dir``, as the summary lists it: its files, sorted (``summary.json`` among them),
    then its ``checkpoint-N/`` folders in step order (``(incomplete)`` after one a killed save left half-written)."""
    if not os.path.isdir(output_dir):
        return []
    names = {n for n in os.listdir(output_dir) if os.path.isfile(os.path.join(output_dir, n))}
    checkpoints = [
        f"{os.path.basename(path)}/{'' if complete else ' (incomplete)'}"
        for _, path, complete in list_checkpoints(output_dir)
    ]
    return sorted(names | {SUMMARY_FILE}) + checkpoints


def report(
    recipe: str,
    output_dir: str,
    before: float | None,
    after: float | None,
    steps: int | None,
    started: float,
    metric: str = "held-out greedy accuracy",
    **extra: Any,
) -> dict:
    """Print the summary table (``metric`` before/after/gain, steps, wall time, outputs) and write ``summary.json``."""
    wall = round(time.time() - started, 1)
    result = {"recipe": recipe, "accuracy_before": before, "accuracy_after": after, **extra}
    if steps is not None:
        result["optimizer_steps"] = steps
    result["wall_time_s"] = wall
    measured = before is not None and after is not None
    rows = [
        (metric, f"{before:.3f} -> {after:.3f}" if measured else None),
        ("gain", f"{100 * (after - before):+.1f} points" if measured else None),
        ("optimizer steps", steps),
        ("wall time", format_duration(wall)),
        ("outputs", f"{output_dir}/: {', '.join(written_files(output_dir))}"),
    ]
    print(summary_table(f"== {recipe} ==", rows), flush=True)
    write_summary(output_dir, result)
    return result


def write_summary(output_dir: str, summary: dict[str, Any]) -> str:
    """The one report file of every recipe and of the pipeline: ``output_dir/summary.json``."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, SUMMARY_FILE)
    with open(path, "w") as f:
        json.dump(summary, f, indent=2, default=str)
    return path


def announce(
    recipe: str,
    trainer_name: str,
    script_args: Any,
    training_args: Any,
    model_args: Any,
    data: tuple,
    steps: str | None = None,
    layout: Layout | None = None,
    rewards: Sequence[str] | None = None,
    model: str | None = None,
) -> None:
    """The opening line: what runs, on what data and rewards, for how long, at what learning rate and precision.
    ``model``: what runs when no model is named (None: the demo model and its warm start)."""
    quiet_libraries()
    if getattr(training_args, "process_index", 0) != 0:
        return
    train_dataset, eval_dataset = data
    name = "built-in arithmetic demo" if script_args.dataset_name is None else script_args.dataset_name
    held_out = held_out_label(eval_dataset)
    if model is not None:
        default_model = model
    elif recipe == "sft":
        default_model = "demo model, random init"
    elif warm_start_is_cached(sft=demo_warm_start_config(getattr(script_args, "demo_warm_start_seed", None))):
        default_model = f"demo model + SFT warm start (cached in {cache_dir()})"
    else:
        default_model = f"demo model + SFT warm start (trained first, then cached in {cache_dir()})"
    max_steps = getattr(training_args, "max_steps", -1)
    parts = [
        trainer_name,
        f"model {model_args.model_name_or_path or default_model}",
        f"data {name} ({len(train_dataset)} train / {held_out})",
        layout.describe() if layout is not None and script_args.dataset_name is not None else None,
        f"reward {', '.join(rewards)}{'' if getattr(script_args, 'reward_funcs', None) else ' (fits the data)'}"
        if rewards
        else None,
        steps or (f"{max_steps} steps" if max_steps and max_steps > 0 else None),
        learning_rate_part(script_args, training_args),
        precision_label(training_args),
        f"generation {generation_backend(training_args)}" if hasattr(training_args, "use_vllm") else None,
        f"outputs in {training_args.output_dir}",
    ]
    print(opening_line(recipe, parts), flush=True)


def learning_rate_part(script_args: Any, training_args: Any) -> str | None:
    """``"lr 5e-05 (--learning_rate)"``: the value and who chose it (a flag, ``config YAML``, ``demo config``, else
    the preset's or the config class's default), the first thing to check when the policy does not move."""
    lr = getattr(training_args, "learning_rate", None)
    if not isinstance(lr, int | float):
        return None
    source = getattr(script_args, "given_sources", {}).get("learning_rate")
    if source is None:
        preset = getattr(script_args, "preset", None)
        source = f"{preset} preset default" if preset else f"{type(training_args).__name__} default"
    return f"lr {lr:g} ({source})"


def announce_eval(args: Any, data: TaskData, split: str, problems: int, models: Sequence[str], settings: Any) -> None:
    """The opening line of ``trl-ext eval``: the models, the data and its layout, the reward, the sampling."""
    quiet_libraries()
    name = "built-in arithmetic demo" if args.dataset_name is None else args.dataset_name
    sampling = f"K={settings.num_samples} samples at temperature {settings.temperature}, top-p {settings.top_p}"
    parts = [
        f"{len(models)} model{'s' if len(models) > 1 else ''}: {', '.join(models)}",
        f"data {name} ({problems} problems of {split})",
        data.describe() if args.dataset_name is not None else None,
        f"reward {', '.join(args.reward_funcs) if args.reward_funcs else ', '.join(data.layout.task_rewards)}",
        sampling + (" + greedy" if settings.greedy else ""),
        f"up to {settings.max_new_tokens} new tokens",
        "vLLM" if settings.use_vllm else "transformers",
        f"outputs in {args.output_dir}",
    ]
    print(opening_line("eval", parts), flush=True)
