"""One weight push per optimizer step under vLLM's sleep mode, however many rounds a step generates.

With ``vllm_enable_sleep_mode`` TRL's colocated engine sleeps at level 2 after every ``generate`` call, which discards
its weights, and the next ``generate`` pushes them again from the training model (TRL's ``VLLMGeneration.generate``:
"Sleep level 2 discards the weights, so waking up isn't enough"). Dynamic sampling's refill rounds would then push the
whole model once per round. ``engine_awake`` keeps the engine awake across the rounds of one step: it wakes it up
once and turns TRL's per-call sleep off while the rounds run (TRL's own per-step sync pushes the weights once, at the
first round), then puts the engine to sleep at level 1 after the last round: level 1 offloads the weights to CPU
memory instead of discarding them, so that waking up at the next step restores valid weights without a push of its
own (TRL's per-step sync then updates them). Anything but a colocated engine in sleep mode passes through untouched.
Sleep mode is CUDA-only (vLLM's CPU build has none).
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
