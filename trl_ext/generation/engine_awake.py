"""One weight push per optimizer step under vLLM's sleep mode, however many rounds a step generates.

With ``vllm_enable_sleep_mode`` TRL's colocated engine sleeps at level 2 after every ``generate`` call, discarding its
weights, so dynamic sampling's refill rounds would push the whole model once per round. ``engine_awake`` wakes the
engine once and turns TRL's per-call sleep off while the rounds run (TRL's per-step sync pushes the weights at the
first round), then sleeps at level 1, which offloads the weights to CPU memory instead of discarding them, so the next
step wakes up with valid weights. Anything but a colocated engine in sleep mode (CUDA-only) passes through untouched.
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
