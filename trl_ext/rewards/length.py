"""Length rewards: DAPO's soft overlong punishment and TRL's repetition penalty (both TRL's), and a length budget.

* :class:`SoftOverlong`: DAPO (arXiv 2503.14476, Eq. 13), TRL's ``get_soft_overlong_punishment``: 0 up to
  ``max_completion_len - soft_punish_cache`` tokens, then a linear ramp down to -1 at ``max_completion_len``.
* :class:`Repetition`: TRL's ``get_repetition_penalty_reward`` (arXiv 2502.03373, appendix C.2).
* :class:`LengthBudget`: as in L1 (arXiv 2503.04697), formula in ``rewards/README.md``; a budget that is missing or
  not a positive number scores ``None``.

All three are shaping rewards (``trl_ext.rewards.shaping``): dynamic sampling's default metric leaves them out.
Length is in completion tokens (``completion_ids``); called by hand without them, in whitespace-separated words.
"""

from __future__ import annotations

from typing import Any

from trl.rewards import get_repetition_penalty_reward, get_soft_overlong_punishment

from trl_ext.rewards.text import completion_texts


class LengthReward:
    """Base of the length rewards; ``last_unit`` says whether the last call counted tokens or words."""

    last_unit = "tokens"

    def units(self, completions: list | None, completion_ids: list | None) -> list[list[Any]]:
        if completion_ids is not None:
            self.last_unit = "tokens"
            return [list(ids) for ids in completion_ids]
        self.last_unit = "words"
        return [text.split() for text in completion_texts(completions or [])]


class _TRLLengthReward(LengthReward):
    """Calls a TRL shaping reward built over ``completion_ids`` with our units."""

    shaping_reward = True

    def __call__(
        self,
        prompts: list | None = None,
        completions: list | None = None,
        completion_ids: list | None = None,
        **kw: Any,
    ) -> list[float]:
        return [float(r) for r in self._trl(completion_ids=self.units(completions, completion_ids))]


class SoftOverlong(_TRLLengthReward):
    """DAPO's soft overlong punishment (TRL's implementation), in [-1, 0]."""

    def __init__(self, max_completion_len: int, soft_punish_cache: int = 0, name: str = "soft_overlong"):
        if max_completion_len < 1:
            raise ValueError(f"max_completion_len must be >= 1, got {max_completion_len}")
        if not 0 <= soft_punish_cache <= max_completion_len:
            raise ValueError(
                f"soft_punish_cache must be in [0, max_completion_len={max_completion_len}], got {soft_punish_cache}"
            )
        self.max_completion_len = max_completion_len
        self.soft_punish_cache = soft_punish_cache
        self._trl = get_soft_overlong_punishment(max_completion_len, soft_punish_cache)
        self.__name__ = name


class Repetition(_TRLLengthReward):
    """TRL's n-gram repetition penalty, in [max_penalty, 0]."""

    def __init__(self, ngram_size: int = 3, max_penalty: float = -1.0, name: str = "repetition"):
        if ngram_size < 1:
            raise ValueError(f"ngram_size must be >= 1, got {ngram_size}")
        self.ngram_size = ngram_size
        self.max_penalty = max_penalty
        self._trl = get_repetition_penalty_reward(ngram_size, max_penalty)  # raises if max_penalty > 0
        self.__name__ = name


class LengthBudget(LengthReward):
    """Penalty for exceeding (``max``) or missing (``exact``) a token budget, relative to the budget."""

    shaping_reward = True

    def __init__(
        self,
        budget: int | None = None,
        budget_column: str = "length_budget",
        mode: str = "max",
        alpha: float = 1.0,
        clip: bool = True,
        name: str = "length_budget",
    ):
        if mode not in ("max", "exact"):
            raise ValueError(f"mode must be 'max' or 'exact', got {mode!r}")
        if budget is not None and budget < 1:
            raise ValueError(f"budget must be >= 1 token, got {budget}")
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.budget = budget
        self.budget_column = budget_column
        self.mode = mode
        self.alpha = alpha
        self.clip = clip
        self.__name__ = name

    def __call__(
        self,
        prompts: list | None = None,
        completions: list | None = None,
        completion_ids: list | None = None,
        **kw: Any,
    ) -> list[float | None]:
        units = self.units(completions, completion_ids)
        per_example = kw.get(self.budget_column)
        if per_example is None and self.budget is None:
            raise ValueError(
                f"reward {self.__name__!r} needs a budget: pass the option budget=<tokens> or a dataset column "
                f"{self.budget_column!r} with one budget per example."
            )
        budgets = list(per_example) if per_example is not None else [self.budget] * len(units)
        if len(budgets) != len(units):
            raise ValueError(f"column {self.budget_column!r} has {len(budgets)} values for {len(units)} completions")
        return [self._one(len(u), b) for u, b in zip(units, budgets, strict=True)]

    def _one(self, n: int, budget: Any) -> float | None:
        try:
            budget = float(budget)
        except (TypeError, ValueError):
            return None
        if not budget > 0:
            return None
        excess = max(0.0, n - budget) if self.mode == "max" else abs(n - budget)
        penalty = self.alpha * excess / budget
        if self.clip:
            penalty = min(penalty, self.alpha)
        return -penalty if penalty else 0.0
