"""Training on the datasets people use (trl_ext.data): each recognized layout, written as a small local file of the
demo's arithmetic problems (tests/layout_files.py), trains from ``trl-ext dapo --dataset_name FILE`` with the
held-out figure reported; the cases that used to exit 0 on a reward of zero now say what is wrong."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from datasets import Dataset
from layout_files import CHAT_LAYOUTS, DEMO_CHAT_TEMPLATE, IO_CODE_LAYOUTS, LAYOUTS, write_layout

from trl_ext.data import apply_layout, detect_layout, format_prompts, load_task_data, reference_answer
from trl_ext.recipe import parsing, rewards
from trl_ext.recipe.grpo import fit_to_model, parse, steps_line
from trl_ext.reliability.checks import check_context_length, check_quantization, check_report_to
from trl_ext.reliability.zero_reward import ZeroRewardWatch
from trl_ext.rewards import MathAccuracy
from trl_ext.rewards.code import read_tests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EXPECTED = {  # layout file -> (recognized layout, reference of the problem "26+18=")
    "gsm8k": ("GSM8K", "44"),
    "math": ("MATH (problem + solution)", "44"),
    "math500": ("problem + answer (MATH-500 / DeepScaleR / OpenR1-Math)", "44"),
    "dapo_math": ("DAPO-Math-17k", "44"),
    "deepscaler": ("problem + answer (MATH-500 / DeepScaleR / OpenR1-Math)", "44"),
    "conversational": ("prompt + answer", "44"),
    "mbpp": ("MBPP", ["assert True"]),
    "humaneval": ("HumanEval", "def check(candidate):\n    assert candidate(-1) == 1\n\ncheck(abs)\n"),
}


@pytest.fixture(scope="module")
def layout_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("layouts")
    for layout in LAYOUTS:
        write_layout(str(folder), layout, num_train=32, num_test=24)
    return folder


def _namespace(**kwargs):
    from types import SimpleNamespace

    base = {"dataset_config": None, "dataset_train_split": "train", "dataset_test_split": "test"}
    return SimpleNamespace(**{**base, **kwargs})


# -- recognition and mapping ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", sorted(EXPECTED))
def test_each_layout_is_recognized_and_mapped(layout_dir, layout):
    data = load_task_data(_namespace(dataset_name=str(layout_dir / layout)))
    name, reference = EXPECTED[layout]
    assert data.layout.name == name
    row = next(r for r in data.train if "26+18=" in str(r["prompt"]))
    assert row[data.layout.target_column] == reference
    prompt = row["prompt"]
    text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
    assert text.startswith("26+18=")
    assert len(data.held_out) == 24 and data.layout.target_column in data.held_out.column_names


@pytest.mark.parametrize("layout", sorted(IO_CODE_LAYOUTS))
def test_input_output_code_layouts_pick_the_code_reward_with_their_checker(layout_dir, layout):
    """APPS, TACO, LiveCodeBench, DeepCoder and open-r1 files: recognized, mapped to JSON tests in their own layout
    (so the code reward reads them with that layout's rule, no option needed), and the task reward is ``code``."""
    data = load_task_data(_namespace(dataset_name=str(layout_dir / layout / "train.jsonl")))
    name, tests_layout = IO_CODE_LAYOUTS[layout]
    assert data.layout.name == name and data.layout.task_rewards == ("code",)
    assert data.describe().endswith("checker) -> tests")
    row = next(r for r in data.train if "26+18=" in str(r["prompt"]))
    assert read_tests(row["tests"]).layout == tests_layout
    funcs, names = rewards.task_rewards(_namespace(reward_funcs=None, reward_options=None), data.layout)
    assert names == ["code"]
    right, wrong = "```python\nprint(44)\n```", "```python\nprint(45)\n```"
    assert funcs[0](prompts=[row["prompt"]] * 2, completions=[right, wrong], tests=[row["tests"]] * 2) == [1.0, 0.0]


def test_livecodebench_function_name_and_starter_code_reach_the_tests_and_prompt():
    row = {
        "question_content": "Add two numbers.",
        "starter_code": "class Solution:\n    def add(self, a: int, b: int) -> int:\n        ",
        "public_test_cases": json.dumps([{"input": "1\n2", "output": "3", "testtype": "functional"}]),
        "metadata": json.dumps({"func_name": "add"}),
    }
    data = Dataset.from_list([row])
    layout = detect_layout(data)
    mapped = apply_layout(data, layout)[0]
    assert layout.name == "LiveCodeBench"
    assert mapped["prompt"].endswith("```python\nclass Solution:\n    def add(self, a: int, b: int) -> int:\n```")
    tests = read_tests(mapped["tests"])
    assert (tests.fn_name, tests.inputs, tests.outputs) == ("add", ("[1, 2]",), (3,))
    unreadable = apply_layout(Dataset.from_list([{**row, "public_test_cases": "not json"}]), layout)[0]
    assert unreadable["tests"] is None


def test_opening_line_names_the_mapping():
    layout = detect_layout(Dataset.from_dict({"question": ["1+1="], "answer": ["#### 2"]}))
    assert layout.describe() == "GSM8K layout: question -> prompt, answer after '####' -> reference"
    assert layout.task_rewards == ("accuracy",)
    mbpp = detect_layout(Dataset.from_dict({"text": ["t"], "test_list": [["assert 1"]], "test_setup_code": [""]}))
    assert mbpp.task_rewards == ("code",)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72", "72"),
        ("so $\\boxed{\\frac{1}{2}}$ and later \\boxed{3}", "3"),
        ("\\frac{14}{3}", "\\frac{14}{3}"),
        (34, "34"),
        (2.0, "2"),
        ({"ground_truth": "34"}, None),
        (["34"], None),
        ("", None),
        ("   ", None),
        (None, None),
        ("#### ", None),
    ],
)
def test_reference_is_the_final_answer_or_unscorable(value, expected):
    assert reference_answer(value) == expected


