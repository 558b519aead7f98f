"""The command line a new user meets: ``trl-ext --help`` without torch, a recipe's short ``--help`` (and
``--help-all``), and user errors (a flag, a file, the data's columns, a config value) printed as one message with
exit code 2, the traceback only under ``TRL_EXT_DEBUG=1``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from layout_files import LAYOUTS

from trl_ext import cli
from trl_ext.errors import MissingFileError, UserError, missing_path_message
from trl_ext.recipe.grpo import parse


def _gsm8k_file(path, rows: int = 12) -> str:
    with open(path, "w") as f:
        for i in range(rows):
            f.write(json.dumps(LAYOUTS["gsm8k"](f"{i}+{i}=", 2 * i)) + "\n")
    return str(path)


# -- trl-ext --help --------------------------------------------------------------------------------------------------


def test_console_script_help_imports_no_torch():
    code = "import sys, trl_ext.cli; trl_ext.cli.main(['--help']); assert 'torch' not in sys.modules, 'torch'"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "presets:  dapo | dr_grpo | grpo | gspo | gspo_token" in run.stdout


def test_console_script_preset_names_are_the_tables():
    from trl_ext.grpo.presets import preset_names

    assert list(cli.PRESET_NAMES) == preset_names() and cli.preset_names() == set(preset_names())
    assert cli.resolve("gspo_token", ["--max_steps", "1"])[1] == ["--preset", "gspo_token", "--max_steps", "1"]


# -- a recipe's --help -----------------------------------------------------------------------------------------------


def _help(argv: list[str], capsys, monkeypatch) -> list[str]:
    monkeypatch.setenv("COLUMNS", "80")  # the narrowest common terminal: the most lines
    with pytest.raises(SystemExit) as done:
        parse("dapo", argv=argv)
    assert done.value.code == 0
    return capsys.readouterr().out.splitlines()


def test_recipe_help_is_short_grouped_and_starts_with_the_model(capsys, monkeypatch):
    lines = _help(["--help"], capsys, monkeypatch)
    assert len(lines) <= 275
    assert lines[0] == "usage: trl-ext dapo [--config FILE.yaml] [--FLAG VALUE ...]"
    assert lines[3].startswith("  --model_name_or_path STR") and lines[4].startswith("  --output_dir STR")
    first_screen = "\n".join(lines[:80])  # where the run writes, beside the model, data and reward flags
    for flag in ("--model_name_or_path", "--output_dir", "--dataset_name", "--reward_funcs"):
        assert f"  {flag} " in first_screen, flag
    headings = [line for line in lines if line.endswith(":") and not line.startswith(" ")]
    assert headings == [
        "model and output:",
        "recipe: data, rewards, run (RLScriptArguments):",
        "preset: DAPOConfig (trl-ext's own fields and defaults):",
        "training:",
        "generation and loss:",
        "logging and checkpoints:",
        "hardware and precision:",
    ]
    text = "\n".join(lines)
    assert "--epsilon_high FLOAT" in text and "(default: 0.28)" in text  # the preset's own value
    assert "--dynamic_sampling_carry_over" in text and "--learning_rate FLOAT" in text
    assert "--health_monitor [BOOL]" in text and "--no_health_monitor" not in text
    assert "--adam_beta1" not in text and "--help-all lists them all" in text
    assert "recipes/configs/demo/dapo/config_demo.yaml sets some of them" in " ".join(text.split())


def test_recipe_help_all_lists_every_field(capsys, monkeypatch):
    lines = _help(["--help-all"], capsys, monkeypatch)
    assert len(lines) > 1000 and any("--adam_beta1" in line for line in lines)


@pytest.mark.parametrize("recipe", ["sft", "dpo", "reward", "eval"])
def test_every_recipe_gets_the_short_help(recipe, capsys, monkeypatch):
    from trl import ModelConfig, RewardConfig, SFTConfig

    from trl_ext.dpo.trainer import DPOConfig
    from trl_ext.recipe import args, parsing

    types = {
        "sft": (args.SFTScriptArguments, SFTConfig, ModelConfig),
        "dpo": (args.DPOScriptArguments, DPOConfig, ModelConfig),
        "reward": (args.RewardScriptArguments, RewardConfig, ModelConfig),
        "eval": (args.EvalArguments,),
    }[recipe]
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        parsing.parse(types, recipe, argv=["--help"])
    out = capsys.readouterr().out
    assert out.startswith(f"usage: trl-ext {recipe} ") and len(out.splitlines()) <= 250
    assert "--dataset_name STR" in out and "--adam_beta1" not in out


# -- user errors -----------------------------------------------------------------------------------------------------


def test_missing_path_message_suggests_the_closest_name(tmp_path):
    _gsm8k_file(tmp_path / "gsm8k_like.jsonl")
    message = missing_path_message(str(tmp_path / "gsm8k_lik.jsonl"), "dataset_name")
    assert message == (
        f"dataset_name={str(tmp_path / 'gsm8k_lik.jsonl')!r}: no such file. "
        f"Did you mean {str(tmp_path / 'gsm8k_like.jsonl')!r}?"
    )
    assert "no such file in" in missing_path_message(str(tmp_path / "zzz.csv"), "dataset_name")
    assert "does not exist either" in missing_path_message(str(tmp_path / "no" / "x.jsonl"), "dataset_name")
    assert missing_path_message("nope.yaml", "--config").startswith("--config nope.yaml: no such file")


def _run_cli(argv: list[str], monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", ["trl-ext", *argv])  # cli.main sets sys.argv for the recipe
    cli.main(argv)


def test_missing_file_prints_the_message_alone_and_exits_2(tmp_path, monkeypatch, capsys):
    _gsm8k_file(tmp_path / "gsm8k_like.jsonl")
    monkeypatch.delenv("TRL_EXT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as done:
        _run_cli(
            ["dapo", "--dataset_name", str(tmp_path / "gsm8k_lik.jsonl"), "--output_dir", str(tmp_path)], monkeypatch
        )
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("trl-ext dapo: error: dataset_name=") and "Did you mean" in err[0]
    assert err[0].endswith(f"{str(tmp_path / 'gsm8k_like.jsonl')!r}?")
    assert err[1:] == ["(TRL_EXT_DEBUG=1 shows the traceback)"]


def test_debug_switch_shows_the_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXT_DEBUG", "1")
    with pytest.raises(MissingFileError, match="no such file"):
        _run_cli(["dapo", "--dataset_name", str(tmp_path / "x.jsonl"), "--output_dir", str(tmp_path)], monkeypatch)


def test_unrecognized_columns_and_config_values_are_user_errors(tmp_path, monkeypatch, capsys):
    path = tmp_path / "odd.jsonl"
    path.write_text(json.dumps({"q": "1+1=", "a": "2"}) + "\n")
    monkeypatch.delenv("TRL_EXT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as done:
        _run_cli(["dapo", "--dataset_name", str(path), "--output_dir", str(tmp_path / "o")], monkeypatch)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "--dataset_prompt_column q" in err and "Traceback" not in err and len(err.splitlines()) == 2
    with pytest.raises(UserError, match="num_generations"):  # a preset's check at construction: a config value
        parse("dapo", argv=["--num_generations", "3", "--per_device_train_batch_size", "8", "--output_dir", "o"])
    with pytest.raises(MissingFileError, match="--config nope.yaml: no such file"):
        parse("dapo", argv=["--config", "nope.yaml"])
    with pytest.raises(UserError, match="Unknown preset 'dapoo'.*Did you mean 'dapo'"):
        parse("grpo", argv=["--preset", "dapoo"])


def test_a_bad_flag_value_is_one_line(capsys):
    with pytest.raises(SystemExit) as done:
        parse("dapo", argv=["--max_steps", "ten"])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "trl-ext dapo: error: argument --max_steps/--max-steps: invalid int value: 'ten'. (--help lists the flags.)"
    ]


def test_bugs_keep_their_traceback(monkeypatch):
    from trl_ext.errors import reported_user_errors

    with pytest.raises(KeyError):
        with reported_user_errors("trl-ext dapo"):
            raise KeyError("a bug")


@pytest.mark.parametrize("command", ["grpo", "dapo", "gspo_token", "sft"])
def test_console_script_help_of_every_kind_of_command(command, capsys, monkeypatch):
    """``trl-ext <recipe> --help`` through the console script's own path (the grpo recipe once took its flags for
    the preset name and crashed)."""
    from trl_ext import cli

    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: trl-ext ")
