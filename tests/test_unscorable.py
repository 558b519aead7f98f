"""Reward functions that return None (TRL: "does not apply"): TRL's own all-None test passes with the drop-in
trainers (one warning, training goes on), per-function None fractions are logged, and a run whose task rewards score
nothing for ``max_unscorable_rounds`` consecutive optimizer steps stops, naming them (only when set: the default is
TRL's, train on)."""

from __future__ import annotations

import logging

import pytest
import torch
import trl
from datasets import Dataset
from helpers import tiny_args
from trl import GRPOConfig

from trl_ext import DAPOTrainer, GRPOTrainer
from trl_ext.reliability.reward_guard import RewardFunctionError
from trl_ext.reliability.unscorable import UnscorableWatch

NAN = float("nan")


def position_reward(completions, **kwargs):
    """0, 1, 2, 3 within each group of 4: every group informative."""
    return [float(i % 4) for i in range(len(completions))]


def none_every_third(completions, **kwargs):
    return [None if i % 3 == 0 else 1.0 for i in range(len(completions))]


def always_none(completions, **kwargs):
    return [None] * len(completions)


# -- TRL's own test ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("GRPOTrainer", [trl.GRPOTrainer, GRPOTrainer, DAPOTrainer], ids=["trl", "ours", "dapo"])
def test_warning_raised_all_rewards_none(GRPOTrainer, tiny_model, tokenizer, problems, tmp_path, caplog):
    """TRL's ``TestGRPOTrainer.test_warning_raised_all_rewards_none`` (huggingface/trl, tests/test_grpo_trainer.py,
    commit f2cd57710ae345ea6428ae95363267fcf38a3dc8), run with each trainer. Only what needs the Hub is replaced: the
    model "trl-internal-testing/tiny-Qwen2ForCausalLM-2.5" by the project's tiny model and its tokenizer
    (``processing_class``), the dataset "trl-internal-testing/zen" (17 prompts) by 5 prompts of the demo task (15
    steps instead of 51: past any stop after a few rounds), and the config runs on the CPU in float32. The rest of the
    config (TRL's ``GRPOConfig``: 3 epochs), the reward function, ``train()`` and the assertion are TRL's; the step
    count is added."""
    dataset = Dataset.from_dict({"prompt": problems[0]["prompt"][:5]})

    def always_none_reward_func(completions, **kwargs):
        """Reward function that always returns None."""
        return [None] * len(completions)

    training_args = GRPOConfig(
        output_dir=str(tmp_path),
        learning_rate=0.1,  # use higher lr because gradients are tiny and default lr can stall updates
        per_device_train_batch_size=3,  # reduce the batch size to reduce memory usage
        num_generations=3,  # reduce the number of generations to reduce memory usage
        max_completion_length=8,  # reduce the completion length to reduce memory usage
        report_to="none",
        use_cpu=True,  # not in TRL's test: TRL's default bf16=True needs a GPU, and this suite runs on CPU
        bf16=False,
    )
    trainer = GRPOTrainer(
        model=tiny_model,
        reward_funcs=always_none_reward_func,
        args=training_args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )

    with caplog.at_level("WARNING", logger="trl.trainer.grpo_trainer"):
        trainer.train()

    expected_warning = "All reward functions returned None for the following kwargs:"
    assert expected_warning in caplog.text
    assert trainer.state.global_step == 15  # trained on to the end, as TRL does (5 prompts x 3 epochs)


# -- the watch on its own ------------------------------------------------------------------------------------------


