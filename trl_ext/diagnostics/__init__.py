"""Looking at a model and a run: the pre-flight probe (``probe``), the training health monitor (``health``),
evaluation as the papers report it (``evaluation``, ``eval_metrics``, ``eval_report``: ``trl-ext eval``) and its
greedy mode during training (``held_out``). Public names are re-exported by ``trl_ext``."""

from dataclasses import field
from typing import Any


def option(default: Any, text: str) -> Any:
    """A dataclass field with its default and its help text (``metadata["help"]``, which ``HfArgumentParser`` reads)."""
    return field(default=default, metadata={"help": text})
