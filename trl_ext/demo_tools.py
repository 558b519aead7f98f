"""The demo's tool task: two-digit multiplication with a ``multiply`` tool, for TRL's multi-turn ``tools=`` rollout.

A 0.6M-parameter model cannot multiply ``37*48`` by itself; it can call ``multiply(a=37, b=48)`` and copy the result.
The tokenizer is the demo's characters plus the few tokens a tool conversation needs; its chat template renders tool
calls and results (TRL checks it can) and its ``response_template`` lets ``parse_response`` read calls back out of
generated ids (docs/TOOLS.md). A rollout renders as (the result is masked out of the loss)::

    37*48=<bot><call>multiply(a=37,b=48)</call><eos><result>1776</result><bot>1776<eos>

The warm start is a short SFT on such traces with the demo's settings (``warm_start_sft_kwargs``), cached like it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import asdict, dataclass
from typing import Any

import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from trl import SFTConfig, SFTTrainer

import trl_ext.demo as demo
from trl_ext.console import use_console
from trl_ext.data import Layout, TaskData
from trl_ext.rewards.arithmetic import arithmetic_reward

TOOL_TOKENS = ["<bot>", "<call>", "</call>", "<result>", "</result>", "multiply"]  # one token each
CHAT_TEMPLATE = (  # {% generation %}: SFT's assistant_only_loss trains the model's turns, not the tool's results
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{{ m.content }}"
    "{%- elif m.role == 'assistant' -%}<bot>{% generation %}{%- for c in m.tool_calls or [] -%}<call>"
    "{{ c.function.name }}({%- for k, v in c.function.arguments.items() -%}{{ ',' if not loop.first }}{{ k }}={{ v }}"
    "{%- endfor -%})</call>{%- endfor -%}{{ m.content or '' }}<eos>{% endgeneration %}"
    "{%- elif m.role == 'tool' -%}<result>{{ m.content }}</result>{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<bot>{%- endif -%}"
)
RESPONSE_TEMPLATE = {  # transformers' declarative response parsing (>= 5.13): a call, then text up to <eos>
    "defaults": {"role": "assistant"},
    "start_anchor": "<bot>",
    "fields": {
        "tool_calls": {
            "open_pattern": r"<call>(?P<name>[a-z_]+)\(",
            "close": ")</call>",
            "repeats": True,
            "content": "kv-lines",
            "content_args": {"line_sep": ",", "kv_sep": "=", "value_parser": {"name": "int"}},
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
        "content": {"close": "<eos>", "content": "text"},
    },
}
#: The SFT warm start: short on purpose, so that RL starts from a policy that gets the tool's use right part of the time.
TOOL_WARM_START = demo.WarmStartConfig(max_steps=60, learning_rate=3e-3, per_device_train_batch_size=32)


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    return int(a) * int(b)


def build_tool_tokenizer() -> PreTrainedTokenizerFast:
    """The demo's characters plus ``TOOL_TOKENS``, the argument names and ``(),``, with the tool chat template and
    ``response_template`` (module docstring)."""
    vocab = {demo.PAD: 0, demo.EOS: 1, demo.UNK: 2}
    for token in [*demo.CHARS, *"ab(),", *TOOL_TOKENS]:
        vocab[token] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab, unk_token=demo.UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    special = {"pad_token": demo.PAD, "eos_token": demo.EOS, "unk_token": demo.UNK}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, extra_special_tokens=TOOL_TOKENS, **special)
    tokenizer.padding_side, tokenizer.model_max_length = "left", 128
    tokenizer.chat_template, tokenizer.response_template = CHAT_TEMPLATE, RESPONSE_TEMPLATE
    return tokenizer


@dataclass
class ToolTaskConfig:
    """Seeded two-digit multiplications (``a*b=``, a and b in 10..99), split into disjoint train and held-out sets."""

    num_train: int = 2000
    num_eval: int = 240
    seed: int = 0


def make_tool_problems(config: ToolTaskConfig | None = None) -> tuple[Dataset, Dataset]:
    """``(train, held_out)``: a conversational ``prompt`` (``"37*48="``), the ``answer`` and the ``completion`` the
    warm start imitates (call, result, answer)."""
    config = config or ToolTaskConfig()
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    random.Random(config.seed).shuffle(pairs)

    def rows(selected: list[tuple[int, int]]) -> dict[str, list[Any]]:
        call = lambda a, b: {"type": "function", "function": {"name": "multiply", "arguments": {"a": a, "b": b}}}  # noqa: E731
        return {
            "prompt": [[{"role": "user", "content": f"{a}*{b}="}] for a, b in selected],
            "completion": [
                [
                    {"role": "assistant", "content": "", "tool_calls": [call(a, b)]},
                    {"role": "tool", "name": "multiply", "content": str(a * b)},
                    {"role": "assistant", "content": str(a * b)},
                ]
                for a, b in selected
            ],
            "answer": [a * b for a, b in selected],
        }

    held_out, train = pairs[: config.num_eval], pairs[config.num_eval : config.num_eval + config.num_train]
    return Dataset.from_dict(rows(train)), Dataset.from_dict(rows(held_out))


def tool_answer_reward(prompts: list, completions: list, answer: list, **kwargs: Any) -> list[float]:
    """The ``arithmetic`` check of the last turn when the model's own turn ends the rollout, else 0.0 (a rollout cut
    after the tool's result has not answered: the result is not the model's answer)."""
    ended = [c if isinstance(c, list) and c and c[-1].get("role") == "assistant" else "" for c in completions]
    return arithmetic_reward(prompts, ended, answer)


TOOL_MODEL = demo.DemoModelConfig(max_position_embeddings=128)  # a tool conversation outgrows the demo's 64


def _tool_warm_start_key(sft: Any) -> dict[str, Any]:
    with open(__file__, "rb") as f:
        code = hashlib.sha256(f.read()).hexdigest()[:12]
    return {**demo.warm_start_key(None, TOOL_MODEL, sft), "task": asdict(ToolTaskConfig()), "tool_code": code}


def tool_warm_start_dir(output_dir: str | None = None, sft: Any = TOOL_WARM_START) -> str:
    """``output_dir/<hash of the settings and of this file>`` (None: ``cache_dir("demo-tools-warm-start")``)."""
    key = _tool_warm_start_key(sft)
    return os.path.join(output_dir or demo.cache_dir("demo-tools-warm-start"), demo.key_hash(key))


def tool_warm_start_is_cached(sft: Any = TOOL_WARM_START) -> bool:
    """Whether ``tool_warm_start(sft=sft)`` would load a cached warm start (else it trains one first)."""
    return os.path.exists(os.path.join(tool_warm_start_dir(sft=sft), "warm_start.json"))


def tool_warm_start(output_dir: str | None = None, sft: Any = TOOL_WARM_START) -> str:
    """The demo model after a short SFT on tool-call traces (TRL's ``SFTTrainer``), saved with the tool tokenizer under
    ``tool_warm_start_dir`` and reused from there (``trl_ext.demo.warm_start_key``)."""
    key = _tool_warm_start_key(sft)
    run_dir = tool_warm_start_dir(output_dir, sft)
    if os.path.exists(os.path.join(run_dir, "warm_start.json")):
        return run_dir
    tokenizer = build_tool_tokenizer()
    args = demo.warm_start_sft_kwargs(os.path.join(run_dir, "trainer"), sft)
    args.update(max_length=48, assistant_only_loss=True)  # the model's turns are trained, not the tool's results
    new_name = "activation_checkpointing" in SFTConfig.__dataclass_fields__  # the old name warns on transformers 5
    args["activation_checkpointing" if new_name else "gradient_checkpointing"] = False  # a 0.6M model
    train = make_tool_problems()[0].select_columns(["prompt", "completion"])
    model = demo.build_model(tokenizer, TOOL_MODEL)
    trainer = SFTTrainer(model, SFTConfig(**args), train_dataset=train, processing_class=tokenizer)
    use_console(trainer, "warm start (SFT on tool calls)", bar=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the demo's warm start: its weights then depend on no thread count
    try:
        trainer.train()
    finally:
        torch.set_num_threads(threads)
    trainer.model.save_pretrained(run_dir)
    tokenizer.save_pretrained(run_dir)
    with open(os.path.join(run_dir, "warm_start.json"), "w") as f:
        json.dump({"key_hash": demo.key_hash(key), "key": key}, f, indent=2)
    return run_dir


@dataclass
class ToolDemo:
    """The tool demo as the GRPO recipe runs it (YAML ``tools:``, no model, no dataset): the problems, the warm
    start's model (trained on first use, after the recipe's opening line) and the reward."""

    data: TaskData
    rewards: tuple[list, list[str]] = ([tool_answer_reward], ["tool_answer_reward"])

    @classmethod
    def of(cls, script_args: Any, model_args: Any) -> ToolDemo | None:
        if not script_args.tools or model_args.model_name_or_path or script_args.dataset_name:
            return None
        train, held_out = make_tool_problems()
        layout = Layout("built-in tool demo (a*b= with a multiply tool)", "prompt", "answer", "as is", "arithmetic")
        return cls(TaskData(train.remove_columns("completion"), held_out, layout))

    @property
    def model_path(self) -> str:
        """The warm start's folder (``tool_warm_start``: trained the first time, then cached)."""
        return tool_warm_start()

    def describe(self) -> str:
        """The opening line's model part, saying whether the warm start is cached or trains first."""
        where = demo.cache_dir()
        cached = f"cached in {where}" if tool_warm_start_is_cached() else f"trained first, then cached in {where}"
        return f"demo model + SFT warm start on tool calls ({cached})"
