"""Loading the recipes' data (the demo, a local file or folder, or a Hub dataset), its layout applied to both splits.

The held-out split is ``dataset_test_split`` (a split name, default ``test``, or a file). Scorable data without one
gets one carved for the training recipes (:func:`carve_held_out`); ``--dataset_test_split none`` trains on every row.
"""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass
from typing import Any

from datasets import Dataset, load_dataset

from trl_ext.data.layouts import Layout, apply_layout, detect_layout
from trl_ext.demo import DemoTaskConfig, make_problems
from trl_ext.errors import MissingFileError, UserError, missing_path_message
from trl_ext.hub import check_hub_name, hub_unreachable

logger = logging.getLogger(__name__)
FILE_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
DEMO_LAYOUT = Layout("built-in arithmetic demo", "prompt", "answer", "as is", task="arithmetic")
DEFAULT_TEST_SPLIT = "test"
NO_HELD_OUT = "none"  # --dataset_test_split none: no held-out split, nothing carved
HELD_OUT_SEED = 0  # the carved rows are the same whatever the training seed, so runs compare on the same problems
HELD_OUT_SHARE = 0.1
HELD_OUT_MAX_ROWS = 100
CARVED = "carved from"  # how a carved split's description starts (held_out_label)
DATA_LOCAL = "a folder or a .jsonl/.json/.csv/.parquet file"  # what to give instead of a Hub name


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


def opts_out(test_split: str | None) -> bool:
    """Whether ``dataset_test_split`` asks for no held-out split (``none``, any case, or null in a YAML)."""
    return test_split is None or test_split.strip().lower() == NO_HELD_OUT


def _load_file(path: str, field_name: str) -> Dataset:
    extension = os.path.splitext(path)[1].lower()
    if not os.path.exists(path):
        raise MissingFileError(missing_path_message(path, field_name))
    return load_dataset(FILE_FORMATS[extension], data_files=path, split="train")


def _looks_local(name: str) -> bool:
    """Whether ``dataset_name`` is meant as a local path rather than a Hub id: it starts like a path (``/``, ``.``,
    ``~``) or its first folder exists here (``data/gsm8k`` next to a ``data`` folder; ``openai/gsm8k`` is a Hub id)."""
    if name.startswith(("/", ".", "~")):
        return True
    head = name.split("/", 1)[0]
    return "/" in name and os.path.isdir(head)


def _check_test_split(name: str, splits: list[str], test_split: str) -> None:
    """A split name the user chose (not the default ``test``) must exist: a typo would otherwise go unnoticed."""
    if test_split == DEFAULT_TEST_SPLIT:
        return
    raise UserError(
        f"dataset_test_split={test_split!r} is not a split of {name} (its splits: {splits}). Name one of them, a "
        f"{'/'.join(FILE_FORMATS)} file of held-out problems, or {NO_HELD_OUT} for no held-out split (unset: 10% of "
        f"the rows, at most {HELD_OUT_MAX_ROWS}, are held out)."
    )


def load_data(
    dataset_name: str | None,
    dataset_config: str | None = None,
    train_split: str = "train",
    test_split: str | None = DEFAULT_TEST_SPLIT,
) -> tuple[Dataset, Dataset | None]:
    """``(train, eval)`` as stored: the demo problems (``dataset_name`` None), a local data file (all of it), or a
    ``load_dataset`` name or folder with its ``test_split`` (or a file of held-out problems, or ``none``)."""
    if dataset_name is None:
        return make_problems(DemoTaskConfig())
    test_file = is_data_file(test_split)
    held_out = _load_file(test_split, "dataset_test_split") if test_file else None
    if is_data_file(dataset_name):
        if not test_file and not opts_out(test_split):
            _check_test_split(dataset_name, ["train"], test_split)
        return _load_file(dataset_name, "dataset_name"), held_out
    if _looks_local(dataset_name) and not os.path.exists(os.path.expanduser(dataset_name)):
        raise MissingFileError(missing_path_message(dataset_name, "dataset_name"))
    if not os.path.exists(os.path.expanduser(dataset_name)):  # a Hub name: no network answers at once, not in a minute
        check_hub_name(f"dataset_name={dataset_name!r}", dataset_name, "dataset", DATA_LOCAL)
    try:
        data = load_dataset(dataset_name, dataset_config)
    except ConnectionError as error:  # datasets' "Couldn't reach '<name>' on the Hub", offline or network down
        raise UserError(hub_unreachable(f"dataset_name={dataset_name!r}", error, DATA_LOCAL)) from error
    if train_split not in data:
        raise UserError(f"dataset_train_split={train_split!r} is not a split of {dataset_name}: {list(data)}.")
    if test_file or opts_out(test_split):
        return data[train_split], held_out
    if test_split not in data:
        _check_test_split(dataset_name, list(data), test_split)
        return data[train_split], None
    return data[train_split], data[test_split]


