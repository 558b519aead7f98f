"""Mixture-of-Experts under RL (``docs/MOE.md``): how much routing moves between the rollout policy and the trained
one, and a guard that lets checkpoints with ``output_router_logits=True`` generate.

GSPO (arXiv 2507.18071) argues from expert-activation volatility: after an update about 10% of a token's experts
change, so the token ratio (GRPO, Eq. 3) compares two sub-networks while GSPO's sequence ratio (Eq. 7) averages it.
:class:`MoERoutingMonitor` logs per optimizer step ``moe/routing_change_frac``, the fraction of (completion token, MoE
layer) routings whose top-k expert set differs between TRL's old-policy and training forwards (not logged on-policy,
where it is 0), and ``moe/max_expert_load``, the busiest expert's share of top-k assignments (worst layer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from transformers import TrainerCallback

__all__ = ["MoERoutingMonitor", "attach_moe_monitor", "guard_router_logits", "routing_change", "router_modules"]


def router_modules(model: nn.Module) -> list[tuple[nn.Module, int]]:
    """The router (gate) modules of ``model`` in forward order, each with the index of its logits in its output: the
    modules transformers hooks to record ``router_logits``. Empty for a dense model."""
    recorders = (getattr(m, "_can_record_outputs", None) or {} for m in model.modules())
    recorder = next((r["router_logits"] for r in recorders if "router_logits" in r), None)
    target = getattr(recorder, "target_class", None)
    return [(m, recorder.index or 0) for m in model.modules() if isinstance(m, target)] if target else []


def _skip_aux_loss_on_cached_steps(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """``generate``'s cached steps feed one token per row with the whole cache's mask, on which transformers'
    ``load_balancing_loss_func`` fails: their aux loss, never used, is not computed (``output_router_logits=False``)."""
    ids, mask = kwargs.get("input_ids", args[0] if args else None), kwargs.get("attention_mask")
    known = kwargs.get("output_router_logits") is not None or ids is None or mask is None
    if not known and mask.shape[-1] != ids.shape[-1]:
        return args, {**kwargs, "output_router_logits": False}
    return None


def guard_router_logits(model: nn.Module) -> Any:
    """Let a model whose config sets ``output_router_logits=True`` generate (``docs/MOE.md``); returns the hook's
    handle. TRL's loss forward, which asks for the aux loss itself, is untouched."""
    return model.register_forward_pre_hook(_skip_aux_loss_on_cached_steps, with_kwargs=True)


def routing_change(old: torch.Tensor, new: torch.Tensor, mask: torch.Tensor) -> tuple[int, int]:
    """``(changed, compared)``: of the masked routings, how many chose a different top-k expert set.
    ``old``/``new``: expert indices ``(..., layers, k)`` (order within k ignored); ``mask``: ``(...)`` bool."""
    differs = (old.sort(-1).values != new.sort(-1).values).any(-1)
    selected = mask.bool().unsqueeze(-1).expand_as(differs)
    return int(differs[selected].sum()), int(selected.sum())


