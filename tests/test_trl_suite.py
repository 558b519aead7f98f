"""TRL's own multi-turn and VLM GRPO tests, and its reward-aggregation and all-None tests, run with
``trl.GRPOTrainer`` (the stand-ins are faithful) and with ``trl_ext.DAPOTrainer(DAPOConfig(dynamic_sampling=True))``
(dynamic sampling passes what TRL passes).

Source: huggingface/trl ``tests/test_grpo_trainer.py`` at commit f2cd57710ae345ea6428ae95363267fcf38a3dc8 ("Async
grpo OpenEnv harness rollout (#6420)", 2026-07-24), the newest in the stored snapshot; read with
``git -C <mirror> show HEAD:tests/test_grpo_trainer.py``. Each test below keeps the body of the TRL test of the same
name (config, fake ``generate``, assertions); what changes:

- ``GRPOTrainer(args=GRPOConfig(...))`` becomes ``make_trainer(kind, ...)``: TRL's trainer and config, or
  ``DAPOTrainer`` with ``DAPOConfig(**the same fields, dynamic_sampling=True, soft_overlong_punishment=False,
  num_minibatches=1)`` (no extra reward function, so TRL's reward-name assertions hold; one optimizer step per
  generation batch, as TRL's default, so the fake ``generate``'s batch sizes hold);
- every config gets ``use_cpu=True, bf16=False`` (this machine has no GPU);
- ``trl-internal-testing/*`` models are offline stand-ins (``trl_suite_models``: random weights, tokenizers and
  processors built in code, saved locally, loaded by TRL from that path as from a Hub id); datasets are TRL's zen
  datasets rebuilt in code with fewer rows (1 prompt instead of 17: TRL's default 3 epochs stay a few steps);
- ``@require_jmespath`` is not applied: with transformers >= 5.13 TRL parses tool calls without jmespath, and TRL
  itself raises when it needs it. Cases the machine cannot run are skipped with the reason.

The refill tests at the end are ours: a reward under which most groups are uninformative, so that dynamic sampling
must refill (``dynamic_sampling/rounds`` > 1) through TRL's multi-turn loop (``tools=``, ``environment_factory=``
single and dict, ``rollout_func=``) and with a VLM stand-in.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from types import SimpleNamespace
from unittest.mock import MagicMock, patch

import pytest
import torch
import transformers
import trl
from datasets import Dataset
from packaging.version import Version
from transformers.utils import is_peft_available
from trl_suite_models import (
    build,
    zen_conversational_prompt_only,
    zen_image,
    zen_multi_image,
    zen_standard_prompt_only,
)

from trl_ext import DAPOConfig, DAPOTrainer

TRL_COMMIT = "f2cd57710ae345ea6428ae95363267fcf38a3dc8"
TRL_VERSION = Version(trl.__version__)
KINDS = ["trl.GRPOTrainer", "DAPOTrainer+DS"]
DS_FIELDS = dict(dynamic_sampling=True, soft_overlong_punishment=False, num_minibatches=1)
ZEN_ROWS = 1
TRL_NUM_GENERATIONS = next(f.default for f in dataclasses.fields(trl.GRPOConfig) if f.name == "num_generations")
CPU = dict(use_cpu=True, bf16=False, disable_tqdm=True)  # TRL's default bf16=True needs a GPU here

QWEN3_MOE = "trl-internal-testing/tiny-Qwen3MoeForCausalLM"
QWEN3 = "trl-internal-testing/tiny-Qwen3ForCausalLM"
QWEN2 = "trl-internal-testing/tiny-Qwen2ForCausalLM-2.5"
REWARD_MODEL = "trl-internal-testing/tiny-Qwen2ForSequenceClassification-2.5"
GEMMA3 = "trl-internal-testing/tiny-Gemma3ForConditionalGeneration"
LLAVA_NEXT = "trl-internal-testing/tiny-LlavaNextForConditionalGeneration"
QWEN2_VL = "trl-internal-testing/tiny-Qwen2VLForConditionalGeneration"
QWEN2_5_VL = "trl-internal-testing/tiny-Qwen2_5_VLForConditionalGeneration"

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.skipif(
        Version(transformers.__version__) < Version("5.2.0"), reason="TRL's multi-turn tests need transformers>=5.2"
    ),
]


def _torchvision_available() -> bool:
    from transformers.utils import is_torchvision_available

    return is_torchvision_available()


#: Processors whose class holds a video processor: transformers builds those with torchvision only.
needs_torchvision = pytest.mark.skipif(
    not _torchvision_available(),
    reason="Qwen2-VL / Qwen2.5-VL processors hold a video processor, which transformers builds only with torchvision "
    "(not installed here)",
)


#: TRL cases whose stand-in is not built here: their processors (Gemma 4's, Qwen3.5's Qwen3VLProcessor) hold a video
#: processor, which transformers builds only with torchvision; and liger-kernel / vLLM are not installed.
NOT_BUILT = pytest.mark.skip(reason="no stand-in: its processor holds a video processor, which needs torchvision")


@pytest.fixture(scope="session")
def standin_root(tmp_path_factory):
    return tmp_path_factory.mktemp("trl-internal-testing")


@pytest.fixture
def standin(request, standin_root):
    """The offline stand-ins of TRL's test models. TRL's own training cases are opt-in (``TRL_EXT_TRL_SUITE=1``):
    about a minute each on 2 idle cores (TRL's tests hard-code Qwen's token ids, so those stand-ins keep its 152k
    vocabulary), over CI's hour at both TRL ends. The refill cases of this project always run."""
    if not request.node.name.startswith("test_refill_") and os.environ.get("TRL_EXT_TRL_SUITE") != "1":
        pytest.skip("TRL's own training tests on stand-ins are opt-in: TRL_EXT_TRL_SUITE=1 python -m pytest ...")
    return lambda model_id: build(model_id, standin_root)


def make_trainer(kind: str, output_dir, args: dict, **trainer_kwargs):
    """TRL's trainer and config, or DAPOTrainer with dynamic sampling and the same fields."""
    args = dict(CPU, **args)
    if kind == "trl.GRPOTrainer":
        return trl.GRPOTrainer(args=trl.GRPOConfig(output_dir=output_dir, **args), **trainer_kwargs)
    # TRL's tests rely on GRPOConfig's num_generations (8) when they do not set it; DAPOConfig's preset is 16
    args.setdefault("num_generations", TRL_NUM_GENERATIONS)
    return DAPOTrainer(args=DAPOConfig(output_dir=output_dir, **args, **DS_FIELDS), **trainer_kwargs)


