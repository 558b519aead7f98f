"""Adapter-only LoRA sync (``vllm_lora_sync="adapter"``, docs/VLLM.md): after each optimizer step vLLM gets only the
LoRA adapter, as a new ``LoRARequest``, instead of TRL's merge, send every weight, unmerge. vLLM 0.31 loads adapters
from a folder only, so it is written to a temporary one (server mode: the file weight sync's folder, seen by both).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

from trl_ext.errors import UserError
from trl_ext.generation.vllm_setup import engine_model_runner

ADAPTER = "LoRA adapter only"
NAME = "trl-ext-adapter"
#: vLLM's accepted ``max_lora_rank`` values (``vllm.config.lora.MaxLoRARanks``)
RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: The keyword arguments of TRL's colocated ``LLM(...)`` (``VLLMGeneration._init_vllm``), rebuilt with LoRA here
TRL_ENGINE_ARGS = (
    "model", "tensor_parallel_size", "gpu_memory_utilization", "max_model_len", "max_num_seqs", "enable_sleep_mode",
    "model_impl", "distributed_executor_backend", "seed", "max_num_batched_tokens", "logprobs_mode", "quantization",
    "trust_remote_code",
)  # fmt: skip


def check_adapter(peft_config: Any, serveable: set[str] | None = None, sleep: bool = False) -> None:
    """Raise a ``UserError`` naming the fix for what adapter sync cannot serve (``serveable``: engine modules)."""
    targets = getattr(peft_config, "target_modules", None) or ()
    targets = {targets} if isinstance(targets, str) else set(targets)
    unserved = sorted(targets - serveable) if serveable is not None and "all-linear" not in targets else []
    problems = [
        (type(peft_config).__name__ != "LoraConfig", "needs a LoRA model: pass peft_config=LoraConfig(...)"),
        (getattr(peft_config, "use_dora", False), "vLLM does not serve DoRA: set use_dora=False"),
        (getattr(peft_config, "modules_to_save", None), "vLLM's adapters cannot carry modules_to_save: drop them"),
        (getattr(peft_config, "bias", "none") != "none", "vLLM's adapters carry no bias: set bias='none'"),
        (getattr(peft_config, "r", 0) > RANKS[-1], f"vLLM's largest rank is {RANKS[-1]}"),
        (unserved, f"vLLM cannot serve LoRA on {unserved} here (it can on {sorted(serveable or ())}): target those"),
        (sleep, "sleep mode discards the base weights, never sent again: set vllm_enable_sleep_mode=False"),
    ]
    for found, problem in problems:
        if found:
            raise UserError(f"vllm_lora_sync='adapter': {problem}; or set vllm_lora_sync='merge' (TRL's merge-sync).")


def serveable_modules(engine_model: Any) -> set[str]:
    """The checkpoint module names the engine accepts LoRA for (a packed ``qkv_proj`` stands for ``q_proj`` ...)."""
    from vllm.lora.utils import get_supported_lora_modules

    packed = getattr(engine_model, "packed_modules_mapping", {}) or {}
    return {name for module in get_supported_lora_modules(engine_model) for name in packed.get(module, [module])}


def max_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds ``rank`` (:func:`check_adapter` refuses above 512)."""
    return next(value for value in RANKS if value >= rank)


