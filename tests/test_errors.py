"""The error catalogue: each misconfiguration fails at the earliest point with a message that names the field, column
or function, the value, and the fix (docs/ARCHITECTURE.md, "Conventions"), and loses nothing already written.

Every test asserts the message users see. The closing note of the reliability work lists them.
"""

from __future__ import annotations

import copy
import os
import sys
from contextlib import contextmanager

import pytest
import torch
from datasets import Dataset
from helpers import tiny_args

from trl_ext import DAPOTrainer, GRPOTrainer, get_preset
from trl_ext.reliability.reliable import NonFiniteLossError
from trl_ext.reliability.reward_guard import RewardFunctionError


@contextmanager
def raises(exception: type[BaseException], *fragments: str):
    """Like ``pytest.raises``, and the message must contain every fragment."""
    with pytest.raises(exception) as info:
        yield info
    message = str(info.value)
    missing = [f for f in fragments if f not in message]
    assert not missing, f"message lacks {missing}:\n{message}"


def answer_reward(completions, answer, **kwargs):
    return [float(len(c) % 2) for c in completions]


def _dapo(tiny_model, tokenizer, dataset, tmp_path, reward_funcs=(answer_reward,), **overrides):
    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False, **overrides)
    return DAPOTrainer(tiny_model, list(reward_funcs), args=args, train_dataset=dataset, processing_class=tokenizer)


# -- data and reward functions, at construction -------------------------------------------------------------------


def test_dataset_without_prompt_column(tiny_model, tokenizer, problems, tmp_path):
    data = problems[0].rename_column("prompt", "question")
    with raises(ValueError, "train_dataset has no 'prompt' column", "rename_column('question', 'prompt')"):
        _dapo(tiny_model, tokenizer, data, tmp_path)


def test_dataset_smaller_than_one_generation_batch(tiny_model, tokenizer, problems, tmp_path):
    """Fewer prompts than one generation batch samples: TRL's sampler would drop the incomplete batch and train zero
    steps silently (seen with DAPOConfig's 16 minibatches on a 12-prompt file)."""
    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False)
    needed = args.generation_batch_size // args.num_generations
    small = problems[0].select(range(needed - 1))
    with raises(
        ValueError,
        f"train_dataset has {needed - 1} prompts",
        f"samples {needed} distinct prompts",
        "lower num_minibatches",
    ):
        DAPOTrainer(tiny_model, [answer_reward], args=args, train_dataset=small, processing_class=tokenizer)
    DAPOTrainer(  # exactly one generation batch of prompts is enough
        tiny_model,
        [answer_reward],
        args=args,
        train_dataset=problems[0].select(range(needed)),
        processing_class=tokenizer,
    )


def test_reward_function_column_missing_from_dataset(tiny_model, tokenizer, problems, tmp_path):
    def exact_match(completions, answers, **kwargs):
        return [0.0] * len(completions)

    with raises(
        ValueError,
        "reward function 'exact_match' reads the column 'answers'",
        "Did you mean 'answer'? Rename the parameter to 'answer', or the column with",
        "dataset.rename_column('answer', 'answers')",
        "give 'answers' a default value",
    ):
        _dapo(tiny_model, tokenizer, problems[0], tmp_path, reward_funcs=[exact_match])


def test_reward_function_declaring_required_columns(tiny_model, tokenizer, problems, tmp_path):
    class Verifier:
        """A callable class reading a column through **kwargs declares it (signature inspection cannot see it)."""

        __name__ = "verifier"
        required_columns = ["tests"]

        def __call__(self, completions, **kwargs):
            return [0.0] * len(completions)

    with raises(ValueError, "reward function 'verifier' reads the column 'tests'"):
        _dapo(tiny_model, tokenizer, problems[0], tmp_path, reward_funcs=[Verifier()])