def assert_params_changed(previous: dict, trainer, frozen: Callable[[str], bool] = lambda n: False) -> None:
    for n, param in previous.items():
        new_param = trainer.model.get_parameter(n)
        if frozen(n):
            assert torch.equal(param, new_param), f"Param {n} expected frozen, but changed"
        else:
            assert not torch.equal(param, new_param), f"Parameter {n} has not changed."


def snapshot(trainer) -> dict:
    return {n: param.clone() for n, param in trainer.model.named_parameters()}


def multiply_tool(a: int, b: int) -> int:
    """
    Multiplies two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The product of the two integers.
    """
    return a * b


async def async_multiply_tool(a: int, b: int) -> int:
    """
    Asynchronously multiplies two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The product of the two integers.
    """
    return a * b


# ---------------------------------------------------------------------------------------------------------------------
# TestGRPORolloutDispatch (rollout_func): TRL's _generate on a bare trainer object


def _bare_trainer(trainer_class):
    trainer = object.__new__(trainer_class)
    trainer.accelerator = SimpleNamespace(device=torch.device("cpu"), is_main_process=True, gather=lambda t: t)
    trainer.args = SimpleNamespace(report_to=[])
    trainer.model = SimpleNamespace(training=True)
    trainer.state = SimpleNamespace(global_step=2, num_input_tokens_seen=0)
    trainer._last_loaded_step = 1
    trainer.use_vllm = False
    trainer.use_transformers_continuous_batching = False
    trainer.vllm_generation = SimpleNamespace(sync_weights=MagicMock())
    trainer.processing_class = SimpleNamespace(batch_decode=MagicMock(return_value=["decoded"]))
    trainer._tokenizer = SimpleNamespace(eos_token_id=2, pad_token_id=0)
    trainer.eos_token_ids = [2]  # read by TRL 1.12 / 1.16's _generate (not set by the snapshot's bare trainer)
    trainer.tools = None
    lengths = ["mean_length", "min_length", "max_length", "clipped_ratio"]
    lengths += ["mean_terminated_length", "min_terminated_length", "max_terminated_length"]
    trainer._metrics = {"train": {"num_tokens": [], **{f"completions/{k}": [] for k in lengths}}}
    return trainer


TRAINER_CLASSES = {"trl.GRPOTrainer": trl.GRPOTrainer, "DAPOTrainer+DS": DAPOTrainer}


@pytest.mark.parametrize("kind", KINDS)
def test_generate_prefers_rollout_func(kind):
    trainer = _bare_trainer(TRAINER_CLASSES[kind])
    trainer.rollout_func = MagicMock(
        return_value={"prompt_ids": [[1]], "completion_ids": [[2]], "logprobs": [[-0.1]], "env_mask": [[1]]}
    )
    result = trainer._generate(["prompt"])
    assert result[0] == [[1]]  # prompt_ids
    assert result[1] == [[2]]  # completion_ids
    assert result[2] == [[1]]  # tool_mask (from env_mask)
    trainer.rollout_func.assert_called_once_with(["prompt"], trainer)


@pytest.mark.parametrize("kind", KINDS)
def test_generate_rollout_func_syncs_vllm_weights_when_needed(kind):
    trainer = _bare_trainer(TRAINER_CLASSES[kind])
    trainer.use_vllm = True
    trainer.rollout_func = MagicMock(return_value={"prompt_ids": [[1]], "completion_ids": [[2]], "logprobs": [[0.0]]})
    trainer._generate(["prompt"])
    trainer.vllm_generation.sync_weights.assert_called_once()
    assert trainer._last_loaded_step == trainer.state.global_step
    trainer.rollout_func.assert_called_once_with(["prompt"], trainer)


@pytest.mark.parametrize("kind", KINDS)
def test_generate_rollout_func_raises_when_required_keys_are_missing(kind):
    trainer = _bare_trainer(TRAINER_CLASSES[kind])
    trainer.rollout_func = MagicMock(return_value={"prompt_ids": [[1]], "completion_ids": [[2]]})
    with pytest.raises(ValueError, match="rollout_func must return keys"):
        trainer._generate(["prompt"])


# ---------------------------------------------------------------------------------------------------------------------
# TestGRPOTrainer: reward aggregation and rewards that are all None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("multi_objective_aggregation", ["sum_then_normalize", "normalize_then_sum"])
def test_reward_metric_reflects_reward_weights(kind, multi_objective_aggregation, standin, tmp_path):
    """Test that the logged 'reward' metric uses reward_weights, not an unweighted sum."""
    dataset = zen_standard_prompt_only(ZEN_ROWS)

    def constant_reward_1(completions, **kwargs):
        return [1.0] * len(completions)

    def constant_reward_0(completions, **kwargs):
        return [0.0] * len(completions)

    args = dict(
        learning_rate=0.1,  # use higher lr because gradients are tiny and default lr can stall updates
        per_device_train_batch_size=3,  # reduce the batch size to reduce memory usage
        num_generations=3,  # reduce the number of generations to reduce memory usage
        max_completion_length=8,  # reduce the completion length to reduce memory usage
        report_to="none",
        reward_weights=[0.7, 0.3],
        multi_objective_aggregation=multi_objective_aggregation,
    )
    trainer = make_trainer(
        kind,
        str(tmp_path),
        args,
        model=standin(QWEN2),
        reward_funcs=[constant_reward_1, constant_reward_0],
        train_dataset=dataset,
    )

    trainer.train()

    log = trainer.state.log_history[-1]
    # With reward_weights=[0.7, 0.3] and rewards [1.0, 0.0]:
    # weighted reward = 0.7*1.0 + 0.3*0.0 = 0.7
    # unweighted reward = 1.0 + 0.0 = 1.0
    assert abs(log["reward"] - 0.7) < 1e-5, (
        f"Expected logged reward to be ~0.7 (weighted), got {log['reward']}. "
        "The reward metric should reflect reward_weights."
    )


