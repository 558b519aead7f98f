"""Learned rewards: the reward-model recipe on hand-made pairs, a reward model as an RL reward, bad reward names, and
the health monitor's over-optimization check."""

from __future__ import annotations

import json
import random
from importlib import import_module

import pytest
from trl import ModelConfig, RewardConfig

from trl_ext.demo import DemoTaskConfig, make_problems
from trl_ext.diagnostics.health import HealthMonitor, HealthThresholds
from trl_ext.recipe.args import RewardScriptArguments
from trl_ext.recipe.grpo import parse as parse_grpo
from trl_ext.recipe.parsing import parse
from trl_ext.recipe.rewards import reward_functions
from trl_ext.reward_model import is_reward_model, preference_splits, reward_model_name


def _write_pairs(folder, num_train=96, num_test=48):
    """Pairs the demo model can learn to rank: the chosen completion is the answer, the rejected one the answer
    followed by junk (``"42"`` over ``"42+7"``)."""
    rng = random.Random(0)
    train, test = make_problems(DemoTaskConfig(num_train=num_train, num_eval=num_test))
    for name, data in (("train", train), ("test", test)):
        with open(folder / f"{name}.jsonl", "w") as f:
            for prompt, answer in zip(data["prompt"], data["answer"], strict=True):
                row = {"prompt": prompt, "chosen": str(answer), "rejected": f"{answer}+{rng.randint(0, 9)}"}
                f.write(json.dumps(row) + "\n")
    return folder


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory):
    folder = _write_pairs(tmp_path_factory.mktemp("pairs"))
    out = folder / "rm"
    argv = [
        *("--dataset_name", str(folder / "train.jsonl"), "--dataset_test_split", str(folder / "test.jsonl")),
        *("--max_steps", "40", "--logging_steps", "20", "--output_dir", str(out)),
    ]
    summary = _reward_recipe(argv)
    return out, summary


def _reward_recipe(argv):
    return import_module("trl_ext.scripts.reward").main(
        *parse((RewardScriptArguments, RewardConfig, ModelConfig), "reward", argv=argv)
    )


@pytest.mark.slow
def test_reward_recipe_learns_held_out_pairs_above_chance(reward_model_dir):
    out, summary = reward_model_dir
    assert summary["held_out_pairs"] == 48 and summary["train_pairs"] == 96
    assert summary["accuracy_after"] > 0.9 and summary["accuracy_after"] > summary["accuracy_before"]
    assert json.load(open(out / "summary.json"))["accuracy_after"] == summary["accuracy_after"]
    (model,) = reward_functions([str(out)])  # what `--reward_funcs <folder>` builds
    assert is_reward_model(model) and model.config.num_labels == 1 and reward_model_name(model) == "rm"


@pytest.mark.slow
def test_dapo_trains_against_a_reward_model_and_scores_held_out_by_the_rule(reward_model_dir, tmp_path):
    out, _ = reward_model_dir
    argv = [
        *("--reward_funcs", str(out), "--max_steps", "2", "--logging_steps", "1", "--held_out_eval_steps", "0"),
        *("--output_dir", str(tmp_path / "dapo")),
    ]
    summary = import_module("trl_ext.scripts.grpo").main(*parse_grpo("dapo", argv=argv))
    rows = [json.loads(line) for line in open(tmp_path / "dapo" / "metrics.jsonl")]
    assert "rewards/rm/mean" in rows[0]  # the model's scores are the training reward
    assert summary["accuracy_before"] > 0.05  # held-out accuracy is the demo's rule check, not the model's scores


