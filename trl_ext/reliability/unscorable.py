"""Unscorable completions made visible: per-function None/NaN counts, and a word when a function never scores.

TRL's convention stays: a reward function returns ``None`` (TRL stores NaN) for a completion it does not apply to;
the weighted sum skips it (``nansum``) and ``rewards/<name>/mean`` averages the others (``nanmean``). That is right
for a function that scores part of the data (a code reward on a mixed math/code set), and silent when a function
scores nothing: its mean reads like any other, and a run whose only task reward is NaN everywhere trains on zero
advantages (or on the shaping terms alone) and exits 0.

:class:`UnscorableWatch` reads the per-function rewards of every training round (``_calculate_rewards``, already
gathered across processes, so every process decides alike) and

- returns ``rewards/<name>/none_frac``, the fraction of the round's completions the function scored None/NaN, for
  every function on every round (the trainers log it beside ``rewards/<name>/mean``);
- after the first ``rounds`` (3) training rounds, for each function that scored None/NaN on every completion of them,
  warns once, naming the function and both readings (it does not apply to this data / it is broken);
- stops the run (``RewardFunctionError``) when that is true of every task reward: all reward functions, or all but
  the shaping ones (``trl_ext.rewards.shaping``, which say nothing about the task). Then every advantage is 0, or
  comes from length shaping alone, and nothing about the task can be learned: a run that goes on only spends compute.
  One function of several that never scores is a warning: the others still teach.
"""

from __future__ import annotations

import logging

import torch

from trl_ext.reliability.reward_guard import RewardFunctionError

logger = logging.getLogger(__name__)


class UnscorableWatch:
    """Per-function None/NaN fractions, and the first-rounds warning or stop (module docstring).

    ``names``: the reward functions' logged names, in column order; ``shaping``: which of them are shaping rewards;
    ``rounds``: the training rounds watched before a function that never scored is reported."""

    def __init__(self, names: list[str], shaping: list[bool], rounds: int = 3):
        self.names = list(names)
        self.shaping = list(shaping)
        self.rounds = rounds
        self.seen_rounds = 0
        self.seen_completions = 0
        self.scored = torch.zeros(len(self.names), dtype=torch.bool)  # scored anything in the watched rounds
        self.warned: list[str] = []

    @property
    def armed(self) -> bool:
        return self.seen_rounds < self.rounds

    def observe(self, rewards_per_func: torch.Tensor, training: bool = True, main_process: bool = True) -> dict:
        """``rewards/<name>/none_frac`` for this round; while armed, also counts training rounds and, at the last
        watched one, warns (on the main process) or raises."""
        unscorable = torch.isnan(rewards_per_func.detach().float().cpu())
        if unscorable.numel() == 0:
            return {}
        fractions = unscorable.float().mean(dim=0).tolist()
        if training and self.armed:
            self.seen_rounds += 1
            self.seen_completions += unscorable.size(0)
            self.scored |= ~unscorable.all(dim=0)
            if not self.armed:
                self._report(main_process)
        return {f"rewards/{name}/none_frac": frac for name, frac in zip(self.names, fractions, strict=True)}

    def task_columns(self) -> list[int]:
        """The task rewards: every function but the shaping ones (all of them if all are shaping)."""
        task = [i for i, is_shaping in enumerate(self.shaping) if not is_shaping]
        return task or list(range(len(self.names)))

    def _report(self, main_process: bool) -> None:
        never = [i for i in range(len(self.names)) if not self.scored[i]]
        if not never:
            return
        seen = f"all {self.seen_completions} completions of the first {self.seen_rounds} generation rounds"
        task = self.task_columns()
        if all(i in never for i in task):
            names = [self.names[i] for i in task]
            rest = [self.names[i] for i in range(len(self.names)) if i not in task]
            left = f"only the shaping rewards {rest} score them" if rest else "every advantage is 0"
            raise RewardFunctionError(
                f'reward function(s) {names} returned None/NaN ("does not apply") for {seen}: no completion can be '
                f"scored for the task, so {left} and training cannot learn the task. Either the function(s) do not "
                "apply to this data (a reward for another task or another answer format: pass the reward that fits, "
                "reward_funcs / --reward_funcs), or they are broken (a reference column they cannot read, a "
                "completion format they cannot parse: call one on a few dataset rows by hand and see why it returns "
                "None)."
            )
        for i in never:
            self.warned.append(self.names[i])
            if main_process:
                logger.warning(
                    f'reward function {self.names[i]!r} returned None/NaN ("does not apply") for {seen}; TRL leaves '
                    "such completions out of its sum, so it has added nothing to the reward, and "
                    f"rewards/{self.names[i]}/mean averages no value. Either it does not apply to this data (then it "
                    "can go from reward_funcs), or it is broken (a column it cannot read, a format it cannot parse: "
                    f"call it on a few rows by hand). rewards/{self.names[i]}/none_frac logs the fraction per round."
                )
