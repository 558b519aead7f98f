"""Loading the recipes' data: the demo, a local file or folder, or a Hub dataset; then its layout
(``trl_ext.data.layouts``) applied to the training and the held-out split alike.

:func:`load_task_data` is what every recipe, the probe and held-out evaluation call: ``TaskData(train, held_out,
layout)``, with ``prompt`` and the reference column in place, the held-out split cut to ``held_out_max_problems``.
Prompts are formatted for the tokenizer afterwards (``trl_ext.data.prompts.format_prompts``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from datasets import Dataset, load_dataset

from trl_ext.data.layouts import Layout, apply_layout, detect_layout
from trl_ext.demo import DemoTaskConfig, make_problems

logger = logging.getLogger(__name__)
FILE_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
DEMO_LAYOUT = Layout("built-in arithmetic demo", "prompt", "answer", "as is", task="arithmetic")


@dataclass
class TaskData:
    """A recipe's data: the training set, the held-out set (None without one) and the layout they were mapped by."""

    train: Dataset
    held_out: Dataset | None
    layout: Layout

    def describe(self) -> str:
        """The opening line's data part: ``GSM8K layout: question -> prompt, answer after '####' -> answer``."""
        return self.layout.describe()


def is_data_file(name: str | None) -> bool:
    """Whether ``name`` names a local data file by its extension (``.json/.jsonl/.csv/.parquet``)."""
    return os.path.splitext(name or "")[1].lower() in FILE_FORMATS


def _load_file(path: str, field_name: str) -> Dataset:
    extension = os.path.splitext(path)[1].lower()
    if not os.path.exists(path):
        raise FileNotFoundError(f"{field_name}={path!r}: no such file. Give a path to an existing file.")
    return load_dataset(FILE_FORMATS[extension], data_files=path, split="train")


def load_data(
    dataset_name: str | None, dataset_config: str | None = None, train_split: str = "train", test_split: str = "test"
) -> tuple[Dataset, Dataset | None]:
    """``(train, eval)`` as stored: the demo problems when ``dataset_name`` is None; a local
    ``.json/.jsonl/.csv/.parquet`` file (all of it for training); or a dataset loadable by ``datasets.load_dataset``
    (Hub name, or a local folder such as one holding ``train.jsonl`` and ``test.jsonl``), whose ``test_split`` is the
    eval set when it exists. ``test_split`` may also be a local file of held-out problems."""
    if dataset_name is None:
        return make_problems(DemoTaskConfig())
    test_file = is_data_file(test_split)
    held_out = _load_file(test_split, "dataset_test_split") if test_file else None
    if is_data_file(dataset_name):
        return _load_file(dataset_name, "dataset_name"), held_out
    data = load_dataset(dataset_name, dataset_config)
    if train_split not in data:
        raise ValueError(f"dataset_train_split={train_split!r} is not a split of {dataset_name}: {list(data)}.")
    if test_file:
        return data[train_split], held_out
    return data[train_split], data[test_split] if test_split in data else None


def cap_held_out(held_out: Dataset | None, max_problems: int | None, seed: int = 0) -> Dataset | None:
    """At most ``max_problems`` held-out problems: a seeded random subset (the same on every run and process) when
    the split is larger, said in a warning; ``None`` or 0: all of them. Greedy evaluation of a large split before,
    during and after training would otherwise cost more than the training itself."""
    if held_out is None or not max_problems or len(held_out) <= max_problems:
        return held_out
    logger.warning(
        f"The held-out split has {len(held_out):,} problems: evaluating a seeded random {max_problems:,} of them "
        f"(held_out_max_problems={max_problems}; set it to 0 to evaluate all)."
    )
    return held_out.shuffle(seed=seed).select(range(max_problems))


def load_task_data(script_args: Any, strict: bool = True, with_completion: bool = False) -> TaskData:
    """The recipe's data (``load_data``) mapped by its layout: recognized from the columns, or named by
    ``dataset_prompt_column`` / ``dataset_answer_column``; the held-out split mapped the same way and cut to
    ``held_out_max_problems``. ``strict=False`` keeps an unrecognized layout as it is (``detect_layout``); ``with_completion`` (SFT) adds the
    layout's worked solution as ``completion`` (``apply_layout``)."""
    name = getattr(script_args, "dataset_name", None)
    train, held_out = load_data(
        name,
        getattr(script_args, "dataset_config", None),
        getattr(script_args, "dataset_train_split", "train"),
        getattr(script_args, "dataset_test_split", "test"),
    )
    held_out = cap_held_out(held_out, getattr(script_args, "held_out_max_problems", None))
    if name is None:
        return TaskData(train, held_out, DEMO_LAYOUT)
    prompt_column = getattr(script_args, "dataset_prompt_column", None)
    answer_column = getattr(script_args, "dataset_answer_column", None)
    layout = detect_layout(train, prompt_column, answer_column, strict)
    train = apply_layout(train, layout, with_completion)
    if held_out is not None:
        held_out_layout = detect_layout(held_out, prompt_column, answer_column, strict)
        held_out = apply_layout(held_out, held_out_layout, with_completion)
    return TaskData(train, held_out, layout)
