"""What overlapped generation (``trl_ext.grpo.async_rollout``) needs: the config's rules, the trainer's, and the bias
of vLLM's importance-sampling correction under truncated sampling (TRL issue #6789)."""

from __future__ import annotations

import logging
from typing import Any

from transformers import ProcessorMixin

logger = logging.getLogger(__name__)


def truncated_sampling(args: Any) -> list[str]:
    """The settings of ``args`` or ``generation_kwargs`` that truncate sampling (top-p < 1, top-k > 0, min-p > 0)."""
    extra = getattr(args, "generation_kwargs", None) or {}
    top_p = extra.get("top_p", getattr(args, "top_p", 1.0))
    top_k = extra.get("top_k", getattr(args, "top_k", 0))
    min_p = extra.get("min_p", getattr(args, "min_p", 0.0))
    found = []
    if top_p is not None and top_p < 1.0:
        found.append(f"top_p={top_p}")
    if top_k is not None and top_k > 0:
        found.append(f"top_k={top_k}")
    if min_p is not None and min_p > 0.0:
        found.append(f"min_p={min_p}")
    return found


def warn_truncated_importance_sampling(args: Any) -> bool:
    """Warn when vLLM's importance-sampling correction meets truncated sampling, which biases the ratio (TRL issue
    #6789, the warning says why); True if it warned."""
    if not (getattr(args, "use_vllm", False) and getattr(args, "vllm_importance_sampling_correction", False)):
        return False
    found = truncated_sampling(args)
    if not found:
        return False
    logger.warning(
        f"vllm_importance_sampling_correction=True with truncated sampling ({', '.join(found)}): vLLM's log-probs "
        "are those of the truncated, renormalized distribution and the trainer's are of the full one, so the "
        "importance ratio is biased (TRL issue #6789, open). Sample with top_p=1.0, top_k=0, min_p=0.0, or set "
        "vllm_importance_sampling_correction=False; watch sampling/importance_sampling_ratio/* and "
        "sampling/sampling_logp_difference/* (the health monitor alerts on them)."
    )
    return True


def check_async_config(args: Any) -> None:
    """The config-level rules of ``async_generation`` (called from ``GRPOFamilyConfig.__post_init__``)."""
    if not getattr(args, "async_generation", False):
        return
    if not getattr(args, "use_vllm", False):
        raise ValueError(
            "async_generation=True overlaps generation only where it runs on other devices (TRL's vLLM server "
            "mode); with use_vllm=False the policy generates with transformers on the training devices. Set "
            "use_vllm=True and vllm_mode='server' (a `trl vllm-serve` process), or async_generation=False."
        )
    if getattr(args, "vllm_mode", "server") != "server":
        raise ValueError(
            f"async_generation=True with vllm_mode={args.vllm_mode!r}: a colocated engine shares the training GPUs "
            "and process, so colocate mode keeps the synchronous path. Set vllm_mode='server' (start `trl "
            "vllm-serve` on other GPUs), or async_generation=False."
        )
    if not getattr(args, "vllm_importance_sampling_correction", False):
        raise ValueError(
            "async_generation=True with vllm_importance_sampling_correction=False: nothing would correct the "
            "one-step-old rollout (TRL's correction weighs it by pi_current / pi_generating). Set "
            "vllm_importance_sampling_correction=True (TRL's default)."
        )
    if int(getattr(args, "max_staleness", 1)) < 1:
        raise ValueError(
            f"max_staleness={args.max_staleness}: a rollout generated while the previous batch trains is at least 1 "
            "generation batch old. Set max_staleness >= 1 (1: verl's one-step off-policy), or async_generation=False."
        )
    level = getattr(args, "importance_sampling_level", "token")
    if level == "sequence" or getattr(args, "gspo_token", False):
        logger.warning(
            "async_generation=True with a sequence-level ratio (GSPO): GSPO's clip band (3e-4 / 4e-4) and stability "
            "claim are for on-policy rollouts, and this one is a generation batch old. Prefer "
            "vllm_importance_sampling_mode='token_truncate' and watch sampling/importance_sampling_ratio/*."
        )


def check_async_trainer(trainer: Any) -> None:
    """The trainer-level rules of ``async_generation`` (what only the built trainer knows)."""
    problems = []
    if getattr(trainer, "tools", None):
        problems.append("tools (the tool loop calls the engine several times per round)")
    if getattr(trainer, "rollout_func", None) is not None:
        problems.append("rollout_func (a custom rollout owns the engine)")
    if getattr(trainer, "environment_factories", None) is not None or getattr(trainer, "environments", None):
        problems.append("environment_factory (environments own the prompts)")
    if isinstance(trainer.processing_class, ProcessorMixin):
        problems.append("a vision-language model (multimodal prompts)")
    from accelerate.utils import is_peft_model

    if is_peft_model(trainer.model):
        problems.append("a PEFT model (its reference pass cannot be deferred)")
    dataset = trainer.train_dataset
    if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        problems.append(
            f"a {type(dataset).__name__} train_dataset (prompts are drawn by index from a datasets.Dataset)"
        )
    if problems:
        raise ValueError(
            f"async_generation=True does not support {'; '.join(problems)}. Set async_generation=False for this run."
        )
    args, world = trainer.args, trainer.accelerator.num_processes
    groups = args.generation_batch_size // trainer.num_generations
    if groups % world:
        raise ValueError(
            f"async_generation=True draws whole groups per process: the generation batch holds {groups} groups of "
            f"num_generations={trainer.num_generations}, which does not split over {world} processes. Make "
            f"generation_batch_size / num_generations a multiple of {world} (e.g. raise per_device_train_batch_size)."
        )
