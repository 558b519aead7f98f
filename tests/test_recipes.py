"""The GRPO-family recipes run end to end: with no arguments (demo YAML), with --config, and with CLI overrides."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(recipe: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "recipes", recipe), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["dapo.py", "grpo.py", "gspo.py", "dr_grpo.py"])
def test_recipe_demo_runs_and_writes_its_outputs(recipe, tmp_path):
    out = tmp_path / "run"
    result = _run(recipe, "--max_steps", "4", "--logging_steps", "2", "--output_dir", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "held-out greedy accuracy" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["optimizer_steps"] == 4
    assert 0.0 <= summary["accuracy_before"] <= 1.0 and 0.0 <= summary["accuracy_after"] <= 1.0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in line for line in lines)
    assert (out / "curves.png").stat().st_size > 0
    assert (out / "model.safetensors").exists()
    if recipe == "dapo.py":
        assert "rounds/step" in result.stdout and "kept-group fraction" in result.stdout  # summary table rows
        assert any("dynamic_sampling/kept_group_frac" in line for line in lines)
    if recipe == "gspo.py":
        assert any("clip_ratio/region_mean" in line for line in lines)


@pytest.mark.slow
def test_recipe_takes_a_config_file_and_cli_overrides(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "output_dir: {out}\nreward_funcs: [arithmetic]\nnum_generations: 4\nper_device_train_batch_size: 16\n"
        "max_completion_length: 6\nmax_steps: 3\nlogging_steps: 1\nuse_cpu: true\nbf16: false\n"
        "report_to: none\nsave_strategy: 'no'\noverlong_buffer_len: 2\n".format(out=tmp_path / "cfg-run")
    )
    result = _run("dapo.py", "--config", str(config), "--max_steps", "2", "--gspo_token", "false")
    # --gspo_token is not a DAPOConfig field: a typo-like unknown flag must fail, not be ignored
    assert result.returncode != 0 and "gspo_token" in result.stderr
    result = _run("dapo.py", "--config", str(config), "--max_steps", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "cfg-run" / "summary.json").read_text())["optimizer_steps"] == 2


def _announced(capsys, argv: list[str]) -> list[str]:
    """What ``trl_ext.recipe.grpo.announce`` prints for the DAPO recipe parsed from ``argv`` (stand-in data)."""
    from types import SimpleNamespace

    from datasets import Dataset

    from trl_ext.recipe.grpo import announce, parse

    script_args, training_args, model_args = parse("dapo", argv=argv)
    rows = lambda n: Dataset.from_dict({"prompt": ["1+1="] * n, "answer": [2] * n})  # noqa: E731
    data = SimpleNamespace(train=rows(12), held_out=rows(6), layout=None)
    announce("dapo", "DAPOTrainer (DAPOConfig)", script_args, training_args, model_args, data, ["arithmetic"])
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("[dapo]")]


def test_opening_line_says_the_learning_rate_and_where_it_came_from(capsys, tmp_path):
    """A given model at the preset's lr (the papers' 1e-6) gets the source and a one-line hint; a flag, the user's
    YAML and the demo's YAML are named as the source, and a chosen lr gets no hint."""
    model = ["--model_name_or_path", "some/model", "--output_dir", str(tmp_path)]
    opening, hint = _announced(capsys, model)
    assert " | lr 1e-06 (dapo preset default) | " in opening
    assert hint.startswith("[dapo] lr 1e-06 is the preset's default, the papers' setting for 7B+ models")
    assert "--learning_rate" in hint
    (opening,) = _announced(capsys, [*model, "--learning_rate", "5e-5"])
    assert " | lr 5e-05 (--learning_rate) | " in opening
    config = tmp_path / "config.yaml"
    config.write_text("learning_rate: 2.0e-5\nmodel_name_or_path: some/model\n")
    (opening,) = _announced(capsys, ["--config", str(config), "--output_dir", str(tmp_path)])
    assert " | lr 2e-05 (config YAML) | " in opening
    (opening,) = _announced(capsys, ["--output_dir", str(tmp_path)])  # the demo: its YAML sets 5e-4
    assert " | lr 0.0005 (demo config) | " in opening


