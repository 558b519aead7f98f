"""Drop-in conformance: our trainers walked through the matrix TRL tests its ``GRPOTrainer`` with, each run compared
with ``trl.GRPOTrainer`` on the same seed (identical weights and losses after a few steps).

The matrix follows TRL's own ``tests/test_grpo_trainer.py``: loss types, ``scale_rewards`` modes, KL, reward-function
kinds (sync, async, a reward model, several with weights), PEFT, ``num_iterations`` / ``steps_per_generation``,
sequence-level importance sampling, truncated-completion masking, evaluation, iterable datasets, environment-owned
rewards routed by an ``environment`` column, and ``reward_funcs=None``. Our extensions are off where they would change
the run (``DAPOTrainer``: no dynamic sampling; the overlong reward is compared with TRL given the same reward);
everything else (reliability layer, reward guard, GSPO logging) must leave TRL's numbers untouched. Tiny models built
in code, 2 steps each, on CPU.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import trl
from datasets import Dataset
from helpers import TINY_SETTINGS
from transformers import Qwen2Config, Qwen2ForSequenceClassification
from trl.rewards import get_soft_overlong_punishment

from trl_ext import DAPOConfig, DAPOTrainer, GRPOFamilyConfig, GRPOTrainer, GSPOConfig, GSPOTrainer
from trl_ext.demo import DemoModelConfig, build_model

SMALL = DemoModelConfig(
    hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
)
BASE = dict(TINY_SETTINGS)  # the suite's small CPU settings, for TRL's config and ours alike
# TRL fields whose defaults our presets change: copied from our config into TRL's so both train the same algorithm
PRESET_FIELDS = (
    "epsilon",
    "epsilon_high",
    "loss_type",
    "beta",
    "num_generations",
    "importance_sampling_level",
    "scale_rewards",
    "steps_per_generation",
)
OURS = {
    "grpo": (GRPOTrainer, GRPOFamilyConfig, {}),
    "dapo": (DAPOTrainer, DAPOConfig, {"dynamic_sampling": False, "soft_overlong_punishment": False}),
    "gspo": (GSPOTrainer, GSPOConfig, {}),
}


def position_reward(completions, **kwargs):
    """Informative in every group: 0, 1, 2, 3 by position."""
    return [float(i % 4) for i in range(len(completions))]


def answer_reward(completions, answer, **kwargs):
    """Reads a dataset column, as math rewards do."""
    return [float(c.strip() == str(a)) for c, a in zip(completions, answer, strict=True)]


async def async_length_reward(completions, **kwargs):
    return [0.25 * len(c) for c in completions]


def _reward_model(tokenizer):
    torch.manual_seed(1)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    return Qwen2ForSequenceClassification(config).eval()


def _reward_funcs(kind, tokenizer):
    if kind == "sync":
        return [position_reward], {}
    if kind == "async":
        return [async_length_reward, position_reward], {}
    if kind == "reward_model":
        return [_reward_model(tokenizer), position_reward], {"reward_processing_classes": [tokenizer, None]}
    if kind == "weighted":
        return [position_reward, answer_reward, async_length_reward], {}
    raise ValueError(kind)


def _configs(kind, tmp_path, overrides):
    _, config_class, extension_off = OURS[kind]
    settings = {**BASE, **overrides}
    ours = config_class(output_dir=str(tmp_path / "ours"), **extension_off, **settings)
    trl_settings = {name: getattr(ours, name) for name in PRESET_FIELDS}
    trl_settings.update(settings)
    if "generation_batch_size" in overrides:
        trl_settings.pop("steps_per_generation")
    theirs = trl.GRPOConfig(output_dir=str(tmp_path / "trl"), **trl_settings)
    return ours, theirs


def _train(trainer_class, args, reward_funcs, tokenizer, train_dataset, **kwargs):
    trainer = trainer_class(
        build_model(tokenizer, SMALL),
        reward_funcs,
        args=args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        **kwargs,
    )
    trainer.train()
    params = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
    history = [{k: v for k, v in h.items() if k in ("loss", "eval_loss", "reward")} for h in trainer.state.log_history]
    return trainer, params, history


def _assert_same_as_trl(kind, tmp_path, tokenizer, train_dataset, overrides=None, rewards="sync", **kwargs):
    trainer_class = OURS[kind][0]
    ours_args, trl_args = _configs(kind, tmp_path, overrides or {})
    funcs, extra = _reward_funcs(rewards, tokenizer)
    theirs, trl_params, trl_history = _train(
        trl.GRPOTrainer, trl_args, funcs, tokenizer, train_dataset, **extra, **kwargs
    )
    funcs, extra = _reward_funcs(rewards, tokenizer)
    ours, our_params, our_history = _train(
        trainer_class, ours_args, funcs, tokenizer, train_dataset, **extra, **kwargs
    )
    assert type(ours) is trainer_class
    assert our_history == trl_history
    assert any("loss" in h for h in our_history)
    assert torch.equal(our_params, trl_params)
    return ours, theirs


LOSS_AND_SCALING = {
    "loss-grpo": {"loss_type": "grpo"},
    "loss-bnpo": {"loss_type": "bnpo"},
    "loss-dr_grpo": {"loss_type": "dr_grpo"},
    "loss-dapo": {"loss_type": "dapo"},
    "loss-cispo": {"loss_type": "cispo", "epsilon_high": 5.0},
    "loss-sapo": {"loss_type": "sapo"},
    "loss-vespo": {"loss_type": "vespo"},
    "loss-luspo": {"loss_type": "luspo", "importance_sampling_level": "sequence"},
    "scale-group": {"scale_rewards": "group"},
    "scale-batch": {"scale_rewards": "batch"},
    "scale-none": {"scale_rewards": "none"},
    "num_iterations": {"num_iterations": 2},
    "steps_per_generation": {"steps_per_generation": 2, "gradient_accumulation_steps": 2},
    "generation_batch_size": {"generation_batch_size": 16},
    "sequence-level": {"importance_sampling_level": "sequence", "loss_type": "grpo"},
    "mask-truncated": {"mask_truncated_completions": True},
    "multi-reward-weights": {"reward_weights": [0.5, 2.0, 1.0], "_rewards": "weighted"},
}


@pytest.mark.parametrize("case", list(LOSS_AND_SCALING), ids=list(LOSS_AND_SCALING))
def test_grpo_trainer_matches_trl(case, tokenizer, problems, tmp_path):
    overrides = dict(LOSS_AND_SCALING[case])
    rewards = overrides.pop("_rewards", "sync")
    _assert_same_as_trl("grpo", tmp_path, tokenizer, problems[0], overrides, rewards=rewards)


@pytest.mark.parametrize("kind", ["grpo", "dapo", "gspo"])
@pytest.mark.parametrize("rewards", ["sync", "async", "reward_model", "weighted"])
def test_reward_function_kinds_match_trl(kind, rewards, tokenizer, problems, tmp_path):
    overrides = {"reward_weights": [0.5, 2.0, 1.0]} if rewards == "weighted" else {}
    _assert_same_as_trl(kind, tmp_path, tokenizer, problems[0], overrides, rewards=rewards)


@pytest.mark.parametrize("beta", [0.0, 0.1], ids=["no-kl", "kl"])
@pytest.mark.parametrize("kind", ["grpo", "dapo", "gspo"])
def test_peft_matches_trl(kind, beta, tokenizer, problems, tmp_path):
    """PEFT, with and without the KL term (the reference is the adapter-disabled policy: an in-memory model has no
    checkpoint name TRL could load a separate reference from)."""
    from peft import LoraConfig

    ours, _ = _assert_same_as_trl(
        kind,
        tmp_path,
        tokenizer,
        problems[0],
        {"beta": beta},
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    assert any("lora_" in name for name, _ in ours.model.named_parameters())


@pytest.mark.parametrize("kind", ["grpo", "dapo", "gspo"])
def test_num_iterations_matches_trl(kind, tokenizer, problems, tmp_path):
    _assert_same_as_trl(kind, tmp_path, tokenizer, problems[0], {"num_iterations": 2, "max_steps": 3})


@pytest.mark.parametrize("kind", ["grpo", "dapo", "gspo"])
def test_eval_matches_trl(kind, tokenizer, problems, tmp_path):
    overrides = {"eval_strategy": "steps", "eval_steps": 1, "per_device_eval_batch_size": 8}
    ours, _ = _assert_same_as_trl(kind, tmp_path, tokenizer, problems[0], overrides, eval_dataset=problems[1])
    assert sum("eval_loss" in h for h in ours.state.log_history) == 2


@pytest.mark.parametrize("kind", ["grpo", "dapo", "gspo"])
def test_iterable_dataset_matches_trl(kind, tokenizer, problems, tmp_path):
    """Streams (dynamic sampling off; with it on, see the dynamic-sampling tests)."""
    _assert_same_as_trl(kind, tmp_path, tokenizer, problems[0].to_iterable_dataset())


def test_dapo_overlong_reward_matches_trl_given_the_same_reward(tokenizer, problems, tmp_path):
    """DAPOTrainer's soft overlong punishment (Eq. 13) is TRL's reward function with weight overlong_penalty_factor."""
    ours_args = DAPOConfig(
        output_dir=str(tmp_path / "ours"),
        dynamic_sampling=False,
        overlong_buffer_len=2,
        overlong_penalty_factor=0.5,
        **BASE,
    )
    trl_args = trl.GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        reward_weights=[1.0, 0.5],
        **{name: getattr(ours_args, name) for name in PRESET_FIELDS},
        **{k: v for k, v in BASE.items() if k != "num_generations"},
    )
    overlong = get_soft_overlong_punishment(ours_args.max_completion_length, 2)
    _, trl_params, trl_history = _train(trl.GRPOTrainer, trl_args, [position_reward, overlong], tokenizer, problems[0])
    ours, our_params, our_history = _train(DAPOTrainer, ours_args, [position_reward], tokenizer, problems[0])
    assert ours.reward_func_names == ["position_reward", "soft_overlong_punishment_reward"]
    assert our_history == trl_history
    assert torch.equal(our_params, trl_params)


# -- reward sources ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["grpo", "dapo", "gspo"])
def test_no_reward_source_raises_trls_own_error(kind, tokenizer, problems, tmp_path):
    """reward_funcs is optional as in TRL (an environment may own the reward); with no source at all, TRL's error."""
    ours_args, trl_args = _configs(kind, tmp_path, {})
    with pytest.raises(ValueError) as theirs:
        trl.GRPOTrainer(
            build_model(tokenizer, SMALL), args=trl_args, train_dataset=problems[0], processing_class=tokenizer
        )
    with pytest.raises(ValueError) as ours:
        OURS[kind][0](
            build_model(tokenizer, SMALL), args=ours_args, train_dataset=problems[0], processing_class=tokenizer
        )
    assert str(ours.value) == str(theirs.value)


