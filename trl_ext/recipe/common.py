"""The recipes' shared helpers under their former import path, ``trl_ext.recipe.common``: each now lives in the
module of its job, and this module only re-exports them so that existing imports keep working.

- ``trl_ext.recipe.parsing``: the one parser (``parse``, ``make_parser``, ``check_flags``, ``config_yaml``, ...)
- ``trl_ext.recipe.paths``: where the recipes and their YAML files are (``demo_config_path``, ``resolve_config``)
- ``trl_ext.recipe.rewards``: reward functions by name, the task reward, the evaluation reward
- ``trl_ext.recipe.models``: the policy, its tokenizer, the demo's model and warm start
- ``trl_ext.recipe.evaluation``: held-out greedy accuracy
- ``trl_ext.recipe.report``: the opening line and the closing report (``summary.json``)
- ``trl_ext.recipe.steps``: a recipe's first and last steps (``start``, ``finish``, ``load_script_data``)
- ``trl_ext.scripts``: the recipes themselves (``load_recipe``)
"""

from __future__ import annotations

import importlib
import types

from trl_ext.data import cap_held_out, is_data_file, load_data
from trl_ext.recipe.evaluation import completion_budget, held_out_evaluator
from trl_ext.recipe.models import (
    DEMO_TRAINED,
    check_model_folder,
    demo_models,
    demo_threads,
    demo_warm_start_config,
    fresh_demo_policy,
    load_for_vllm,
    load_policy,
    load_tokenizer,
    warm_start_sft_config,
)
from trl_ext.recipe.parsing import (
    RecipeParser,
    check_config_file,
    check_flags,
    config_yaml,
    given_fields,
    given_sources,
    make_parser,
    parse,
    print_help,
    recipe_prog,
    supported_precision,
)
from trl_ext.recipe.paths import DEMO_CONFIG_DIR, SCRIPTS_PACKAGE, demo_config_path
from trl_ext.recipe.report import (
    SUMMARY_FILE,
    announce,
    announce_eval,
    learning_rate_part,
    learning_rate_source,
    report,
    write_summary,
    written_files,
)
from trl_ext.recipe.rewards import evaluation_reward, gold_reward, reward_functions, task_rewards
from trl_ext.recipe.steps import finish, load_script_data, start


def load_recipe(name: str) -> types.ModuleType:
    """The recipe ``name`` as a module, ``trl_ext.scripts.<name>`` (its ``main`` is the recipe, its ``cli`` the
    command line)."""
    return importlib.import_module(f"{SCRIPTS_PACKAGE}.{name}")


__all__ = [
    "DEMO_CONFIG_DIR",
    "DEMO_TRAINED",
    "SUMMARY_FILE",
    "RecipeParser",
    "announce",
    "announce_eval",
    "cap_held_out",
    "check_config_file",
    "check_flags",
    "check_model_folder",
    "completion_budget",
    "config_yaml",
    "demo_config_path",
    "demo_models",
    "demo_threads",
    "demo_warm_start_config",
    "evaluation_reward",
    "finish",
    "fresh_demo_policy",
    "given_fields",
    "given_sources",
    "gold_reward",
    "held_out_evaluator",
    "is_data_file",
    "learning_rate_part",
    "learning_rate_source",
    "load_data",
    "load_for_vllm",
    "load_policy",
    "load_recipe",
    "load_script_data",
    "load_tokenizer",
    "make_parser",
    "parse",
    "print_help",
    "recipe_prog",
    "report",
    "reward_functions",
    "start",
    "supported_precision",
    "task_rewards",
    "warm_start_sft_config",
    "write_summary",
    "written_files",
]
