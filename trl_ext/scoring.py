"""Rewards of prompts and completions as TRL's GRPO computes them, for DPO mining, PPO, the probe and evaluation."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from trl_ext.reward_model import as_callable


def is_conversational(prompt: Any) -> bool:
    """A prompt in TRL's conversational format: a non-empty list of ``{"role": ..., "content": ...}`` messages."""
    return isinstance(prompt, list) and bool(prompt) and isinstance(prompt[0], dict) and "role" in prompt[0]


def prompt_text(prompt: Any, tokenizer: Any) -> str:
    """The model's input text: the string, or the conversation's chat template plus generation prompt (as in TRL)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    raise ValueError(f"prompts must be text or a list of chat messages, got {type(prompt).__name__}.")


def combine_rewards(rewards_per_func: torch.Tensor, weights: Sequence[float] | None = None) -> torch.Tensor:
    """``(N, F)`` rewards of F functions to ``(N,)``: the weighted sum over the functions that scored each completion
    (TRL GRPO's ``nansum``), NaN where no function did. Computed in the input's floating dtype (float32 otherwise)."""
    if rewards_per_func.dim() != 2:
        raise ValueError(
            f"rewards_per_func must be (num_completions, num_funcs), got {tuple(rewards_per_func.shape)}."
        )
    values = rewards_per_func if rewards_per_func.is_floating_point() else rewards_per_func.float()
    num_funcs = values.shape[1]
    w = torch.ones(num_funcs, dtype=values.dtype) if weights is None else torch.as_tensor(list(weights))
    if w.numel() != num_funcs:
        raise ValueError(
            f"reward_weights has {w.numel()} values for {num_funcs} reward functions; give one weight per function "
            "or leave reward_weights unset (all 1.0)."
        )
    combined = torch.nansum(values * w.to(values.device, values.dtype).unsqueeze(0), dim=1)
    # TRL's rule: nansum of an all-NaN row is 0, but a completion that no function scored has no reward at all
    combined[torch.isnan(values).all(dim=1)] = torch.nan
    return combined


def score_completions(
    reward_funcs: Sequence[Callable],
    prompts: Sequence[Any],
    completions: Sequence[Any],
    reward_weights: Sequence[float] | None = None,
    *,
    extra: Mapping[str, Any] | None = None,
    dtype: torch.dtype = torch.float32,
    **columns: Sequence[Any],
) -> torch.Tensor:
    """Call each reward function like TRL's GRPO does (``prompts=, completions=, **columns``; ``extra``: keywords
    passed as they are) and combine them with ``combine_rewards``; ``None`` from a function is NaN."""
    if not reward_funcs:
        raise ValueError("reward_funcs is empty: give at least one reward function (e.g. rewards.arithmetic_reward).")
    for name, values in columns.items():
        if len(values) != len(completions):
            raise ValueError(f"column {name!r} has {len(values)} entries for {len(completions)} completions.")
    table = torch.full((len(completions), len(reward_funcs)), torch.nan, dtype=dtype)
    kwargs = {k: list(v) for k, v in columns.items()} | dict(extra or {})
    for j, func in enumerate(reward_funcs):
        values = as_callable(func)(prompts=list(prompts), completions=list(completions), **kwargs)
        if len(values) != len(completions):
            name = getattr(func, "__name__", type(func).__name__)
            raise ValueError(
                f"reward function {name!r} returned {len(values)} rewards for {len(completions)} "
                "completions; it must return one float (or None) per completion."
            )
        table[:, j] = torch.tensor([math.nan if v is None else float(v) for v in values], dtype=dtype)
    return combine_rewards(table, reward_weights)


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """The token ids that end a completion: the model's generation config's EOS (one or a list) and the tokenizer's."""
    ids = model.generation_config.eos_token_id if getattr(model, "generation_config", None) is not None else None
    ids = set(ids if isinstance(ids, list) else [] if ids is None else [ids])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


@torch.no_grad()
def generate_groups(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    num_generations: int,
    max_new_tokens: int,
    prompts_per_call: int,
    eos_ids: Sequence[int],
    pad_id: int,
    add_special_tokens: bool = True,
    greedy: bool = False,
    **sampling: Any,
) -> tuple[list[list[int]], list[bool]]:
    """``num_generations`` samples per prompt text (or the greedy completion), groups contiguous: each completion's
    token ids up to and including its first EOS (TRL GRPO's ``completion_ids``), and whether it was truncated."""
    device = next(model.parameters()).device
    was_training, padding_side = model.training, tokenizer.padding_side
    model.eval()
    tokenizer.padding_side = "left"  # decoder-only generation continues from the last prompt token
    eos = set(eos_ids)
    completions: list[list[int]] = []
    truncated: list[bool] = []
    try:
        for start in range(0, len(texts), prompts_per_call):
            batch = list(texts[start : start + prompts_per_call])
            inputs = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=add_special_tokens)
            inputs = inputs.to(device)
            output = model.generate(
                **inputs,
                do_sample=not greedy,
                num_return_sequences=num_generations,
                max_new_tokens=max_new_tokens,
                pad_token_id=pad_id,
                eos_token_id=sorted(eos) or None,
                **sampling,
            )
            for ids in output[:, inputs["input_ids"].shape[1] :].tolist():
                end = next((i for i, token in enumerate(ids) if token in eos), None)
                completions.append(ids if end is None else ids[: end + 1])
                truncated.append(end is None)
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return completions, truncated
