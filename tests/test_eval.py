"""``trl-ext eval``: the estimators against hand-computed values, the report files, bad input, and the identity of
the recipes' held-out figure with eval's greedy pass@1 on the same model and split."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from importlib import import_module

import pytest
from layout_files import write_layout

from trl_ext.diagnostics.eval_metrics import default_ks, majority_vote, mean_figures, pass_at_k, problem_figures
from trl_ext.diagnostics.eval_report import recompute
from trl_ext.diagnostics.evaluation import EvalSettings, answer_extractor
from trl_ext.recipe.args import EvalArguments
from trl_ext.recipe.grpo import parse as parse_grpo
from trl_ext.recipe.parsing import parse
from trl_ext.reliability.zero_reward import ZeroRewardWatch
from trl_ext.rewards import MathAccuracy, arithmetic_reward, get_rewards

ROOT = __file__.rsplit("/tests/", 1)[0]

# -- estimators ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (5, 2, 1, 2 / 5),  # pass@1 = c / n
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2) / C(5,2)
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5) / C(10,5)
        (5, 4, 2, 1.0),  # n - c < k: every draw of 2 holds a correct one
        (4, 1, 4, 1.0),  # n = k: pass@n is "any correct"
        (4, 0, 4, 0.0),  # n = k, none correct
        (8, 0, 1, 0.0),  # c = 0
        (8, 8, 8, 1.0),
    ],
)
def test_pass_at_k_is_the_unbiased_estimator(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_the_binomial_form_everywhere():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1.0 if n - c < k else 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12), (n, c, k)


def test_majority_vote_tie_goes_to_the_answer_voted_first():
    assert majority_vote(["3", "5", "5", "3", None]) == 0  # 2 votes each: "3" came first
    assert majority_vote(["7", None, "2", "2"]) == 2  # "2" has two votes, at index 2 first
    assert majority_vote([None, "4"]) == 1  # a sample without an answer does not vote
    assert majority_vote([None, None]) is None


def test_problem_figures_by_hand():
    rewards = [1.0, 0.0, None, 1.0]
    answers = ["6", "5", "5", "6"]  # "6" and "5" tie at 2 votes; "6" voted first and is correct
    figures = problem_figures(rewards, answers, [1, 2, 4])
    assert figures["avg@4"] == 0.5  # the per-sample mean (None is wrong)
    assert figures["pass@1"] == 0.5 and figures["pass@2"] == pytest.approx(1 - 1 / 6)  # 1 - C(2,2)/C(4,2)
    assert figures["pass@4"] == 1.0 and figures["maj@4"] == 1.0
    wrong_majority = problem_figures([0.0, 0.0, 1.0], ["5", "5", "6"], [1])
    assert wrong_majority["maj@3"] == 0.0 and wrong_majority["avg@3"] == pytest.approx(1 / 3)
    partial = problem_figures([0.5, 1.0], None, [1])  # code: partial credit is not correct; no answers, no vote
    assert partial["avg@2"] == 0.5 and partial["maj@2"] is None
    assert mean_figures([figures, wrong_majority | {"avg@4": 0.0, "pass@2": 0.0, "pass@4": 0.0, "maj@4": 0.0}])[
        "avg@4"
    ] == pytest.approx(0.25)


def test_default_ks_and_bad_k():
    assert default_ks(1) == [1] and default_ks(8) == [1, 2, 4, 8] and default_ks(6) == [1, 2, 4, 6]
    with pytest.raises(ValueError, match="num_samples must be"):
        EvalSettings(num_samples=0).ks()
    with pytest.raises(ValueError, match=r"--pass_ks \[1, 8\].*--num_samples \(4\).*drop \[8\]"):
        EvalSettings(num_samples=4, pass_ks=[1, 8]).ks()
    with pytest.raises(ValueError, match="pass@5 needs at least 5 samples"):
        pass_at_k(4, 1, 5)


def test_answers_come_from_the_rewards_own_extraction():
    math_reward = ZeroRewardWatch(MathAccuracy(), "answer")  # the recipes wrap the task reward
    extract = answer_extractor(math_reward)
    assert extract("so \\boxed{4}") == extract("#### 4") == "$4$"
    assert answer_extractor(MathAccuracy(extraction="boxed"))("#### 4") is None
    assert answer_extractor(arithmetic_reward)(" 42<eos>") == "42"
    (code,) = get_rewards(["code"])
    assert answer_extractor(code) is None  # no answer to vote on: maj@K is n/a


# -- the command ------------------------------------------------------------------------------------------------------


def _eval(argv):
    return import_module("trl_ext.scripts.eval").main(*parse((EvalArguments,), None, argv=argv))


@pytest.fixture(scope="module")
def trained_demo(tmp_path_factory):
    """A DAPO demo run of 3 steps (its summary holds the recipes' held-out figure after RL)."""
    out = tmp_path_factory.mktemp("runs") / "dapo"
    argv = ["--max_steps", "3", "--logging_steps", "1", "--held_out_eval_steps", "0", "--output_dir", str(out)]
    summary = import_module("trl_ext.scripts.grpo").main(*parse_grpo("dapo", argv=argv))
    return out, summary


@pytest.mark.slow
def test_eval_greedy_pass_at_1_is_the_recipes_held_out_figure(trained_demo, tmp_path):
    out, summary = trained_demo
    result = _eval(["--models", str(out), "--num_samples", "4", "--output_dir", str(tmp_path / "eval")])
    (model,) = result["models"]
    assert model["figures"]["pass@1 (greedy)"] == summary["accuracy_after"]
    assert set(model["figures"]) >= {"avg@4", "pass@1", "pass@2", "pass@4", "maj@4", "mean length", "truncated"}
    assert model["figures"]["avg@4"] == pytest.approx(model["figures"]["pass@1"])
    # every figure comes back from per_problem.jsonl alone
    assert recompute(str(tmp_path / "eval"))[str(out)] == pytest.approx(model["figures"])
    lines = [json.loads(line) for line in open(tmp_path / "eval" / "per_problem.jsonl")]
    assert len(lines) == 240 and len(lines[0]["samples"]) == 4
    assert {"text", "answer", "reward", "length", "truncated"} <= set(lines[0]["samples"][0])


@pytest.mark.slow
def test_eval_on_a_gsm8k_file_matches_the_recipes_held_out_figure(tmp_path):
    folder = write_layout(str(tmp_path), "gsm8k", num_train=32, num_test=24)
    run = tmp_path / "run"
    data = ["--dataset_name", f"{folder}/train.jsonl", "--dataset_test_split", f"{folder}/test.jsonl"]
    argv = [*data, "--max_steps", "2", "--held_out_eval_steps", "0", "--output_dir", str(run)]
    summary = import_module("trl_ext.scripts.grpo").main(*parse_grpo("dapo", argv=argv))
    assert summary["accuracy_after"] > 0.05  # not a trivial 0 = 0
    result = _eval(
        [
            *data,
            "--models",
            str(run),
            "--num_samples",
            "2",
            "--max_new_tokens",
            "6",
            "--output_dir",
            str(tmp_path / "e"),
        ]
    )
    figures = result["models"][0]["figures"]
    assert figures["pass@1 (greedy)"] == summary["accuracy_after"]
    assert figures["maj@2"] is not None and result["reward"] == "accuracy"


def test_a_split_without_a_reference_fails_naming_the_flag(tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps({"question": f"{i}+1="}) + "\n" for i in range(4)))
    with pytest.raises(ValueError, match="--dataset_answer_column"):
        _eval(["--dataset_name", str(path), "--models", "unused", "--output_dir", str(tmp_path / "e")])


