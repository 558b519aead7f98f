"""A held-out split carved from data that has none (a lone file, a dataset without ``test``): 10% of the rows, at
most 100, seed 0, removed from training and said on the opening line; ``--dataset_test_split`` chooses another or
``none``."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from layout_files import LAYOUTS, write_layout

from trl_ext.data import held_out_label, held_out_size, load_task_data
from trl_ext.errors import UserError


def _file(path, rows: int = 200) -> str:
    with open(path, "w") as f:
        for i in range(rows):
            f.write(json.dumps(LAYOUTS["gsm8k"](f"{i}+{i}=", 2 * i)) + "\n")
    return str(path)


def _args(name: str, **kwargs) -> SimpleNamespace:
    base = {"dataset_name": name, "dataset_config": None, "dataset_train_split": "train", "dataset_test_split": "test"}
    return SimpleNamespace(**{**base, **kwargs})


@pytest.mark.parametrize(
    ("rows", "held"), [(0, 0), (1, 0), (2, 1), (9, 1), (10, 1), (200, 20), (1000, 100), (17398, 100)]
)
def test_held_out_size(rows, held):
    assert held_out_size(rows) == held


def test_a_lone_file_gets_a_seeded_held_out_split_removed_from_training(tmp_path):
    path = _file(tmp_path / "gsm8k_like.jsonl")
    data = load_task_data(_args(path), hold_out=True)
    assert (len(data.train), len(data.held_out)) == (180, 20)
    train, held = set(data.train["prompt"]), set(data.held_out["prompt"])
    assert not train & held and len(train | held) == 200  # every row once, none trained on and evaluated
    assert data.held_out["answer"][0] == str(2 * int(data.held_out["prompt"][0].split("+")[0]))  # mapped alike
    again = load_task_data(_args(path), hold_out=True)  # seed 0: the training seed is not an input
    assert again.held_out["prompt"] == data.held_out["prompt"]
    assert held_out_label(data.held_out) == (
        "20 held-out, carved from its 200 rows with seed 0; --dataset_test_split <split|file|none> to choose"
    )
    assert load_task_data(_args(path)).held_out is None  # hold_out=False (eval, probe): the file whole


def test_the_opening_line_says_what_was_held_out(tmp_path, capsys):
    from trl_ext.recipe.grpo import announce, parse

    path = _file(tmp_path / "gsm8k_like.jsonl")
    script_args, training_args, model_args = parse("dapo", argv=["--dataset_name", path, "--output_dir", "o"])
    data = load_task_data(script_args, hold_out=True)
    announce("dapo", "DAPOTrainer", script_args, training_args, model_args, data, ["accuracy"])
    line = capsys.readouterr().out
    assert f"data {path} (180 train / 20 held-out, carved from its 200 rows with seed 0;" in line


def test_none_trains_on_every_row_and_a_file_or_split_is_used_as_given(tmp_path):
    path = _file(tmp_path / "gsm8k_like.jsonl")
    for none in ("none", "None", None):
        data = load_task_data(_args(path, dataset_test_split=none), hold_out=True)
        assert len(data.train) == 200 and data.held_out is None
        assert held_out_label(data.held_out) == "no held-out split"
    test = _file(tmp_path / "test.jsonl", rows=7)
    data = load_task_data(_args(path, dataset_test_split=test), hold_out=True)
    assert (len(data.train), len(data.held_out)) == (200, 7) and held_out_label(data.held_out) == "7 held-out"
    folder = write_layout(str(tmp_path), "gsm8k", num_train=32, num_test=24)  # a folder with its own test split
    data = load_task_data(_args(folder), hold_out=True)
    assert (len(data.train), len(data.held_out)) == (32, 24)


def test_a_named_split_that_does_not_exist_is_a_user_error(tmp_path):
    path = _file(tmp_path / "gsm8k_like.jsonl", rows=20)
    with pytest.raises(UserError, match=r"dataset_test_split='validation' is not a split of .*none"):
        load_task_data(_args(path, dataset_test_split="validation"), hold_out=True)
    folder = write_layout(str(tmp_path), "gsm8k", num_train=8, num_test=4)
    with pytest.raises(UserError, match=r"its splits: \['train', 'test'\]"):
        load_task_data(_args(folder, dataset_test_split="validation"), hold_out=True)


def test_data_without_a_reference_is_not_carved(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i}+1="}) + "\n" for i in range(50)))
    data = load_task_data(_args(str(path)), hold_out=True)  # nothing could score a held-out figure
    assert len(data.train) == 50 and data.held_out is None
