"""The tool demo (trl_ext.demo_tools): its tokenizer against TRL's tool checks, the hint for tools= on the plain demo
tokenizer, and DAPO's dynamic sampling refilling multi-turn rollouts (TRL's tools= loop) with consistent tool masks."""

from __future__ import annotations

import re

import pytest
import torch
from datasets import Dataset
from helpers import tiny_args
from trl.chat_template_utils import is_chat_template_prefix_preserving, parse_response, supports_tool_calling

from trl_ext import DAPOConfig, DAPOTrainer
from trl_ext.demo import DemoModelConfig, build_model, build_tokenizer
from trl_ext.demo_tools import build_tool_tokenizer, make_tool_problems, multiply, tool_answer_reward
from trl_ext.errors import UserError
from trl_ext.recipe.tools import load_tools

TINY = DemoModelConfig(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=128,
)


def test_tool_tokenizer_passes_trl_checks_and_round_trips_a_call():
    tokenizer = build_tool_tokenizer()
    assert supports_tool_calling(tokenizer) and is_chat_template_prefix_preserving(tokenizer)
    train, _ = make_tool_problems()
    row = train[0]
    text = tokenizer.apply_chat_template(row["prompt"] + row["completion"], tokenize=False)
    a, b = map(int, re.match(r"(\d+)\*(\d+)=", row["prompt"][0]["content"]).groups())
    assert text == f"{a}*{b}=<bot><call>multiply(a={a},b={b})</call><eos><result>{a * b}</result><bot>{a * b}<eos>"
    assert tokenizer.unk_token_id not in tokenizer(text)["input_ids"]
    prefix = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, return_dict=False)
    call = tokenizer(f"<call>multiply(a={a},b={b})</call><eos>")["input_ids"]
    parsed = parse_response(tokenizer, call, prefix=prefix)
    assert parsed["tool_calls"][0]["function"] == {"name": "multiply", "arguments": {"a": a, "b": b}}
    assert tool_answer_reward(None, [row["completion"], row["completion"][:2]], [a * b, a * b]) == [1.0, 0.0]


def test_tools_on_the_plain_demo_tokenizer_fail_with_the_fix(tmp_path):
    tokenizer = build_tokenizer()
    train, _ = make_tool_problems()
    args = DAPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        report_to="none",
        num_generations=2,
        per_device_train_batch_size=2,
        num_minibatches=1,
        max_completion_length=32,
    )
    with pytest.raises(ValueError, match="build_tool_tokenizer") as error:
        DAPOTrainer(
            build_model(tokenizer, TINY),
            [tool_answer_reward],
            args=args,
            processing_class=tokenizer,
            train_dataset=train.select(range(16)),
            tools=[multiply],
        )
    assert "has no chat template" in str(error.value) and "TOOLS.md" in str(error.value)


def test_load_tools_names_the_bad_name():
    assert load_tools(["trl_ext.demo_tools.multiply"]) == [multiply]
    assert load_tools(None) is None
    with pytest.raises(UserError, match="trl_ext.demo_tools.divide.*module.function"):
        load_tools(["trl_ext.demo_tools.divide"])


class RecordingDAPOTrainer(DAPOTrainer):
    """Keeps every batch that reaches the loss (the trained rows, after dynamic sampling assembled them)."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        self.trained_batches = [*getattr(self, "trained_batches", []), {k: v for k, v in inputs.items()}]
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


def informative_reward(prompts, completions, informative, **kwargs):
    """0 for every completion of most prompts (their groups carry no signal); on the few marked prompts, whether the
    rollout called the tool and ended on an answer, which varies within a group."""
    return [float(flag and len(c) == 3) for c, flag in zip(completions, informative, strict=True)]


@pytest.mark.slow  # a short SFT so that the tiny model calls the tool, then 3 DAPO steps of multi-turn rollouts
def test_dynamic_sampling_refills_multi_turn_rollouts_with_consistent_tool_masks(tmp_path):
    from trl import SFTConfig, SFTTrainer

    torch.manual_seed(0)
    tokenizer = build_tool_tokenizer()
    model = build_model(tokenizer, TINY)
    train, _ = make_tool_problems()
    sft = SFTConfig(
        output_dir=str(tmp_path / "sft"),
        max_steps=40,
        learning_rate=1e-2,
        per_device_train_batch_size=16,
        max_length=48,
        assistant_only_loss=True,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
    )
    SFTTrainer(
        model,
        args=sft,
        train_dataset=train.select(range(640)).select_columns(["prompt", "completion"]),
        processing_class=tokenizer,
    ).train()

    rows = train.select(range(64)).remove_columns("completion")
    data = rows.add_column("informative", [i % 4 == 0 for i in range(len(rows))])  # 1 prompt in 4 can be informative
    args = tiny_args(
        DAPOConfig,
        tmp_path,
        max_completion_length=32,
        max_steps=3,
        learning_rate=1e-3,
        max_tool_calling_iterations=1,
        dynamic_sampling_max_generation_batches=6,
        dynamic_sampling_reward_range=[0.0, 1.0],
    )
    trainer = RecordingDAPOTrainer(
        model,
        [informative_reward],
        args=args,
        processing_class=tokenizer,
        train_dataset=Dataset.from_list(list(data)),
        tools=[multiply],
    )
    trainer.train()

    logs = [h for h in trainer.state.log_history if "dynamic_sampling/rounds" in h]
    assert logs and max(h["dynamic_sampling/rounds"] for h in logs) > 1  # refills happened
    assert max(h["tools/call_frequency"] for h in logs) > 0
    checked = 0
    for batch in trainer.trained_batches:
        ids, mask, tool = batch["completion_ids"], batch["completion_mask"], batch["tool_mask"]
        assert ids.shape == mask.shape == tool.shape and ids.shape[0] == args.per_device_train_batch_size
        for row_ids, row_mask, row_tool in zip(ids, mask, tool, strict=True):
            kept = row_mask.bool()
            tool_tokens = (kept & (row_tool == 0)).nonzero().flatten()
            if len(tool_tokens) == 0:
                continue  # no tool ran in this row: every token is the model's
            start, end = int(tool_tokens[0]), int(tool_tokens[-1]) + 1
            assert len(tool_tokens) == end - start  # one tool result, in one piece
            before, masked_out = tokenizer.decode(row_ids[:start][kept[:start]]), tokenizer.decode(row_ids[start:end])
            # the tokens masked out of the loss are the results of this row's own calls (and the next turn's start),
            # right after the turn that made them
            turn = before.rpartition("<bot>")[2]
            assert (
                turn.endswith("<eos>")
                and "<call>" in turn
                and re.fullmatch(r"(<result>.*</result>)+<bot>", masked_out)
            )
            calls = re.findall(r"<call>multiply\(a=(\d+),b=(\d+)\)</call>", turn)
            if len(calls) == turn.count("<call>"):  # every call well formed: the results are known
                assert masked_out == "".join(f"<result>{int(a) * int(b)}</result>" for a, b in calls) + "<bot>"
            checked += 1
    assert checked > 0