@pytest.mark.parametrize("kind", KINDS)
def test_train_normalize_then_sum_aggregation(kind, standin, tmp_path):
    dataset = zen_standard_prompt_only(ZEN_ROWS)

    def reward_func1(completions, **kwargs):
        """Reward function that rewards longer completions."""
        return [float(len(completion)) for completion in completions]

    def reward_func2(completions, **kwargs):
        """Reward function that rewards completions with more unique letters."""
        return [float(len(set(completion))) for completion in completions]

    args = dict(
        learning_rate=0.1,  # use higher lr because gradients are tiny and default lr can stall updates
        per_device_train_batch_size=3,  # reduce the batch size to reduce memory usage
        num_generations=3,  # reduce the number of generations to reduce memory usage
        max_completion_length=8,  # reduce the completion length to reduce memory usage
        multi_objective_aggregation="normalize_then_sum",
        report_to="none",
    )
    trainer = make_trainer(
        kind,
        str(tmp_path),
        args,
        model=standin(QWEN2),
        reward_funcs=[reward_func1, reward_func2],
        train_dataset=dataset,
    )

    previous_trainable_params = snapshot(trainer)

    trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None

    # Check that the params have changed
    assert_params_changed(previous_trainable_params, trainer)


@pytest.mark.parametrize("kind", KINDS)
def test_warning_raised_all_rewards_none(kind, standin, tmp_path, caplog):
    """Test that a proper warning is raised when all rewards are None."""
    dataset = zen_standard_prompt_only(ZEN_ROWS)

    def always_none_reward_func(completions, **kwargs):
        """Reward function that always returns None."""
        return [None] * len(completions)

    args = dict(
        learning_rate=0.1,  # use higher lr because gradients are tiny and default lr can stall updates
        per_device_train_batch_size=3,  # reduce the batch size to reduce memory usage
        num_generations=3,  # reduce the number of generations to reduce memory usage
        max_completion_length=8,  # reduce the completion length to reduce memory usage
        report_to="none",
    )
    trainer = make_trainer(
        kind,
        str(tmp_path),
        args,
        model=standin(QWEN2),
        reward_funcs=always_none_reward_func,
        train_dataset=dataset,
    )

    with caplog.at_level("WARNING", logger="trl.trainer.grpo_trainer"):
        trainer.train()

    expected_warning = "All reward functions returned None for the following kwargs:"
    assert expected_warning in caplog.text


# ---------------------------------------------------------------------------------------------------------------------
# TestGRPOTrainer: tools and environments

# fmt: off
TOOL_CALLS = {
    # '<tool_call>\n{"name": "multiply_tool", "arguments": {"a": 3, "b": 4}}\n</tool_call><|im_end|>', then the same
    # with a wrong argument name ("c"), then "I don't know any tool<|im_end|>" + padding
    "multiply_tool": [
        [151657, 198, 4913, 606, 788, 330, 64648, 22785, 497, 330, 16370, 788, 5212, 64, 788, 220, 18, 11, 330, 65, 788, 220, 19, 11248, 151658, 151645],  # noqa: E501
        [151657, 198, 4913, 606, 788, 330, 64648, 22785, 497, 330, 16370, 788, 5212, 64, 788, 220, 18, 11, 330, 66, 788, 220, 19, 11248, 151658, 151645],  # noqa: E501
        [40, 1513, 944, 1414, 894, 5392, 151645] + [151643] * 19,
    ],
    "async_multiply_tool": [
        [151657, 198, 4913, 606, 788, 330, 7692, 93054, 22785, 497, 330, 16370, 788, 5212, 64, 788, 220, 18, 11, 330, 65, 788, 220, 19, 11248, 151658, 151645],  # noqa: E501
        [151657, 198, 4913, 606, 788, 330, 7692, 93054, 22785, 497, 330, 16370, 788, 5212, 64, 788, 220, 18, 11, 330, 66, 788, 220, 19, 11248, 151658, 151645],  # noqa: E501
        [40, 1513, 944, 1414, 894, 5392, 151645] + [151643] * 20,
    ],
}
# '<tool_call>\n{"name": "increment", "arguments": {"step": 1}}\n</tool_call><|im_end|>' + pad
INCREMENT_CALL = [151657, 198, 4913, 606, 788, 330, 35744, 497, 330, 16370, 788, 5212, 9520, 788, 220, 16, 11248, 151658, 151645, 151643]  # noqa: E501
# '<tool_call>\n{"name": "decrement", "arguments": {"step": 2}}\n</tool_call><|im_end|>' (a tool that does not exist)
DECREMENT_CALL = [151657, 198, 4913, 606, 788, 330, 450, 13477, 497, 330, 16370, 788, 5212, 9520, 788, 220, 17, 11248, 151658, 151645]  # noqa: E501
# "I won't increment<|im_end|>" + pad
NO_CALL = [40, 2765, 944, 16252, 151645] + [151643] * 15
# '<tool_call>\n{"name": "shout", "arguments": {"text": "hi"}}\n</tool_call><|im_end|>'
SHOUT_CALL = [151657, 198, 4913, 606, 788, 330, 927, 411, 497, 330, 16370, 788, 5212, 1318, 788, 330, 6023, 95642, 151658, 151645]  # noqa: E501
DONE = [17453, 0, 151645]  # 'Done!<|im_end|>'
# fmt: on


def _cat(input_ids, rows):
    return torch.cat([input_ids, torch.tensor(rows, device=input_ids.device)], dim=-1)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tools", [[multiply_tool], [async_multiply_tool]], ids=["sync", "async"])
def test_train_with_tools(kind, tools, standin, tmp_path):
    dataset = zen_conversational_prompt_only(ZEN_ROWS)
    args = dict(
        learning_rate=0.1,
        per_device_train_batch_size=3,
        num_generations=3,
        max_completion_length=128,
        report_to="none",
    )
    trainer = make_trainer(
        kind,
        str(tmp_path),
        args,
        model=standin(QWEN3_MOE),
        reward_funcs=standin(REWARD_MODEL),
        train_dataset=dataset,
        tools=tools,
    )
    previous_trainable_params = snapshot(trainer)
    tool_name = tools[0].__name__

    def fake_generate(input_ids, **kwargs):
        if input_ids.shape[0] == 3:  # first call
            return _cat(input_ids, TOOL_CALLS[tool_name])
        # second call will only have two inputs in the batch, because two examples have a tool call.
        return _cat(input_ids, [DONE, DONE])

    with patch.object(trainer.model, "generate", side_effect=fake_generate):
        trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert trainer.state.log_history[-1]["tools/call_frequency"] is not None
    assert trainer.state.log_history[-1]["tools/call_frequency"] == pytest.approx(2 / 3)
    assert trainer.state.log_history[-1]["tools/failure_frequency"] is not None
    assert trainer.state.log_history[-1]["tools/failure_frequency"] == pytest.approx(1 / 2)
    assert_params_changed(previous_trainable_params, trainer)


