"""Old-policy and reference log-probs computed for the trained rows only.

While a dynamic-sampling round (or an overlapped round) is generated, TRL's no-grad log-prob passes are deferred:
``_get_per_token_logps_and_entropies`` returns a placeholder (``DeferredPasses``). Once the trained batch is known,
``fill_deferred_logps`` runs TRL's own method on TRL's inputs (prompt + completion ids, their masks, the completion
width, ``per_device_train_batch_size``) for those rows, so no dropped group ever reaches a forward pass. Under vLLM's
importance-sampling correction the ratio of those rows and its ``sampling/*`` metrics are then recomputed with TRL's
formula (``ds_rounds.importance_sampling_ratio``). Not deferred: PEFT with ``beta > 0`` (TRL computes the reference
with the adapter disabled, a context that cannot be replayed).
"""

from __future__ import annotations

from typing import Any

import torch

from trl_ext.grpo.ds_batch import pad_width
from trl_ext.grpo.ds_rounds import importance_sampling_ratio


class DeferredPasses:
    """Which no-grad log-prob passes were deferred while a round ran (``"old"``, ``"ref"``); inactive otherwise."""

    def __init__(self) -> None:
        self.kinds: set[str] | None = None

    @property
    def active(self) -> bool:
        return self.kinds is not None

    def start(self) -> None:
        self.kinds = set()

    def stop(self) -> frozenset:
        kinds, self.kinds = frozenset(self.kinds or ()), None
        return kinds

    def defer(self, kind: str, rows: int, width: int, device: Any) -> torch.Tensor:
        """Record a deferred pass and return its placeholder."""
        self.kinds.add(kind)
        return torch.zeros(rows, width, device=device)


def can_defer(trainer: Any) -> bool:
    """PEFT with a KL term computes the reference with the adapter disabled inside TRL: not deferred."""
    return not (trainer.beta != 0.0 and trainer.ref_model is None)


def sharded_forward(trainer: Any) -> bool:
    """Whether a forward pass is a collective over the processes (DeepSpeed ZeRO-3 or FSDP shard the weights):
    every process must then run the same number of forward calls."""
    if getattr(trainer, "is_fsdp_enabled", False):
        return True
    if not getattr(trainer, "is_deepspeed_enabled", False):
        return False
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    return getattr(plugin, "zero_stage", 0) == 3


def fill_deferred_logps(
    trainer: Any, batch: dict[str, Any], deferred: frozenset, rows: torch.Tensor | None = None, metrics: bool = True
) -> dict[str, Any]:
    """Compute the deferred log-probs of ``batch`` for ``rows`` (a bool mask of the rows to compute; ``None``: all),
    with TRL's ``_get_per_token_logps_and_entropies``; then, under vLLM's importance-sampling correction, the ratio
    of those rows and (``metrics``) its ``sampling/*`` metrics."""
    if not deferred:
        return batch
    from trl.models.utils import disable_gradient_checkpointing

    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    width = batch["completion_ids"].size(1)
    index = None if rows is None or bool(rows.all()) else rows.nonzero().flatten().to(ids.device)
    if index is not None and not sharded_forward(trainer):
        # carried rows keep the log-probs of the policy that generated them: not computed again
        ids, mask = ids.index_select(0, index), mask.index_select(0, index)
        index_into = None
    else:
        # with sharded parameters every forward is collective: every process runs the pass over all its rows
        # (as many as every other process has), and only the fresh rows' values are kept
        index_into = index
    size = trainer.args.per_device_train_batch_size
    gc_kwargs = trainer.args.gradient_checkpointing_kwargs
    with torch.no_grad(), disable_gradient_checkpointing(trainer.model, gc_kwargs):
        for kind, key, model in (
            ("old", "old_per_token_logps", trainer.model),
            ("ref", "ref_per_token_logps", trainer.ref_model),
        ):
            if kind not in deferred or key not in batch or ids.size(0) == 0:
                continue
            # batch_size by keyword: TRL 1.14 takes it keyword-only (``model, *args, batch_size=None``)
            values = trainer._get_per_token_logps_and_entropies(model, ids, mask, width, batch_size=size)[0]
            if index is None:
                batch[key] = values
            else:
                if index_into is not None:
                    values = values.index_select(0, index_into)
                batch[key] = pad_width(batch[key], width, 0, left=False)[:, :width].clone()
                batch[key][index] = values.to(batch[key].dtype)
    if "old" in deferred and "importance_sampling_ratio" in batch and "sampling_per_token_logps" in batch:
        fill_importance_sampling(trainer, batch, metrics=metrics)
    return batch


def fill_importance_sampling(trainer: Any, batch: dict[str, Any], metrics: bool = True) -> None:
    """vLLM's importance-sampling ratio of the trained rows, and TRL's ``sampling/*`` metrics for them."""
    loss_mask = batch["completion_mask"] * batch["tool_mask"] if "tool_mask" in batch else batch["completion_mask"]
    old, sampled = batch["old_per_token_logps"], batch["sampling_per_token_logps"]
    mode = trainer.vllm_importance_sampling_mode
    ratio = importance_sampling_ratio(
        old,
        sampled,
        loss_mask,
        mode,
        trainer.vllm_importance_sampling_clip_min,
        trainer.vllm_importance_sampling_clip_max,
    )
    batch["importance_sampling_ratio"] = ratio
    if not metrics:
        return
    sink, gather = trainer._metrics["train"], trainer.accelerator.gather
    zero = torch.tensor(0.0, device=old.device)
    mask = loss_mask.bool()
    delta = torch.abs(old - sampled)[mask]
    delta = delta[~torch.isnan(delta)]
    sink["sampling/sampling_logp_difference/mean"].append(
        gather(delta.mean() if delta.numel() else zero).mean().item()
    )
    sink["sampling/sampling_logp_difference/max"].append(gather(delta.max() if delta.numel() else zero).max().item())
    flat = ratio.flatten() if mode.startswith("sequence") else ratio[mask]
    sink["sampling/importance_sampling_ratio/min"].append(gather(flat.min() if flat.numel() else zero).min().item())
    sink["sampling/importance_sampling_ratio/mean"].append(gather(flat.mean() if flat.numel() else zero).mean().item())
    sink["sampling/importance_sampling_ratio/max"].append(gather(flat.max() if flat.numel() else zero).max().item())