def test_a_run_folder_with_checkpoints_only_names_the_newest(tmp_path):
    (tmp_path / "run" / "checkpoint-5").mkdir(parents=True)
    (tmp_path / "run" / "checkpoint-10").mkdir()
    with pytest.raises(ValueError, match=r"holds no model.*checkpoint-10"):
        _eval(["--models", str(tmp_path / "run"), "--num_samples", "1", "--output_dir", str(tmp_path / "e")])


@pytest.mark.parametrize("flags, message", [(["--num_samples", "0"], "num_samples"), (["--pass_ks", "64"], "drop")])
def test_bad_k_fails_from_the_command_line_before_loading_a_model(flags, message):
    command = [sys.executable, "-m", "trl_ext.cli", "eval", "--models", "/nonexistent", *flags]
    run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode != 0 and message in run.stderr and "/nonexistent" not in run.stderr


def test_vllm_path_asks_one_engine_per_model_for_k_samples(monkeypatch, tiny_model, tokenizer):
    """vLLM cannot run here: a stand-in ``vllm`` module records what the evaluator asks of it (one engine per model,
    ``SamplingParams(n=K)`` with DAPO's temperature / top-p, greedy as temperature 0) and returns canned outputs,
    whose ``finish_reason == "length"`` must read as truncated."""
    import types

    from datasets import Dataset

    from trl_ext.diagnostics import evaluation

    engines, calls = [], []

    class Output:
        def __init__(self, text, finish_reason):
            self.text, self.token_ids, self.finish_reason = text, [1] * len(text), finish_reason

    class LLM:
        def __init__(self, model, seed, dtype, max_model_len, **engine_kwargs):  # engine_kwargs: CPU KV cache size
            engines.append(model)

        def generate(self, texts, params, use_tqdm):
            calls.append(params)
            return [
                types.SimpleNamespace(outputs=[Output("2", "stop")] + [Output("22222", "length")] * (params.n - 1))
                for _ in texts
            ]

    class SamplingParams:
        def __init__(self, **kwargs):
            self.__dict__.update(kwargs)

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=SamplingParams))
    data = Dataset.from_dict({"prompt": ["1+1=", "0+2="], "answer": [2, 2]})
    settings = EvalSettings(num_samples=3, max_new_tokens=4, use_vllm=True)
    result = evaluation.evaluate_model("m", tiny_model, tokenizer, data, arithmetic_reward, settings, "path/to/m")
    assert engines == ["path/to/m"]  # one engine for the greedy pass and the samples
    greedy, sampled = calls
    assert (greedy.n, greedy.temperature) == (1, 0.0)
    assert (sampled.n, sampled.temperature, sampled.top_p, sampled.max_tokens) == (3, 1.0, 0.7, 4)
    assert result.figures["pass@1 (greedy)"] == 1.0 and result.figures["avg@3"] == pytest.approx(1 / 3)
    assert result.figures["truncated"] == pytest.approx(2 / 3) and result.figures["maj@3"] == 0.0  # "22222" wins 2-1