@pytest.mark.slow  # TRL's own 16-row dataset: 24 steps (3 epochs), the heaviest case here
@pytest.mark.parametrize("kind", KINDS)
@patch.dict(os.environ, {"TRL_EXPERIMENTAL_SILENCE": "1"})
def test_train_with_multiple_environments(kind, standin, tmp_path):
    dataset = Dataset.from_dict({"environment": ["counter", "echo"] * 8})
    reset_kwargs_seen = {"counter": [], "echo": []}
    tool_calls_made = {"increment": [], "shout": []}

    class CounterEnvironment:
        def reset(self, **kwargs):
            reset_kwargs_seen["counter"].append(kwargs)
            return "Count."

        def increment(self, step: int) -> int:
            """
            Increment the internal counter.

            Args:
                step: Value to add to the counter.

            Returns:
                The updated counter value.
            """
            tool_calls_made["increment"].append(step)
            return step

    class EchoEnvironment:
        def reset(self, **kwargs):
            reset_kwargs_seen["echo"].append(kwargs)
            return "Echo."

        def shout(self, text: str) -> str:
            """
            Shout the given text.

            Args:
                text: Text to shout.

            Returns:
                The text in upper case.
            """
            tool_calls_made["shout"].append(text)
            return text.upper()

    args = dict(
        learning_rate=0.1, per_device_train_batch_size=4, num_generations=2, shuffle_dataset=False, report_to="none"
    )
    trainer = make_trainer(
        kind,
        str(tmp_path),
        args,
        model=standin(QWEN3_MOE),
        reward_funcs=standin(REWARD_MODEL),
        train_dataset=dataset,
        environment_factory={"counter": CounterEnvironment, "echo": EchoEnvironment},
    )
    assert [tool.__name__ for tool in trainer._env_tools["counter"]] == ["increment"]
    assert [tool.__name__ for tool in trainer._env_tools["echo"]] == ["shout"]
    assert len(trainer._environment_pool["counter"]) == 1
    assert len(trainer._environment_pool["echo"]) == 1
    previous_trainable_params = snapshot(trainer)

    def fake_generate(input_ids, **kwargs):
        if input_ids.shape[0] == 4:  # first generation: batch is [counter, counter, echo, echo]
            no_call = [40, 2765, 944, 151645] + [151643] * 16  # "I won't<|im_end|>" + pad
            done = DONE + [151643] * 17
            return _cat(input_ids, [INCREMENT_CALL, no_call, SHOUT_CALL, done])
        # regeneration after tool execution: only the two examples that issued a (valid) tool call
        return _cat(input_ids, [DONE, DONE])

    with patch.object(trainer.model, "generate", side_effect=fake_generate):
        trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert tool_calls_made["increment"]
    assert tool_calls_made["shout"]
    assert trainer.state.log_history[-1]["tools/call_frequency"] == pytest.approx(2 / 4)
    assert trainer.state.log_history[-1]["tools/failure_frequency"] == pytest.approx(0.0)
    assert reset_kwargs_seen["counter"] and reset_kwargs_seen["echo"]
    assert all("environment" not in kwargs for kwargs in reset_kwargs_seen["counter"] + reset_kwargs_seen["echo"])
    assert_params_changed(previous_trainable_params, trainer)


@pytest.mark.parametrize("kind", KINDS)
@patch.dict(os.environ, {"TRL_EXPERIMENTAL_SILENCE": "1"})
def test_train_with_unknown_environment_raises(kind, standin, tmp_path):
    dataset = zen_conversational_prompt_only(ZEN_ROWS).map(lambda example: {"environment": "unknown"})

    class CounterEnvironment:
        def reset(self, **kwargs): ...

        def increment(self, step: int) -> int:
            """
            Increment the internal counter.

            Args:
                step: Value to add to the counter.

            Returns:
                The updated counter value.
            """
            return step

    args = dict(per_device_train_batch_size=3, num_generations=3, report_to="none")
    trainer = make_trainer(
        kind,
        str(tmp_path),
        args,
        model=standin(QWEN3_MOE),
        reward_funcs=standin(REWARD_MODEL),
        train_dataset=dataset,
        environment_factory={"counter": CounterEnvironment},
    )
    with pytest.raises(ValueError, match="not among the environments"):
        trainer.train()


def _counter_environment(with_reward: bool):
    class DummyEnvironment:
        def reset(self, **kwargs):
            self._counter = 0

        def increment(self, step: int) -> int:
            """
            Increment the internal counter.

            Args:
                step: Value to add to the counter.

            Returns:
                The updated counter value.
            """
            self._counter += step
            return self._counter

    if not with_reward:
        return DummyEnvironment

    class RewardedEnvironment(DummyEnvironment):
        def get_reward(self) -> float:
            return float(self._counter)

    RewardedEnvironment.__name__ = "DummyEnvironment"
    return RewardedEnvironment


def _increment_generate(input_ids, **kwargs):
    if input_ids.shape[0] == 3:  # first call
        return _cat(input_ids, [INCREMENT_CALL, DECREMENT_CALL, NO_CALL])
    # second call will only have two inputs in the batch, because two examples have a tool call.
    return _cat(input_ids, [DONE, DONE])


@pytest.mark.parametrize("kind", KINDS)
@patch.dict(os.environ, {"TRL_EXPERIMENTAL_SILENCE": "1"})
def test_train_with_environment_factory(kind, standin, tmp_path):
    args = dict(learning_rate=0.1, per_device_train_batch_size=3, num_generations=3, max_steps=5, report_to="none")
    trainer = make_trainer(
        kind,
        str(tmp_path),
        args,
        model=standin(QWEN3_MOE),
        reward_funcs=standin(REWARD_MODEL),
        environment_factory=_counter_environment(with_reward=False),
    )
    previous_trainable_params = snapshot(trainer)
    with patch.object(trainer.model, "generate", side_effect=_increment_generate):
        trainer.train()

    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert trainer.state.log_history[-1]["tools/call_frequency"] is not None
    assert trainer.state.log_history[-1]["tools/call_frequency"] == pytest.approx(2 / 3)
    assert trainer.state.log_history[-1]["tools/failure_frequency"] is not None
    assert trainer.state.log_history[-1]["tools/failure_frequency"] == pytest.approx(1 / 2)
    assert trainer.environments[0]._counter == 1  # should have been incremented once
    assert trainer.environments[1]._counter == 0  # shouldn't have been incremented because the tool call failed
    assert trainer.environments[2]._counter == 0  # shouldn't have been incremented because no tool call was made
    assert_params_changed(previous_trainable_params, trainer)