def test_flags_map_any_layout_and_reach_nested_fields():
    data = Dataset.from_dict(
        {"q": ["1+2=", "2+2="], "meta": [{"gt": {"value": "3"}}, {"gt": {"value": "4"}}], "other": ["x", "y"]}
    )
    with pytest.raises(ValueError, match="--dataset_prompt_column q"):
        detect_layout(data)
    layout = detect_layout(data, prompt_column="q", answer_column="meta.gt.value")
    mapped = apply_layout(data, layout)
    assert mapped["prompt"] == ["1+2=", "2+2="] and mapped["answer"] == ["3", "4"]
    with pytest.raises(ValueError, match="no column 'qq'.*Did you mean 'q'"):
        detect_layout(data, prompt_column="qq")


def test_dict_reference_is_unscorable_never_zero():
    """DAPO-Math-17k pointed at the whole ``reward_model`` column: the reference is a dict, scored None (counted in
    accuracy/unscorable_frac), where it used to score 0.0 with unscorable_frac 0."""
    rows = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": "1+1="}]], "reward_model": [{"ground_truth": "2", "style": "x"}]}
    )
    mapped = apply_layout(rows, detect_layout(rows, answer_column="reward_model"))
    assert mapped["answer"] == [None]
    logged = {}
    reward = MathAccuracy()
    assert reward(completions=["2"], answer=[{"ground_truth": "2"}], log_metric=logged.__setitem__) == [None]
    assert logged["accuracy/unscorable_frac"] == 1.0
    assert MathAccuracy(timeout_backend="process")(completions=["2"], answer=[["2"]]) == [None]


def test_final_answer_wins_over_a_worked_solution():
    """DeepScaleR / OpenR1-Math: ``answer`` is the reference even when ``solution`` (without a box) is present."""
    reward = MathAccuracy()
    scores = reward(completions=["44", "43"], answer=["44", "44"], solution=["add the tens first"] * 2)
    assert scores == [1.0, 0.0]


# -- prompts as the model expects them -----------------------------------------------------------------------------


def test_text_prompts_become_conversations_with_a_chat_template(tokenizer):
    data = Dataset.from_dict({"prompt": ["1+1="], "answer": ["2"]})
    assert format_prompts(data, tokenizer)["prompt"] == ["1+1="]  # no template: text as it is
    assert format_prompts(data, tokenizer, "Be brief.")["prompt"] == ["Be brief.\n\n1+1="]
    templated = _templated(tokenizer)
    formatted = format_prompts(data, templated, "Be brief.")["prompt"][0]
    assert formatted == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1="}]


def _templated(tokenizer):
    import copy

    templated = copy.deepcopy(tokenizer)
    templated.chat_template = DEMO_CHAT_TEMPLATE
    return templated


def test_conversational_data_without_a_chat_template_stops_naming_the_fix(tokenizer):
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": "1+1="}]], "answer": ["2"]})
    with pytest.raises(ValueError, match="no chat template.*--chat_template"):
        format_prompts(data, tokenizer)


