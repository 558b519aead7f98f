"""The one command-line parser of every recipe (``parse``): ``TrlParser`` over the recipe's dataclasses, with checked
flags and YAML keys, the demo YAML by default, the short ``--help`` and ``bf16`` / ``use_cpu`` fitted to the hardware."""

from __future__ import annotations

import difflib
import os
import re
import sys
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

import torch
import yaml
from accelerate.utils import is_mps_available, is_xpu_available
from transformers.utils import is_torch_bf16_gpu_available
from trl import TrlParser

from trl_ext.errors import MissingFileError, UserError, as_user_errors, missing_path_message
from trl_ext.grpo.configs import RENAMED_FIELDS
from trl_ext.recipe.help import HELP_ALL, short_help, wants_help
from trl_ext.recipe.paths import DEMO_CONFIG_DIR, demo_config_path, documented_name, resolve_config
from trl_ext.reliability.checks import check_config_keys, check_report_to

#: The recipes' own defaults where they differ from the config class's (shown by --help; a flag or YAML key overrides):
#: a recipe run stops after 3 optimizer steps in which no task reward scored anything (the trainers, like TRL's, warn
#: and train on), since a recipe's reward that scores nothing is almost always the wrong reward for the data.
RECIPE_DEFAULTS: dict[str, object] = {"max_unscorable_rounds": 3}


class RecipeParser(TrlParser):
    """``TrlParser`` whose usage errors (e.g. ``--max_steps ten``) print one line, not a usage line of every field."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}. (--help lists the flags.)", file=sys.stderr, flush=True)
        raise SystemExit(2)


def make_parser(dataclass_types: Sequence[type]) -> RecipeParser:
    """``RecipeParser`` over ``dataclass_types``: no abbreviations (``--learning_rat`` is not ``--learning_rate``),
    and a bare ``%`` in any help text escaped, since argparse formats help with ``%`` (``--help-all`` would fail); the
    fields of ``RECIPE_DEFAULTS`` default to the recipes' values."""
    parser = RecipeParser(tuple(dataclass_types), allow_abbrev=False)
    for action in parser._actions:
        if isinstance(action.help, str):
            action.help = re.sub(r"%(?!\()", "%%", action.help)
        if action.dest in RECIPE_DEFAULTS and action.option_strings:
            action.default = RECIPE_DEFAULTS[action.dest]
            action.help = f"{action.help or ''} The recipes set {action.default}.".strip()
    return parser


def check_flags(parser: TrlParser, argv: Sequence[str]) -> None:
    """An unknown ``--flag`` in ``argv`` stops here (exit 2) naming the closest one, not with a traceback."""
    known = {option for action in parser._actions for option in action.option_strings} | {"--config", HELP_ALL}
    for arg in argv:
        if not arg.startswith("--"):
            continue
        flag = arg.split("=", 1)[0]
        if flag not in known:
            close = difflib.get_close_matches(flag, sorted(known), n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]}?" if close else ""
            print(f"{parser.prog}: error: unknown flag {flag}.{hint} (--help lists the flags.)", file=sys.stderr)
            raise SystemExit(2)


def config_arg(argv: Sequence[str]) -> str | None:
    """The value of ``--config`` in ``argv`` (None without one)."""
    index = argv.index("--config") + 1 if "--config" in argv else len(argv)
    return argv[index] if index < len(argv) else None


def config_yaml(argv: Sequence[str]) -> dict[str, Any]:
    """The ``--config`` YAML's mapping ({} without one, or one missing or not a mapping: reported elsewhere)."""
    path = resolve_config(config_arg(argv) or "")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        config = yaml.safe_load(f) or {}
    return config if isinstance(config, dict) else {}


def given_sources(argv: Sequence[str]) -> dict[str, str]:
    """The fields the user set (``--name`` flags and the keys of the ``--config`` YAML) and where, for the opening
    line: ``"--name"`` (a flag wins over the YAML), ``"demo config"`` (the demo YAML) or ``"config YAML"``."""
    config = resolve_config(config_arg(argv) or "")
    demo = os.path.realpath(config).startswith(os.path.realpath(DEMO_CONFIG_DIR) + os.sep)
    sources = dict.fromkeys(config_yaml(argv), "demo config" if demo else "config YAML")
    for arg in argv:
        if arg.startswith("--") and arg != "--config":
            name = arg[2:].split("=", 1)[0]
            sources[name] = f"--{name}"
    return sources


def recipe_prog(recipe: str | None) -> str:
    """``trl-ext <recipe>``: how help and errors name the command (the script's name when ``recipe`` is None)."""
    return f"trl-ext {recipe or os.path.splitext(os.path.basename(sys.argv[0]))[0]}"