class AdapterLLM:
    """TRL's colocated ``vllm.LLM`` whose ``generate`` carries the current adapter's ``LoRARequest``."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.lora_request: Any = None

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        return self.llm.generate(*args, lora_request=self.lora_request, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)


@dataclass
class AdapterSync:
    """Writes the adapter to ``folder`` and hands it to the engine as version ``version`` (module docstring)."""

    folder: str
    version: int = 0

    @classmethod
    def start(cls, generation: Any) -> AdapterSync:
        """Check the trainer's LoRA config and, in colocate mode, rebuild TRL's engine with LoRA enabled."""
        from peft import PeftModel

        model = generation.model
        peft_config = model.peft_config.get("default") if isinstance(model, PeftModel) else None
        if generation.mode != "colocate":
            check_adapter(peft_config)  # the server checks target modules when it loads the adapter
            client = getattr(generation, "vllm_client", None)
            folder = getattr(client, "sync_dir", None) or os.environ.get("TRL_EXT_VLLM_SYNC_DIR")
            return cls(tempfile.mkdtemp(prefix="trl-ext-adapter-", dir=folder))
        engine_model = engine_model_runner(generation.llm).get_model()
        check_adapter(peft_config, serveable_modules(engine_model), generation.enable_sleep_mode)
        generation.llm = AdapterLLM(build_lora_engine(generation, max_lora_rank(peft_config.r)))
        return cls(tempfile.mkdtemp(prefix="trl-ext-adapter-"))

    def sync(self, generation: Any) -> None:
        """Write the adapter and have the engine serve it under a new name and id; the previous one is dropped."""
        previous = os.path.join(self.folder, f"v{self.version}")
        self.version += 1
        path = os.path.join(self.folder, f"v{self.version}")
        name = f"{NAME}-v{self.version}"
        if generation.mode == "colocate":
            from vllm.lora.request import LoRARequest

            generation.model.save_pretrained(path)
            engine = generation.llm
            request = LoRARequest(name, self.version, path)
            engine.llm_engine.add_lora(request)
            if engine.lora_request is not None:
                engine.llm_engine.remove_lora(engine.lora_request.lora_int_id)
            engine.lora_request = request
            engine.reset_prefix_cache()
        elif generation.accelerator.is_main_process:
            client = generation.vllm_client
            if self.version == 1:  # the server's base may be another run's: send the policy's base once
                client.update_named_params(*_base_weights(generation.model))
            generation.model.save_pretrained(path)
            _post(client, "/v1/load_lora_adapter", lora_name=name, lora_path=os.path.abspath(path))
            if client.model.startswith(NAME):
                _post(client, "/v1/unload_lora_adapter", lora_name=client.model)
            client.model = name
            client.reset_prefix_cache()
        shutil.rmtree(previous, ignore_errors=True)


def _base_weights(model: Any) -> tuple[list[tuple[str, str, list[int]]], Any]:
    """TRL's weight announcement and stream of a PEFT model's base (its names for vLLM, the adapter left out)."""
    named = [(name.removeprefix("base_model.model.").replace(".base_layer", ""), param.data)
             for name, param in model.named_parameters() if model.prefix not in name]  # fmt: skip
    return [(n, str(t.dtype).removeprefix("torch."), list(t.shape)) for n, t in named], iter(named)


def _post(client: Any, route: str, **payload: str) -> None:
    response = client.session.post(f"{client.base_url}{route}", json=payload)
    if response.status_code != 200:
        raise RuntimeError(
            f"{route} failed ({response.status_code}: {response.text[:300]}). Start the server with --enable-lora "
            "--max-lora-rank <rank> and VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 (vllm_server.serve_command(lora_rank=...))."
        )


def build_lora_engine(generation: Any, rank: int) -> Any:
    """TRL's colocated engine, released, then rebuilt with its arguments plus LoRA (one adapter, up to ``rank``)."""
    import gc

    from vllm import LLM

    quantization = generation.llm.llm_engine.vllm_config.model_config.quantization
    generation.llm = None
    gc.collect()
    arguments = dict(
        model=generation.model.name_or_path, tensor_parallel_size=generation.tensor_parallel_size,
        gpu_memory_utilization=generation.gpu_memory_utilization, max_model_len=generation.max_model_length,
        max_num_seqs=generation.max_num_seqs, enable_sleep_mode=False, model_impl=generation.model_impl,
        distributed_executor_backend="external_launcher",
        seed=generation.accelerator.process_index // generation.tensor_parallel_size, max_num_batched_tokens=4096,
        logprobs_mode="processed_logprobs", quantization=quantization, trust_remote_code=generation.trust_remote_code,
    )  # fmt: skip
    assert tuple(arguments) == TRL_ENGINE_ARGS
    return LLM(**arguments, enable_lora=True, max_lora_rank=rank, max_loras=1)
