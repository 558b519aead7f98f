"""The old-policy log-probs of the trained rows only: no forward pass over a group that is then dropped.

TRL computes pi_old's log-probs (the denominator of the clipped ratio) in every round, before the rewards say which
groups are kept. ``DeferredOldLogps`` skips that pass during a round and ``fill`` runs TRL's own
``_get_per_token_logps_and_entropies`` on the assembled, trained rows instead.

Deferred only where nothing inside a round reads those log-probs: not with vLLM's importance-sampling correction
(computed in the round), not where the reference pass also runs on the policy model (a PEFT adapter disabled,
``beta != 0`` without a reference model), which the policy pass could not be told apart from, and not when a class
outside trl_ext and TRL overrides ``_get_per_token_logps_and_entropies``: a user's override always receives TRL's
tensors, never the deferred pass's ``None``.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import trl

#: what TRL's old-policy pass takes from a batch besides ids and masks (multimodal inputs), read off its signature
_FORWARD_KEYS = [
    name
    for name in inspect.signature(trl.GRPOTrainer._get_per_token_logps_and_entropies).parameters
    if name not in ("self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size")
    and not name.startswith("compute_")
]


def _overridden_by_user(cls: type) -> bool:
    """Whether the ``_get_per_token_logps_and_entropies`` of ``cls`` comes from a class outside trl_ext and TRL."""
    owner = next(c for c in cls.__mro__ if "_get_per_token_logps_and_entropies" in vars(c))
    return owner.__module__.split(".")[0] not in ("trl_ext", "trl")


class DeferredOldLogps:
    """Defers TRL's old-policy pass of dynamic-sampling rounds to the trained rows (module docstring)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.active = False
        self.deferred = False  # a round's old-policy pass was skipped: fill() owes it

    @contextmanager
    def during_round(self) -> Iterator[None]:
        """Defer the round's old-policy pass where nothing inside the round reads it (module docstring)."""
        trainer = self.trainer
        vllm_correction = trainer.use_vllm and getattr(trainer, "vllm_importance_sampling_correction", False)
        self.active = (
            not vllm_correction
            and (trainer.beta == 0.0 or trainer.ref_model is not None)
            and not _overridden_by_user(type(trainer))
        )
        try:
            yield
        finally:
            self.active = False

    def skips(self, model: Any) -> bool:
        """Whether this ``_get_per_token_logps_and_entropies`` call is a round's old-policy pass, now deferred."""
        if self.active and model is self.trainer.model and not torch.is_grad_enabled():
            self.deferred = True
            return True
        return False

    def fill(self, batch: dict[str, Any]) -> dict[str, Any]:
        """``batch`` with ``old_per_token_logps`` of its rows, when the rounds' passes were deferred."""
        if not self.deferred:
            return batch
        self.deferred = False
        trainer = self.trainer
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        extra = {key: batch[key] for key in _FORWARD_KEYS if key in batch}
        with torch.no_grad():
            logps, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model,
                input_ids,
                attention_mask,
                batch["completion_ids"].size(1),
                batch_size=trainer.args.per_device_train_batch_size,
                **extra,
            )
        return {**batch, "old_per_token_logps": logps}