def print_help(parser: TrlParser, dataclass_types: Sequence[type], recipe: str | None, argv: Sequence[str]) -> None:
    """``--help``: the short, grouped help (``trl_ext.recipe.help``); ``--help-all``: every field, as TRL prints it."""
    if wants_help(argv) == "all":
        parser.print_help()
    else:
        demo = documented_name(demo_config_path(recipe)) if recipe else None
        print(short_help(parser, dataclass_types, parser.prog, demo), end="")


def renamed_flags(argv: list[str], dataclass_types: Sequence[type]) -> list[str]:
    """``argv`` with each deprecated flag (``RENAMED_FIELDS``) under its new name, with a ``FutureWarning``, so that it
    overrides the YAML like any flag (the config maps a deprecated YAML key itself)."""
    fields = {name for t in dataclass_types for name in getattr(t, "__dataclass_fields__", {})}
    out = []
    for arg in argv:
        flag, sep, value = arg.partition("=")
        new = RENAMED_FIELDS.get(flag[2:]) if flag.startswith("--") else None
        if new is not None and new in fields:
            warnings.warn(
                f"{flag} is deprecated: use --{new} (same value, same meaning).", FutureWarning, stacklevel=3
            )
            arg = f"--{new}{sep}{value}"
        out.append(arg)
    return out


def check_config_file(argv: list[str]) -> None:
    """``--config`` must name an existing file (a packaged name is replaced in ``argv`` by its file)."""
    index = argv.index("--config")
    if index + 1 >= len(argv):
        raise UserError("--config needs a YAML file: --config recipes/configs/<model>/<algo>/config_<variant>.yaml.")
    argv[index + 1] = resolve_config(argv[index + 1])
    if not os.path.isfile(argv[index + 1]):
        raise MissingFileError(missing_path_message(argv[index + 1], "--config"))


def parse(dataclass_types: Sequence[type], recipe: str | None, argv: list[str] | None = None) -> tuple:
    """The parsed ``dataclass_types`` of recipe ``recipe``: with neither ``--config`` nor ``--model_name_or_path``
    the demo YAML supplies the values, flags override either way. Unknown YAML keys fail naming the closest field
    (``TrlParser`` would ignore a typo); a missing file or a refused config value is a ``UserError``. The script
    arguments get ``given_fields`` and ``given_sources`` (flag or YAML)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = make_parser(dataclass_types)
    parser.prog = recipe_prog(recipe)  # errors and help say `trl-ext dapo`, not `dapo.py`
    if wants_help(argv):
        print_help(parser, dataclass_types, recipe, argv)
        raise SystemExit(0)
    check_flags(parser, argv)
    argv = renamed_flags(argv, dataclass_types)
    if recipe and "--config" not in argv and not any(a.startswith("--model_name_or_path") for a in argv):
        argv = ["--config", demo_config_path(recipe), *argv]
    with as_user_errors(ValueError):  # a config value refused at construction: the user's to fix, not a bug
        if "--config" in argv:
            check_config_file(argv)
            check_config_keys(argv[argv.index("--config") + 1], list(dataclass_types))
        trains = any("bf16" in getattr(t, "__dataclass_fields__", {}) for t in dataclass_types)
        parsed = parser.parse_args_and_config(args=supported_precision(argv) if trains else argv)
        for values in parsed:
            if hasattr(values, "report_to"):
                check_report_to(values.report_to)
    parsed[0].given_sources = given_sources(argv)
    parsed[0].given_fields = set(parsed[0].given_sources)
    return parsed


def _setting(argv: list[str], name: str) -> tuple[bool, Any]:
    """``(given, value)`` of a boolean flag: ``--name``, ``--name X``, ``--name=X``, else the ``--config`` YAML."""
    flag = f"--{name}"
    for i, arg in enumerate(argv):
        if arg == flag:
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else "true"
            return True, str(value).lower() in ("true", "1", "yes")
        if arg.startswith(flag + "="):
            return True, arg.split("=", 1)[1].lower() in ("true", "1", "yes")
    config = config_yaml(argv)
    if config.get(name) is not None:
        return True, bool(config[name])
    return False, None


def supported_precision(argv: list[str]) -> list[str]:
    """``argv`` fitted to the hardware, unless set: ``--bf16 false`` without a bf16 GPU (transformers refuses the
    default), ``--use_cpu true`` without an accelerator; ``bf16`` there without ``use_cpu`` fails, naming the fix."""
    if is_torch_bf16_gpu_available():
        return argv
    argv = list(argv)
    given, bf16 = _setting(argv, "bf16")
    if given and bf16 and not _setting(argv, "use_cpu")[1]:
        raise UserError(
            "bf16=True, but this machine has no GPU that supports bf16. Drop --bf16 (and bf16 from the config) to "
            "let the recipe use fp32 here, or pass --use_cpu true to train with bf16 autocast on the CPU."
        )
    if not given:
        argv += ["--bf16", "false"]
    accelerator = torch.cuda.is_available() or is_mps_available() or is_xpu_available()
    if not accelerator and not _setting(argv, "use_cpu")[0]:
        argv += ["--use_cpu", "true"]
    return argv
