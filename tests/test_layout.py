"""Issue 13: one preset table decides config and trainer; a new preset is one dataclass + one row and runs by name
from Python, the command line (``--preset``, ``trl-ext <name>``) and YAML (``preset:``); one recipe parser checks
YAML keys on every path; no import cycles and no intra-project import inside a function."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

import pytest
import trl
from trl import ModelConfig, SFTConfig

from trl_ext import (
    DAPOTrainer,
    DrGRPOConfig,
    GRPOTrainer,
    GSPOTokenTrainer,
    GSPOTrainer,
    cli,
    get_preset,
    trainer_class_for,
)
from trl_ext.grpo import presets
from trl_ext.grpo.presets import PRESETS, Preset
from trl_ext.recipe import grpo as grpo_recipe
from trl_ext.recipe import parsing, paths
from trl_ext.recipe.args import SFTScriptArguments

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU = {"use_cpu": True, "bf16": False}


@dataclass
class TinyKLConfig(DrGRPOConfig):
    """A new preset for the test: Dr. GRPO with a KL term (one dataclass ...)."""

    beta: float = field(default=0.01, metadata={"help": "KL coefficient."})


@pytest.fixture
def tiny_kl(monkeypatch):
    """(... and one table row.)"""
    monkeypatch.setitem(PRESETS, "tiny_kl", Preset(TinyKLConfig, GRPOTrainer, summary="test preset"))


def test_the_table_decides_each_presets_trainer(tmp_path):
    expected = {
        "grpo": GRPOTrainer,
        "dr_grpo": GRPOTrainer,
        "dapo": DAPOTrainer,
        "gspo": GSPOTrainer,
        "gspo_token": GSPOTokenTrainer,
    }
    assert {name: row.trainer for name, row in PRESETS.items()} == expected
    for name in expected:
        args = get_preset(name, output_dir=str(tmp_path), **CPU)
        assert trainer_class_for(args) is expected[name], name
    assert trainer_class_for(trl.GRPOConfig(output_dir=str(tmp_path), **CPU)) is GRPOTrainer


def test_a_new_preset_runs_by_name_from_python_cli_and_yaml(tiny_kl, tmp_path):
    # Python
    config = get_preset("tiny_kl", output_dir=str(tmp_path), **CPU)
    assert type(config) is TinyKLConfig and config.beta == 0.01 and config.loss_type == "dr_grpo"
    assert trainer_class_for(config) is GRPOTrainer
    # command line: recipes/grpo.py --preset tiny_kl, and `trl-ext tiny_kl` resolves to exactly that
    flags = ["--model_name_or_path", "m", "--output_dir", str(tmp_path), "--use_cpu", "true"]
    script_args, training_args, _ = grpo_recipe.parse("grpo", argv=["--preset", "tiny_kl", *flags])
    assert type(training_args) is TinyKLConfig and script_args.preset == "tiny_kl"
    path, argv = cli.resolve("tiny_kl", ["--max_steps", "3"])
    assert path == "trl_ext.scripts.grpo" and argv == ["--preset", "tiny_kl", "--max_steps", "3"]
    # YAML
    yaml_path = tmp_path / "run.yaml"
    yaml_path.write_text(f"preset: tiny_kl\nbeta: 0.02\noutput_dir: {tmp_path}\nuse_cpu: true\n")
    script_args, training_args, _ = grpo_recipe.parse("grpo", argv=["--config", str(yaml_path)])
    assert type(training_args) is TinyKLConfig and training_args.beta == 0.02 and script_args.preset == "tiny_kl"


def test_a_preset_row_fixes_its_fields_and_uses_its_config_class_demo(tmp_path):
    script_args, training_args, _ = grpo_recipe.parse("gspo_token", argv=["--output_dir", str(tmp_path)])
    assert training_args.gspo_token and script_args.preset == "gspo_token"
    assert trainer_class_for(training_args) is GSPOTokenTrainer
    assert training_args.num_generations == 8  # GSPO's demo YAML (recipes/configs/demo/gspo/config_demo.yaml)


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(ValueError, match="Known presets: .*'dr_grpo'.*Did you mean 'dr_grpo'"):
        grpo_recipe.parse("grpo", argv=["--preset", "dr-grpoo"])
    with pytest.raises(SystemExit, match="unknown command 'dapoo'"):
        cli.resolve("dapoo", [])


def test_cli_lists_recipes_and_presets(capsys):
    cli.main([])
    printed = capsys.readouterr().out
    for name in [*cli.RECIPES, *presets.preset_names(), "probe"]:
        assert name in printed
    for name in cli.RECIPES:
        assert os.path.exists(os.path.join(ROOT, "recipes", f"{name}.py")), name


def test_every_recipe_yaml_key_is_checked(tmp_path):
    """The one parser: the SFT / DPO / PPO recipes check YAML keys too (before: only the GRPO family did)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("max_stpes: 3\n")
    with pytest.raises(ValueError, match="unknown key 'max_stpes'.*Did you mean 'max_steps'"):
        parsing.parse((SFTScriptArguments, SFTConfig, ModelConfig), "sft", argv=["--config", str(bad)])


def test_every_demo_config_follows_one_naming_scheme():
    demo = os.path.join(ROOT, "recipes", "configs", "demo")
    assert sorted(os.listdir(demo)) == ["dapo", "dpo", "dr_grpo", "grpo", "gspo", "ppo", "reward", "sft"]
    for algo in os.listdir(demo):
        assert os.path.exists(paths.demo_config_path(algo)), algo


def test_no_import_cycles_and_no_imports_inside_functions():
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "import_graph.py")], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "import cycles among project modules: 0" in result.stdout, result.stdout
    assert "intra-project imports inside functions: 0" in result.stdout, result.stdout


@pytest.mark.slow
def test_trl_ext_command_runs_dr_grpo_by_name(tmp_path):
    """``trl-ext dr_grpo`` (the console script's entry point) runs recipes/dr_grpo.py's demo with the Dr. GRPO config."""
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}
    flags = ["--max_steps", "2", "--logging_steps", "1", "--output_dir", str(out), "--held_out_eval_steps", "0"]
    result = subprocess.run(
        [sys.executable, "-c", "from trl_ext.cli import main; main()", "dr_grpo", *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[dr_grpo] GRPOTrainer (DrGRPOConfig) |" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["recipe"] == "dr_grpo" and summary["trainer"] == "GRPOTrainer" and summary["optimizer_steps"] == 2


def test_rewards_import_name_cannot_collide_and_the_old_one_still_works():
    """The package ships only ``trl_ext`` (``rewards`` on the package index is another project); in a checkout the
    top-level ``rewards/`` shim keeps ``from rewards import ...`` and ``from rewards.<module> import ...`` working."""
    import tomllib
    from rewards.math import MathAccuracy

    import rewards
    import trl_ext.rewards
    import trl_ext.rewards.math

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        include = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]["include"]
    assert include == ["trl_ext*"]
    assert rewards.get_rewards is trl_ext.rewards.get_rewards and MathAccuracy is trl_ext.rewards.math.MathAccuracy
    assert sorted(rewards.__all__) == sorted(trl_ext.rewards.__all__)


def test_importing_the_rewards_does_not_import_the_trainers():
    """``trl_ext``'s public names load lazily: the math reward's helper processes import ``trl_ext.rewards`` only."""
    code = "import sys, trl_ext.rewards.math; print('trl_ext.grpo.trainers' in sys.modules, 'trl_ext.grpo' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]
