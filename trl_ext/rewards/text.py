"""Text of a completion, whatever shape TRL hands it over in, and the base and column helpers of the rewards."""

from __future__ import annotations

from typing import Any


def completion_text(completion: Any) -> str:
    """Plain text of one completion: the text, or the content (blocks joined) of a conversational completion's last
    message. Anything unexpected becomes a string rather than an exception: a reward must never raise on model output."""
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


class TextReward:
    """A reward scored one completion text at a time, by the subclass's ``score(text)``."""

    def __call__(self, prompts: list | None = None, completions: list | None = None, **kwargs: Any) -> list[float]:
        return [self.score(text) for text in completion_texts(completions or [])]


def column(kwargs: dict[str, Any], name: str, n: int, reward_name: str) -> list[Any]:
    """Dataset column ``name`` from a reward's keyword arguments, one value per completion. A missing column is the
    user's wiring error, not malformed model output, so it raises, naming the fix."""
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
