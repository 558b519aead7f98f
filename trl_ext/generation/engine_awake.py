"""One weight push per optimizer step under vLLM's sleep mode, however many rounds a step generates.

With ``vllm_enable_sleep_mode`` TRL's colocated engine sleeps at level 2 (weights discarded) after every ``generate``,
so each dynamic-sampling refill round would push the whole model again. ``engine_awake`` wakes the engine once and
turns TRL's per-call sleep off for the rounds (TRL's per-step sync pushes the weights at the first), then sleeps at
level 1, which offloads the weights to CPU memory, so the next step wakes up with valid weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def engine_awake(trainer: Any) -> Iterator[None]:
    """Keep ``trainer``'s colocated vLLM engine awake for the rounds run inside (module docstring)."""
    generation = getattr(trainer, "vllm_generation", None) if getattr(trainer, "use_vllm", False) else None
    if getattr(generation, "mode", None) != "colocate" or not getattr(generation, "enable_sleep_mode", False):
        yield
        return
    generation.llm.wake_up()
    generation.enable_sleep_mode = False
    try:
        yield
    finally:
        generation.enable_sleep_mode = True
        generation.llm.sleep(level=1)
