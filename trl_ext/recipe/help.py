"""A recipe's ``--help``: the flags a user reaches for, grouped, in under 250 lines (model and output, the script
arguments, the preset's own fields, the most-used TRL fields in a sentence each); ``--help-all`` prints every field."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import re
import shutil
from collections.abc import Sequence

HELP_ALL = "--help-all"
MAX_WIDTH = 120
MODEL_FIELDS = (  # the first section, with where the run writes: the first screen holds model, output, data, rewards
    "model_name_or_path",
    "output_dir",
    "dtype",
    "use_peft",
    "lora_r",
    "lora_alpha",
    "lora_target_modules",
    "load_in_4bit",
)
MOST_USED: dict[str, tuple[str, ...]] = {  # heading -> fields, shown when the recipe's parser has them
    "training": (
        "max_steps",
        "num_train_epochs",
        "learning_rate",
        "lr_scheduler_type",
        "warmup_ratio",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "max_grad_norm",
        "seed",
    ),
    "generation and loss": (
        "num_generations",
        "max_prompt_length",
        "max_completion_length",
        "max_length",
        "temperature",
        "beta",
        "loss_type",
        "use_vllm",
        "vllm_mode",
    ),
    "logging and checkpoints": (
        "logging_steps",
        "save_strategy",
        "save_steps",
        "report_to",
        "run_name",
        "resume_from_checkpoint",
        "push_to_hub",
    ),
    "hardware and precision": ("bf16", "use_cpu", "gradient_checkpointing"),
}


def wants_help(argv: Sequence[str]) -> str | None:
    """``"all"`` for ``--help-all``, ``"short"`` for ``-h`` / ``--help``, else None."""
    if HELP_ALL in argv:
        return "all"
    return "short" if "-h" in argv or "--help" in argv else None


def own_fields(config_class: type) -> list[str]:
    """The fields trl-ext's classes in ``config_class``'s ancestry define, most derived first; [] for a TRL class."""
    names: list[str] = []
    for cls in config_class.__mro__:
        if not cls.__module__.startswith("trl_ext"):
            break
        names += [name for name in cls.__dict__.get("__annotations__", {}) if name not in names]
    return names


def first_sentence(text: str) -> str:
    """The first sentence of a library field's help (the rest is in ``--help-all``)."""
    text = " ".join(text.split())
    match = re.search(r"(?<=[a-z0-9)`'\"])\.\s", text)
    return text[: match.start() + 1] if match else text


def _short_action(action: argparse.Action, full_text: bool) -> argparse.Action:
    """``action`` as the short help shows it: one spelling, a typed metavar, its default, its help's first sentence."""
    shown = copy.copy(action)
    shown.option_strings = action.option_strings[:1]
    if action.nargs != 0:
        kind = getattr(action.type, "__name__", "value")
        names = {"int": "INT", "float": "FLOAT", "str": "STR", "string_to_bool": "BOOL"}
        shown.metavar = names.get(kind, "VALUE")
        if action.choices:
            shown.metavar = "{" + ",".join(str(c) for c in action.choices) + "}"
            shown.choices = None
    text = action.help or ""
    text = text if full_text else first_sentence(text)
    shown.help = text if action.default is None else f"{text} (default: %(default)s)"
    return shown


def short_help(
    parser: argparse.ArgumentParser, dataclass_types: Sequence[type], prog: str, demo_config: str | None = None
) -> str:
    """The short ``--help`` (script arguments first); ``demo_config``: the YAML read with no model and no config."""
    actions = {  # field -> its --field action (a bool field defaulting to True also has a --no_field one)
        action.dest: action
        for action in parser._actions
        if action.option_strings and action.option_strings[0] == f"--{action.dest}"
    }
    shown: set[str] = set()
    sections: list[tuple[str, list[argparse.Action]]] = []

    def section(title: str, names: Sequence[str], full_text: Sequence[str] = ()) -> None:
        """The fields ``names`` not shown yet (deprecated ones never); those in ``full_text`` with their whole help."""
        picked = [n for n in names if n in actions and n not in shown]
        shown.update(picked)
        picked = [n for n in picked if not (actions[n].help or "").startswith("Deprecated")]
        if picked:
            sections.append((title, [_short_action(actions[n], n in full_text) for n in picked]))

    script, *configs = dataclass_types
    script_fields = [f.name for f in dataclasses.fields(script)]
    section("model and output", [name for name in MODEL_FIELDS if name not in script_fields])
    section(f"recipe: data, rewards, run ({script.__name__})", script_fields, script_fields)
    for config in configs:  # the preset class's own defaults in full (the paper's values), its family's briefly
        preset_fields = list(config.__dict__.get("__annotations__", {}))
        section(f"preset: {config.__name__} (trl-ext's own fields and defaults)", own_fields(config), preset_fields)
    for title, names in MOST_USED.items():
        section(title, names)

    width = min(shutil.get_terminal_size().columns, MAX_WIDTH) - 2
    formatter = argparse.HelpFormatter(prog, max_help_position=34, width=width)
    formatter.add_usage(f"{prog} [--config FILE.yaml] [--FLAG VALUE ...]", [], [], prefix="usage: ")
    for title, section_actions in sections:
        formatter.start_section(title)
        formatter.add_arguments(section_actions)
        formatter.end_section()
    demo = f" With no --model_name_or_path and no --config, {demo_config} sets some of them." if demo_config else ""
    formatter.add_text(
        f"The most-used {len(shown)} flags of {len(actions)}: {HELP_ALL} lists them all. --config FILE.yaml takes "
        f"the same names as keys (flags override it).{demo}"
    )
    return formatter.format_help()