# Environment-owned rewards: an environment with ``reset`` (supplies the prompt) and ``get_reward`` (TRL turns it into
# a reward function named after the class). TRL needs a chat template that can render tool calls for environments.
TOOL_TEMPLATE = (
    "{% for m in messages %}{% if m.content %}{{ m.content }}{% endif %}{% if m.tool_calls %}{% for c in m.tool_calls %}"
    "{{ c.function.name }}{{ c.function.arguments | tojson }}{% endfor %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}={% endif %}"
)


def _environments():
    """Fresh environment classes whose rewards vary within a group (0, 1, 2, 3 by reset order) and per class."""
    counter = {"n": 0}

    class AdditionEnv:
        def reset(self, **kwargs):
            self.score = counter["n"] % 4
            counter["n"] += 1
            return "1+2"

        def get_reward(self):
            return float(self.score)

    class HalfEnv(AdditionEnv):
        def get_reward(self):
            return 0.5 * self.score

    return {"add": AdditionEnv, "half": HalfEnv}


@pytest.fixture
def tool_tokenizer(tokenizer):
    from trl_ext.demo import build_tokenizer

    tool_tokenizer = build_tokenizer()
    tool_tokenizer.chat_template = TOOL_TEMPLATE
    return tool_tokenizer


@pytest.mark.parametrize("kind", ["grpo", "dapo", "gspo"])
def test_environment_rewards_and_routing_column_match_trl(kind, tool_tokenizer, tmp_path):
    """A dataset with only an ``environment`` column (no ``prompt``), environment-owned rewards, reward_funcs=None."""
    data = Dataset.from_dict({"environment": ["add", "half"] * 16})
    ours_args, trl_args = _configs(kind, tmp_path, {})
    runs = {}
    for name, trainer_class, args in (("trl", trl.GRPOTrainer, trl_args), ("ours", OURS[kind][0], ours_args)):
        runs[name] = _train(trainer_class, args, None, tool_tokenizer, data, environment_factory=_environments())
    (theirs, trl_params, trl_history), (ours, our_params, our_history) = runs["trl"], runs["ours"]
    assert ours.reward_func_names == theirs.reward_func_names == ["AdditionEnv", "HalfEnv"]
    assert our_history == trl_history
    assert torch.equal(our_params, trl_params)
    assert not torch.equal(
        our_params, torch.cat([p.flatten() for p in build_model(tool_tokenizer, SMALL).parameters()])
    )


