r"""GSPO-token (GSPO, arXiv 2507.18071, Eq. 13-14) over TRL's token-level ratio, on every supported TRL release.

GSPO-token gives each token the ratio

    s_{i,t} = sg[s_i] * pi(y_{i,t}) / sg[pi(y_{i,t})]        s_i = exp( (1/|y_i|) sum_t log(pi / pi_old)(y_{i,t}) )

whose value is the sequence ratio s_i of GSPO (Eq. 7) on every token and whose gradient is that of the token's own
log-probability scaled by s_i. With one advantage per sequence it equals GSPO in loss and gradient (Eq. 15-17); with
per-token advantages it weights each token separately.

TRL >= 1.14 has no GSPO-token level, so ``GSPOTokenTrainer`` (``trl_ext.grpo.trainers``) keeps TRL's token level (``log_ratio = per_token_logps -
old_per_token_logps``) and, right after TRL's policy forward, replaces the old log-probabilities in a copy of the
batch with

    old'_{i,t} = sg[log pi(y_{i,t})] - sg[log s_i]      so that      log_ratio = log pi - sg[log pi] + sg[log s_i],

exactly Eq. 13 in log space. The policy log-probabilities themselves are untouched, so the KL term, entropies and
metrics are TRL's; ``off_policy_mask_threshold``'s mask keeps the true old log-probabilities.
"""

from __future__ import annotations

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