@pytest.mark.parametrize(
    "reward, fragments",
    [
        (lambda completions, **kw: [0.0] * (len(completions) - 1), ["returned 7 values for 8 completions"]),
        (lambda completions, **kw: ["1.0"] * len(completions), ["returned a str ('1.0')", "convert with float"]),
        (lambda completions, **kw: [float("inf")] * len(completions), ["returned an infinite value (inf)"]),
    ],
    ids=["wrong-count", "strings", "inf"],
)
def test_reward_function_returning_bad_values(tiny_model, tokenizer, problems, tmp_path, reward, fragments):
    reward.__name__ = "bad_reward"
    trainer = _dapo(tiny_model, tokenizer, problems[0], tmp_path, reward_funcs=[reward], max_steps=1)
    with raises(RewardFunctionError, "reward function 'bad_reward'", *fragments):
        trainer.train()


def test_reward_function_raising_stops_with_name_and_completion(tiny_model, tokenizer, problems, tmp_path):
    def fragile(completions, answer, **kwargs):
        """Fails on the prompts with an odd answer only."""
        return [1.0 if int(a) % 2 == 0 else 1 / 0 for a in answer]

    trainer = _dapo(tiny_model, tokenizer, problems[0], tmp_path, reward_funcs=[fragile], max_steps=1)
    with raises(
        RewardFunctionError,
        "reward function 'fragile' raised ZeroDivisionError: division by zero on completion ",
        "of 8 (prompt '",
        "step 1)",
        "set reward_errors='skip'",
    ) as info:
        trainer.train()
    assert isinstance(info.value.__cause__, ZeroDivisionError)


@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("reward_errors", "ignore", "reward_errors='ignore': must be 'raise'"),
        ("reward_timeout", 0, "reward_timeout=0: must be a number of seconds > 0"),
    ],
)
def test_bad_reward_guard_settings(tiny_model, tokenizer, problems, tmp_path, field, value, fragment):
    args = tiny_args("dapo", tmp_path, soft_overlong_punishment=False)
    setattr(args, field, value)  # GRPOFamilyConfig fields (read with getattr until presets.py defines them)
    with raises(ValueError, fragment):
        DAPOTrainer(tiny_model, [answer_reward], args=args, train_dataset=problems[0], processing_class=tokenizer)


# -- configs and presets -------------------------------------------------------------------------------------------


def test_num_generations_not_dividing_the_generation_batch_names_both(tmp_path):
    with raises(ValueError, "generation_batch_size (6)", "num_generations (4)"):
        tiny_args("dapo", tmp_path, per_device_train_batch_size=6)


def test_num_generations_not_dividing_the_generation_batch_says_the_fix(tmp_path):
    with raises(ValueError, "num_generations=4", "per_device_train_batch_size"):
        tiny_args("dapo", tmp_path, per_device_train_batch_size=6)


def test_group_size_one(tmp_path):
    with raises(ValueError, "num_generations=1", "Set num_generations >= 2"):
        tiny_args("dapo", tmp_path, num_generations=1, per_device_train_batch_size=8)


@pytest.mark.parametrize(
    "preset, overrides, fragments",
    [
        ("dapo", {"mask_truncated_completions": True}, ["soft_overlong_punishment=True with mask_truncated", "False"]),
        (
            "gspo",
            {"epsilon": 0.2, "epsilon_high": 0.28},
            ["epsilon=0.2 with importance_sampling_level='sequence'", "3e-4"],
        ),
        ("gspo", {"loss_type": "dapo"}, ["loss_type='dapo'", "Use loss_type='grpo'"]),
        ("dapo", {"epsilon": 0.3}, ["epsilon_high=0.28 is below epsilon=0.3"]),
    ],
    ids=["overlong-vs-mask", "gspo-eps", "gspo-loss", "clip-higher"],
)
def test_contradictory_preset_overrides(tmp_path, preset, overrides, fragments):
    with raises(ValueError, *fragments):
        tiny_args(preset, tmp_path, **overrides)


def test_unknown_preset_name():
    with raises(ValueError, "Unknown preset 'dapoo'", "Did you mean 'dapo'?", "Known presets"):
        get_preset("dapoo")


def test_unknown_preset_field():
    with raises(ValueError, "Unknown field(s) ['lerning_rate']", "Did you mean 'learning_rate'?"):
        get_preset("dapo", output_dir="x", lerning_rate=0.1)


