"""The dpo recipe (trl_ext.scripts.dpo): demo YAML parsing, a short group-mined run, and offline DPO on the pairs
it saved."""

from __future__ import annotations

import importlib
import json
import os

import pytest

from trl_ext.data import load_task_data
from trl_ext.recipe.parsing import parse
from trl_ext.recipe.rewards import task_rewards

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)


def load_recipe(name: str):
    """The recipe module ``trl_ext.scripts.<name>`` (``recipes/<name>.py`` only calls its ``cli``)."""
    return importlib.import_module(f"trl_ext.scripts.{name}")


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from trl_ext.demo import DemoModelConfig, build_model, build_tokenizer

    path = str(tmp_path_factory.mktemp("tiny"))
    tokenizer = build_tokenizer()
    build_model(tokenizer, DemoModelConfig(**TINY)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _parse(dpo, argv):
    from trl import ModelConfig

    return parse((dpo.DPOScriptArguments, dpo.DPOConfig, ModelConfig), "dpo", argv=argv)


def test_no_arguments_parse_to_the_demo_yaml():
    dpo = load_recipe("dpo")
    script_args, training_args, model_args = _parse(dpo, [])
    assert model_args.model_name_or_path is None and script_args.dataset_name is None
    assert script_args.reward_funcs is None  # the task reward of the data: arithmetic on the demo
    assert task_rewards(script_args, load_task_data(script_args, hold_out=True).layout)[1] == ["arithmetic"]
    assert training_args.loss_type == ["sigmoid", "sft"] and training_args.loss_weights == [1.0, 1.0]
    assert training_args.mining_rounds == 2 and training_args.num_generations == 8
    assert training_args.output_dir == "outputs/dpo"


def test_mined_then_offline(tiny_checkpoint, tmp_path):
    dpo = load_recipe("dpo")
    mined_dir = str(tmp_path / "mined")
    common = [
        "--model_name_or_path",
        tiny_checkpoint,
        "--max_steps",
        "1",
        "--per_device_train_batch_size",
        "4",
        "--use_cpu",
        "true",
        "--bf16",
        "false",
        "--report_to",
        "none",
        "--save_strategy",
        "no",
        "--max_length",
        "32",
    ]
    # group-mined: --config with the demo YAML, overridden to tiny sizes; a reward every random model can satisfy
    argv = [
        "--config",
        os.path.join(REPO, "recipes/configs/demo/dpo/config_demo.yaml"),
        *common,
        "--output_dir",
        mined_dir,
        "--mining_rounds",
        "1",
        "--prompts_per_round",
        "24",
        "--num_generations",
        "4",
        "--reward_funcs",
        "length_budget",
        "--reward_options",
        '{"length_budget": {"budget": 2, "mode": "exact"}}',
    ]
    result = dpo.main(*_parse(dpo, argv))
    assert result["mode"] == "mined" and result["rounds"][0]["mining/num_pairs"] > 0
    assert 0.0 <= result["accuracy_after"] <= 1.0
    pairs_file = os.path.join(mined_dir, "pairs-round-0.jsonl")
    with open(pairs_file) as f:
        rows = [json.loads(line) for line in f]
    assert len(rows) == result["rounds"][0]["mining/num_pairs"]
    assert all(r["chosen_reward"] > r["rejected_reward"] for r in rows)

    # offline: the saved pairs as a preference file, length-normalized loss from the offline YAML
    argv = [
        "--config",
        os.path.join(REPO, "recipes/configs/demo/dpo/config_offline.yaml"),
        *common,
        "--dataset_name",
        pairs_file,
        "--output_dir",
        str(tmp_path / "offline"),
    ]
    result = dpo.main(*_parse(dpo, argv))
    assert result["mode"] == "offline" and result["accuracy_before"] is None  # no held-out split in a file
    assert os.path.exists(tmp_path / "offline" / "model.safetensors")
