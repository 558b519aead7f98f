"""The recipes, one module each, as TRL ships ``trl/scripts/``: ``grpo`` (every preset of the GRPO family), ``dapo``,
``gspo``, ``dr_grpo``, ``sft``, ``dpo``, ``ppo`` (trl 1.12), ``reward``, ``eval`` and ``pipeline``.

Each has ``main(...)`` (the recipe, top to bottom: seed, data, model, rewards, trainer, train, save, report) and
``cli(argv=None)`` (its command line), and runs as ``python -m trl_ext.scripts.<name>``, ``trl-ext <name>`` or
``python recipes/<name>.py`` in a checkout. Their YAML files are package data: ``configs/<model>/<algo>/
config_<variant>.yaml`` (``configs/demo/<recipe>/config_demo.yaml``: what a recipe runs with no arguments) and
``accelerate_configs/*.yaml``; ``--config`` finds them by their documented names (``trl_ext.recipe.paths``).
"""