def _yaml(tmp_path, text: str) -> str:
    """A valid demo-sized DAPO config plus ``text``."""
    path = tmp_path / "config.yaml"
    base = (
        f"output_dir: {tmp_path}/out\nper_device_train_batch_size: 8\nnum_generations: 4\nuse_cpu: true\nbf16: false\n"
    )
    path.write_text(base + text)
    return str(path)


def test_unknown_reward_name_in_yaml(tmp_path):
    from trl_ext import DAPOConfig
    from trl_ext.recipe.grpo import parse
    from trl_ext.recipe.rewards import reward_functions

    config = _yaml(tmp_path, "reward_funcs: [acuracy]\n")
    script_args, _, _ = parse(DAPOConfig, "dapo", ["--config", config])
    with raises(ValueError, "unknown reward 'acuracy'", "Did you mean 'accuracy'?", "Known rewards"):
        reward_functions(script_args.reward_funcs)


def test_yaml_key_typo_is_an_error_not_ignored(tmp_path):
    from trl import ModelConfig

    from trl_ext import DAPOConfig
    from trl_ext.recipe.grpo import RLScriptArguments, parse
    from trl_ext.reliability.checks import check_config_keys

    config = _yaml(tmp_path, "lerning_rate: 0.1\n")
    with raises(ValueError, "lerning_rate"):  # what the recipes do today (TRL's parser)
        parse(DAPOConfig, "dapo", ["--config", config])
    with raises(ValueError, "unknown key 'lerning_rate'", "Did you mean 'learning_rate'?", "fix the spelling"):
        check_config_keys(config, (RLScriptArguments, DAPOConfig, ModelConfig))


# -- model, tokenizer, environment ---------------------------------------------------------------------------------


def test_tokenizer_without_pad_or_eos_token(tiny_model, tokenizer, problems, tmp_path):
    bare = copy.deepcopy(tokenizer)
    bare.pad_token = None
    bare.eos_token = None
    with raises(ValueError, "neither a pad_token nor an eos_token", "tokenizer.pad_token = tokenizer.eos_token"):
        _dapo(tiny_model, bare, problems[0], tmp_path)


def test_max_completion_length_longer_than_the_context(tiny_model, tokenizer, problems, tmp_path):
    with raises(ValueError, "max_completion_length=100", "max_position_embeddings=64", "Set max_completion_length <="):
        _dapo(tiny_model, tokenizer, problems[0], tmp_path, max_completion_length=100)


def test_prompt_plus_completion_longer_than_the_context(tiny_model, tokenizer, problems, tmp_path):
    with raises(
        ValueError, "with max_completion_length=62", "past the model's context", "Lower max_completion_length"
    ):
        _dapo(tiny_model, tokenizer, problems[0], tmp_path, max_completion_length=62)


def test_use_vllm_without_vllm(tiny_model, tokenizer, problems, tmp_path, monkeypatch):
    import trl_ext.reliability.checks

    monkeypatch.setattr(trl_ext.reliability.checks, "vllm_installed", lambda: False)
    with raises(ValueError, "use_vllm=True, but vLLM is not installed", "set use_vllm=False"):
        _dapo(tiny_model, tokenizer, problems[0], tmp_path, use_vllm=True)


def test_ppo_with_a_trl_that_has_no_ppo(monkeypatch):
    import trl
    from packaging.version import Version

    from trl_ext.reliability.checks import require_ppo

    if Version(trl.__version__) < Version("1.13"):
        assert require_ppo()[1].__name__ == "PPOTrainer"  # trl 1.12 has it
    monkeypatch.setitem(sys.modules, "trl.experimental.ppo", None)  # what a newer TRL looks like
    # the install line names the `ppo` extra (it pins trl 1.12), not a bare TRL downgrade
    with raises(ImportError, "PPO needs trl.experimental.ppo.PPOTrainer", 'pip install -e ".[ppo]"', "trl 1.12"):
        require_ppo()


# -- output directory and checkpoints ------------------------------------------------------------------------------


def _train_with_checkpoints(tiny_model, tokenizer, data, tmp_path, **overrides):
    trainer = _dapo(
        tiny_model, tokenizer, data, tmp_path, save_strategy="steps", save_steps=1, max_steps=1, **overrides
    )
    trainer.train()
    return trainer


