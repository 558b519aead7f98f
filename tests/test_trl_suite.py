"""Dynamic sampling through TRL's multi-turn loop and with VLMs: refills. Most prompts make an uninformative group
(every completion gets the same reward), so ``DAPOTrainer`` with ``DAPOConfig(dynamic_sampling=True)`` must run refill
rounds (``dynamic_sampling/rounds`` > 1) through TRL's ``tools=``, ``environment_factory=`` (single and dict),
``rollout_func=`` and with VLM stand-ins; their rows, with TRL's tool masks and multimodal inputs, are regrouped into
the trained batch.

TRL's own GRPO tests (``tests/test_grpo_trainer.py``), which this file used to adapt by hand in part, run unchanged
with both ``trl.GRPOTrainer`` and ``DAPOTrainer`` + dynamic sampling in ``tests/trl_grpo/`` (its conftest describes
the harness). The models here are the same offline stand-ins (``trl_suite_models``: random weights, tokenizers and
processors built in code, saved locally); the trainer convention is the same (``make_trainer``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from types import SimpleNamespace
from unittest.mock import patch

import pytest
import torch
import transformers
import trl
from datasets import Dataset
from packaging.version import Version
from trl_suite_models import build, zen_image

from trl_ext import DAPOConfig, DAPOTrainer

DS_FIELDS = dict(dynamic_sampling=True, soft_overlong_punishment=False, num_minibatches=1)
TRL_NUM_GENERATIONS = next(f.default for f in dataclasses.fields(trl.GRPOConfig) if f.name == "num_generations")
CPU = dict(use_cpu=True, bf16=False, disable_tqdm=True)  # TRL's default bf16=True needs a GPU here

GEMMA3 = "trl-internal-testing/tiny-Gemma3ForConditionalGeneration"
LLAVA_NEXT = "trl-internal-testing/tiny-LlavaNextForConditionalGeneration"

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.skipif(
        Version(transformers.__version__) < Version("5.2.0"), reason="TRL's multi-turn loop needs transformers>=5.2"
    ),
]


@pytest.fixture(scope="session")
def standin_root(tmp_path_factory):
    return tmp_path_factory.mktemp("trl-internal-testing")


@pytest.fixture
def standin(standin_root):
    """The offline stand-ins of TRL's test models (``trl_suite_models``), by Hub id: the local path to load."""
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


def _cat(input_ids, rows):
    return torch.cat([input_ids, torch.tensor(rows, device=input_ids.device)], dim=-1)


VLM_ARGS = dict(learning_rate=0.1, per_device_train_batch_size=2, num_generations=2, max_completion_length=8)


# ---------------------------------------------------------------------------------------------------------------------
# Refills through TRL's multi-turn loop and with VLMs. Most prompts make an uninformative group (every
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