def test_the_health_monitor_reads_held_out_accuracy_of_the_same_log(reward_model_dir, tmp_path):
    """Both callbacks go first (before the trackers), held-out evaluation ahead of the monitor: the monitor's
    over-optimization check sees ``held_out/accuracy`` in the log it belongs to, and watches the reward model."""
    from trl_ext import DAPOConfig, DAPOTrainer
    from trl_ext.diagnostics.held_out import HeldOutEvaluation
    from trl_ext.recipe.grpo import attach_monitors
    from trl_ext.recipe.models import load_policy

    out, _ = reward_model_dir
    model, tokenizer, _ = load_policy(None)
    funcs = reward_functions([str(out)])
    train, _ = make_problems(DemoTaskConfig())
    args = DAPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, max_steps=1,
                      report_to="none", use_cpu=True, num_minibatches=1, max_completion_length=4,
                      overlong_buffer_len=2)  # fmt: skip
    trainer = DAPOTrainer(model=model, reward_funcs=funcs, args=args, train_dataset=train, processing_class=tokenizer)
    script_args, _, _ = parse_grpo("dapo", argv=["--held_out_eval_steps", "5"])
    attach_monitors(trainer, "dapo", script_args, lambda model: 0.5, 0.4, funcs)
    first, second = trainer.callback_handler.callbacks[:2]
    assert isinstance(first, HeldOutEvaluation) and isinstance(second, HealthMonitor)
    assert second.thresholds.proxy_metrics == ["rewards/rm/mean"]
    assert second.thresholds.gold_metrics == ["held_out/accuracy"]


def test_a_reward_that_is_neither_a_name_nor_a_model_says_both(tmp_path):
    with pytest.raises(ValueError, match="unknown reward 'accuracyy'.*Did you mean 'accuracy'"):
        reward_functions(["accuracyy"])
    (tmp_path / "not_a_model").mkdir()
    with pytest.raises(ValueError, match=r"neither a registry name \(.*accuracy.*\) nor a loadable reward model"):
        reward_functions([str(tmp_path / "not_a_model")])


def test_preference_splits_hold_out_a_seeded_share_when_there_is_no_split():
    from datasets import Dataset

    pairs = Dataset.from_dict({"chosen": [str(i) for i in range(20)], "rejected": ["x"] * 20})
    train, held_out = preference_splits(pairs, None, 0.25, seed=0)
    assert (len(train), len(held_out)) == (15, 5)
    assert not set(train["chosen"]) & set(held_out["chosen"])
    with pytest.raises(ValueError, match="no \\['rejected'\\]"):
        preference_splits(Dataset.from_dict({"chosen": ["a"]}), None, 0.5)


# -- over-optimization ------------------------------------------------------------------------------------------------


def _monitor():
    return HealthMonitor(HealthThresholds(proxy_metrics=["rewards/rm/mean"], warmup_logs=1, print_warnings=False))


def test_overoptimization_warns_when_the_proxy_rises_and_the_gold_falls():
    monitor = _monitor()
    gold = {20: 0.40, 40: 0.42, 60: 0.41, 80: 0.36, 100: 0.30, 120: 0.25}  # held-out accuracy every 20 steps
    for step in range(10, 121, 10):
        logs = {"rewards/rm/mean": 0.1 * step / 10}  # the learned reward keeps rising
        if step in gold:
            logs["held_out/accuracy"] = gold[step]
        monitor.check(logs, step)
    events = [e for e in monitor.events if e.condition == "reward_overoptimized"]
    # at step 120 the 6 gold values have a least-squares fall of 0.1657 > 0.05 (by hand: sum of (x - 2.5)(v - mean)
    # = -0.58 over sum (x - 2.5)^2 = 17.5, times 5 intervals) while the proxy rose: one warning
    assert len(events) == 1 and events[0].step == 120 and "-0.1657" in events[0].message
    assert "rewards/rm/mean" in events[0].message and "held_out/accuracy" in events[0].message


def test_overoptimization_stays_quiet_when_gold_rises_with_the_proxy_or_without_a_reward_model():
    monitor = _monitor()
    for step in range(10, 121, 10):
        logs = {"rewards/rm/mean": 0.1 * step / 10}
        if step % 20 == 0:
            logs["held_out/accuracy"] = 0.3 + step / 1000  # a healthy run: both rise
        metrics = monitor.check(logs, step)
    assert not monitor.events and metrics.get("health/reward_overoptimized") == 0.0
    plain = HealthMonitor(HealthThresholds(print_warnings=False))  # no reward model: the check is off
    assert "health/reward_overoptimized" not in plain.check({"reward": 1.0, "held_out/accuracy": 0.1}, 1)