def test_output_dir_holding_another_runs_checkpoints(tiny_model, tokenizer, problems, tmp_path):
    _train_with_checkpoints(copy.deepcopy(tiny_model), tokenizer, problems[0], tmp_path)
    before = sorted(os.listdir(tmp_path / "out" / "checkpoint-1"))
    other = _dapo(tiny_model, tokenizer, problems[0], tmp_path, save_strategy="steps", save_steps=1, seed=1)
    with raises(
        ValueError,
        f"output_dir='{tmp_path}/out' already holds checkpoints of another run (seed: 0 (checkpoint) vs 1 (now))",
        "['checkpoint-1']",
        "use a new output_dir",
    ):
        other.train()
    with raises(
        ValueError, "was written by another run (seed: 0 (checkpoint) vs 1 (now))", "Resume from a checkpoint"
    ):
        other.train(resume_from_checkpoint=True)
    assert sorted(os.listdir(tmp_path / "out" / "checkpoint-1")) == before  # nothing lost


def test_same_run_restarted_without_resume(tiny_model, tokenizer, problems, tmp_path):
    _train_with_checkpoints(copy.deepcopy(tiny_model), tokenizer, problems[0], tmp_path)
    again = _dapo(tiny_model, tokenizer, problems[0], tmp_path, save_strategy="steps", save_steps=1)
    with raises(ValueError, "already holds checkpoints of an earlier run", "train(resume_from_checkpoint=True)"):
        again.train()


def test_resume_from_an_incomplete_checkpoint(tiny_model, tokenizer, problems, tmp_path):
    _train_with_checkpoints(copy.deepcopy(tiny_model), tokenizer, problems[0], tmp_path)
    partial = tmp_path / "out" / "checkpoint-2"  # what a kill during a plain Trainer's save leaves behind
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"")
    trainer = _dapo(tiny_model, tokenizer, problems[0], tmp_path, save_strategy="steps", save_steps=1, max_steps=2)
    with raises(ValueError, f"resume_from_checkpoint='{partial}' is incomplete", "Resume from", "checkpoint-1"):
        trainer.train(resume_from_checkpoint=str(partial))


def test_non_finite_loss_stops_with_step_and_batch_and_keeps_the_checkpoint(tiny_model, tokenizer, problems, tmp_path):
    from safetensors.torch import load_file

    trainer = _dapo(tiny_model, tokenizer, problems[0], tmp_path, save_strategy="steps", save_steps=1, max_steps=3)
    original = trainer._generate_and_score_completions

    def poisoned(inputs):  # a NaN advantage in the batch of step 2 (e.g. from a broken reward pipeline)
        output = original(inputs)
        if trainer.state.global_step == 1:
            output["advantages"][0] = float("nan")
        return output

    trainer._generate_and_score_completions = poisoned
    out = tmp_path / "out"
    with raises(
        NonFiniteLossError,
        "non-finite loss (nan) at step 2",
        "weights are still those of step 1",
        f"{out}/nonfinite-batch-step2-rank0.pt",
        "non-finite inputs: ['advantages']",
        f"The last checkpoint, {out}/checkpoint-1, is kept",
        "lower it",
    ) as info:
        trainer.train()
    assert "prompts: ['" in str(info.value)
    assert torch.isnan(torch.load(out / "nonfinite-batch-step2-rank0.pt")["advantages"]).any()
    assert not (out / "checkpoint-2").exists()
    saved = load_file(out / "checkpoint-1" / "model.safetensors")
    current = trainer.model.state_dict()
    assert all(torch.equal(saved[k], current[k]) for k in saved)  # no NaN update was applied


def test_grpo_trainer_checks_run_too(tiny_model, tokenizer, tmp_path):
    """The checks are in the shared base, so every trainer of the family runs them."""
    data = Dataset.from_dict({"query": ["1+1="] * 4})
    with raises(ValueError, "train_dataset has no 'prompt' column", "rename_column('query', 'prompt')"):
        GRPOTrainer(
            tiny_model,
            [answer_reward],
            args=tiny_args("grpo", tmp_path),
            train_dataset=data,
            processing_class=tokenizer,
        )
