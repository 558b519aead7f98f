"""Code-format reward (open-r1's ``get_code_format_reward``), checking what the code reward will run. With
``think_format=True`` the completion must also pass the strict think format, as open-r1's does.
"""

from __future__ import annotations

import ast

from trl_ext.rewards.code import FENCE, PYTHON_LABELS
from trl_ext.rewards.extract import answer_region
from trl_ext.rewards.format import ThinkFormat
from trl_ext.rewards.text import TextReward


class CodeFormat(TextReward):
    """1.0 when the answer (after ``</think>``) has a block fenced in ``language`` (``python``: also ``py``,
    ``python3``, ``py3``) and, for Python, the last one parses; else 0.0."""

    def __init__(self, language: str = "python", think_format: bool = False, name: str = "code_format"):
        if not language or not language.replace("+", "").replace("#", "").isalnum():
            raise ValueError(f"language must be a fence label such as 'python' or 'cpp', got {language!r}")
        self.language = language.lower()
        self.labels = PYTHON_LABELS - {""} if self.language in PYTHON_LABELS else {self.language}
        self.think_format = ThinkFormat(strict=True) if think_format else None
        self.__name__ = name

    def score(self, text: str) -> float:
        region = answer_region(text)
        if region is None:
            return 0.0
        if self.think_format is not None and self.think_format.score(text) != 1.0:
            return 0.0
        blocks = [body for label, body in FENCE.findall(region) if label.lower() in self.labels]
        if not blocks or not blocks[-1].strip():
            return 0.0
        if self.labels & PYTHON_LABELS:
            try:
                ast.parse(blocks[-1])
            except (SyntaxError, ValueError):
                return 0.0
        return 1.0
