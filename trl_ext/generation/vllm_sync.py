"""Weight sync from the policy to a vLLM engine that works wherever vLLM runs, its CPU build included.

TRL's colocate sync loads one parameter at a time through each parameter's ``weight_loader``; vLLM's CPU platform
repacks every linear weight after loading and leaves an empty parameter behind, so the first sync dies with
``'Parameter' object has no attribute 'weight_loader'``. There :class:`ReloadingVLLMGeneration` runs vLLM's layer-wise
reload of TRL's ``_iter_named_params`` (PEFT merge, DeepSpeed and FSDP gathering stay TRL's) plus
:func:`refresh_tied_layers`, since a tied LM head receives no weights of its own and keeps the packed old embedding;
elsewhere TRL's own sync runs.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Iterator
from typing import Any

import torch
from trl.generation.vllm_generation import VLLMGeneration

from trl_ext.generation import vllm_lora, vllm_setup
from trl_ext.generation.vllm_setup import engine_model_runner

logger = logging.getLogger(__name__)

RELOAD = "layer-wise reload"
PER_PARAMETER = "per-parameter load_weights (TRL)"


def platform_repacks_weights() -> bool:
    """Whether vLLM's platform repacks linear weights after loading (CPU), out of reach of TRL's ``load_weights``."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def restore_set_num_threads() -> bool:
    """Put back torch's ``set_num_threads`` where a colocated CPU engine made it a no-op (``CPUWorker.init_device``,
    meant for its own workers), so the thread count stays the user's; returns whether it had been replaced."""
    if torch.set_num_threads is torch._C.set_num_threads:
        return False
    torch.set_num_threads = torch._C.set_num_threads
    return True


def tied_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The layers of ``model`` holding a parameter that another layer holds too (a tied LM head and its embedding),
    each with a ``quant_method`` whose post-load processing may keep a derived copy of that parameter."""
    owners: dict[int, list[torch.nn.Module]] = {}
    for module in model.modules():
        for param in module.parameters(recurse=False):
            owners.setdefault(id(param), []).append(module)
    shared = [module for modules in owners.values() if len(modules) > 1 for module in modules]
    return list({id(m): m for m in shared if getattr(m, "quant_method", None) is not None}.values())


@torch.no_grad()
def refresh_tied_layers(model: torch.nn.Module) -> int:
    """Re-run the post-load processing of every full-weight layer of :func:`tied_layers`, so that what its kernel
    reads (on CPU, a tied LM head's packed copy) is the shared weight as it is now; returns how many were refreshed."""
    full = [layer for layer in tied_layers(model) if isinstance(getattr(layer, "weight", None), torch.Tensor)]
    full = [layer for layer in full if layer.weight.numel() > 0]
    for layer in full:
        layer.quant_method.process_weights_after_loading(layer)
    return len(full)


class ReloadingVLLMGeneration(VLLMGeneration):
    """TRL's ``VLLMGeneration`` with the module docstring's sync, over the state of TRL's object (:meth:`adopt`: no
    second engine). ``route``: ``RELOAD``, ``PER_PARAMETER`` or ``vllm_lora.ADAPTER``; ``sync_seconds``: the time in
    :meth:`sync_weights` (TRL's profiling only reaches wandb / mlflow)."""

    route: str
    adapter: vllm_lora.AdapterSync | None = None
    sync_seconds: float = 0.0

    @classmethod
    def adopt(cls, generation: VLLMGeneration, repacks: bool | None = None) -> ReloadingVLLMGeneration:
        """This class over the state of ``generation`` (the same engine, client and settings: the attribute dict is
        shared, not copied), the route chosen by the platform (``repacks``: :func:`platform_repacks_weights`)."""
        adopted = cls.__new__(cls)
        adopted.__dict__ = generation.__dict__
        repacks = generation.mode == "colocate" and (platform_repacks_weights() if repacks is None else repacks)
        adopted.route = RELOAD if repacks else PER_PARAMETER
        return adopted

    def sync_weights(self) -> None:
        """Push the policy into the engine by ``route``, then reset the prefix cache (computed by the old weights)."""
        started = time.perf_counter()
        if self.adapter is not None:
            self.adapter.sync(self)
        elif self.route != RELOAD:
            super().sync_weights()
        else:
            if self.enable_sleep_mode:  # TRL's wake-up before loading (a no-op warning on vLLM's CPU build)
                self.llm.wake_up(tags=["weights"])
                self._llm_weights_sleeping = False
            runner = engine_model_runner(self.llm)
            weights = self._iter_named_params()
            try:
                runner.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
            finally:
                _drain(weights)  # TRL's iterator unmerges a PEFT adapter only once it has been read to the end
            refresh_tied_layers(runner.get_model())
            self.llm.reset_prefix_cache()
        self.sync_seconds += time.perf_counter() - started


def _drain(weights: Iterator[Any]) -> None:
    """Exhaust ``weights`` so that TRL's generator reaches its final ``model.unmerge_adapter()`` (PEFT)."""
    collections.deque(weights, maxlen=0)


def adopt_for_trainer(trainer: Any) -> None:
    """Put :class:`ReloadingVLLMGeneration` in place of a vLLM ``trainer``'s TRL object, with vLLM's
    ``generation_kwargs``, adapter sync when ``vllm_lora_sync="adapter"`` and torch's ``set_num_threads`` restored."""
    generation = getattr(trainer, "vllm_generation", None)
    if generation is None or isinstance(generation, ReloadingVLLMGeneration):
        return
    adopted = ReloadingVLLMGeneration.adopt(generation)
    adopted.generation_kwargs = vllm_setup.vllm_generation_kwargs(trainer.args, generation.generation_kwargs)
    if getattr(trainer.args, "vllm_lora_sync", "merge") == "adapter":
        adopted.adapter = vllm_lora.AdapterSync.start(adopted)
        adopted.route = vllm_lora.ADAPTER
    if generation.mode == "colocate":
        restore_set_num_threads()
    trainer.vllm_generation = adopted
    logger.info(f"vLLM weight sync: {adopted.route}.")
