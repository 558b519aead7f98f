"""Tools in the GRPO recipe (YAML ``tools:``, docs/TOOLS.md): the functions named, and held-out greedy accuracy with
the tools run as TRL's multi-turn ``tools=`` rollout runs them."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from datasets import Dataset
from trl.chat_template_utils import parse_response

from trl_ext.errors import UserError
from trl_ext.scoring import eos_ids, generate_groups, prompt_text


def greedy_tool_rollouts(model: Any, tokenizer: Any, prompts: list, tools: list[Callable], max_calls: int = 1) -> list:
    """Each prompt's greedy multi-turn completion as TRL's ``tools=`` rollout builds it: generate, parse the turn with
    the tokenizer's ``response_template``, run its tool calls, generate again (at most ``max_calls`` times)."""
    by_name, eos, pad = {tool.__name__: tool for tool in tools}, eos_ids(model, tokenizer), tokenizer.pad_token_id
    chats, completions, active = [list(p) for p in prompts], [[] for _ in prompts], list(range(len(prompts)))
    for turn in range(max_calls + 1):
        texts = [prompt_text(chats[i], tokenizer) for i in active]
        ids, _ = generate_groups(model, tokenizer, texts, 1, 24, 256, eos, pad, add_special_tokens=False, greedy=True)
        calling = []
        for i, text, turn_ids in zip(active, texts, ids, strict=True):
            new = [parse_response(tokenizer, turn_ids, prefix=text)]
            for call in new[0].get("tool_calls") or [] if turn < max_calls else []:
                function = call["function"]
                try:
                    result = by_name[function["name"]](**function["arguments"])
                except Exception as error:  # as TRL's loop does: the model sees the error
                    result = {"error": str(error)}
                new.append({"role": "tool", "name": function["name"], "content": str(result)})
            chats[i], completions[i] = chats[i] + new, completions[i] + new
            calling += [i] if len(new) > 1 else []
        active = calling
    return completions


def tool_evaluator(tokenizer: Any, eval_dataset: Dataset | None, tools: list[Callable], reward: Callable) -> Callable:
    """``evaluate(model, phase=False)``: the share of held-out problems ``reward`` scores 1.0, tools run (or None)."""

    def evaluate(model: Any, phase: str | bool = False) -> float | None:
        if eval_dataset is None or len(eval_dataset) == 0:
            return None
        completions = greedy_tool_rollouts(model, tokenizer, eval_dataset["prompt"], tools)
        columns = {k: eval_dataset[k] for k in eval_dataset.column_names if k != "prompt"}
        rewards = reward(prompts=eval_dataset["prompt"], completions=completions, **columns)
        return sum(r == 1.0 for r in rewards) / len(rewards)

    return evaluate


def load_tools(names: list[str] | None) -> list[Callable] | None:
    """The functions YAML ``tools:`` names by dotted path (``trl_ext.demo_tools.multiply``); None for none."""
    tools = []
    for name in names or []:
        module, _, attribute = name.rpartition(".")
        try:
            tools.append(getattr(importlib.import_module(module), attribute))
        except (ImportError, AttributeError, ValueError) as error:
            raise UserError(
                f"tools: {name!r} is not a function Python can import ({error}). Name each tool by its dotted path, "
                "module.function (e.g. trl_ext.demo_tools.multiply)."
            ) from None
    return tools or None