class MoERoutingMonitor(TrainerCallback):
    """Hooks on ``model``'s routers; appends ``moe/routing_change_frac`` and ``moe/max_expert_load`` to ``metrics``
    (a trainer's ``_metrics["train"]``) at every step end. ``reduce`` sums a tensor over processes."""

    def __init__(self, model: nn.Module, metrics: dict[str, list[float]], reduce: Callable | None = None) -> None:
        self.routers = router_modules(model)
        if not self.routers:
            raise ValueError(f"{type(model).__name__} has no router modules: MoERoutingMonitor needs an MoE model.")
        config = getattr(model.config, "text_config", model.config)
        self.top_k = int(config.num_experts_per_tok)
        num_experts = getattr(self.routers[0][0], "num_experts", None) or self.routers[0][0].weight.shape[0]
        self.metrics, self.reduce = metrics, reduce
        self.old: dict[bytes, torch.Tensor] = {}  # sequence (its non-pad token ids) -> top-k of the old-policy pass
        self.load = torch.zeros(len(self.routers), num_experts)
        self.counts = torch.zeros(2)  # changed, compared
        self.trained_since_store, self.context, self.captured = True, None, []
        self.handles = [model.register_forward_pre_hook(self._begin, with_kwargs=True)]
        self.handles.append(model.register_forward_hook(self._end))
        for router, index in self.routers:
            self.handles.append(router.register_forward_hook(lambda m, a, out, i=index: self._capture(out[i])))

    def _begin(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        ids, mask = kwargs.get("input_ids", args[0] if args else None), kwargs.get("attention_mask")
        mask = torch.ones_like(ids) if mask is None and ids is not None else mask
        self.context, self.captured = None, []
        if ids is None or ids.dim() != 2 or mask.shape != ids.shape:  # generate's cached steps: not a full sequence
            return
        mask, labels, keep = mask.bool(), kwargs.get("labels"), kwargs.get("logits_to_keep")
        if labels is not None:  # TRL >= 1.14: the completion tokens are the labelled ones
            completion = labels != -100
        elif isinstance(keep, int) and keep > 1:  # TRL 1.12: logits_to_keep = completion length + 1
            completion = torch.zeros_like(mask)
            completion[:, -(keep - 1) :] = True
        else:
            completion = mask
        self.context = (ids.cpu(), mask.cpu(), (completion & mask).cpu(), torch.is_grad_enabled())

    def _capture(self, logits: torch.Tensor) -> None:
        if self.context is not None:  # outside a full forward (e.g. checkpointing's recompute): not ours
            self.captured.append(logits.detach().topk(self.top_k, dim=-1).indices.cpu())

    def _end(self, module: nn.Module, args: tuple, output: Any) -> None:
        if self.context is None or len(self.captured) != len(self.routers):
            self.context = None
            return
        ids, mask, completion, grad = self.context
        topk = torch.stack([c.view(*ids.shape, -1) for c in self.captured], dim=2)  # (B, L, layers, k)
        self.context, self.captured = None, []
        if not grad:  # a no-grad full forward: the old-policy pass (the first one per sequence since training)
            if self.trained_since_store:
                self.old, self.trained_since_store = {}, False
            for row, m in enumerate(mask):
                self.old.setdefault(ids[row][m].numpy().tobytes(), topk[row][m])
            return
        self.trained_since_store = True
        flat = topk[mask]  # (tokens, layers, k)
        for layer in range(flat.shape[1]):
            self.load[layer] += torch.bincount(flat[:, layer].flatten(), minlength=self.load.shape[1]).float()
        for row, m in enumerate(mask):
            old = self.old.get(ids[row][m].numpy().tobytes())
            if old is not None:
                self.counts += torch.tensor(routing_change(old, topk[row][m], completion[row][m]))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        counts, load = self.counts, self.load
        if self.reduce is not None:
            counts, load = self.reduce(counts.clone(), reduction="sum"), self.reduce(load.clone(), reduction="sum")
        if counts[1] > 0:
            self.metrics["moe/routing_change_frac"].append(float(counts[0] / counts[1]))
        if load.sum() > 0:
            self.metrics["moe/max_expert_load"].append(float((load / load.sum(-1, keepdim=True)).max()))
        self.counts, self.load = torch.zeros_like(self.counts), torch.zeros_like(self.load)

    def remove(self) -> None:
        """Unregister every hook."""
        for handle in self.handles:
            handle.remove()


def attach_moe_monitor(trainer: Any) -> MoERoutingMonitor | None:
    """For an MoE policy: guard its router logits and add a :class:`MoERoutingMonitor` (returned; None for a dense
    model). Call on a built ``GRPOTrainer``, after its reference model exists, so that the hooks stay on the policy."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    if not router_modules(model):
        return None
    guard_router_logits(model)
    monitor = MoERoutingMonitor(model, trainer._metrics["train"], trainer.accelerator.reduce)
    trainer.add_callback(monitor)
    return monitor
