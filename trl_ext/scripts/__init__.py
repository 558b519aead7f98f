"""The recipes, one module each, as TRL ships ``trl/scripts/``: each has ``main(...)`` (the recipe, top to bottom) and
``cli(argv=None)``, and runs as ``python -m trl_ext.scripts.<name>``, ``trl-ext <name>`` or ``python
recipes/<name>.py``. Their YAML files are package data (``configs/<model>/<algo>/config_<variant>.yaml``,
``accelerate_configs/*.yaml``), found by ``--config`` by their documented names.
"""
