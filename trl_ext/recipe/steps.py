"""The first and last steps that the SFT, DPO, PPO and reward recipes share: ``start`` (clock, seed, threads, data)
and ``finish`` (save, held-out accuracy after training, report). The GRPO family's ``main`` spells its own out."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from datasets import Dataset
from transformers import set_seed

from trl_ext.data import Layout, TaskData, load_task_data
from trl_ext.recipe.models import demo_threads
from trl_ext.recipe.report import report


def start(
    script_args: Any, training_args: Any, model_args: Any, strict: bool = True, with_completion: bool = False
) -> tuple[float, Dataset, Dataset | None, Layout]:
    """The first steps of a recipe: the clock, the seed, the demo's thread count and the data (``(started, train,
    held-out, layout)``; see ``load_script_data``)."""
    started = time.time()
    set_seed(training_args.seed)
    demo_threads(model_args)
    data = load_script_data(script_args, strict=strict, with_completion=with_completion)
    return started, data.train, data.held_out, data.layout


def finish(
    recipe: str,
    trainer: Any,
    tokenizer: Any,
    policy: Any,
    evaluate: Callable[[Any, str], float | None],
    before: float | None,
    started: float,
) -> dict:
    """The last steps of a recipe after ``trainer.train()``: save the model and tokenizer to ``output_dir``, measure
    the held-out greedy accuracy of ``policy`` (``evaluate``, from ``held_out_evaluator``) and report (``report``:
    table and ``summary.json``)."""
    output_dir = trainer.args.output_dir
    trainer.save_model(output_dir)
    tokenizer.save_pretrained(output_dir)
    after = evaluate(policy, "after")
    return report(recipe, output_dir, before, after, trainer.state.global_step, started)


def load_script_data(
    script_args: Any, strict: bool = True, with_completion: bool = False, hold_out: bool = True
) -> TaskData:
    """The recipe's data (``trl_ext.data.load_task_data``): training and held-out sets mapped by their layout, the
    held-out set cut to ``held_out_max_problems``. ``strict=False`` (SFT, DPO on preference pairs) keeps a layout it
    does not recognize as it is; ``with_completion`` (SFT) maps a worked solution to ``completion``. ``hold_out``
    (the training recipes; not ``trl-ext eval``, which evaluates a lone file whole): data with a reference column
    but no held-out split gets one carved from its rows (``trl_ext.data.carve_held_out``)."""
    return load_task_data(script_args, strict=strict, with_completion=with_completion, hold_out=hold_out)