@pytest.mark.parametrize("kind", KINDS)
@patch.dict(os.environ, {"TRL_EXPERIMENTAL_SILENCE": "1"})
def test_train_with_environment_owned_reward(kind, standin, tmp_path):
    args = dict(learning_rate=0.1, per_device_train_batch_size=3, num_generations=3, max_steps=5, report_to="none")
    trainer = make_trainer(
        kind, str(tmp_path), args, model=standin(QWEN3_MOE), environment_factory=_counter_environment(with_reward=True)
    )
    assert trainer.reward_func_names == ["DummyEnvironment"]
    assert trainer.reward_weights.tolist() == [1.0]
    tool_names = [tool.__name__ for tool in trainer.tools]
    assert "increment" in tool_names
    assert "get_reward" not in tool_names
    assert "reset" not in tool_names
    previous_trainable_params = snapshot(trainer)
    with patch.object(trainer.model, "generate", side_effect=_increment_generate):
        trainer.train()
    # Counters are 1, 0, 0 -> rewards 1.0, 0.0, 0.0.
    assert trainer.state.log_history[-1]["rewards/DummyEnvironment/mean"] == pytest.approx(1 / 3)
    assert_params_changed(previous_trainable_params, trainer)


@pytest.mark.parametrize("kind", KINDS)
@patch.dict(os.environ, {"TRL_EXPERIMENTAL_SILENCE": "1"})
def test_environment_owned_reward_coexists_with_reward_funcs(kind, standin, tmp_path):
    class DummyEnvironment:
        def reset(self, **kwargs):
            self._solved = False

        def guess(self, word: str) -> str:
            """
            Submit a guess.

            Args:
                word: The guessed word.

            Returns:
                Feedback about the guess.
            """
            return "nope"

        def get_reward(self) -> float:
            return 1.0 if self._solved else 0.0

    def format_reward(completions, **kwargs):
        return [0.0 for _ in completions]

    args = dict(per_device_train_batch_size=3, num_generations=3, max_steps=5, reward_weights=[0.5], report_to="none")
    trainer = make_trainer(
        kind,
        str(tmp_path),
        args,
        model=standin(QWEN3_MOE),
        reward_funcs=format_reward,
        environment_factory=DummyEnvironment,
    )
    assert trainer.reward_func_names == ["format_reward", "DummyEnvironment"]
    assert trainer.reward_weights.tolist() == [0.5, 1.0]
    assert len(trainer.reward_funcs) == 2
    tool_names = [tool.__name__ for tool in trainer.tools]
    assert "guess" in tool_names
    assert "get_reward" not in tool_names


@pytest.mark.parametrize("kind", KINDS)
@patch.dict(os.environ, {"TRL_EXPERIMENTAL_SILENCE": "1"})
def test_environment_owned_reward_mixed_environments(kind, standin, tmp_path):
    class ScoredEnvironment:  # owns its reward
        def reset(self, **kwargs): ...

        def act(self, x: int) -> int:
            """
            Act.

            Args:
                x: A value.

            Returns:
                The value.
            """
            return x

        def get_reward(self) -> float:
            return 1.0

    class PlainEnvironment:  # no `get_reward`; scored by `reward_funcs`
        def reset(self, **kwargs): ...

        def play(self, x: int) -> int:
            """
            Play.

            Args:
                x: A value.

            Returns:
                The value.
            """
            return x

    def format_reward(completions, **kwargs):
        return [0.0 for _ in completions]

    dataset = Dataset.from_dict({"environment": ["scored", "scored2", "plain"]})
    args = dict(per_device_train_batch_size=3, num_generations=3, report_to="none")
    trainer = make_trainer(
        kind,
        str(tmp_path),
        args,
        model=standin(QWEN3_MOE),
        reward_funcs=format_reward,
        train_dataset=dataset,
        environment_factory={"scored": ScoredEnvironment, "scored2": ScoredEnvironment, "plain": PlainEnvironment},
    )
    assert trainer.reward_func_names == ["format_reward", "ScoredEnvironment"]
    assert trainer.reward_weights.tolist() == [1.0, 1.0]
    env_reward_func = trainer.reward_funcs[-1]
    rewards = env_reward_func(environments=[ScoredEnvironment(), PlainEnvironment()])
    assert rewards == [1.0, None]


@pytest.mark.parametrize("kind", KINDS)
@patch.dict(os.environ, {"TRL_EXPERIMENTAL_SILENCE": "1"})
def test_environment_owned_data_requires_max_steps(kind, standin, tmp_path):
    class DummyEnvironment:
        def reset(self, **kwargs):
            return "Guess the 5-letter word."

    with pytest.raises(ValueError, match="max_steps"):
        make_trainer(
            kind,
            str(tmp_path),
            dict(report_to="none"),  # max_steps unset
            model=standin(QWEN3),
            reward_funcs=standin(REWARD_MODEL),
            environment_factory=DummyEnvironment,
        )


@pytest.mark.parametrize("kind", KINDS)
@patch.dict(os.environ, {"TRL_EXPERIMENTAL_SILENCE": "1"})
def test_multiple_environments_without_dataset_raises(kind, standin, tmp_path):
    class EnvA:
        def reset(self, **kwargs): ...

    class EnvB:
        def reset(self, **kwargs): ...

    with pytest.raises(ValueError, match="requires a `train_dataset`"):
        make_trainer(
            kind,
            str(tmp_path),
            dict(max_steps=1, report_to="none"),
            model=standin(QWEN3),
            reward_funcs=standin(REWARD_MODEL),
            environment_factory={"a": EnvA, "b": EnvB},
        )


@pytest.mark.parametrize("kind", KINDS)
@patch.dict(os.environ, {"TRL_EXPERIMENTAL_SILENCE": "1"})
def test_train_with_environment_owned_data(kind, standin, tmp_path):
    class GuessTheWordEnvironment:
        def reset(self, **kwargs):
            return "Guess the 5-letter word."  # the env owns the data and returns the prompt

    def fake_generate(input_ids, **kwargs):
        rows = [
            [17453, 0, 151645, 151643, 151643, 151643],  # 'Done!' + eos + pad
            [17453, 17453, 0, 151645, 151643, 151643],  # 'DoneDone!' + eos + pad
            [17453, 17453, 17453, 0, 151645, 151643],  # 'DoneDoneDone!' + eos + pad
        ]
        return _cat(input_ids, [rows[i % 3] for i in range(input_ids.shape[0])])

    def reward_len(completions, **kwargs):
        return [float(len(completion[-1]["content"])) for completion in completions]

    args = dict(
        learning_rate=0.1,
        per_device_train_batch_size=3,
        num_generations=3,
        max_steps=5,
        max_completion_length=8,
        report_to="none",
    )
    trainer = make_trainer(
        kind,
        str(tmp_path),
        args,
        model=standin(QWEN3),
        reward_funcs=reward_len,
        environment_factory=GuessTheWordEnvironment,
    )
    previous_trainable_params = snapshot(trainer)
    with patch.object(trainer.model, "generate", side_effect=fake_generate):
        trainer.train()
    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert_params_changed(previous_trainable_params, trainer)


