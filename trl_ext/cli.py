"""``trl-ext <command> [flags]``: the recipes from one console script, in the spirit of TRL's ``trl grpo ...``.

    trl-ext dapo                                   # == python recipes/dapo.py (the demo on CPU)
    trl-ext grpo --preset dr_grpo --max_steps 50   # any preset of the table by name
    trl-ext gspo_token                             # a preset name alone runs the grpo recipe with that preset
    trl-ext sft | dpo | ppo | reward | pipeline    # the other recipes, same flags as their files
    trl-ext eval --models <model> <model> ...      # pass@1, avg@k, pass@k, maj@k side by side
    trl-ext probe --config <run YAML>              # the pre-flight probe (trl_ext.scripts.probe)

A command runs the ``cli`` of the recipe module ``trl_ext.scripts.<command>``, so every flag and ``--config`` YAML
works the same way, from any directory and from a wheel. ``trl-ext --help`` imports nothing heavy (no torch).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from trl_ext.errors import reported_user_errors
from trl_ext.recipe.paths import SCRIPTS_PACKAGE, script_path

RECIPES = ("grpo", "dapo", "gspo", "dr_grpo", "sft", "dpo", "ppo", "reward", "pipeline", "eval")
# trl_ext.grpo.presets.PRESETS's names (it imports torch), for an instant `trl-ext --help`; test_cli keeps them equal
PRESET_NAMES = ("dapo", "dr_grpo", "grpo", "gspo", "gspo_token")
PRESETS_MODULE = "trl_ext.grpo.presets"


def preset_names() -> set[str]:
    """The presets ``trl-ext <name>`` runs: the table's, plus any registered at run time (never imported here)."""
    table = sys.modules.get(PRESETS_MODULE)
    return set(PRESET_NAMES) | set(getattr(table, "PRESETS", {}))


def usage() -> str:
    return (
        "usage: trl-ext <command> [flags]\n\n"
        f"recipes:  {' | '.join(RECIPES)}  (trl_ext.scripts.<command>; --help: its main flags, --help-all: all)\n"
        f"presets:  {' | '.join(PRESET_NAMES)}  (trl-ext <preset>, or trl-ext grpo --preset <preset>)\n"
        "probe:    pre-flight probe of a model on a task (trl-ext probe --help)\n"
        "errors:   a mistake in a flag, file or config prints its message alone; TRL_EXT_DEBUG=1 adds the traceback\n"
    )


def resolve(command: str, flags: Sequence[str]) -> tuple[str, list[str]]:
    """``(recipe module, argv)`` that ``trl-ext <command> <flags>`` runs (a preset: the grpo recipe, ``--preset``)."""
    name = command.lower().replace("-", "_")
    presets = preset_names()
    if name in RECIPES or (
        name not in presets and name.isidentifier() and name[0] != "_" and os.path.exists(script_path(name))
    ):
        return f"{SCRIPTS_PACKAGE}.{name}", list(flags)
    if name in presets:
        return f"{SCRIPTS_PACKAGE}.grpo", ["--preset", name, *flags]
    raise SystemExit(f"trl-ext: unknown command {command!r}.\n\n{usage()}")


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``trl-ext <command> <flags>`` (``argv``: the command line after ``trl-ext``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return
    command, flags = argv[0], argv[1:]
    with reported_user_errors(f"trl-ext {command}"):
        run(command, flags)


def run(command: str, flags: list[str]) -> None:
    """The ``cli`` of the recipe module of ``command`` with ``flags``, ``sys.argv`` set as ``python -m`` would set it."""
    module_name, flags = resolve(command, flags)
    sys.argv = [script_path(module_name.rpartition(".")[2]), *flags]
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        if module_name != f"{SCRIPTS_PACKAGE}.ppo" or "PPO needs" not in str(error):
            raise
        raise SystemExit(f"trl-ext ppo: {error}") from None  # a TRL without PPO: the message, not a traceback
    module.cli(argv=flags)


if __name__ == "__main__":
    main()