@pytest.mark.slow
def test_overoptimization_is_quiet_on_the_healthy_demo_run(tmp_path):
    """The demo's DAPO run (rising held-out accuracy), watched as if its rule reward were a learned one."""
    argv = ["--max_steps", "160", "--held_out_eval_steps", "20", "--output_dir", str(tmp_path / "demo")]
    import_module("trl_ext.scripts.grpo").main(*parse_grpo("dapo", argv=argv))
    rows = [json.loads(line) for line in open(tmp_path / "demo" / "metrics.jsonl")]
    monitor = HealthMonitor(HealthThresholds(proxy_metrics=["reward"], print_warnings=False))
    for row in rows:
        monitor.check(row, row.get("step", 0))
    assert sum("held_out/accuracy" in row for row in rows) >= 7  # the gold figure was there to compare with
    assert not [e for e in monitor.events if e.condition == "reward_overoptimized"]


# -- the reward model in the probe, PPO and the pipeline ---------------------------------------------------------------


def test_probe_reports_the_reward_models_spread_on_the_first_groups(reward_model_dir):
    from trl_ext.diagnostics.probe_stats import reward_model_spread
    from trl_ext.recipe.models import load_policy
    from trl_ext.scripts.probe import ProbeArguments, probe_model

    assert reward_model_spread([1.0, 3.0, 0.0, 0.0], 2) == {"within_group_std": 0.5, "std": 1.224744871391589,
                                                           "min": 0.0, "max": 3.0}  # fmt: skip
    out, _ = reward_model_dir
    model, tokenizer, _ = load_policy(None)
    train, _ = make_problems(DemoTaskConfig())
    args = ProbeArguments(num_generations=4, num_prompts=6, max_completion_length=4, generation_batch_size=8)
    (reward,) = reward_functions([str(out)])
    report = probe_model(model, tokenizer, train.select(range(6)), [reward], args)
    spread = report.meta["reward_model_spread"]["rm"]
    assert spread["within_group_std"] > 0 and spread["min"] < spread["max"]
    assert "Reward model rm: within-group std" in report.format()


@pytest.mark.slow
def test_ppo_takes_the_same_reward_model(reward_model_dir, tmp_path):
    pytest.importorskip("trl.experimental.ppo", reason='PPO needs trl 1.12 (removed in 1.13): pip install -e ".[ppo]"')
    from trl.experimental.ppo import PPOConfig

    from trl_ext.recipe.args import PPOScriptArguments

    out, _ = reward_model_dir
    argv = [
        *("--reward_model_path", str(out), "--output_dir", str(tmp_path / "ppo"), "--total_episodes", "16"),
        *("--per_device_train_batch_size", "8", "--num_ppo_epochs", "1"),
    ]
    types_ = (PPOScriptArguments, PPOConfig, ModelConfig)
    summary = import_module("trl_ext.scripts.ppo").main(*parse(types_, "ppo", argv=argv))
    assert summary["accuracy_before"] > 0.05 and summary["accuracy_after"] is not None  # the rule reward's figure
    with pytest.raises(ValueError, match="could not be loaded as a reward model"):
        import_module("trl_ext.scripts.ppo").main(
            *parse(types_, "ppo", argv=["--reward_model_path", str(tmp_path), *argv[2:]])
        )