@pytest.mark.parametrize("kind", KINDS)
def test_train_with_malformed_tool_calls(kind, standin, tmp_path):
    dataset = zen_conversational_prompt_only(ZEN_ROWS)
    args = dict(
        learning_rate=0.1,
        per_device_train_batch_size=3,
        num_generations=3,
        max_completion_length=128,
        report_to="none",
    )
    trainer = make_trainer(
        kind,
        str(tmp_path),
        args,
        model=standin(QWEN3_MOE),
        reward_funcs=standin(REWARD_MODEL),
        train_dataset=dataset,
        tools=[multiply_tool],
    )
    previous_trainable_params = snapshot(trainer)

    def fake_generate(input_ids, **kwargs):
        # If input_ids.shape[0] < 3, it means that it's a second call, which should not happen here
        assert input_ids.shape[0] == 3
        # fmt: off
        rows = [
            # '<tool_call>\n{"arguments": {"a": 3, "b": 4}}\n</tool_call><|im_end|>'
            [151657, 198, 4913, 16370, 788, 5212, 64, 788, 220, 18, 11, 330, 65, 788, 220, 19, 11248, 151658, 151645, 151643, 151643, 151643, 151643, 151643],  # noqa: E501
            # '<toolcall>\n{"arguments": {"a": 3, "b": 4}}\n</toolcall><|im_end|>'
            [27, 14172, 6659, 397, 4913, 16370, 788, 5212, 64, 788, 220, 18, 11, 330, 65, 788, 220, 19, 11248, 522, 14172, 6659, 29, 151645],  # noqa: E501
            # '<tool_call>\n{"arguments": {a: 3, b: 4}}\n</tool_call><|im_end|>'
            [151657, 198, 4913, 16370, 788, 314, 64, 25, 220, 18, 11, 293, 25, 220, 19, 11248, 151658, 151645, 151643, 151643, 151643, 151643, 151643, 151643],  # noqa: E501
        ]
        # fmt: on
        return _cat(input_ids, rows)

    with patch.object(trainer.model, "generate", side_effect=fake_generate):
        trainer.train()
    assert trainer.state.log_history[-1]["train_loss"] is not None
    assert_params_changed(previous_trainable_params, trainer)


# ---------------------------------------------------------------------------------------------------------------------
# TestGRPOTrainerVLM


def reward_func(completions, **kwargs):
    """Reward function that rewards longer completions."""
    return [float(len(completion[0]["content"])) for completion in completions]


VLM_ARGS = dict(learning_rate=0.1, per_device_train_batch_size=2, num_generations=2, max_completion_length=8)
LLAVA_FROZEN = (LLAVA_NEXT,)


def _train_vlm(kind, standin, tmp_path, model_id, dataset=None, **extra):
    trainer = make_trainer(
        kind,
        str(tmp_path),
        dict(VLM_ARGS, report_to="none", **extra),
        model=standin(model_id),
        reward_funcs=reward_func,
        train_dataset=dataset if dataset is not None else zen_image(ZEN_ROWS),
    )
    previous_trainable_params = snapshot(trainer)
    trainer.train()
    assert trainer.state.log_history[-1]["train_loss"] is not None
    return trainer, previous_trainable_params


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "model_id",
    [
        GEMMA3,
        LLAVA_NEXT,
        pytest.param(QWEN2_5_VL, marks=needs_torchvision),
        pytest.param(QWEN2_VL, marks=needs_torchvision),
        pytest.param("Gemma4", marks=NOT_BUILT),
        pytest.param("Qwen3_5-NoThink", marks=NOT_BUILT),
        pytest.param("Qwen3_5Moe-3.6", marks=NOT_BUILT),
    ],
    ids=["Gemma3", "LlavaNext", "Qwen2_5_VL", "Qwen2VL", "Gemma4", "Qwen3_5", "Qwen3_5Moe"],
)
def test_train_vlm(kind, model_id, standin, tmp_path):
    trainer, previous = _train_vlm(kind, standin, tmp_path, model_id)

    # LLaVA & LLaVA-Next: vision_feature_layer=-2 leaves the last encoder layer (layers.1) and post_layernorm
    # (pooler-only path) without gradient by design.
    def frozen(n):
        return model_id in LLAVA_FROZEN and ("encoder.layers.1" in n or "post_layernorm" in n)

    assert_params_changed(previous, trainer, frozen)


@pytest.mark.parametrize("kind", KINDS)
def test_train_vlm_with_pad_to_multiple_of(kind, standin, tmp_path):
    trainer, previous = _train_vlm(kind, standin, tmp_path, GEMMA3, pad_to_multiple_of=7)
    assert_params_changed(previous, trainer)


@pytest.mark.parametrize("kind", KINDS)
@needs_torchvision
def test_train_vlm_beta_non_zero(kind, standin, tmp_path):
    trainer, previous = _train_vlm(kind, standin, tmp_path, QWEN2_5_VL, beta=0.1)
    assert_params_changed(previous, trainer)


@pytest.mark.parametrize("kind", KINDS)
@needs_torchvision
def test_train_vlm_and_importance_sampling(kind, standin, tmp_path):
    trainer, previous = _train_vlm(kind, standin, tmp_path, QWEN2_5_VL, steps_per_generation=2)
    assert_params_changed(previous, trainer)


@pytest.mark.parametrize("kind", KINDS)
@needs_torchvision
def test_train_vlm_multi_image(kind, standin, tmp_path):
    trainer, previous = _train_vlm(kind, standin, tmp_path, QWEN2_5_VL, dataset=zen_multi_image(ZEN_ROWS))
    assert_params_changed(previous, trainer)


@pytest.mark.parametrize("kind", KINDS)
def test_train_vlm_log_multimodal_false(kind, standin, tmp_path):
    args = dict(
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        report_to="none",
        log_completions=True,
        log_multimodal=False,
    )
    trainer = make_trainer(
        kind, str(tmp_path), args, model=standin(GEMMA3), reward_funcs=reward_func, train_dataset=zen_image(ZEN_ROWS)
    )
    trainer.train()
    assert len(trainer._logs["images"]) == 0


