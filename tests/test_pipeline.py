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


def test_the_learned_reward_pipeline_wires_its_levers(tmp_path, monkeypatch):
    """Reward models from the demo YAML's pairs and initialization, one seed each; DAPO against all of them with a KL
    penalty, batch-normalized rewards and held-out accuracy every 20 steps; the user's overrides last."""
    import time

    from trl_ext.recipe.args import PipelineArguments

    pipeline = load_recipe("pipeline")
    seen = {"reward": [], "dapo": []}

    def reward_main(script_args, training_args, model_args):
        seen["reward"].append((script_args, training_args, model_args))
        return {"accuracy_before": 0.5, "accuracy_after": 0.9, "train_pairs": 10, "held_out_pairs": 4}

    def dapo_main(script_args, training_args, model_args):
        seen["dapo"].append((script_args, training_args, model_args))
        return {"accuracy_after": 0.6, "health_warnings": []}

    monkeypatch.setattr(pipeline.reward_recipe, "main", reward_main)
    monkeypatch.setattr(pipeline.dapo_recipe, "main", dapo_main)
    monkeypatch.setattr(pipeline, "ensemble_pairwise_accuracy", lambda dirs: 0.95)
    args = PipelineArguments(
        output_dir=str(tmp_path), learned_reward=True, reward_models=2, dapo_overrides=["max_steps=5"]
    )
    summary = pipeline.learned_reward_stages(args, "sft-dir", {}, {"sft": 0.0}, time.time())

    rm_dirs = [str(tmp_path / "reward"), str(tmp_path / "reward-1")]
    assert [t.output_dir for _, t, _ in seen["reward"]] == rm_dirs
    assert [t.seed for _, t, _ in seen["reward"]] == [0, 1]
    for script_args, training_args, model_args in seen["reward"]:
        assert model_args.model_name_or_path == "sft-dir"
        assert script_args.num_generations == 32 and script_args.pairs_per_group == 8
        assert script_args.reference_pairs and script_args.init_sft_steps == 3000
        assert script_args.mining_max_new_tokens == 6 and training_args.center_rewards_coefficient == 0.01
    ((script_args, training_args, model_args),) = seen["dapo"]
    assert script_args.reward_funcs == rm_dirs and model_args.model_name_or_path == "sft-dir"
    assert training_args.beta == 0.04 and training_args.scale_rewards == "batch"
    assert script_args.held_out_eval_steps == 20 and training_args.max_steps == 5
    assert summary["reward_model"]["accuracy_after"] == 0.95 and len(summary["reward_model"]["members"]) == 2
    assert summary["overoptimization_alert"] is None
