"""The first and last steps that the SFT, DPO, PPO and reward recipes share."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from datasets import Dataset
from transformers import set_seed

from trl_ext.console import quiet_libraries
from trl_ext.data import Layout, load_task_data
from trl_ext.errors import reported_user_errors
from trl_ext.recipe.models import demo_threads
from trl_ext.recipe.report import report


def run(name: str, main: Callable[..., Any], parse_args: Callable[[], tuple]) -> Any:
    """A recipe's command line: ``main(*parse_args())``, library noise hidden and a user error printed as one line."""
    quiet_libraries()
    with reported_user_errors(f"trl-ext {name}"):
        return main(*parse_args())


def start(
    script_args: Any, training_args: Any, model_args: Any, strict: bool = True, with_completion: bool = False
) -> tuple[float, Dataset, Dataset | None, Layout]:
    """The clock, the seed, the demo's thread count and the data: ``(started, train, held-out, layout)``."""
    started = time.time()
    set_seed(training_args.seed)
    demo_threads(model_args)
    data = load_task_data(script_args, strict=strict, with_completion=with_completion, hold_out=True)
    return started, data.train, data.held_out, data.layout


def finish(
    recipe: str,
    trainer: Any,
    tokenizer: Any,
    policy: Any,
    evaluate: Callable[[Any, str], float | None],
    before: float | None,
    started: float,
    **extra: Any,
) -> dict:
    """After ``trainer.train()``: save model and tokenizer, measure ``policy``'s held-out accuracy, ``report``."""
    output_dir = trainer.args.output_dir
    trainer.save_model(output_dir)
    tokenizer.save_pretrained(output_dir)
    after = evaluate(policy, "after")
    return report(recipe, output_dir, before, after, trainer.state.global_step, started, **extra)
