"""The recipes, one module each as TRL ships ``trl/scripts/``: ``main(...)`` and ``cli(argv=None)``, run as ``python
-m trl_ext.scripts.<name>``, ``trl-ext <name>`` or ``python recipes/<name>.py``; their YAML files are package data."""