def test_fractions_and_one_warning_naming_each_function_and_its_fraction(caplog):
    watch = UnscorableWatch(["acc", "fmt", "overlong"], shaping=[False, False, True], max_steps=2)
    rewards = torch.tensor([[1.0, NAN, -0.5], [NAN, NAN, 0.0], [0.0, NAN, 0.0], [NAN, NAN, -1.0]])
    with caplog.at_level(logging.WARNING, logger="trl_ext.reliability.unscorable"):
        watch.observe(rewards, training=False)  # evaluation rounds are neither warned about nor counted
        assert not caplog.records and watch.unscored_steps == 0
        first = watch.observe(rewards, step=0)
        assert first == {"rewards/acc/none_frac": 0.5, "rewards/fmt/none_frac": 1.0, "rewards/overlong/none_frac": 0.0}
        for step in range(1, 4):
            watch.observe(rewards, step)  # 'acc' scores some completions: the task is scored, the run goes on
    assert watch.unscored_steps == 0
    (message,) = [r.getMessage() for r in caplog.records if r.name == "trl_ext.reliability.unscorable"]  # once
    assert "on a training round of 4 completions: 'acc' on 50%, 'fmt' on 100%;" in message
    assert "0 of them are scored by no function" in message  # 'overlong' scores every completion
    assert "Training goes on, as in TRL" in message
    assert "stops after max_unscorable_rounds=2 consecutive optimizer steps in which no task reward" in message


def test_the_stop_counts_optimizer_steps_and_names_the_task_rewards():
    """(step, rewards) of each round: several rounds per step (dynamic sampling's refills) count as one step, a step
    with any scored round starts the count again, and the stop comes at the round after ``max_steps`` unscored steps."""
    watch = UnscorableWatch(["acc", "overlong"], shaping=[False, True], max_steps=3)
    unscored, scored = torch.tensor([[NAN, -0.5], [NAN, 0.0]]), torch.tensor([[1.0, -0.5], [NAN, 0.0]])
    rounds = [(0, unscored), (0, unscored), (0, unscored), (0, unscored)]  # four rounds of the first step: no stop
    rounds += [(1, unscored), (1, scored), (1, unscored)]  # step 2's batch is scored: the count starts again
    rounds += [(2, unscored), (2, unscored), (3, unscored), (4, unscored)]  # steps 3, 4 and 5 trained unscored
    for step, rewards in rounds:
        watch.observe(rewards, step)
    assert watch.unscored_steps == 2
    with pytest.raises(RewardFunctionError) as info:
        watch.observe(unscored, 5)  # generating step 6: 3 completed unscored steps
    message = str(info.value)
    assert "['acc'] returned None/NaN" in message
    assert "for all 8 completions generated for 3 consecutive optimizer steps (max_unscorable_rounds=3)" in message
    assert "only the shaping rewards ['overlong'] score them" in message
    assert "do not apply to this data" in message and "or they are broken" in message
    assert "raise max_unscorable_rounds (None: never stop, as TRL)" in message
    only = UnscorableWatch(["overlong"], shaping=[True], max_steps=1)  # all shaping: they are the task rewards
    only.observe(torch.tensor([[NAN], [NAN]]), 0)
    with pytest.raises(RewardFunctionError, match="every advantage is 0"):
        only.observe(torch.tensor([[NAN], [NAN]]), 1)
    never = UnscorableWatch(["acc"], shaping=[False], max_steps=None)  # TRL's GRPOConfig has no such field
    for step in range(10):
        never.observe(torch.tensor([[NAN], [NAN]]), step)
    assert never.unscored_steps == 9


# -- in a trainer --------------------------------------------------------------------------------------------------


def test_trainer_logs_none_fractions_and_warns_once(tiny_model, tokenizer, problems, tmp_path, caplog):
    args = tiny_args("dapo", tmp_path, max_steps=3, soft_overlong_punishment=False, dynamic_sampling=False)
    funcs = [position_reward, none_every_third, always_none]
    trainer = DAPOTrainer(tiny_model, funcs, args=args, train_dataset=problems[0], processing_class=tokenizer)
    with caplog.at_level(logging.WARNING, logger="trl_ext.reliability.unscorable"):
        trainer.train()
    rows = [h for h in trainer.state.log_history if "loss" in h]
    # 8 completions per round: indices 0, 3, 6 are None for none_every_third
    assert [h["rewards/none_every_third/none_frac"] for h in rows] == [3 / 8] * 3
    assert [h["rewards/always_none/none_frac"] for h in rows] == [1.0] * 3
    assert [h["rewards/position_reward/none_frac"] for h in rows] == [0.0] * 3
    (message,) = [r.getMessage() for r in caplog.records if r.name == "trl_ext.reliability.unscorable"]
    assert "round of 8 completions: 'none_every_third' on 38%, 'always_none' on 100%;" in message