# ---------------------------------------------------------------------------------------------------------------------
# Ours: refills through TRL's multi-turn loop and with VLMs. Most prompts make an uninformative group (every
# completion gets the same reward), so dynamic sampling must run refill rounds; their rows, with TRL's tool masks and
# multimodal inputs, are regrouped into the trained batch.

INFORMATIVE_EVERY = 4  # one prompt in 4 makes an informative group


def mostly_equal_reward(completions, informative, **kwargs):
    """Position in the group (0, 1, 2, ...) for the informative prompts; 1.0 for every completion of the others."""
    return [float(i % 2 + i % 3) if keep else 1.0 for i, keep in enumerate(informative)]


def _refill_dataset(rows: int, **columns) -> Dataset:
    questions = [f"Question {i}: what is {i} times {i + 1}?" for i in range(rows)]
    data = {"prompt": [[{"role": "user", "content": q}] for q in questions]}
    data["informative"] = [i % INFORMATIVE_EVERY == INFORMATIVE_EVERY - 1 for i in range(rows)]
    return Dataset.from_dict(dict(data, **columns))


REFILL_ARGS = dict(
    learning_rate=0.1,
    per_device_train_batch_size=3,
    num_generations=3,
    max_completion_length=64,
    max_steps=3,
    logging_steps=1,
    seed=0,
    report_to="none",
)


def _assert_refilled(trainer) -> list[float]:
    rounds = [h["dynamic_sampling/rounds"] for h in trainer.state.log_history if "dynamic_sampling/rounds" in h]
    assert len(rounds) == REFILL_ARGS["max_steps"], trainer.state.log_history
    assert max(rounds) > 1, f"no refill happened: dynamic_sampling/rounds = {rounds}"
    assert trainer.state.log_history[-1]["train_loss"] is not None
    return rounds


SMALL_QWEN3 = "trl-ext/tiny-Qwen3ForCausalLM-small-vocab"  # Qwen3's tokens and template in a ~2k vocabulary
FIRST_TURNS = [
    '<tool_call>\n{"name": "multiply_tool", "arguments": {"a": 3, "b": 4}}\n</tool_call><|im_end|>',
    '<tool_call>\n{"name": "multiply_tool", "arguments": {"a": 3, "c": 4}}\n</tool_call><|im_end|>',
    "I don't know any tool<|im_end|>",
]


def _last(trainer, key: str) -> float:
    """The last logged value of ``key`` (with logging_steps=1, the final summary holds no metric)."""
    return [h[key] for h in trainer.state.log_history if key in h][-1]


def _multi_turn_generate(trainer, calls: list):
    """A stand-in for the policy's ``generate``: on a first turn, row i answers with the i-th of (a valid tool call,
    a call with a wrong argument, no call); after a tool response, 'Done!'. Records the batch size of each call."""
    tokenizer = trainer.processing_class
    pad, tool_response = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<tool_response>"])
    first = [tokenizer.encode(text, add_special_tokens=False) for text in FIRST_TURNS]
    width = max(len(ids) for ids in first)
    first = [ids + [pad] * (width - len(ids)) for ids in first]
    done = tokenizer.encode("Done!<|im_end|>", add_special_tokens=False)

    def fake_generate(input_ids, **kwargs):
        after_tool = bool((input_ids[0] == tool_response).any())  # a later turn
        calls.append((after_tool, input_ids.shape[0]))
        if after_tool:
            return _cat(input_ids, [done] * input_ids.shape[0])
        return _cat(input_ids, [first[i % 3] for i in range(input_ids.shape[0])])

    return fake_generate


def test_refill_with_tools(standin, tmp_path):
    trainer = make_trainer(
        "DAPOTrainer+DS",
        str(tmp_path),
        REFILL_ARGS,
        model=standin(SMALL_QWEN3),
        reward_funcs=mostly_equal_reward,
        train_dataset=_refill_dataset(16),
        tools=[multiply_tool],
    )
    previous = snapshot(trainer)
    calls = []
    with patch.object(trainer.model, "generate", side_effect=_multi_turn_generate(trainer, calls)):
        trainer.train()
    rounds = _assert_refilled(trainer)
    first_turns = [n for after_tool, n in calls if not after_tool]
    assert len(first_turns) == round(sum(rounds))  # every round, refills included, ran TRL's tool loop
    assert sum(after_tool for after_tool, _ in calls) == len(first_turns)  # ... and its second turn
    assert _last(trainer, "tools/call_frequency") == pytest.approx(2 / 3)
    assert _last(trainer, "tools/failure_frequency") == pytest.approx(1 / 2)
    assert_params_changed(previous, trainer)


def _increment_environment(resets: list):
    class CounterEnvironment:
        def reset(self, **kwargs):
            resets.append(kwargs["informative"])
            self.counter = 0

        def multiply_tool(self, a: int, b: int) -> int:
            """
            Multiplies two integers.

            Args:
                a: The first integer.
                b: The second integer.

            Returns:
                The product of the two integers.
            """
            self.counter += 1
            return a * b

    return CounterEnvironment


@pytest.mark.parametrize("factory", ["single", "dict"])
@patch.dict(os.environ, {"TRL_EXPERIMENTAL_SILENCE": "1"})
def test_refill_with_environment_factory(factory, standin, tmp_path):
    resets = []
    environment = _increment_environment(resets)
    if factory == "single":
        environment_factory, dataset = environment, _refill_dataset(16)
    else:
        other = _increment_environment(resets)
        environment_factory = {"a": environment, "b": other}
        dataset = _refill_dataset(16, environment=["a", "b"] * 8)

    def env_reward(completions, environments, informative, **kwargs):
        """The environment's count of successful tool calls for the informative prompts; 1.0 for the others."""
        return [float(env.counter) if keep else 1.0 for env, keep in zip(environments, informative, strict=True)]

    trainer = make_trainer(
        "DAPOTrainer+DS",
        str(tmp_path),
        REFILL_ARGS,
        model=standin(SMALL_QWEN3),
        reward_funcs=env_reward,
        train_dataset=dataset,
        environment_factory=environment_factory,
    )
    calls = []
    with patch.object(trainer.model, "generate", side_effect=_multi_turn_generate(trainer, calls)):
        trainer.train()
    rounds = _assert_refilled(trainer)
    assert len(resets) == sum(n for after_tool, n in calls if not after_tool)  # one reset per rollout, refills too
    assert len([c for c in calls if not c[0]]) == round(sum(rounds))
    assert _last(trainer, "tools/failure_frequency") == pytest.approx(1 / 2)


