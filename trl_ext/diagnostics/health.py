"""Training-health monitor: plain-words warnings, with the suggested fix, while an RL run can still be saved.

:class:`HealthMonitor` is a ``TrainerCallback`` for any TRL trainer: at every log it runs the checks of
:mod:`trl_ext.diagnostics.health_checks`. A condition warns once per episode (when it becomes active, then not until
it has cleared and come back), and every log gains ``health/<condition>`` (1.0 active, 0.0 not) for each condition
evaluated.

A non-finite metric stops training (``stop_on_non_finite``; ``transformers`` hides a non-finite ``loss`` by default,
``grad_norm`` still shows it: use ``logging_steps=1`` to stop at the first bad step). The running levels and episodes
are checkpointed (an ``ExportableState``), so that a resumed run warns exactly as the uninterrupted one would.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_callback import ExportableState

from trl_ext.diagnostics.health_checks import CONDITIONS, VLLM_CONDITIONS, HealthChecks
from trl_ext.diagnostics.health_thresholds import HealthThresholds

__all__ = ["CONDITIONS", "VLLM_CONDITIONS", "HealthChecks", "HealthEvent", "HealthMonitor", "HealthThresholds"]

logger = logging.getLogger(__name__)


@dataclass
class HealthEvent:
    """One warning: the condition that became active, at which step, what was said, and whether it was fatal."""

    step: int
    condition: str
    message: str
    fatal: bool = False


class FirstCallback(TrainerCallback):
    """A callback whose metrics the reporting callbacks (TensorBoard, W&B) must see in the same log."""

    def attach(self, trainer: Any) -> Any:
        """Register with ``trainer`` as its *first* callback (returns ``self``): ``Trainer`` registers its reporting
        callbacks before those passed in ``callbacks=[...]``, which would otherwise miss these metrics."""
        callbacks = trainer.callback_handler.callbacks
        callbacks[:] = [cb for cb in callbacks if cb is not self]
        callbacks.insert(0, self)
        return self

    @staticmethod
    def add_to_log(state: TrainerState, logs: dict[str, Any], metrics: dict[str, Any]) -> None:
        """Add ``metrics`` to ``logs`` and to the copy of ``logs`` that ``Trainer.log`` appended to ``log_history``
        just before calling ``on_log``."""
        last = state.log_history[-1] if state.log_history else {}
        if last.get("step") == state.global_step and all(key in last for key in logs):
            last.update(metrics)
        logs.update(metrics)


class HealthMonitor(HealthChecks, FirstCallback, ExportableState):
    """Watches logged metrics and warns, once per episode, with the suggested action (module docstring).

    ``check(logs, step)`` is the whole logic and needs no trainer. ``events`` holds every warning given;
    ``summary_at_end=False`` leaves out the end-of-training list.
    """

    def __init__(self, thresholds: HealthThresholds | dict | None = None, summary_at_end: bool = True):
        if isinstance(thresholds, dict):  # as saved in a checkpoint (``state()``)
            thresholds = HealthThresholds(**thresholds)
        self.summary_at_end = summary_at_end
        super().__init__(thresholds)

    def reset(self) -> None:
        """Forget running levels, streaks and episodes (called at the start of training)."""
        self.events: list[HealthEvent] = []
        self.active: set[str] = set()
        super().reset()

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps (``ExportableState``): the thresholds as ``args``, the levels as ``attributes``."""
        levels = {name: getattr(self, name) for name in self._LEVELS}
        levels["active"] = sorted(self.active)
        levels["events"] = [asdict(event) for event in self.events]
        return {"args": {"thresholds": asdict(self.thresholds)}, "attributes": {"levels": levels}}

    def load_levels(self, levels: dict[str, Any]) -> None:
        """Restore what ``state()`` saved (at the start of a resumed run); an absent level keeps its value."""
        for name in self._LEVELS:
            if name in levels:
                setattr(self, name, levels[name])
        self.active = set(levels.get("active", []))
        self.events = [HealthEvent(**event) for event in levels.get("events", [])]  # absent from older checkpoints

    @property
    def levels(self) -> dict[str, Any]:
        return self.state()["attributes"]["levels"]

    @levels.setter
    def levels(self, value: dict[str, Any]) -> None:  # transformers' restore_callback_states_from_checkpoint path
        self.load_levels(value)

    @property
    def fatal(self) -> bool:
        """Whether a fatal condition (non-finite metric) has been seen since the start of training."""
        return any(event.fatal for event in self.events)

    def check(self, logs: dict[str, Any], step: int = 0, args: Any = None, main_process: bool = True) -> dict:
        """Run every check on one log; returns the ``health/*`` metrics. New episodes are appended to ``events`` and
        logged."""
        results, metrics = self.evaluate(logs, step, args)
        for name, (active, message) in results.items():
            if active is None:
                continue
            metrics[f"health/{name}"] = float(active)
            if not active:
                self.active.discard(name)
            elif name not in self.active:
                self.active.add(name)
                event = HealthEvent(step=step, condition=name, message=message, fatal=name == "non_finite")
                self.events.append(event)
                if self.thresholds.print_warnings and main_process:
                    logger.warning("[trl-ext health] step %d, %s: %s", step, name, message)
        return metrics

    def warnings_by_kind(self) -> list[dict[str, Any]]:
        """The warnings given so far, one entry per condition in the order they first fired: ``{"kind", "count"
        (episodes), "step" (the first), "message" (the first), "fatal"}``, for a run's summary."""
        grouped: dict[str, dict[str, Any]] = {}
        for event in self.events:
            entry = grouped.setdefault(
                event.condition,
                {"kind": event.condition, "count": 0, "step": event.step, "message": event.message, "fatal": False},
            )
            entry["count"] += 1
            entry["fatal"] = entry["fatal"] or event.fatal
        return list(grouped.values())

    def summary(self) -> str:
        """One line per warning given so far."""
        if not self.events:
            return "[trl-ext health] no warnings."
        lines = [f"[trl-ext health] {len(self.events)} warning(s):"]
        lines += [f"  step {e.step:>6d}  {e.condition:<17s} {e.message}" for e in self.events]
        return "\n".join(lines)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        self.reset()
        saved = (state.stateful_callbacks or {}).get(type(self).__name__) if state.global_step > 0 else None
        if isinstance(saved, list):
            saved = saved[0] if saved else None
        if saved:  # a resumed run: the checkpoint's trainer_state.json holds the levels
            self.load_levels(saved.get("attributes", {}).get("levels", {}))

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs=None, **kwargs):
        if not logs:
            return control
        num_events = len(self.events)
        metrics = self.check(logs, state.global_step, args, main_process=state.is_world_process_zero)
        if not metrics:
            return control
        self.add_to_log(state, logs, metrics)
        if self.thresholds.stop_on_non_finite and any(event.fatal for event in self.events[num_events:]):
            control.should_save = self.thresholds.save_on_non_finite
            control.should_training_stop = True
        return control

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        if self.events and self.summary_at_end and self.thresholds.print_warnings and state.is_world_process_zero:
            logger.warning(self.summary())