def test_written_files_list_checkpoint_folders_in_step_order(tmp_path):
    from trl_ext.recipe.report import written_files

    for name in ("checkpoint-10", "checkpoint-2", "checkpoint-3", "runs", "checkpoint-x"):
        (tmp_path / name).mkdir()
    for name in ("checkpoint-10", "checkpoint-2"):
        (tmp_path / name / "trainer_state.json").write_text("{}")  # complete; checkpoint-3 was cut short
    (tmp_path / "model.safetensors").write_text("")
    (tmp_path / "config.json").write_text("{}")
    assert written_files(str(tmp_path)) == [
        "config.json",
        "model.safetensors",
        "summary.json",
        "checkpoint-2/",
        "checkpoint-3/ (incomplete)",
        "checkpoint-10/",
    ]


def _finished_trainer(output_dir, monitor):
    """A stand-in for a trained GRPO trainer, as much of one as ``summarize`` reads."""
    from types import SimpleNamespace

    history = [{"step": 1, "reward": 0.25, "loss": 0.0}, {"step": 2, "loss": 0.01}, {"step": 3, "reward": 0.5}]
    (output_dir / "metrics.jsonl").write_text("\n".join(json.dumps(row) for row in history) + "\n")
    (output_dir / "checkpoint-3").mkdir()
    (output_dir / "checkpoint-3" / "trainer_state.json").write_text("{}")
    return SimpleNamespace(
        args=SimpleNamespace(output_dir=str(output_dir), bf16=False, fp16=False, use_cpu=True),
        state=SimpleNamespace(log_history=history, global_step=3),
        accelerator=SimpleNamespace(is_main_process=True),
        callback_handler=SimpleNamespace(callbacks=[monitor] if monitor is not None else []),
    )


def test_summary_reports_health_warnings_and_checkpoints(tmp_path, capsys):
    """The health monitor's warnings (each kind once: count, first step, advice) are in the table, in a block after
    it and in summary.json; the checkpoint folder is among the outputs."""
    from trl_ext.diagnostics.health import HealthEvent, HealthMonitor
    from trl_ext.recipe.grpo import summarize

    monitor = HealthMonitor()
    monitor.events = [
        HealthEvent(step=240, condition="reward_stall", message="reward stalled. Check the rewards."),
        HealthEvent(step=480, condition="reward_stall", message="reward stalled again."),
        HealthEvent(step=500, condition="clip_high", message="30% of tokens clipped. Lower learning_rate."),
        HealthEvent(step=700, condition="reward_stall", message="reward stalled a third time."),
    ]
    summary = summarize("dapo", _finished_trainer(tmp_path, monitor), "m", None, None, None, None, 0.0, 1.0)
    printed = capsys.readouterr().out
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["health_warnings"] == summary["health_warnings"] == [
        {"kind": "reward_stall", "count": 3, "step": 240, "message": "reward stalled. Check the rewards.",
         "fatal": False},
        {"kind": "clip_high", "count": 1, "step": 500, "message": "30% of tokens clipped. Lower learning_rate.",
         "fatal": False},
    ]  # fmt: skip
    assert written["outputs"]["files"][-1] == "checkpoint-3/"
    row = "  health           4 warnings: reward_stall x3 (first at step 240), clip_high x1 (first at step 500)\n"
    assert row in printed
    assert printed.rstrip().splitlines()[-3:] == [
        "health warnings (the first of each kind, with what to do):",
        "  reward_stall at step 240: reward stalled. Check the rewards.",
        "  clip_high at step 500: 30% of tokens clipped. Lower learning_rate.",
    ]
    assert "checkpoint-3/" in printed.splitlines()[-4]  # the outputs row, just before the block


