"""Unscorable completions made visible: per-function None/NaN fractions, one warning, and a stop when it lasts.

A reward function returns ``None`` (TRL stores NaN) for a completion it does not apply to; TRL leaves it out of the
sum, a completion no function scores gets advantage 0, and training goes on: silent when the only task reward is NaN
everywhere (the run exits 0). :class:`UnscorableWatch` reads every round's per-function rewards, gathered across
processes, and stops the run when no task reward (shaping rewards aside) scores any completion for
``max_unscorable_rounds`` consecutive training rounds (each dynamic-sampling refill is a round; ``None`` or 0: never).
"""

from __future__ import annotations

import logging

import torch

from trl_ext.reliability.reward_guard import RewardFunctionError

logger = logging.getLogger(__name__)


class UnscorableWatch:
    """The module docstring's watch. ``names``: the reward functions' logged names, in column order; ``shaping``:
    which of them are shaping rewards."""

    def __init__(self, names: list[str], shaping: list[bool], rounds: int | None = None):
        self.names = list(names)
        self.shaping = list(shaping)
        self.rounds = rounds
        self.unscored_rounds = 0  # consecutive training rounds in which no task reward scored anything
        self.unscored_completions = 0  # their completions
        self.warned = False

    def observe(self, rewards_per_func: torch.Tensor, training: bool = True, main_process: bool = True) -> dict:
        """``rewards/<name>/none_frac`` for this round; a training round also counts toward the warning (once, main
        process) and the stop (``RewardFunctionError`` after ``rounds`` unscored rounds)."""
        unscorable = torch.isnan(rewards_per_func.detach().float().cpu())
        if unscorable.numel() == 0:
            return {}
        fractions = unscorable.float().mean(dim=0).tolist()
        if training:
            if not self.warned and (unscorable.all(dim=0).any() or unscorable.all(dim=1).any()):
                self.warned = True
                if main_process:
                    logger.warning(self._warning(fractions, int(unscorable.all(dim=1).sum()), unscorable.size(0)))
            if bool(unscorable[:, self.task_columns()].all()):
                self.unscored_rounds += 1
                self.unscored_completions += unscorable.size(0)
            else:
                self.unscored_rounds = self.unscored_completions = 0
            if self.rounds and self.unscored_rounds >= self.rounds:
                raise RewardFunctionError(self._stop_message())
        return {f"rewards/{name}/none_frac": frac for name, frac in zip(self.names, fractions, strict=True)}

    def task_columns(self) -> list[int]:
        """The task rewards: every function but the shaping ones (all of them if all are shaping)."""
        task = [i for i, is_shaping in enumerate(self.shaping) if not is_shaping]
        return task or list(range(len(self.names)))

    def _warning(self, fractions: list[float], unscored: int, total: int) -> str:
        which = ", ".join(f"{name!r} on {frac:.0%}" for name, frac in zip(self.names, fractions, strict=True) if frac)
        rule = (
            f"the run stops if no task reward scores any completion for max_unscorable_rounds={self.rounds} "
            "consecutive rounds"
            if self.rounds
            else "this config sets no max_unscorable_rounds (trl-ext's configs: 3), so the run never stops for this"
        )
        return (
            f'reward functions returned None/NaN ("does not apply") on a training round of {total} completions: '
            f"{which}; {unscored} of them are scored by no function (left out of their group's baseline, "
            f"advantage 0). Training goes on, as in TRL; {rule}. A function that should score these is broken (call "
            "it on a few rows by hand); one that does not apply can go from reward_funcs. (Shown once; "
            "rewards/<name>/none_frac logs every round.)"
        )

    def _stop_message(self) -> str:
        task = self.task_columns()
        names = [self.names[i] for i in task]
        rest = [self.names[i] for i in range(len(self.names)) if i not in task]
        left = f"only the shaping rewards {rest} score them" if rest else "every advantage is 0"
        return (
            f'reward function(s) {names} returned None/NaN ("does not apply") for all {self.unscored_completions} '
            f"completions of {self.unscored_rounds} consecutive generation rounds (max_unscorable_rounds="
            f"{self.rounds}): {left} and training cannot learn the task. Either the function(s) do not apply to this "
            "data (pass the reward that fits, reward_funcs / --reward_funcs), or they are broken (call one on a few "
            "dataset rows by hand). If they legitimately score nothing for a while, raise max_unscorable_rounds "
            "(None: never stop, as TRL)."
        )