def test_a_prompt_longer_than_the_context_gets_a_valid_suggestion(tiny_model, tokenizer):
    from types import SimpleNamespace

    data = Dataset.from_dict({"prompt": ["1" * 70]})
    with pytest.raises(ValueError, match="whole context") as error:
        check_context_length(tiny_model.config, SimpleNamespace(max_completion_length=6), tokenizer, data)
    assert "-" not in str(error.value).split("at most")[1].split("tokens")[0]  # a positive bound, not -6
    assert "at most 58 tokens" in str(error.value)


# -- end to end: trl-ext dapo --dataset_name FILE ------------------------------------------------------------------


def _train(layout_dir, layout, tmp_path, *flags):
    from importlib import import_module

    argv = [
        *("--dataset_name", str(layout_dir / layout)),
        *("--max_steps", "2", "--logging_steps", "1", "--held_out_eval_steps", "0"),
        *("--output_dir", str(tmp_path / layout)),
        *flags,
    ]
    if layout in CHAT_LAYOUTS:
        argv += ["--chat_template", DEMO_CHAT_TEMPLATE]
    return import_module("trl_ext.scripts.grpo").main(*parse("dapo", argv=argv))


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["gsm8k", "math", "math500", "dapo_math", "deepscaler", "conversational"])
def test_math_layouts_train_with_accuracy_above_zero(layout_dir, layout, tmp_path):
    summary = _train(layout_dir, layout, tmp_path)
    assert summary["held_out_problems"] == 24
    assert summary["accuracy_before"] > 0.05 and summary["accuracy_after"] is not None
    rows = [json.loads(line) for line in open(tmp_path / layout / "metrics.jsonl")]
    assert "rewards/accuracy/mean" in rows[0]  # the task reward of the layout, not the demo's arithmetic
    assert rows[0]["accuracy/unscorable_frac"] == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["mbpp", "humaneval"])
def test_code_layouts_train_on_the_code_reward(layout_dir, layout, tmp_path):
    """The demo model writes digits, valid Python: HumanEval's ``check(abs)`` passes for half of the problems by
    design, so its held-out figure is clearly above zero; MBPP's prompt (task + tests) is off the demo model's
    distribution, so there the test only asks that the sandbox ran every program (no unscorable example)."""
    summary = _train(layout_dir, layout, tmp_path)
    assert summary["accuracy_before"] is not None and summary["held_out_problems"] == 24
    if layout == "humaneval":
        assert summary["accuracy_before"] > 0.2
    rows = [json.loads(line) for line in open(tmp_path / layout / "metrics.jsonl")]
    assert "rewards/code/mean" in rows[0] and rows[0]["code/sandbox_error_frac"] == 0.0


@pytest.mark.slow
def test_wrong_reference_column_warns_once_with_a_pair_then_stops(layout_dir, tmp_path, caplog):
    """DAPO-Math-17k's whole ``reward_model`` dict as the reference: every completion unscorable, accuracy 0, and one
    warning naming the reward, the column and a reference/completion pair; then the run stops, since its only task
    reward scored no completion for the recipes' ``max_unscorable_rounds=3`` optimizer steps
    (``trl_ext.reliability.unscorable``)."""
    from trl_ext.reliability.reward_guard import RewardFunctionError

    with caplog.at_level(logging.WARNING, logger="trl_ext.reliability.zero_reward"):
        with pytest.raises(RewardFunctionError, match=r"\['accuracy'\] returned None/NaN"):
            _train(layout_dir, "dapo_math", tmp_path, "--dataset_answer_column", "reward_model", "--max_steps", "5")
    warnings = [r.getMessage() for r in caplog.records if r.name == "trl_ext.reliability.zero_reward"]
    assert len(warnings) == 1
    assert "reward 'accuracy'" in warnings[0] and "'answer'" in warnings[0] and "unscorable" in warnings[0]


@pytest.mark.slow
def test_lora_run_lists_the_adapter_files_it_wrote(layout_dir, tmp_path):
    summary = _train(layout_dir, "gsm8k", tmp_path, "--use_peft", "true", "--lora_target_modules", "all-linear")
    assert "adapter_model.safetensors" in summary["outputs"]["files"]
    assert "model.safetensors" not in summary["outputs"]["files"]


