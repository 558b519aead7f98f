"""The building blocks of the recipes (``trl_ext.scripts``), one job per module: ``args`` (script arguments),
``parsing`` and ``help`` (the command line), ``paths`` (the YAML files), ``rewards``, ``models``, ``evaluation``
(held-out greedy accuracy), ``report`` (opening line, ``summary.json``), ``steps`` (first and last steps), ``tools``
and ``grpo`` (the GRPO family's own parts)."""
