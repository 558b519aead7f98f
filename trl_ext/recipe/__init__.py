"""The building blocks of the recipes (``trl_ext.scripts``), one job per module:

- ``args``: the recipes' script arguments (data, rewards, run options)
- ``parsing``: the one command-line parser (``--config`` YAML, demo YAML, checked keys and flags, short ``--help``)
- ``help``: the short, grouped ``--help``
- ``paths``: where the recipes and their YAML files are, and how a ``--config`` name finds its file
- ``rewards``: reward functions by name, the task reward, the reward that scores held-out accuracy
- ``models``: the policy and its tokenizer, the demo's model and warm start
- ``evaluation``: held-out greedy accuracy
- ``report``: the opening line and the closing report (``summary.json``)
- ``steps``: a recipe's first and last steps
- ``grpo``: the GRPO-family run's own parts (preset parsing, output folder, monitors, metrics file, summary)
- ``common``: the former home of the helpers above, re-exporting them under their old import path
"""