@pytest.mark.slow
def test_trl_ext_dapo_dataset_name_file_from_the_command_line(layout_dir, tmp_path):
    """Exactly as a user types it: a GSM8K-layout file, no other flag but a short run."""
    folder = layout_dir / "gsm8k"
    out = tmp_path / "cli"
    command = [
        sys.executable, "-m", "trl_ext.cli", "dapo", "--dataset_name", str(folder / "train.jsonl"),
        "--dataset_test_split", str(folder / "test.jsonl"), "--max_steps", "2", "--held_out_eval_steps", "0",
        "--output_dir", str(out),
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "GSM8K layout: question -> prompt, answer after '####' -> reference" in run.stdout
    assert "reward accuracy (fits the data)" in run.stdout
    summary = json.load(open(out / "summary.json"))
    assert summary["accuracy_before"] > 0.05


# -- no silent zeros ------------------------------------------------------------------------------------------------


def test_user_data_never_gets_the_demo_reward(layout_dir):
    """The GSM8K file renamed to ``prompt`` with no --reward_funcs: math accuracy, not the demo's arithmetic."""
    script_args, _, _ = parse("dapo", argv=["--dataset_name", str(layout_dir / "gsm8k")])
    assert script_args.reward_funcs is None
    data = Dataset.from_dict({"prompt": ["1+1="], "answer": ["#### 2"]})
    layout = detect_layout(data)
    funcs, names = rewards.task_rewards(script_args, layout)
    assert names == ["accuracy"] and funcs[0].__name__ == "accuracy"
    demo_args, _, _ = parse("dapo", argv=[])
    assert rewards.task_rewards(demo_args, load_task_data(demo_args).layout)[1] == ["arithmetic"]
    with pytest.raises(ValueError, match="--dataset_answer_column"):
        rewards.task_rewards(script_args, detect_layout(Dataset.from_dict({"prompt": ["1+1="]})))


def test_zero_reward_watch_warns_once_after_the_first_calls(caplog):
    from types import SimpleNamespace

    state = SimpleNamespace(is_world_process_zero=True)
    watch = ZeroRewardWatch(MathAccuracy(), "answer", calls=2)
    with caplog.at_level(logging.WARNING, logger="trl_ext.reliability.zero_reward"):
        watch(completions=["7"], answer=["44"])  # held-out evaluation (no trainer_state): not counted
        for _ in range(3):
            assert watch(completions=["7", "8"], answer=["44", "45"], trainer_state=state) == [0.0, 0.0]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "reference '44', completion '7'" in messages[0]
    assert "first 2 generation rounds" in messages[0]
    healthy = ZeroRewardWatch(MathAccuracy(), "answer", calls=1)
    healthy(completions=["44"], answer=["44"], trainer_state=state)
    assert not healthy.armed and not healthy.warned


# -- leaving the demo is not a cliff --------------------------------------------------------------------------------


def test_a_given_model_gets_the_presets_batch_and_a_completion_length_that_fits(tiny_model, tokenizer, tmp_path):
    model_dir = tmp_path / "model"
    tiny_model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    script_args, training_args, _ = parse(
        "dapo", argv=["--model_name_or_path", str(model_dir), "--output_dir", str(tmp_path / "out")]
    )
    preset = training_args.max_completion_length
    assert preset > 64  # the preset's, not the demo YAML's 6
    line = steps_line(training_args)
    assert line == "3 epochs, steps of 8 completions (rollouts of 8 prompts x 16 completions, 16 steps each)"
    data = Dataset.from_dict({"prompt": ["12+13=", "1+2="]})
    fitted = fit_to_model("dapo", training_args, tiny_model, tokenizer, data, script_args)
    assert training_args.max_completion_length == 64 - 6 and f"{preset} -> 58" in fitted
    assert training_args.overlong_buffer_len == int(0.2 * 58)
    argv = ["--model_name_or_path", str(model_dir), "--max_completion_length", "40", "--output_dir", str(tmp_path)]
    given_args, given, _ = parse("dapo", argv=argv)
    assert "max_completion_length" in given_args.given_fields
    assert fit_to_model("dapo", given, tiny_model, tokenizer, data, given_args) is None  # the user's choice stands
    assert given.max_completion_length == 40


def test_quantization_is_never_ignored(monkeypatch):
    import importlib.util
    from types import SimpleNamespace

    import torch

    args = SimpleNamespace(load_in_4bit=True, load_in_8bit=False, use_peft=True)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "bitsandbytes" else real(n, *a))
    with pytest.raises(ValueError, match="--load_in_4bit.*bitsandbytes"):
        check_quantization(args)
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == "bitsandbytes" else real(n, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="CUDA GPU"):
        check_quantization(args)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ValueError, match="--use_peft true"):
        check_quantization(SimpleNamespace(load_in_4bit=False, load_in_8bit=True, use_peft=False))
    check_quantization(args)  # bitsandbytes, a GPU and LoRA: nothing to say