def test_trainer_stops_after_k_steps_with_no_task_reward(tiny_model, tokenizer, problems, tmp_path, caplog):
    """max_unscorable_rounds=2, one round per step: steps 1 and 2 train (with the warning), step 3's round stops."""
    args = tiny_args(
        "dapo", tmp_path, max_steps=5, soft_overlong_punishment=False, dynamic_sampling=False, max_unscorable_rounds=2
    )
    trainer = DAPOTrainer(tiny_model, [always_none], args=args, train_dataset=problems[0], processing_class=tokenizer)
    with caplog.at_level(logging.WARNING, logger="trl_ext.reliability.unscorable"):
        with pytest.raises(RewardFunctionError) as info:
            trainer.train()
    assert trainer.state.global_step == 2
    stop = str(info.value)
    assert "['always_none'] returned None/NaN" in stop
    assert "all 16 completions generated for 2 consecutive optimizer steps (max_unscorable_rounds=2)" in stop
    (message,) = [r.getMessage() for r in caplog.records if r.name == "trl_ext.reliability.unscorable"]
    assert "'always_none' on 100%; 8 of them are scored by no function" in message


def test_dapo_defaults_warn_and_train_on_through_the_refill_rounds(tiny_model, tokenizer, problems, tmp_path, caplog):
    """DAPO's defaults (the overlong shaping term, dynamic sampling refilling the uninformative rounds): as TRL, one
    warning and training goes on; with max_unscorable_rounds=1 the first step's refill rounds still train, and the
    second step's first round stops."""
    args = tiny_args("dapo", tmp_path, max_steps=2, overlong_buffer_len=4)
    assert args.max_unscorable_rounds is None
    trainer = DAPOTrainer(tiny_model, [always_none], args=args, train_dataset=problems[0], processing_class=tokenizer)
    with caplog.at_level(logging.WARNING, logger="trl_ext.reliability.unscorable"):
        trainer.train()
    assert trainer.state.global_step == 2
    assert [h["dynamic_sampling/rounds"] for h in trainer.state.log_history if "loss" in h][0] > 1
    (message,) = [r.getMessage() for r in caplog.records if r.name == "trl_ext.reliability.unscorable"]
    assert "max_unscorable_rounds is not set (the recipes set 3), so the run never stops for this" in message

    args = tiny_args("dapo", tmp_path, max_steps=2, overlong_buffer_len=4, max_unscorable_rounds=1)
    trainer = DAPOTrainer(tiny_model, [always_none], args=args, train_dataset=problems[0], processing_class=tokenizer)
    with pytest.raises(RewardFunctionError, match=r"\['always_none'\] returned None/NaN.*soft_overlong_punishment"):
        trainer.train()
    assert trainer.state.global_step == 1  # the first step's several rounds are one step


# -- the recipes' default ------------------------------------------------------------------------------------------


def test_recipes_default_to_three_steps_and_say_so_in_their_help(tmp_path, capsys):
    from trl_ext.recipe import grpo as grpo_recipe

    out = ["--output_dir", str(tmp_path)]
    assert grpo_recipe.parse("dapo", argv=out)[1].max_unscorable_rounds == 3
    assert grpo_recipe.parse("dapo", argv=[*out, "--max_unscorable_rounds", "0"])[1].max_unscorable_rounds == 0
    config = tmp_path / "config.yaml"
    config.write_text("max_unscorable_rounds: 5\n")
    assert grpo_recipe.parse("grpo", argv=["--config", str(config), *out])[1].max_unscorable_rounds == 5
    with pytest.raises(SystemExit):
        grpo_recipe.parse("dapo", argv=["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    entry = shown[shown.index("--max_unscorable_rounds") :].split(" --")[0]
    assert entry.startswith("--max_unscorable_rounds INT Stop after this many consecutive optimizer steps in which")
    assert entry.endswith("(default: 3)"), entry
