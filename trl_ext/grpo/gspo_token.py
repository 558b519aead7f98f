r"""GSPO-token (GSPO, arXiv 2507.18071, Eq. 13-14) over TRL's token-level ratio, on every supported TRL release.

GSPO-token gives each token the ratio

    s_{i,t} = sg[s_i] * pi(y_{i,t}) / sg[pi(y_{i,t})]        s_i = exp( (1/|y_i|) sum_t log(pi / pi_old)(y_{i,t}) )

whose value is the sequence ratio s_i of GSPO (Eq. 7) on every token and whose gradient is that of the token's own
log-probability scaled by s_i. With one advantage per sequence it equals GSPO in loss and gradient (Eq. 15-17); with
per-token advantages it weights each token separately.

TRL >= 1.14 has no GSPO-token level, so this mixin keeps TRL's token level (``log_ratio = per_token_logps -
old_per_token_logps``) and, right after TRL's policy forward, replaces the old log-probabilities in a copy of the
batch with

    old'_{i,t} = sg[log pi(y_{i,t})] - sg[log s_i]      so that      log_ratio = log pi - sg[log pi] + sg[log s_i],

exactly Eq. 13 in log space. The policy log-probabilities themselves are untouched, so the KL term, entropies and
metrics are TRL's; ``off_policy_mask_threshold``'s mask keeps the true old log-probabilities.
"""

from __future__ import annotations

from typing import Any

import torch


def gspo_token_old_logps(
    per_token_logps: torch.Tensor, old_per_token_logps: torch.Tensor | None, mask: torch.Tensor
) -> torch.Tensor:
    """The old log-probabilities that make TRL's token-level ``log_ratio`` equal GSPO-token's (Eq. 13, module
    docstring). ``old_per_token_logps=None`` means on-policy (TRL then uses ``per_token_logps.detach()``: s_i = 1)."""
    current = per_token_logps.detach()
    old = current if old_per_token_logps is None else old_per_token_logps
    mask = mask.to(current.dtype)
    log_seq_ratio = ((current - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # log s_i (Eq. 7), no gradient
    return current - log_seq_ratio.unsqueeze(-1)


class GSPOTokenMixin:
    """Turns TRL's token-level ratio into GSPO-token's when ``args.gspo_token`` (module docstring)."""

    _gspo_token_batch: dict[str, Any] | None = None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if not getattr(self.args, "gspo_token", False):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        batch = dict(inputs)  # the caller's buffered batch is reused by later steps: never edit it
        self._gspo_token_batch = batch
        try:  # TRL's compute_loss hands this batch to its _compute_loss, whose policy forward is the next call below
            return super().compute_loss(model, batch, return_outputs, num_items_in_batch)
        finally:
            self._gspo_token_batch = None

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        result = super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
        )
        batch = self._gspo_token_batch
        if batch is None:  # generation-time passes (old / reference log-probs): TRL's own values
            return result
        self._gspo_token_batch = None  # only the policy forward of this loss computation
        per_token_logps = result[0]
        mask = batch["completion_mask"]
        if "tool_mask" in batch:
            mask = mask * batch["tool_mask"]
        old = batch.get("old_per_token_logps")
        if getattr(self, "off_policy_mask_threshold", None) is not None and "sampling_per_token_logps" not in batch:
            batch["sampling_per_token_logps"] = per_token_logps.detach() if old is None else old
        batch["old_per_token_logps"] = gspo_token_old_logps(per_token_logps, old, mask)
        return result
