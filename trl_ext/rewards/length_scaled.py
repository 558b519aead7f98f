"""Length rewards that depend on correctness: Kimi k1.5's group length reward and the cosine-scaled length reward.

* :class:`KimiLength` (``len_reward``), Kimi k1.5 (arXiv 2501.12599, section 2.3.3; formula in ``rewards/README.md``),
  within each prompt's group (open-r1's ``len_reward`` takes the whole batch, mixing questions); a group of equal
  lengths scores 0 (open-r1's convention). Kimi's warm-up of the penalty over training is not here.
* :class:`CosineLength` (``cosine``), arXiv 2502.03373, section 4, Eq. 1: ``r_T + 0.5 (r_0 - r_T) (1 + cos(t pi /
  T))`` of the length ``t`` (clipped at ``T = max_len``), with ``(r_0, r_T) = (max_value_correct,
  min_value_correct)`` when correct (shorter is better) and ``(min_value_wrong, max_value_wrong)`` when wrong (longer
  is penalized less, so the model keeps thinking when unsure); ``exceed_penalty`` (the paper's ``r_e``) is the
  reward at ``max_len``. Defaults are open-r1's ``get_cosine_scaled_reward``.

Correctness is the accuracy reward (or any callable passed as ``accuracy``) scoring 1.0; an unscorable completion
gets ``None``. Lengths as in :mod:`trl_ext.rewards.length`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from trl_ext.rewards.length import LengthReward
from trl_ext.rewards.math import MathAccuracy


class _Correctness(LengthReward):
    """Base of both rewards: correctness from an accuracy reward, lengths in tokens; its options are KimiLength's."""

    def __init__(
        self,
        accuracy: Callable | None = None,
        solution_column: str | None = None,
        extraction: str = "auto",
        name: str = "len_reward",
    ):
        self.accuracy = accuracy or MathAccuracy(extraction=extraction, solution_column=solution_column)
        self.__name__ = name

    def judged(self, prompts: list | None, completions: list, completion_ids: list | None, kwargs: dict) -> tuple:
        columns = {k: v for k, v in kwargs.items() if k not in ("log_metric", "log_extra")}  # logged by accuracy
        scores = self.accuracy(prompts=prompts, completions=completions, **columns)
        correct = [None if score is None else score >= 1.0 for score in scores]
        return correct, [len(u) for u in self.units(completions, completion_ids)]


class KimiLength(_Correctness):
    """Kimi k1.5's length reward within each prompt's group (module doc). A shaping reward: it is added to the
    accuracy and varies with length inside an all-correct group (``CosineLength`` replaces the accuracy instead)."""

    shaping_reward = True

    def __call__(
        self, prompts: list | None = None, completions: list | None = None, completion_ids: list | None = None, **kw
    ) -> list[float | None]:
        completions = list(completions or [])
        correct, lengths = self.judged(prompts, completions, completion_ids, kw)
        groups: dict[str, list[int]] = {}
        for index in range(len(completions)):
            key = repr(prompts[index]) if prompts is not None and index < len(prompts) else ""
            groups.setdefault(key, []).append(index)
        rewards: list[float | None] = [None] * len(completions)
        for members in groups.values():
            shortest, longest = min(lengths[i] for i in members), max(lengths[i] for i in members)
            for i in members:
                if correct[i] is None:
                    continue
                lam = 0.0 if longest == shortest else 0.5 - (lengths[i] - shortest) / (longest - shortest)
                rewards[i] = lam if correct[i] else min(0.0, lam)
        return rewards


class CosineLength(_Correctness):
    """Cosine-scaled length reward (module doc)."""

    def __init__(
        self,
        min_value_wrong: float = -1.0,
        max_value_wrong: float = -0.5,
        min_value_correct: float = 0.5,
        max_value_correct: float = 1.0,
        max_len: int = 1000,
        exceed_penalty: float | None = None,
        accuracy: Callable | None = None,
        solution_column: str | None = None,
        extraction: str = "auto",
        name: str = "cosine",
    ):
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        super().__init__(accuracy, solution_column, extraction, name)
        self.correct_range = (max_value_correct, min_value_correct)  # (r_0, r_T)
        self.wrong_range = (min_value_wrong, max_value_wrong)
        self.max_len = max_len
        self.exceed_penalty = exceed_penalty

    def value(self, length: int, correct: bool) -> float:
        """``CosFn(length, max_len, r_0, r_T)`` for a correct or wrong answer (module doc)."""
        if self.exceed_penalty is not None and length >= self.max_len:
            return float(self.exceed_penalty)
        r_0, r_t = self.correct_range if correct else self.wrong_range
        t = min(length, self.max_len)
        return r_t + 0.5 * (r_0 - r_t) * (1.0 + math.cos(t * math.pi / self.max_len))

    def __call__(
        self, prompts: list | None = None, completions: list | None = None, completion_ids: list | None = None, **kw
    ) -> list[float | None]:
        correct, lengths = self.judged(prompts, list(completions or []), completion_ids, kw)
        return [None if ok is None else self.value(n, ok) for ok, n in zip(correct, lengths, strict=True)]