def test_dapo_default_config_when_args_is_none(tokenizer, problems, monkeypatch):
    """``DAPOTrainer(model, reward_funcs)`` builds its own DAPOConfig, as trl.GRPOTrainer builds a GRPOConfig.
    Default configs ask for bf16 (TRL's too), which transformers refuses on a CPU-only machine: this construction-only
    test lets transformers believe bf16 is available."""
    monkeypatch.setattr("transformers.training_args.is_torch_bf16_gpu_available", lambda: True)
    model = build_model(tokenizer, dataclasses.replace(SMALL, max_position_embeddings=1024))
    trainer = DAPOTrainer(model, [position_reward], train_dataset=problems[0], processing_class=tokenizer)
    assert type(trainer.args) is DAPOConfig and trainer.args.output_dir.endswith("-DAPO")
    assert trainer.args.dynamic_sampling and trainer.args.loss_type == "dapo"
    assert trainer.reward_func_names[-1] == "soft_overlong_punishment_reward"


def test_dapo_trainer_builds_its_own_config_when_args_is_none(tokenizer, problems, monkeypatch):
    """The trainer side of ``args=None``, independent of DAPOConfig's own defaults: DAPOTrainer builds whatever its
    default config class is (here a DAPOConfig whose batch holds a 16-completion group), named after the model, like
    TRL's trainer."""

    @dataclasses.dataclass
    class BatchOf16(DAPOConfig):
        per_device_train_batch_size: int = 16
        use_cpu: bool = True

    monkeypatch.setattr(DAPOTrainer, "_default_config", BatchOf16)
    model = build_model(tokenizer, dataclasses.replace(SMALL, max_position_embeddings=1024))
    trainer = DAPOTrainer(model, [position_reward], train_dataset=problems[0], processing_class=tokenizer)
    assert type(trainer.args) is BatchOf16 and trainer.args.output_dir.endswith("-DAPO")
    assert trainer.args.dynamic_sampling and trainer.args.num_generations == 16
    assert trainer.reward_func_names == ["position_reward", "soft_overlong_punishment_reward"]
    # (TRL's own trainer builds GRPOConfig(output_dir=f"{name}-GRPO") the same way; its defaults ask for bf16, so
    # that path cannot run on a CPU-only machine to compare.)
