"""Unscorable completions made visible: per-function None/NaN fractions, one warning, and a stop only if asked.

A reward function returns ``None`` (TRL stores NaN) for a completion it does not apply to; TRL leaves it out of the
sum, a completion no function scores gets advantage 0, and training goes on with one warning. :class:`UnscorableWatch`
reads every round's per-function rewards, gathered across processes: it logs ``rewards/<name>/none_frac``, warns once
as TRL does (naming each function and its fraction), and trains on. Only when ``max_unscorable_rounds`` is set does it
stop the run: after that many consecutive optimizer steps trained on generation batches in which no task reward
(shaping rewards aside) scored any completion. Counted in optimizer steps, not generation rounds, so that dynamic
sampling's refills (several rounds in one step) do not end a run inside its first step; checked when the next step's
batch is generated. ``None`` or 0 (the trainers' default, as TRL's): never stop. The recipes set 3.
"""

from __future__ import annotations

import logging

import torch

from trl_ext.reliability.reward_guard import RewardFunctionError

logger = logging.getLogger(__name__)


class UnscorableWatch:
    """The module docstring's watch. ``names``: the reward functions' logged names, in column order; ``shaping``:
    which of them are shaping rewards; ``max_steps``: ``max_unscorable_rounds`` (None or 0: never stop)."""

    def __init__(self, names: list[str], shaping: list[bool], max_steps: int | None = None):
        self.names = list(names)
        self.shaping = list(shaping)
        self.max_steps = max_steps
        self.scored_step: int | None = None  # the optimizer step whose batch a task reward last scored
        self.unscored_since: int | None = None  # the first step of the current run of unscored batches
        self.unscored_steps = 0  # completed optimizer steps of that run
        self.unscored_completions = 0  # the completions they generated
        self.warned = False

    def observe(
        self, rewards_per_func: torch.Tensor, step: int = 0, training: bool = True, main_process: bool = True
    ) -> dict:
        """``rewards/<name>/none_frac`` of this round. A training round (``step``: the optimizer steps completed, the
        Trainer's ``global_step``) also counts toward the warning (once, main process) and the stop
        (``RewardFunctionError`` once ``max_steps`` completed steps trained on batches no task reward scored)."""
        unscorable = torch.isnan(rewards_per_func.detach().float().cpu())
        if unscorable.numel() == 0:
            return {}
        fractions = unscorable.float().mean(dim=0).tolist()
        if training:
            if not self.warned and (unscorable.all(dim=0).any() or unscorable.all(dim=1).any()):
                self.warned = True
                if main_process:
                    logger.warning(self._warning(fractions, int(unscorable.all(dim=1).sum()), unscorable.size(0)))
            self._count(bool(unscorable[:, self.task_columns()].all()), unscorable.size(0), step)
        return {f"rewards/{name}/none_frac": frac for name, frac in zip(self.names, fractions, strict=True)}

    def _count(self, unscored: bool, completions: int, step: int) -> None:
        if not unscored:  # any round of a step that scores makes the step's batch scored
            self.scored_step, self.unscored_since = step, None
            self.unscored_steps = self.unscored_completions = 0
            return
        if step == self.scored_step:  # a later round of a step a task reward already scored
            return
        if self.unscored_since is None:
            self.unscored_since = step
        self.unscored_steps = step - self.unscored_since
        if self.max_steps and self.unscored_steps >= self.max_steps:
            raise RewardFunctionError(self._stop_message())
        self.unscored_completions += completions

    def task_columns(self) -> list[int]:
        """The task rewards: every function but the shaping ones (all of them if all are shaping)."""
        task = [i for i, is_shaping in enumerate(self.shaping) if not is_shaping]
        return task or list(range(len(self.names)))

    def _warning(self, fractions: list[float], unscored: int, total: int) -> str:
        which = ", ".join(f"{name!r} on {frac:.0%}" for name, frac in zip(self.names, fractions, strict=True) if frac)
        rule = (
            f"the run stops after max_unscorable_rounds={self.max_steps} consecutive optimizer steps in which no task "
            "reward scores any completion"
            if self.max_steps
            else "max_unscorable_rounds is not set (the recipes set 3), so the run never stops for this"
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
            f"completions generated for {self.unscored_steps} consecutive optimizer steps (max_unscorable_rounds="
            f"{self.max_steps}): {left} and training cannot learn the task. Either the function(s) do not apply to "
            "this data (pass the reward that fits, reward_funcs / --reward_funcs), or they are broken (call one on a "
            "few dataset rows by hand). If they legitimately score nothing for a while, raise max_unscorable_rounds "
            "(None: never stop, as TRL)."
        )