def test_summary_says_no_health_warnings_and_nothing_without_a_monitor(tmp_path, capsys):
    from trl_ext.diagnostics.health import HealthMonitor
    from trl_ext.recipe.grpo import summarize

    (tmp_path / "quiet").mkdir()
    (tmp_path / "off").mkdir()
    trainer = _finished_trainer(tmp_path / "quiet", HealthMonitor())
    quiet = summarize("dapo", trainer, "m", None, None, None, None, 0, 1)
    assert quiet["health_warnings"] == [] and "  health           no warnings\n" in capsys.readouterr().out
    off = summarize("dapo", _finished_trainer(tmp_path / "off", None), "m", None, None, None, None, 0, 1)
    printed = capsys.readouterr().out.splitlines()
    assert off["health_warnings"] is None and not any(line.split()[:1] == ["health"] for line in printed)
    assert printed[-1].startswith("  outputs ")


# -- recipes inside the package -----------------------------------------------------------------------------------


def test_top_level_recipes_only_call_the_packaged_cli():
    """``recipes/<name>.py`` is a one-line docstring naming its module, ``from trl_ext.scripts.<name> import cli``
    and a guarded ``cli()``: nothing that ``trl_ext/scripts/<name>.py`` says already (usage lines included)."""
    import ast

    from trl_ext.cli import RECIPES

    for name in RECIPES:
        with open(os.path.join(ROOT, "recipes", f"{name}.py")) as f:
            body = ast.parse(f.read()).body
        assert isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), name
        assert "\n" not in body[0].value.value and f"trl_ext/scripts/{name}.py" in body[0].value.value, name
        imports, guard = body[1:-1], body[-1]
        assert [ast.unparse(node) for node in imports] == [f"from trl_ext.scripts.{name} import cli"], name
        assert ast.unparse(guard) == "if __name__ == '__main__':\n    cli()", name


def test_config_names_resolve_to_the_packaged_yaml_from_any_directory(tmp_path, monkeypatch):
    from trl_ext.recipe.paths import ACCELERATE_CONFIGS_DIR, CONFIGS_DIR, documented_name, resolve_config

    monkeypatch.chdir(tmp_path)
    name = "qwen2.5-math-7b/dapo/config_colocate.yaml"
    packaged = os.path.join(CONFIGS_DIR, *name.split("/"))
    assert resolve_config(f"recipes/configs/{name}") == packaged == resolve_config(f"./recipes/configs/{name}")
    assert resolve_config(name) == packaged and documented_name(packaged) == f"recipes/configs/{name}"
    assert resolve_config("recipes/accelerate_configs/zero3.yaml") == os.path.join(
        ACCELERATE_CONFIGS_DIR, "zero3.yaml"
    )
    # A missing name is returned as given (the parser reports it); an absolute path is never replaced
    assert resolve_config("recipes/configs/nope.yaml") == "recipes/configs/nope.yaml"
    assert resolve_config(str(tmp_path / "recipes/configs" / name)) == str(tmp_path / "recipes/configs" / name)
    # A file of the user's own at that relative path wins over the packaged one
    own = tmp_path / "recipes" / "configs" / "qwen2.5-math-7b" / "dapo" / "config_colocate.yaml"
    own.parent.mkdir(parents=True)
    own.write_text("max_steps: 3\n")
    assert resolve_config(f"recipes/configs/{name}") == f"recipes/configs/{name}"
    # The checkout's recipes/configs and recipes/accelerate_configs are the packaged folders, not copies
    assert os.path.realpath(os.path.join(ROOT, "recipes", "configs")) == os.path.realpath(CONFIGS_DIR)
    assert os.path.realpath(os.path.join(ROOT, "recipes", "accelerate_configs")) == os.path.realpath(
        ACCELERATE_CONFIGS_DIR
    )


def test_a_documented_config_name_parses_outside_the_checkout(tmp_path, monkeypatch):
    from trl_ext.recipe.grpo import parse

    monkeypatch.chdir(tmp_path)
    argv = ["--config", "recipes/configs/demo/dapo/config_demo.yaml", "--output_dir", str(tmp_path / "out")]
    script_args, training_args, _ = parse("dapo", argv=argv)
    assert script_args.given_sources["learning_rate"] == "demo config" and training_args.learning_rate == 5e-4
    with pytest.raises(FileNotFoundError, match="--config recipes/configs/demo/dapo/config_demoo.yaml"):
        parse("dapo", argv=["--config", "recipes/configs/demo/dapo/config_demoo.yaml"])
