"""Where the recipes and their YAML files live (``trl_ext/scripts/``, linked from a checkout's ``recipes/``), and how
a ``--config`` name finds its file from any directory. Free of torch: ``trl-ext --help`` stays instant."""

from __future__ import annotations

import os

SCRIPTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")
SCRIPTS_PACKAGE = "trl_ext.scripts"
CONFIGS_DIR = os.path.join(SCRIPTS_DIR, "configs")
ACCELERATE_CONFIGS_DIR = os.path.join(SCRIPTS_DIR, "accelerate_configs")
DEMO_CONFIG_DIR = os.path.join(CONFIGS_DIR, "demo")
#: The prefixes the documentation writes before a packaged YAML (a checkout's ``recipes/`` links to the package).
DOCUMENTED_PREFIXES = {"recipes/configs/": CONFIGS_DIR, "recipes/accelerate_configs/": ACCELERATE_CONFIGS_DIR}


def script_path(name: str) -> str:
    """The file of recipe ``name``: ``trl_ext/scripts/<name>.py``."""
    return os.path.join(SCRIPTS_DIR, f"{name}.py")


def demo_config_path(recipe: str) -> str:
    """``configs/demo/<recipe>/config_demo.yaml``: the settings a recipe runs with when given no arguments."""
    return os.path.join(DEMO_CONFIG_DIR, recipe, "config_demo.yaml")


def documented_name(path: str) -> str:
    """``recipes/configs/...`` for a packaged YAML (the name that works from any directory), else ``path``."""
    real = os.path.realpath(path)
    for prefix, folder in DOCUMENTED_PREFIXES.items():
        folder = os.path.realpath(folder)
        if real.startswith(folder + os.sep):
            return prefix + os.path.relpath(real, folder).replace(os.sep, "/")
    return path


def resolve_config(path: str) -> str:
    """The YAML file ``path`` names: itself when it exists or is absolute; else the packaged file it names, as the
    documentation writes it (``recipes/configs/...``) or relative to the packaged folder; else ``path`` unchanged."""
    if os.path.exists(path) or os.path.isabs(path):
        return path
    normalized = path.replace(os.sep, "/").removeprefix("./")
    for prefix, folder in DOCUMENTED_PREFIXES.items():
        if normalized.startswith(prefix):
            candidate = os.path.join(folder, *normalized[len(prefix) :].split("/"))
            return candidate if os.path.isfile(candidate) else path
    candidate = os.path.join(CONFIGS_DIR, *normalized.split("/"))
    return candidate if os.path.isfile(candidate) else path
