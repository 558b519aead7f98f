"""An optimizer step whose accumulation window trained no token changes nothing.

Dynamic sampling fills a batch with zero-weight groups when its generation budget runs out. Their gradient is zero,
but AdamW would still apply its momentum and weight decay. When no process trained a token in the window the gate
drops every gradient, and torch's optimizers skip a parameter without one, so weights and optimizer state stay as they
were; ``global_step`` and the LR schedule still advance, so logging, saving and exact resume are unchanged. Not
applied under DeepSpeed, whose engine owns the step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback


class UntrainedStepGate(TrainerCallback):
    """Skip the optimizer's update for a window without trained tokens (module docstring)."""

    def __init__(self, accelerator: Any, record: Callable[[float], None]) -> None:
        self.accelerator = accelerator
        self.record = record
        self.window_tokens: Any = 0
        self.armed = False

    def arm(self, armed: bool = True) -> None:
        """Whether the generation batch being trained holds filler groups (until the next one is generated)."""
        self.armed = armed
        if not armed:
            self.window_tokens = 0

    def count(self, inputs: dict[str, Any]) -> None:
        """Add the tokens a micro-batch trains on (its loss mask) to the window's count."""
        if not self.armed:
            return
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        self.window_tokens = self.window_tokens + mask.sum()

    def on_pre_optimizer_step(self, args, state, control, optimizer: Any = None, **kwargs: Any):
        if optimizer is None or not self.armed:
            return
        # whether no process trained a token in the window (a collective: every process gets here)
        tokens = torch.as_tensor(self.window_tokens, dtype=torch.float32, device=self.accelerator.device)
        self.window_tokens = 0
        if self.accelerator.num_processes > 1:
            tokens = self.accelerator.reduce(tokens, reduction="sum")
        empty = bool(tokens.item() == 0)
        self.record(float(empty))
        if not empty:
            return
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.grad = None
