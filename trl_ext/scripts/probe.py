"""The pre-flight probe (``trl_ext.diagnostics.probe``): will RL learn anything on this model and data, and what will
dynamic sampling cost?

    trl-ext probe                                                     # the demo after its SFT warm start
    trl-ext probe --config recipes/configs/qwen2.5-0.5b-instruct/dapo/config_gsm8k.yaml   # a run's own YAML
    python -m trl_ext.scripts.probe --model_name_or_path <model> --dataset_name <data> --num_generations 16
"""

from __future__ import annotations

from collections.abc import Sequence

from trl_ext.diagnostics.probe import ProbeReport, main
from trl_ext.recipe.steps import run


def cli(argv: Sequence[str] | None = None) -> ProbeReport:
    """Parse the command line (``argv``, default ``sys.argv[1:]``), probe, print the table and save the report."""
    return run("probe", main, lambda: (argv,))


if __name__ == "__main__":
    cli()
