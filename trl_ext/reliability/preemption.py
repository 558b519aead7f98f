"""Graceful preemption (docs/PREEMPTION.md), a ``TrainerCallback`` any Trainer can take: on SIGTERM or SIGUSR1 the run finishes the optimizer step in progress,
writes a checkpoint through the atomic path (``checkpoints``), says so and exits with ``PREEMPTED_EXIT_CODE`` (75,
``EX_TEMPFAIL``: "retry"). All ranks stop at the same step even when one was signalled; the main process also writes
``output_dir/preempted.json`` for launchers that do not pass the exit code on (``torchrun`` exits 1).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

from transformers import TrainerCallback

from trl_ext.reliability.checkpoints import write_json_atomic

logger = logging.getLogger(__name__)

PREEMPTED_EXIT_CODE = 75
PREEMPTED_FILE = "preempted.json"
DEFAULT_PREEMPTION_SIGNALS = ("SIGTERM", "SIGUSR1")
_OFF = {"none", "off", "false", ""}
_UNCATCHABLE = {"SIGKILL", "SIGSTOP"}


def parse_signals(names: Any) -> list[signal.Signals]:
    """``["SIGTERM", "usr1"]`` or ``"SIGTERM,usr1"`` -> the signals; ``[]``, ``None`` or ``["none"]`` -> ``[]``."""
    if names is None:
        return []
    if isinstance(names, str):
        names = names.split(",")
    parsed: list[signal.Signals] = []
    for raw in names:
        name = str(raw).strip().upper()
        if name.lower() in _OFF:
            continue
        full = name if name.startswith("SIG") else f"SIG{name}"
        if full in _UNCATCHABLE:
            raise ValueError(
                f"preemption_signals: {raw!r} cannot be caught by any process. Use SIGTERM and/or SIGUSR1 (the "
                "defaults), or [] to turn graceful preemption off."
            )
        member = getattr(signal.Signals, full, None) if full.isidentifier() else None
        if member is None:
            raise ValueError(
                f"preemption_signals: unknown signal {raw!r}. Give signal names such as SIGTERM, SIGUSR1, SIGUSR2 or "
                "SIGINT (default: SIGTERM SIGUSR1), or 'none' to turn graceful preemption off."
            )
        if member not in parsed:
            parsed.append(member)
    return parsed


def any_process(accelerator: Any, flag: bool) -> bool:
    """True on every process when ``flag`` is True on any (accelerate's ``set_trigger`` / ``check_trigger``: one
    all-reduce; none on a single process)."""
    if accelerator.num_processes == 1:
        return bool(flag)
    if flag:
        accelerator.set_trigger()
    return accelerator.check_trigger()


class Preempted(SystemExit):
    """Stopped on a preemption signal after a complete checkpoint (``step``, ``checkpoint``, ``signal_name``)."""

    def __init__(self, message: str, step: int, checkpoint: str | None, signal_name: str) -> None:
        super().__init__(PREEMPTED_EXIT_CODE)
        self.message, self.step, self.checkpoint, self.signal_name = message, step, checkpoint, signal_name

    def __str__(self) -> str:
        return self.message


class SignalLatch:
    """Turns the first of ``signals`` into a flag (``received``, the signal's name) and a second into the default
    action at once, between ``install`` and ``restore`` (main thread only: Python delivers signals there)."""

    def __init__(self, signals: list[signal.Signals]) -> None:
        self.signals = signals
        self.received: str | None = None
        self._previous: dict[signal.Signals, Any] = {}

    def install(self) -> None:
        if not self.signals:
            return
        if threading.current_thread() is not threading.main_thread():
            logger.warning(
                "train() runs outside the main thread: graceful preemption is off (signal handlers can only be set "
                "in the main thread); a SIGTERM stops the process at once."
            )
            return
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.received is not None:
            os.write(2, f"[trl-ext] second signal ({name}): stopping now, without a checkpoint.\n".encode())
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.received = name
        # os.write, not logging: a signal handler may run while the logging lock is held
        os.write(
            2,
            f"[trl-ext] {name} received: finishing the optimizer step in progress, then writing a checkpoint and "
            f"exiting with code {PREEMPTED_EXIT_CODE} (send it again to stop at once).\n".encode(),
        )


class PreemptionCallback(TrainerCallback):
    """Graceful preemption for any Trainer: ``trainer.add_callback(PreemptionCallback(trainer))``. During ``train()``
    the signals of ``args.preemption_signals`` (default SIGTERM, SIGUSR1) only set a flag; the processes agree on it
    at each step end and after each checkpoint (accelerate's trigger), save, and raise ``Preempted`` right after that
    step's checkpoint, once the main process logged how to resume."""

    def __init__(self, trainer: Any) -> None:
        self.accelerator = trainer.accelerator
        self.latch = SignalLatch([])
        self.stopping = False

    def _agreed(self) -> bool:
        return any_process(self.accelerator, self.latch.received is not None)

    def on_train_begin(self, args, state, control, **kwargs):
        if args.should_save:
            stale = os.path.join(args.output_dir, PREEMPTED_FILE)
            if os.path.exists(stale):
                os.remove(stale)  # a previous segment's stop; this one starts
        self.latch.restore()
        self.latch = SignalLatch(parse_signals(getattr(args, "preemption_signals", DEFAULT_PREEMPTION_SIGNALS)))
        self.stopping = False
        self.latch.install()

    def on_train_end(self, args, state, control, **kwargs):
        self.latch.restore()
        if self.latch.received is not None and not self.stopping:
            logger.warning(
                f"{self.latch.received} arrived after the last optimizer step: no preemption checkpoint was written."
            )

    def on_step_end(self, args, state, control, **kwargs):
        if not self.stopping and self._agreed():
            self.stopping = True
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_save(self, args, state, control, **kwargs):
        if not self.stopping and not self._agreed():
            return control
        self.stopping = True
        self.latch.restore()
        checkpoint = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        name = self.latch.received or "a preemption signal on another process"
        message = (
            f"Preempted ({name}) at step {state.global_step}: {checkpoint} is written and complete; exiting with code "
            f"{PREEMPTED_EXIT_CODE}. Resume with resume_from_checkpoint=True (recipes: --resume_from_checkpoint "
            "latest) to continue exactly where it stopped."
        )
        if args.should_save:
            write_json_atomic(
                os.path.join(args.output_dir, PREEMPTED_FILE),
                {
                    "step": state.global_step,
                    "checkpoint": checkpoint,
                    "signal": name,
                    "exit_code": PREEMPTED_EXIT_CODE,
                },
            )
            logger.warning(message)
        raise Preempted(message, state.global_step, checkpoint, name)
