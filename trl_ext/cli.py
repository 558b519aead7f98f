"""``trl-ext <command> [flags]``: the recipes from one console script, in the spirit of TRL's ``trl grpo ...``.

    trl-ext dapo                                   # == python recipes/dapo.py (the demo on CPU)
    trl-ext grpo --preset dr_grpo --max_steps 50   # any preset of the table by name
    trl-ext gspo_token                             # a preset name alone runs recipes/grpo.py with that preset
    trl-ext sft | dpo | ppo | reward | pipeline    # the other recipes, same flags as their files
    trl-ext eval --models <model> <model> ...      # pass@1, avg@k, pass@k, maj@k side by side (recipes/eval.py)
    trl-ext probe --model_name_or_path <model>     # the pre-flight probe (trl_ext.diagnostics.probe)

A command runs ``recipes/<command>.py`` exactly as ``python recipes/<command>.py`` would (``__main__``, same
``sys.argv``), so every flag and ``--config`` YAML works the same way; a registered preset without a recipe file of
its own (``trl_ext.grpo.presets.PRESETS``) runs ``recipes/grpo.py --preset <name>``.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Sequence

from trl_ext.diagnostics import probe
from trl_ext.grpo.presets import PRESETS, preset_names
from trl_ext.recipe.common import RECIPES_DIR

RECIPES = ("grpo", "dapo", "gspo", "dr_grpo", "sft", "dpo", "ppo", "reward", "pipeline", "eval")


def usage() -> str:
    return (
        "usage: trl-ext <command> [flags]\n\n"
        f"recipes:  {' | '.join(RECIPES)}  (recipes/<command>.py; --help lists its flags)\n"
        f"presets:  {' | '.join(preset_names())}  (trl-ext <preset>, or trl-ext grpo --preset <preset>)\n"
        "probe:    pre-flight probe of a model on a task (trl-ext probe --help)\n"
    )


def resolve(command: str, flags: Sequence[str]) -> tuple[str, list[str]]:
    """``(recipe file, argv)`` that ``trl-ext <command> <flags>`` runs."""
    name = command.lower().replace("-", "_")
    path = os.path.join(RECIPES_DIR, f"{name}.py")
    if name in RECIPES or (name not in PRESETS and os.path.exists(path)):
        return path, list(flags)
    if name in PRESETS:
        return os.path.join(RECIPES_DIR, "grpo.py"), ["--preset", name, *flags]
    raise SystemExit(f"trl-ext: unknown command {command!r}.\n\n{usage()}")


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return
    command, flags = argv[0], argv[1:]
    if command == "probe":
        probe.main(flags)
        return
    path, flags = resolve(command, flags)
    if not os.path.exists(path):
        raise SystemExit(
            f"trl-ext: {path} not found. The recipes ship with the source tree: run from a checkout or install it "
            "with `pip install -e .`."
        )
    sys.argv = [path, *flags]
    try:
        runpy.run_path(path, run_name="__main__")
    except ImportError as error:
        if os.path.basename(path) != "ppo.py" or "PPO needs" not in str(error):
            raise
        raise SystemExit(f"trl-ext ppo: {error}") from None  # a TRL without PPO: the message, not a traceback


if __name__ == "__main__":
    main()
