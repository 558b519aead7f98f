"""What a recipe shows: a clean console (no raw metrics dict, no warning our code causes, no preprocessing bars), live
figures per phase, held-out accuracy during RL in ``metrics.jsonl`` and ``curves.png``, a summary table; a real local
dataset with a test split gets the same; precision follows the hardware."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from trl_ext.console import library_lines_dropped

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RAW_DICT = re.compile(r"\{'[\w/]+': ")  # transformers' PrinterCallback / ProgressCallback: {'loss': '1.3', ...}
NOISE = [
    "Warning",  # FutureWarning, UserWarning, ...
    "deprecated",
    "Setting accelerator to CPU",
    "Tokenizing train dataset",
    "Adding EOS",
    "Loading weights",
    "Writing model shards",
]


def _recipe(recipe: str, *args: str, cwd: str, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": ROOT,
        **(extra_env or {}),
    }
    # What a user sees by default: no variable the test process itself set (conftest sets W&B off; quiet_libraries,
    # run by other tests in this process, sets DS_ACCELERATOR, which would hide DeepSpeed's accelerator line).
    for name in ("TRL_EXT_LIBRARY_WARNINGS", "WANDB_MODE", "DS_ACCELERATOR"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "recipes", recipe), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _metrics(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_demo_console_is_clean_and_logs_held_out_accuracy(tmp_path):
    """The done-when check of issue 15: the demo from nothing (a fresh warm start in an empty cache folder), a few RL
    steps."""
    out, cache = tmp_path / "run", tmp_path / "cache"
    result = _recipe(
        "dapo.py",
        *("--max_steps", "4", "--logging_steps", "2", "--output_dir", str(out)),
        cwd=str(tmp_path),
        extra_env={"TRL_EXT_CACHE": str(cache)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout + result.stderr
    assert not RAW_DICT.search(printed), RAW_DICT.search(printed)
    for noise in NOISE:
        assert noise not in printed, noise

    lines = result.stdout.splitlines()
    opening = lines[0]
    assert opening.startswith("[dapo] DAPOTrainer") and "fp32 on CPU" in opening and str(out) in opening
    assert "| generation transformers |" in opening
    assert "600 train / 240 held-out" in opening and "4 steps of 8 prompts x 8 completions" in opening
    assert f"SFT warm start (trained first, then cached in {cache})" in opening  # a first run: nothing cached yet
    # the next run says "(cached)": the warm start is complete under its key in the cache folder
    assert [p.parent.name for p in (cache / "demo-warm-start").glob("*/warm_start.json")]
    assert any(line.startswith("warm start (SFT) step 600/600 | loss") for line in lines)
    rl_lines = [line for line in lines if line.startswith("dapo (RL) step")]
    assert [line.split(" | ")[0] for line in rl_lines] == ["dapo (RL) step 2/4", "dapo (RL) step 4/4"]
    assert all("reward " in line and "kept " in line and "held-out " in line for line in rl_lines)
    assert "warm start (SFT)" in result.stderr and "dapo (RL)" in result.stderr  # the bars
    assert "evaluation (before RL)" in result.stderr

    rows = _metrics(out / "metrics.jsonl")
    held_out = [(row["step"], row["held_out/accuracy"]) for row in rows if "held_out/accuracy" in row]
    assert [step for step, _ in held_out] == [2, 4]
    assert all("reward" in row for row in rows if "held_out/accuracy" in row)  # in the regular log of that step
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accuracy_after"] == held_out[-1][1]
    generation = summary["generation"]  # dynamic sampling timed it: seconds per optimizer step and share of the step
    assert generation["backend"] == "transformers" and 0 < generation["share_of_step"] <= 1
    assert generation["s_per_step"] > 0 and f"transformers: {generation['s_per_step']:.3f} s/step" in result.stdout
    assert summary["accuracy_gain_points"] == round(100 * (summary["accuracy_after"] - summary["accuracy_before"]), 1)
    assert (out / "curves.png").stat().st_size > 10_000
    # the summary table: aligned rows, the same figures as summary.json
    table = result.stdout[result.stdout.index("== dapo (DAPOTrainer) ==") :].splitlines()[1:]
    assert len({line.index(line.split("  ")[1].strip()) for line in table if line.strip()}) == 1
    expected = f"{summary['accuracy_before']:.3f} -> {summary['accuracy_after']:.3f}"
    assert any(line.split()[:3] == ["held-out", "greedy", "accuracy"] and expected in line for line in table)


def test_curves_lead_with_held_out_accuracy_and_mark_the_warm_start(tmp_path):
    from trl_ext.recipe.grpo import plot_curves

    rows = [
        {"step": 2, "reward": 0.3, "dynamic_sampling/kept_group_frac": 0.8, "dynamic_sampling/rounds": 2.0},
        {"step": 2, "held_out/accuracy": 0.4, "reward": 0.3, "entropy": 0.5, "clip_ratio/region_mean": 0.01},
        {"step": 4, "held_out/accuracy": 0.5, "reward": 0.35, "entropy": 0.4, "clip_ratio/region_mean": 0.02},
    ]
    fig = plot_curves({"dapo": rows}, warm_start=0.25)
    accuracy_ax = fig.axes[0]
    assert accuracy_ax.get_title() == "held-out greedy accuracy"
    line, warm = accuracy_ax.get_lines()
    assert list(line.get_xdata()) == [0, 2, 4] and list(line.get_ydata()) == [0.25, 0.4, 0.5]
    assert list(warm.get_ydata()) == [0.25, 0.25]  # the horizontal warm-start level
    assert [ax.get_title() for ax in fig.axes[1:5]] == ["reward", "kept-group fraction", "clip fraction", "entropy"]
    path = tmp_path / "curves.png"
    plot_curves({"dapo": rows}, str(path), warm_start=0.25)
    assert path.stat().st_size > 0


class _State:
    def __init__(self, logging_steps=2, max_steps=10):
        self.logging_steps, self.max_steps, self.global_step = logging_steps, max_steps, 0
        self.log_history: list[dict] = []


class _Control:
    should_log = False


def test_held_out_interval_is_a_multiple_of_logging_steps_and_the_value_joins_that_log():
    from trl_ext.diagnostics.held_out import HeldOutEvaluation

    values = iter([0.5, 0.6, 0.7])
    callback = HeldOutEvaluation(lambda model: next(values), every=3, start=0.25)
    state, control = _State(logging_steps=2, max_steps=6), _Control()
    callback.on_train_begin(None, state, control)
    assert callback.every == 4  # 3 rounded up to a multiple of logging_steps
    logged = []
    for step in range(1, 7):
        state.global_step = step
        control.should_log = step % 2 == 0
        callback.on_step_end(None, state, control, model=None)
        if control.should_log:
            logs = {"loss": 0.0}
            state.log_history.append({**logs, "step": step})
            callback.on_log(None, state, control, logs=logs)
            logged.append((step, logs.get("held_out/accuracy"), state.log_history[-1].get("held_out/accuracy")))
    # evaluated at step 4 (interval) and 6 (last step); each value lands in the log of its own step
    assert callback.points == [(0, 0.25), (4, 0.5), (6, 0.6)]
    assert logged == [(2, None, None), (4, 0.5, 0.5), (6, 0.6, 0.6)]


def test_adaptive_interval_widens_when_evaluation_costs_too_much(monkeypatch):
    from trl_ext.diagnostics import held_out

    clock = {"now": 0.0}
    monkeypatch.setattr(held_out.time, "time", lambda: clock["now"])

    def evaluate(model):  # one evaluation takes 1 s
        clock["now"] += 1.0
        return 0.5

    callback = held_out.HeldOutEvaluation(evaluate, every=None, target_frac=0.05)
    state, control = _State(logging_steps=5, max_steps=1000), _Control()
    callback.on_train_begin(None, state, control)
    assert callback.every == 5
    for step in range(1, 11):  # steps take 0.1 s: evaluating every 5 steps would cost 1 s per 0.5 s of training
        clock["now"] += 0.1
        state.global_step = step
        callback.on_step_end(None, state, control, model=None)
    # one evaluation (1 s) must be at most 5% of the steps between two: 1 / (0.05 * 0.1) = 200 steps
    assert callback.every == 200
    assert callback.points == [(5, 0.5)]


def test_held_out_accuracy_reaches_trackers_and_the_log_history(tiny_model, tokenizer, problems, tmp_path):
    """In a real GRPO run: the callback registers first, so a reporting callback (here a recorder added after it, as
    transformers adds TensorBoard / W&B) and ``log_history`` see ``held_out/accuracy`` in the log of its step."""
    from helpers import tiny_args
    from transformers import TrainerCallback

    from trl_ext import trainer_class_for
    from trl_ext.diagnostics.held_out import HeldOutEvaluation, held_out_accuracy
    from trl_ext.rewards import arithmetic_reward

    class Recorder(TrainerCallback):
        logs: list[dict] = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.logs.append(dict(logs))

    args = tiny_args("grpo", tmp_path, max_steps=4, logging_steps=2, beta=0.0)  # no reference model to load
    train, test = problems
    recorder = Recorder()
    trainer = trainer_class_for(args)(
        model=tiny_model,
        reward_funcs=[arithmetic_reward],
        args=args,
        train_dataset=train,
        processing_class=tokenizer,
        callbacks=[recorder],
    )
    trainer.callback_handler.callbacks.remove(recorder)
    trainer.callback_handler.callbacks.insert(0, recorder)  # where TensorBoard / W&B sit: before user callbacks
    evaluation = HeldOutEvaluation(lambda model: held_out_accuracy(model, tokenizer, test), every=2).attach(trainer)
    trainer.train()
    seen = [(log.get("held_out/accuracy")) for log in recorder.logs if "loss" in log]
    assert seen == [value for _, value in evaluation.points] and len(seen) == 2
    history = [h["held_out/accuracy"] for h in trainer.state.log_history if "held_out/accuracy" in h]
    assert history == seen
    assert seen[-1] == held_out_accuracy(trainer.model, tokenizer, test)  # the same weights, the same figure


def _tiny_local_model(path) -> str:
    from trl_ext.demo import DemoModelConfig, build_model, build_tokenizer

    tokenizer = build_tokenizer()
    config = DemoModelConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    build_model(tokenizer, config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def _write_jsonl(path, rows) -> None:
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")


@pytest.mark.slow
def test_local_dataset_folder_gets_the_console_and_a_held_out_figure_from_its_test_split(tmp_path):
    """``--dataset_name <folder>`` with train.jsonl / test.jsonl (prompt, solution), ``--reward_funcs accuracy``, a
    local model and no precision flags on a CPU machine: it trains, evaluates on test.jsonl, says fp32."""
    model = _tiny_local_model(tmp_path / "model")
    data = tmp_path / "data"
    data.mkdir()
    _write_jsonl(data / "train.jsonl", [{"prompt": f"{a}+{a}=", "solution": str(2 * a)} for a in range(12)])
    _write_jsonl(data / "test.jsonl", [{"prompt": f"{a}+1=", "solution": str(a + 1)} for a in range(6)])
    out = tmp_path / "run"
    result = _recipe(
        "dapo.py",
        *("--model_name_or_path", model, "--dataset_name", str(data), "--reward_funcs", "accuracy"),
        *("--num_generations", "4", "--per_device_train_batch_size", "8", "--max_completion_length", "4"),
        *("--max_steps", "2", "--logging_steps", "1", "--output_dir", str(out), "--report_to", "none"),
        *("--save_strategy", "no", "--overlong_buffer_len", "1", "--num_minibatches", "1"),
        cwd=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout + result.stderr
    assert not RAW_DICT.search(printed)
    for noise in NOISE:
        assert noise not in printed, noise
    opening = result.stdout.splitlines()[0]
    assert f"data {data} (12 train / 6 held-out)" in opening and "fp32 on CPU" in opening
    assert "held-out greedy accuracy before RL" in result.stdout
    assert [line.split(" | ")[0] for line in result.stdout.splitlines() if " (RL) step" in line] == [
        "dapo (RL) step 1/2",
        "dapo (RL) step 2/2",
    ]
    rows = _metrics(out / "metrics.jsonl")
    assert [row["step"] for row in rows if "held_out/accuracy" in row] == [1, 2]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["held_out_problems"] == 6 and 0.0 <= summary["accuracy_after"] <= 1.0


def test_held_out_accuracy_scores_greedy_completions_with_the_task_reward(tiny_model, tokenizer):
    """The reward-based metric on a dataset with ``solution``: hand-checked against the model's own greedy output."""
    from datasets import Dataset

    from trl_ext.diagnostics.held_out import held_out_accuracy
    from trl_ext.rewards import get_rewards

    prompts = ["1+1=", "2+3=", "4+4="]
    inputs = tokenizer(prompts, return_tensors="pt", padding=True)
    output = tiny_model.generate(**inputs, max_new_tokens=3, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(output[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    # the first solution is what the model says (right by construction), the others cannot be matched
    solutions = [texts[0].strip() or "0", "never", "never"]
    (accuracy,) = get_rewards(["accuracy"])
    expected = sum(r or 0.0 for r in accuracy(completions=texts, solution=solutions)) / 3
    dataset = Dataset.from_dict({"prompt": prompts, "solution": solutions})
    assert held_out_accuracy(tiny_model, tokenizer, dataset, accuracy, max_new_tokens=3) == pytest.approx(expected)
    assert held_out_accuracy(tiny_model, tokenizer, dataset) is None  # no answer column and no task reward


def _no_bf16_gpu() -> bool:
    from transformers.utils import is_torch_bf16_gpu_available

    return not is_torch_bf16_gpu_available()


@pytest.mark.skipif(not _no_bf16_gpu(), reason="checks the behaviour on a machine without a bf16 GPU")
def test_precision_follows_the_hardware_and_an_explicit_bf16_fails_clearly(tmp_path):
    from trl_ext import DAPOConfig
    from trl_ext.recipe.grpo import parse

    base = ["--model_name_or_path", "some/model", "--output_dir", str(tmp_path), "--per_device_train_batch_size", "16"]
    _, training_args, _ = parse(DAPOConfig, "dapo", argv=base)
    assert training_args.bf16 is False  # TRL's default (bf16) would stop here with "Your setup doesn't support bf16"
    import torch

    if not torch.cuda.is_available():
        assert training_args.use_cpu is True
    with pytest.raises(ValueError, match=r"bf16=True, but this machine has no GPU that supports bf16.*--bf16"):
        parse(DAPOConfig, "dapo", argv=[*base, "--bf16", "true"])
    config = tmp_path / "config.yaml"
    config.write_text("bf16: true\n")
    with pytest.raises(ValueError, match="bf16=True"):
        parse(DAPOConfig, "dapo", argv=["--config", str(config), *base])
    _, training_args, _ = parse(DAPOConfig, "dapo", argv=[*base, "--bf16", "true", "--use_cpu", "true"])
    assert training_args.bf16 is True  # asked for, with bf16 autocast on the CPU


def test_library_notices_are_hidden_but_warnings_that_ask_to_act_are_shown():
    """After ``quiet_libraries()`` (a fresh interpreter, as a recipe starts): transformers' rename FutureWarning from
    TRL's config default is gone, our own logger's warning (e.g. dynamic sampling's round limit) is printed; with
    ``TRL_EXT_LIBRARY_WARNINGS=1`` the library warning is back."""
    code = (
        "import logging, tempfile\n"
        "from trl_ext.console import quiet_libraries\n"
        "quiet_libraries()\n"
        "from trl import GRPOConfig\n"
        "GRPOConfig(output_dir=tempfile.mkdtemp(), use_cpu=True, bf16=False, report_to='none')\n"
        "logging.getLogger('trl_ext.grpo.dynamic_sampling').warning('round limit hit: raise num_generations')\n"
    )
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
    env.pop("TRL_EXT_LIBRARY_WARNINGS", None)
    quiet = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert "gradient_checkpointing" not in quiet.stderr
    assert "WARNING [trl_ext.grpo.dynamic_sampling] round limit hit: raise num_generations" in quiet.stderr
    env["TRL_EXT_LIBRARY_WARNINGS"] = "1"
    loud = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "FutureWarning: `gradient_checkpointing` is deprecated" in loud.stderr
    assert "round limit hit" in loud.stderr


def test_held_out_split_can_be_a_file_of_its_own(tmp_path):
    from trl_ext.data import load_data

    _write_jsonl(tmp_path / "train.jsonl", [{"prompt": "1+1=", "solution": "2"}] * 3)
    _write_jsonl(tmp_path / "test.jsonl", [{"prompt": "2+2=", "solution": "4"}] * 2)
    train, test = load_data(str(tmp_path / "train.jsonl"), test_split=str(tmp_path / "test.jsonl"))
    assert (len(train), len(test)) == (3, 2) and test["prompt"] == ["2+2=", "2+2="]
    train, test = load_data(str(tmp_path / "train.jsonl"))  # a lone file: nothing held out
    assert len(train) == 3 and test is None
    with pytest.raises(FileNotFoundError, match="dataset_test_split="):
        load_data(str(tmp_path / "train.jsonl"), test_split=str(tmp_path / "missing.jsonl"))


def test_large_held_out_split_is_cut_to_a_seeded_subset_with_a_warning(tmp_path, caplog):
    from trl_ext.data import load_task_data
    from trl_ext.recipe.args import RLScriptArguments

    _write_jsonl(tmp_path / "train.jsonl", [{"prompt": "1+1=", "solution": "2"}] * 3)
    _write_jsonl(tmp_path / "test.jsonl", [{"prompt": f"{a}+1=", "solution": str(a + 1)} for a in range(30)])
    args = RLScriptArguments(dataset_name=str(tmp_path), held_out_max_problems=8)
    with caplog.at_level("WARNING", logger="trl_ext"):
        held_out = load_task_data(args, hold_out=True).held_out
    assert len(held_out) == 8 and len(set(held_out["prompt"])) == 8
    assert "has 30 problems: evaluating a seeded random 8" in caplog.text and "held_out_max_problems" in caplog.text
    assert load_task_data(args, hold_out=True).held_out["prompt"] == held_out["prompt"]  # the same subset on every run
    for keep_all in (None, 0, 30):
        args.held_out_max_problems = keep_all
        assert len(load_task_data(args, hold_out=True).held_out) == 30
    assert RLScriptArguments().held_out_max_problems == 500  # the demo's 240 problems are all kept


def test_console_prints_compact_lines_and_no_bar_with_disable_tqdm(capsys):
    from types import SimpleNamespace

    from trl_ext.console import ConsoleCallback

    console = ConsoleCallback("dapo (RL)", held_out=True)
    state = SimpleNamespace(is_local_process_zero=True, max_steps=20, global_step=0)
    console.on_train_begin(SimpleNamespace(disable_tqdm=True), state, None)
    assert console.bar is None
    state.global_step = 10
    logs = {"loss": 0.01, "reward": 0.4125, "dynamic_sampling/kept_group_frac": 0.78, "dynamic_sampling/rounds": 1.9}
    console.on_log(None, state, None, logs={**logs, "entropy": 0.5, "clip_ratio/region_mean": 0.0123})
    console.on_log(None, state, None, logs={"held_out/accuracy": 0.55, **logs})
    console.on_log(None, state, None, logs={"train_runtime": 3.0, "train_loss": 0.1})  # the end-of-training record
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "dapo (RL) step 10/20 | reward 0.412 | kept 0.78 | rounds 1.90 | clip 0.012 | entropy 0.500 | held-out -",
        "dapo (RL) step 10/20 | reward 0.412 | kept 0.78 | rounds 1.90 | clip -     | entropy -     | held-out 0.550",
    ]


def test_console_lines_keep_one_format_across_rollouts_and_show_held_out_only_where_measured():
    """DAPO with 2 optimizer steps per rollout, logged every step, held-out measured at steps 2 and 4: the steps
    that did not generate carry no reward figures and the steps between evaluations no held-out figure; every line
    still has the same columns in the same order, ``-`` where a figure was not logged, never an older value."""
    from types import SimpleNamespace

    from trl_ext.console import ConsoleCallback

    console = ConsoleCallback("dapo (RL)", bar=False, held_out=True)
    state = SimpleNamespace(is_local_process_zero=True, max_steps=10, global_step=0)
    rollout = {"reward": 0.25, "dynamic_sampling/kept_group_frac": 0.5, "dynamic_sampling/rounds": 2.0}
    steps = [
        {"loss": 0.0, **rollout, "clip_ratio/region_mean": 0.0, "entropy": 0.9},  # step 1: generated
        {"loss": 0.021, "clip_ratio/region_mean": 0.013, "entropy": 0.8, "held_out/accuracy": 0.4},  # step 2
        {"loss": -0.002, **rollout, "reward": 0.5, "clip_ratio/region_mean": 0.0, "entropy": 0.7},  # step 3
        {"loss": 0.03, "clip_ratio/region_mean": 0.02, "entropy": 0.6, "grad_norm": 0.1},  # step 4: no held-out
        {"eval_loss": 1.0},  # a record without figures: no line
    ]
    for step, logs in enumerate(steps, start=1):
        state.global_step = step
        console.on_log(None, state, None, logs=logs)
    assert console.lines == [
        "dapo (RL) step  1/10 | reward 0.250 | kept 0.50 | rounds 2.00 | clip 0.000 | entropy 0.900 | held-out -",
        "dapo (RL) step  2/10 | reward -     | kept -    | rounds -    | clip 0.013 | entropy 0.800 | held-out 0.400",
        "dapo (RL) step  3/10 | reward 0.500 | kept 0.50 | rounds 2.00 | clip 0.000 | entropy 0.700 | held-out -",
        "dapo (RL) step  4/10 | reward -     | kept -    | rounds -    | clip 0.020 | entropy 0.600 | held-out -",
    ]


def test_console_columns_are_set_by_the_first_log_and_a_new_figure_joins_at_the_end():
    """Without ``held_out=True`` the held-out column appears when the first measurement does, after the others; SFT
    (no reward) keeps its loss column."""
    from trl_ext.console import columns, figures

    first = {"loss": 0.5, "reward": 0.2, "entropy": 0.9}
    shown = columns(first)
    assert [label for _, label, _ in shown] == ["reward", "entropy"]  # an RL loss is not a column
    shown = columns({"loss": 0.1, "entropy": 0.8, "held_out/accuracy": 0.3}, shown=shown)
    assert [label for _, label, _ in shown] == ["reward", "entropy", "held-out"]
    assert figures({"loss": 0.1, "entropy": 0.8, "held_out/accuracy": 0.3}, shown) == [
        "reward -    ",
        "entropy 0.800",
        "held-out 0.300",
    ]
    sft = columns({"loss": 1.3344, "entropy": 1.35, "mean_token_accuracy": 0.507})
    assert figures({"loss": 1.3344, "entropy": 1.35, "mean_token_accuracy": 0.507}, sft) == [
        "loss 1.334",
        "entropy 1.350",
        "token acc 0.507",
    ]


def test_library_lines_dropped_keeps_everything_else_in_order(capsys, monkeypatch):
    monkeypatch.delenv("TRL_EXT_LIBRARY_WARNINGS", raising=False)
    with library_lines_dropped("===training policy==="):
        print("step 1")
        print("===training policy===")
        print("===training policy=== and more")
        print("tail without newline", end="")
    assert capsys.readouterr().out == "step 1\n===training policy=== and more\ntail without newline"
    monkeypatch.setenv("TRL_EXT_LIBRARY_WARNINGS", "1")  # everything, as the library prints it
    with library_lines_dropped("===training policy==="):
        print("===training policy===")
    assert capsys.readouterr().out == "===training policy===\n"
