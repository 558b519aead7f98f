"""The sft recipe (trl_ext.scripts.sft): the demo warm start is this code path (same weights), the demo YAML
matches it, and a short run."""

from __future__ import annotations

import importlib
import json
import os

import pytest
import torch
import yaml

from trl_ext.recipe.parsing import parse

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_recipe(name: str):
    """The recipe module ``trl_ext.scripts.<name>`` (``recipes/<name>.py`` only calls its ``cli``)."""
    return importlib.import_module(f"trl_ext.scripts.{name}")


def test_demo_yaml_is_the_warm_start_config():
    from trl_ext.recipe.models import warm_start_sft_config
    from trl_ext.recipe.paths import demo_config_path

    with open(demo_config_path("sft")) as f:
        config = yaml.safe_load(f)
    expected = warm_start_sft_config("outputs/sft")
    expected["use_cpu"] = True  # the YAML pins the demo to CPU; warm_start uses CPU when there is no GPU
    assert {k: config[k] for k in expected} == expected
    assert config["model_name_or_path"] is None and config["dataset_name"] is None


def test_no_arguments_parse_to_the_demo_yaml():
    sft = load_recipe("sft")
    from trl import ModelConfig, SFTConfig

    script_args, training_args, model_args = parse(
        (sft.SFTScriptArguments, SFTConfig, ModelConfig), "sft", argv=["--max_steps", "7"]
    )
    assert training_args.max_steps == 7  # CLI overrides the YAML
    assert training_args.learning_rate == 3e-3 and training_args.completion_only_loss is True
    assert model_args.model_name_or_path is None and script_args.dataset_name is None


def test_recipe_trains_exactly_like_the_demo_warm_start(tmp_path):
    """Same SFTTrainer settings, same data, same seed: the recipe and ``demo.warm_start`` give identical weights."""
    from trl_ext.demo import WarmStartConfig, warm_start

    steps = 3
    demo_dir = warm_start(output_dir=str(tmp_path / "demo"), sft=WarmStartConfig(max_steps=steps), use_cache=False)

    sft = load_recipe("sft")
    from trl import ModelConfig, SFTConfig

    out = str(tmp_path / "recipe")
    argv = ["--max_steps", str(steps), "--logging_steps", str(max(steps // 4, 1)), "--output_dir", out]
    result = sft.main(*parse((sft.SFTScriptArguments, SFTConfig, ModelConfig), "sft", argv=argv))

    from safetensors.torch import load_file

    ours, theirs = load_file(os.path.join(out, "model.safetensors")), load_file(f"{demo_dir}/model.safetensors")
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    with open(os.path.join(out, "summary.json")) as f:
        assert json.load(f) == result
    assert 0.0 <= result["accuracy_after"] <= 1.0 and result["accuracy_before"] == 0.0  # random init: never right


@pytest.mark.parametrize("missing", ["nope.jsonl"])
def test_missing_dataset_file_names_the_field(tmp_path, missing):
    from trl_ext.data import load_data

    with pytest.raises(FileNotFoundError, match="dataset_name="):
        load_data(str(tmp_path / missing))