@pytest.mark.slow
def test_pipeline_with_a_learned_reward_end_to_end(tmp_path, capsys):
    from trl import TrlParser

    from trl_ext.recipe.args import PipelineArguments

    argv = [
        *("--output_dir", str(tmp_path / "out"), "--learned_reward", "true"),
        *("--reward_overrides", "max_steps=20", "num_generations=4", "init_sft_steps=0"),
        *("--dapo_overrides", "max_steps=2", "logging_steps=1", "held_out_eval_steps=0"),
    ]
    (args,) = TrlParser((PipelineArguments,)).parse_args_and_config(argv)
    summary = import_module("trl_ext.scripts.pipeline").main(args)
    printed = capsys.readouterr().out
    assert list(summary["accuracies"]) == ["0. random init", "1. SFT warm start", "3. DAPO against the reward model"]
    assert summary["reward_model"]["held_out_pairs"] > 0 and 0 <= summary["reward_model"]["accuracy_after"] <= 1
    assert "2. reward model: held-out pairwise accuracy" in printed
    rows = [json.loads(line) for line in open(tmp_path / "out" / "dapo-rm" / "metrics.jsonl")]
    assert "rewards/reward/mean" in rows[0]  # DAPO trained on the reward model's scores (folder out/reward)


def test_pairwise_accuracy_by_hand():
    from datasets import Dataset

    from trl_ext.reward_model import held_out_pairwise_accuracy, pairwise_accuracy

    # right, wrong, tie (one half), right: 2.5 of 4
    assert pairwise_accuracy([2.0, 0.5, 1.0, -1.0], [1.0, 0.7, 1.0, -2.0]) == 0.625
    with pytest.raises(ValueError, match="as many chosen as rejected"):
        pairwise_accuracy([1.0], [])

    # A reward called as GRPO calls it, on prompt + completion: here the completion's length
    pairs = Dataset.from_dict(
        {"prompt": ["1+1=", "2+2=", "3+3="], "chosen": ["2", "4", "66"], "rejected": ["22", "4", "6"]}
    )

    def length(prompts, completions, **kwargs):
        return [-float(len(c)) for c in completions]  # shorter is better: right, tie, wrong

    assert held_out_pairwise_accuracy(length, pairs) == pytest.approx(0.5)


def test_rollout_pairs_pair_the_answer_with_each_distinct_mistake_most_frequent_first():
    from trl_ext.reward_model import rollout_pairs

    completions = ["4", "5", "4", "5", "3", "5"] + ["7", "8", "8", "9", "7", "8"] + ["2", "2", "2", "2", "2", "2"]
    labels = [1, 0, 1, 0, 0, 0] + [0, 0, 0, 0, 0, 0] + [1, 1, 1, 1, 1, 1]
    pairs = rollout_pairs(["2+2=", "3+3=", "1+1="], completions, labels, 6, max_pairs_per_prompt=2)
    rows = list(zip(pairs["prompt"], pairs["chosen"], pairs["rejected"], strict=True))
    assert rows == [("2+2=", "4", "5"), ("2+2=", "4", "3")]
    # the known answer stands in where no rollout is right; a group with no mistake gives nothing
    pairs = rollout_pairs(["2+2=", "3+3=", "1+1="], completions, labels, 6, 8, references=["4", "6", "2"])
    assert list(zip(pairs["chosen"], pairs["rejected"], strict=True))[2:] == [("6", "8"), ("6", "7"), ("6", "9")]


def test_reward_model_trains_on_the_tokens_grpo_scores():
    """TRL's RewardTrainer appends EOS to text pairs; GRPO scores prompt + completion without it."""
    from datasets import Dataset

    from trl_ext.demo import build_tokenizer
    from trl_ext.reward_model import as_scored_ids

    tokenizer = build_tokenizer()
    ids = as_scored_ids(Dataset.from_dict({"prompt": ["1+2="], "chosen": ["3"], "rejected": ["12"]}), tokenizer)
    assert ids.column_names == ["chosen_ids", "rejected_ids"]
    assert ids[0]["chosen_ids"] == tokenizer("1+2=3", add_special_tokens=False)["input_ids"]
    assert tokenizer.eos_token_id not in ids[0]["chosen_ids"] + ids[0]["rejected_ids"]
