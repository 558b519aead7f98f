"""Prompts as the model expects them (as open-r1's GRPO script builds them; TRL renders conversations with the chat
template), by :func:`format_prompts`. With a chat template, a text prompt becomes ``[system?, user]`` messages (an
instruct model is trained on its template; raw text would be off its distribution) and a conversation gets
``system_prompt`` unless it has a system message. Without one (a base model, the demo), a text prompt stays text,
after ``system_prompt`` and a blank line, and a conversation is a ``UserError`` naming the fix (transformers would
fail at the first generation step).
"""

from __future__ import annotations

from typing import Any

from datasets import Dataset

from trl_ext.errors import UserError
from trl_ext.scoring import is_conversational


def has_chat_template(tokenizer: Any) -> bool:
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # processors wrap a tokenizer
    return bool(getattr(tokenizer, "chat_template", None))


def format_prompt(prompt: Any, chat: bool, system_prompt: str | None = None) -> Any:
    """One prompt, formatted for a tokenizer with (``chat=True``) or without a chat template (module docstring)."""
    if isinstance(prompt, str):
        if chat:
            system = [{"role": "system", "content": system_prompt}] if system_prompt else []
            return [*system, {"role": "user", "content": prompt}]
        return f"{system_prompt}\n\n{prompt}" if system_prompt else prompt
    if system_prompt and not any(message.get("role") == "system" for message in prompt):
        return [{"role": "system", "content": system_prompt}, *prompt]
    return prompt


def format_prompts(
    dataset: Dataset | None, tokenizer: Any, system_prompt: str | None = None, name: str = "train_dataset"
) -> Dataset | None:
    """``dataset`` with its ``prompt`` column formatted for ``tokenizer`` (module docstring); ``None`` stays None."""
    if dataset is None or "prompt" not in dataset.column_names or len(dataset) == 0:
        return dataset
    chat = has_chat_template(tokenizer)
    conversational = is_conversational(dataset[0]["prompt"])
    if conversational and not chat:
        raise UserError(
            f"{name}'s prompts are chat messages, but the tokenizer ({type(tokenizer).__name__}) has no chat template "
            "to render them. Use a model whose tokenizer has one (an -Instruct or -Chat model), give a template with "
            "--chat_template <file.jinja>, or map a plain-text column with --dataset_prompt_column."
        )
    if not system_prompt and not (chat and not conversational):
        return dataset
    # SFT's prompt-completion pairs: a completion that is text next to a prompt that became a conversation becomes
    # the assistant turn (TRL wants both in one format)
    completion = chat and not conversational and "completion" in dataset.column_names

    def convert(row: dict[str, Any]) -> dict[str, Any]:
        out = {"prompt": format_prompt(row["prompt"], chat, system_prompt)}
        if completion and isinstance(row["completion"], str):
            out["completion"] = [{"role": "assistant", "content": row["completion"]}]
        return out

    return dataset.map(convert, desc="formatting prompts")