def held_out_size(rows: int) -> int:
    """How many of ``rows`` training rows are held out: 10%, at least 1, at most 100, leaving one to train on."""
    if rows < 2:
        return 0
    return min(HELD_OUT_MAX_ROWS, max(1, int(rows * HELD_OUT_SHARE)), rows - 1)


def carve_held_out(train: Dataset) -> tuple[Dataset, Dataset | None]:
    """``(train without the held-out rows, held-out rows)``: ``held_out_size`` rows drawn with Python's ``random``
    (stable across versions) and seed ``HELD_OUT_SEED``, both in the file's order; ``(train, None)`` for too few."""
    size = held_out_size(len(train))
    if size == 0:
        return train, None
    chosen = set(random.Random(HELD_OUT_SEED).sample(range(len(train)), size))
    held_out = train.select(sorted(chosen))
    rest = train.select([i for i in range(len(train)) if i not in chosen])
    held_out.info.description = (
        f"{CARVED} its {len(train):,} rows with seed {HELD_OUT_SEED}; --dataset_test_split <split|file|none> to choose"
    )
    return rest, held_out


def held_out_label(held_out: Dataset | None) -> str:
    """The opening line's held-out part: ``"no held-out split"``, ``"24 held-out"``, or for a carved split ``"20
    held-out, carved from its 200 rows with seed 0; --dataset_test_split <split|file|none> to choose"``."""
    if held_out is None:
        return "no held-out split"
    description = held_out.info.description or ""
    return f"{len(held_out)} held-out" + (f", {description}" if description.startswith(CARVED) else "")


def cap_held_out(held_out: Dataset | None, max_problems: int | None, seed: int = 0) -> Dataset | None:
    """At most ``max_problems`` held-out problems (``None`` or 0: all): a seeded random subset, with a warning."""
    if held_out is None or not max_problems or len(held_out) <= max_problems:
        return held_out
    logger.warning(
        f"The held-out split has {len(held_out):,} problems: evaluating a seeded random {max_problems:,} of them "
        f"(held_out_max_problems={max_problems}; set it to 0 to evaluate all)."
    )
    return held_out.shuffle(seed=seed).select(range(max_problems))


def load_task_data(
    script_args: Any, strict: bool = True, with_completion: bool = False, hold_out: bool = False
) -> TaskData:
    """The recipe's data, both splits mapped by their layout, the held-out one cut to ``held_out_max_problems``;
    ``hold_out`` (training recipes): scorable data without a held-out split gets one carved, unless ``none``."""
    name = getattr(script_args, "dataset_name", None)
    test_split = getattr(script_args, "dataset_test_split", DEFAULT_TEST_SPLIT)
    config = getattr(script_args, "dataset_config", None)
    train_split = getattr(script_args, "dataset_train_split", "train")
    train, held_out = load_data(name, config, train_split, test_split)
    cap = getattr(script_args, "held_out_max_problems", None)
    if name is None:
        return TaskData(train, cap_held_out(held_out, cap), DEMO_LAYOUT)
    prompt_column = getattr(script_args, "dataset_prompt_column", None)
    answer_column = getattr(script_args, "dataset_answer_column", None)
    layout = detect_layout(train, prompt_column, answer_column, strict)
    if hold_out and held_out is None and not opts_out(test_split) and layout.reference_column is not None:
        train, held_out = carve_held_out(train)
    held_out = cap_held_out(held_out, cap)
    train = apply_layout(train, layout, with_completion)
    if held_out is not None:
        held_out_layout = detect_layout(held_out, prompt_column, answer_column, strict)
        held_out = apply_layout(held_out, held_out_layout, with_completion)
    return TaskData(train, held_out, layout)
