"""The SFT -> DAPO -> DPO pipeline, end to end at toy sizes (the real run's numbers are in the README / report)."""

from __future__ import annotations

import importlib
import json
import os

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_recipe(name: str):
    """The recipe module ``trl_ext.scripts.<name>`` (``recipes/<name>.py`` only calls its ``cli``)."""
    return importlib.import_module(f"trl_ext.scripts.{name}")


@pytest.mark.slow
def test_pipeline_runs_every_stage_from_a_config(tmp_path, capsys):
    from trl import TrlParser

    from trl_ext.recipe.args import PipelineArguments

    config = tmp_path / "pipeline.yaml"
    config.write_text(
        yaml.safe_dump(
            dict(
                output_dir=str(tmp_path / "out"),
                sft_max_steps=4,
                dapo_overrides=[
                    "max_steps=1",
                    "per_device_train_batch_size=8",
                    "num_generations=4",
                    "dynamic_sampling_max_generation_batches=1",
                    "logging_steps=1",
                ],
                dpo_overrides=["mining_rounds=1", "max_steps=1", "prompts_per_round=16", "num_generations=4"],
            )
        )
    )
    (args,) = TrlParser((PipelineArguments,)).parse_args_and_config(["--config", str(config), "--seed", "1"])
    assert args.seed == 1 and args.dpo_overrides[0] == "mining_rounds=1"

    summary = load_recipe("pipeline").main(args)
    printed = capsys.readouterr().out
    stages = ["0. random init", "1. SFT warm start", "2. DAPO", "3. DPO for style"]
    assert list(summary["accuracies"]) == stages
    assert all(0.0 <= summary["accuracies"][s] <= 1.0 for s in stages)
    for stage in stages:
        assert f"| {stage} | {summary['accuracies'][stage]:.3f} |" in printed
    assert summary["dpo_rounds"][0]["mining/num_pairs"] > 0
    assert set(summary["style"]) == {"after DAPO", "after DPO"}
    with open(tmp_path / "out" / "summary.json") as f:
        assert json.load(f)["accuracies"] == summary["accuracies"]
    for stage_dir in ("dapo", "dpo"):
        assert os.path.exists(tmp_path / "out" / stage_dir / "model.safetensors")
