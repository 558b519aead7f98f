"""The building blocks of the recipes (``trl_ext.scripts``), one job per module (each module's docstring says which)."""
