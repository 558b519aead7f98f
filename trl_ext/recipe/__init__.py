"""The shared parts of the recipes in ``recipes/`` (and of ``trl-ext <recipe>``): argument parsing with the YAML-key
check (``args``), data / model / reward loading and the run report (``common``), the short ``--help``
(``help``), where the recipes live (``paths``), the GRPO-family run (``grpo``), the
SFT / DPO / PPO stages (``stages``) and the three-stage pipeline (``pipeline``)."""