@patch.dict(os.environ, {"TRL_EXPERIMENTAL_SILENCE": "1"})
def test_refill_with_rollout_func(standin, tmp_path):
    """A multi-turn ``rollout_func`` whose completions mix model and environment tokens (``env_mask``) and whose
    widths change from round to round: the kept rows of several rounds are padded and masked together."""
    rollouts = []

    def rollout_func(prompts, trainer):
        tokenizer = trainer.processing_class
        done = tokenizer.encode("Done!<|im_end|>", add_special_tokens=False)
        texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
        prompt_ids = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
        width = 3 + 2 * (len(rollouts) % 3)  # a different completion width each round
        rollouts.append(len(prompts))
        completion_ids, env_mask = [], []
        for i in range(len(prompts)):
            n = width - i % 2
            completion_ids.append(done[:1] * (n - 2) + done[-2:])
            env_mask.append([1] + [0] * (n - 3) + [1, 1])  # the middle tokens came from the environment
        logprobs = [[-0.5] * len(ids) for ids in completion_ids]
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs, "env_mask": env_mask}

    trainer = make_trainer(
        "DAPOTrainer+DS",
        str(tmp_path),
        REFILL_ARGS,
        model=standin(SMALL_QWEN3),
        reward_funcs=mostly_equal_reward,
        train_dataset=_refill_dataset(16),
        rollout_func=rollout_func,
    )
    previous = snapshot(trainer)
    trainer.train()
    rounds = _assert_refilled(trainer)
    assert len(rollouts) == round(sum(rounds))
    assert_params_changed(previous, trainer)


@pytest.mark.parametrize("model_id", [GEMMA3, LLAVA_NEXT], ids=["Gemma3", "LlavaNext"])
def test_refill_with_vlm(model_id, standin, tmp_path):
    dataset = zen_image(8)
    dataset = dataset.add_column("informative", [i % INFORMATIVE_EVERY == 1 for i in range(len(dataset))])
    args = dict(VLM_ARGS, max_steps=3, logging_steps=1, seed=0, report_to="none")
    trainer = make_trainer(
        "DAPOTrainer+DS",
        str(tmp_path),
        args,
        model=standin(model_id),
        reward_funcs=mostly_equal_reward,
        train_dataset=dataset,
    )
    trainer.train()
    rounds = [h["dynamic_sampling/rounds"] for h in trainer.state.log_history if "dynamic_sampling/rounds" in h]
    assert max(rounds) > 1, f"no refill happened: dynamic_sampling/rounds = {rounds}"
    assert trainer.state.log_history[-1]["train_loss"] is not None


@pytest.mark.parametrize("kind", KINDS)
@needs_torchvision
@pytest.mark.skipif(not is_peft_available(), reason="test requires peft")
def test_train_vlm_peft(kind, standin, tmp_path):
    from peft import LoraConfig
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(standin(QWEN2_5_VL), dtype="float32")
    base_param_names = [f"base_model.model.{n}" for n, _ in model.named_parameters()]
    trainer = make_trainer(
        kind,
        str(tmp_path),
        dict(VLM_ARGS, report_to="none"),
        model=model,
        reward_funcs=reward_func,
        train_dataset=zen_image(ZEN_ROWS),
        peft_config=LoraConfig(target_modules=["q_proj", "v_proj"]),
    )
    previous_trainable_params = snapshot(trainer)
    trainer.train()
    assert trainer.state.log_history[-1]["train_loss"] is not None
    for n, param in previous_trainable_params.items():
        new_param = trainer.model.get_parameter(n)
        if n in base_param_names:  # We expect the base model params to be the same
            torch.testing.assert_close(param, new_param, msg=f"Parameter {n} has changed.")
        elif "base_layer" not in n:  # We expect the peft params to be different (except for the base layer)
            assert not torch.equal(param, new_param), f"Parameter {n} has not changed."


@pytest.mark.parametrize("kind", KINDS)
@NOT_BUILT
def test_train_with_tools_multimodal_response(kind):
    """TRL's test runs tiny-Qwen3_5ForConditionalGeneration-NoThink (a Qwen3VLProcessor)."""


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.skip(reason="test requires liger-kernel (not installed)")
def test_train_vlm_and_liger(kind):
    """TRL's test runs with use_liger_kernel=True."""


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.skip(reason="skipped by TRL itself: 'We should add a mock for the vLLM server.' (and vLLM needs a GPU)")
def test_train_vlm_and_vllm(kind):
    """TRL skips it."""


def test_assemble_pads_llava_next_patches_across_rounds():
    """LLaVA-NeXT's processor pads ``pixel_values`` [images, patches, C, H, W] to the most patches in its batch (the
    model reads the real count from ``image_sizes``), so two rounds can carry 3 and 5 patches: the kept rows of both
    must be zero-padded to 5 patches, as the processor would pad one batch holding both images."""
    from trl_ext.grpo.dynamic_sampling.batch import Round, assemble

    def output(patches, prompt_width):
        rows = 2
        return {
            "prompt_ids": torch.ones(rows, prompt_width, dtype=torch.long),
            "prompt_mask": torch.ones(rows, prompt_width, dtype=torch.long),
            "completion_ids": torch.ones(rows, 3, dtype=torch.long),
            "completion_mask": torch.ones(rows, 3, dtype=torch.long),
            "advantages": torch.tensor([1.0, -1.0]),
            "pixel_values": torch.rand(rows, patches, 3, 28, 28) + 1,
            "image_sizes": torch.tensor([[40, 50], [50, 40]]),
            "num_images": [1, 1],
        }

    informative = [torch.tensor([True]), torch.tensor([True])]
    rounds = [
        Round(output(p, w), torch.zeros(2, 1), torch.tensor([0.0, 1.0]), i, 0.0)
        for p, w, i in zip((3, 5), (5, 7), informative, strict=True)
    ]
    accelerator = SimpleNamespace(num_processes=1, process_index=0, device=torch.device("cpu"), gather=lambda t: t)
    batch = assemble(rounds, [(0, 0), (1, 0)], [], accelerator, num_generations=2, pad_id=0)
    assert batch["pixel_values"].shape == (4, 5, 3, 28, 28)
    torch.testing.assert_close(batch["pixel_values"][:2, :3], rounds[0].output["pixel_values"])
    assert (batch["pixel_values"][:2, 3:] == 0).all()
    torch.testing.assert_close(batch["pixel_values"][2:], rounds[1].output["pixel_values"])
