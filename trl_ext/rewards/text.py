"""Text of a completion, whatever shape TRL hands it over in.

TRL passes ``completions`` as plain strings for standard datasets and as a list of messages
(``[{"role": "assistant", "content": ...}]``) for conversational ones; content may itself be a list of blocks
(``[{"type": "text", "text": ...}]``). Every reward in this package reads completions through :func:`completion_text`
so that both shapes, and malformed ones, are handled in one place and never raise.
"""

from __future__ import annotations

from typing import Any


def completion_text(completion: Any) -> str:
    """Plain text of one completion, whether plain text or conversational (a list of ``{"role", "content"}``).

    Conversational completions use the content of their last message. Anything unexpected (``None``, numbers,
    dicts without ``content``) becomes a string rather than an exception: a reward must never raise on model output.
    """
    try:
        if isinstance(completion, str):
            return completion
        if isinstance(completion, list):
            if not completion:
                return ""
            last = completion[-1]
            if isinstance(last, dict):
                return _content_text(last.get("content", ""))
            return str(last)
        if isinstance(completion, dict):
            return _content_text(completion.get("content", ""))
        return "" if completion is None else str(completion)
    except Exception:  # a __str__ that raises, an odd mapping: never let model output crash the trainer
        return ""


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # content blocks: [{"type": "text", "text": ...}]
        return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return "" if content is None else str(content)


def completion_texts(completions: list) -> list[str]:
    """:func:`completion_text` over a batch."""
    return [completion_text(completion) for completion in completions]


def column(kwargs: dict[str, Any], name: str, n: int, reward_name: str) -> list[Any]:
    """Dataset column ``name`` from a reward's keyword arguments, checked to hold one value per completion.

    A missing column or a wrong length is a wiring error of the user's, not malformed model output, so it raises
    a ``ValueError`` naming the reward, the column and the fix.
    """
    if name not in kwargs or kwargs[name] is None:
        present = sorted(k for k in kwargs if k not in {"trainer_state", "log_extra", "log_metric", "completion_ids"})
        raise ValueError(
            f"reward {reward_name!r} needs the dataset column {name!r}, which TRL passes as a keyword argument; "
            f"the dataset has {present}. Rename the column or pass the column name as an option."
        )
    values = list(kwargs[name])
    if len(values) != n:
        raise ValueError(f"reward {reward_name!r}: column {name!r} has {len(values)} values for {n} completions.")
    return values