@pytest.mark.skipif(__import__("importlib.util").util.find_spec("bitsandbytes") is not None, reason="bnb present")
def test_load_in_4bit_stops_the_recipe_before_loading(tmp_path):
    from importlib import import_module

    argv = ["--load_in_4bit", "true", "--use_peft", "true", "--max_steps", "1", "--output_dir", str(tmp_path)]
    with pytest.raises(ValueError, match="bitsandbytes"):
        import_module("trl_ext.scripts.grpo").main(*parse("dapo", argv=argv))


def test_report_to_a_missing_tracker_fails_at_start(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    missing = {"tensorboard", "tensorboardX"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n in missing else real(n, *a))
    with pytest.raises(ValueError, match="report_to='tensorboard'.*pip install tensorboard"):
        check_report_to(["tensorboard"])
    with pytest.raises(ValueError, match="tensorboard"):
        parse("dapo", argv=["--report_to", "tensorboard"])
    check_report_to(["none"])


# -- the command line behaves -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", ["dapo", "grpo", "gspo", "dr_grpo", "sft", "dpo"])
def test_help_works_for_every_recipe(recipe, capsys):
    from trl import ModelConfig, SFTConfig

    from trl_ext.dpo.trainer import DPOConfig
    from trl_ext.recipe.args import DPOScriptArguments, SFTScriptArguments

    with pytest.raises(SystemExit) as done:
        if recipe == "sft":
            parsing.parse((SFTScriptArguments, SFTConfig, ModelConfig), "sft", argv=["--help"])
        elif recipe == "dpo":
            parsing.parse((DPOScriptArguments, DPOConfig, ModelConfig), "dpo", argv=["--help"])
        else:
            parse(recipe, argv=["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--dataset_answer_column" in out and "--system_prompt" in out and "--learning_rate" in out
    if recipe not in ("sft", "dpo"):
        assert "5 percent of the run" in out
    if recipe == "dapo":
        assert "20% of max_completion_length" in " ".join(out.split())  # the help that broke argparse's % formatting


@pytest.mark.slow
def test_help_from_the_console_script_on_every_command():
    for command in ("dapo", "gspo", "probe", "pipeline"):
        run = subprocess.run(
            [sys.executable, "-m", "trl_ext.cli", command, "--help"], capture_output=True, text=True, cwd=ROOT
        )
        assert run.returncode == 0, run.stderr[-2000:]
        assert "--" in run.stdout and "Traceback" not in run.stderr


@pytest.mark.parametrize(
    ("flag", "close"), [("--learnig_rate", "--learning_rate"), ("--learning_rat", "--learning_rate")]
)
def test_unknown_or_abbreviated_flag_names_the_closest(flag, close, capsys):
    with pytest.raises(SystemExit) as done:
        parse("dapo", argv=[flag, "1e-3"])
    assert done.value.code == 2
    assert f"unknown flag {flag}. Did you mean {close}?" in capsys.readouterr().err


def test_sft_gets_the_worked_solution_as_completion(layout_dir, tokenizer):
    data = load_task_data(_namespace(dataset_name=str(layout_dir / "gsm8k")), with_completion=True)
    row = next(r for r in data.train if r["prompt"] == "26+18=")
    assert row["completion"].endswith("#### 44") and row["answer"] == "44"
    chat = format_prompts(data.train.select(range(1)), _templated(tokenizer))[0]
    assert chat["prompt"][-1]["role"] == "user" and chat["completion"][0]["role"] == "assistant"
    rl = load_task_data(_namespace(dataset_name=str(layout_dir / "gsm8k")))
    assert "completion" not in rl.train.column_names  # RL data carries no target text


def test_longest_prompt_counts_tokens_of_chat_prompts(tokenizer):
    """transformers 5's apply_chat_template returns a BatchEncoding: its length is its keys (2), not its tokens."""
    from trl_ext.reliability.checks import longest_prompt

    data = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": "26+18="}], [{"role": "user", "content": "1="}]]}
    )
    assert longest_prompt(data, _templated(tokenizer)) == (6, 0)
