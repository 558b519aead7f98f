"""Loading what a recipe trains or evaluates: the policy and its tokenizer (no name: the demo's SFT warm start), a
stand-in for vLLM, and the demo's own settings (its thread count, its warm start)."""

from __future__ import annotations

import os
import re
import types
from typing import Any

import torch
from accelerate import PartialState
from peft import AutoPeftModelForCausalLM
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from trl import get_quantization_config

from trl_ext.demo import WarmStartConfig, build_model, build_tokenizer, warm_start, warm_start_sft_kwargs
from trl_ext.errors import UserError
from trl_ext.hub import check_hub_name, hub_unreachable
from trl_ext.reliability.checkpoints import list_checkpoints
from trl_ext.reliability.checks import check_quantization

MODEL_LOCAL = "a save_pretrained folder"  # what to give instead of a Hub name


def load_policy(
    model_name_or_path: str | None,
    dtype: str | None = None,
    model_args: Any = None,
    chat_template: str | None = None,
    warm_start_seed: int | None = None,
) -> tuple[PreTrainedModel, Any, str]:
    """``(model, tokenizer, path)`` from a Hub id or a folder (a LoRA run's output merged), for ``None`` the demo's
    SFT warm start (seed ``warm_start_seed``); ``load_in_4bit`` / ``8bit`` via TRL, onto this process's GPU."""
    quantization = None
    if model_args is not None and (model_args.load_in_4bit or model_args.load_in_8bit):
        check_quantization(model_args)
        quantization = {
            "quantization_config": get_quantization_config(model_args),
            "device_map": {"": PartialState().local_process_index},
        }
    path = model_name_or_path or warm_start(sft=demo_warm_start_config(warm_start_seed))
    check_model_folder(path)
    torch_dtype = "auto" if dtype in (None, "auto") else getattr(torch, dtype)
    if not os.path.isdir(path):  # a Hub name: no network answers at once, not after the Hub client's retries
        check_hub_name(f"model_name_or_path={path!r}", path, "model", MODEL_LOCAL)
    try:
        if os.path.exists(os.path.join(path, "adapter_config.json")):  # a LoRA run's output: base + adapter, merged
            model = AutoPeftModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **(quantization or {}))
            model = model.merge_and_unload() if quantization is None else model
        else:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **(quantization or {}))
        return model, load_tokenizer(model_name_or_path and path, chat_template), path
    except OSError as error:  # transformers: "We couldn't connect to 'https://huggingface.co' ..." (or offline mode)
        if os.path.isdir(path) or not re.search(r"connect|offline", str(error), re.IGNORECASE):
            raise
        raise UserError(hub_unreachable(f"model_name_or_path={path!r}", error, MODEL_LOCAL)) from error


def demo_warm_start_config(seed: int | None) -> WarmStartConfig:
    """The demo's warm-start settings with SFT seed ``seed`` (None: the default seed)."""
    return WarmStartConfig() if seed is None else WarmStartConfig(seed=seed)


def load_tokenizer(path: str | None, chat_template: str | None = None) -> Any:
    """The tokenizer saved with a model (None: the demo's) with a pad token, left padding and ``chat_template``."""
    tokenizer = build_tokenizer() if path is None else AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # generation (GRPO family, PPO, DPO mining) needs left padding
    if chat_template:
        if os.path.exists(chat_template):
            with open(chat_template) as f:
                chat_template = f.read()
        tokenizer.chat_template = chat_template
    return tokenizer


def load_for_vllm(path: str, chat_template: str | None = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for vLLM, which loads the weights: a stand-in with ``config`` and ``name_or_path``."""
    check_model_folder(path)
    config = AutoConfig.from_pretrained(path)
    return types.SimpleNamespace(config=config, name_or_path=path), load_tokenizer(path, chat_template)


def check_model_folder(path: str) -> None:
    """A local folder given as a model must hold one; for a run stopped before its final save, name its checkpoint."""
    if not os.path.isdir(path) or any(
        os.path.exists(os.path.join(path, name)) for name in ("config.json", "adapter_config.json")
    ):
        return
    checkpoints = list_checkpoints(path)
    hint = (
        f"It holds checkpoints only (the run stopped before its final save): give {checkpoints[-1][1]}"
        if checkpoints
        else "Give a folder written by save_pretrained (a run's output_dir or checkpoint-N folder) or a Hub id"
    )
    raise UserError(f"{path} holds no model (no config.json or adapter_config.json). {hint}.")


def fresh_demo_policy() -> tuple[PreTrainedModel, Any]:
    """The demo's randomly initialised model and its tokenizer (the starting point of the SFT warm start)."""
    tokenizer = build_tokenizer()
    return build_model(tokenizer), tokenizer


#: The ``SFTConfig`` fields of the demo warm start: ``recipes/sft.py``'s with no arguments (a test keeps them equal).
warm_start_sft_config = warm_start_sft_kwargs


def demo_threads(model_args: Any = None, demo: bool | None = None) -> None:
    """One intra-op thread for the demo model (no ``model_name_or_path``, or ``demo=True``) unless ``OMP_NUM_THREADS``
    is set: at 0.6M parameters threads gain nothing and thrash on a busy machine."""
    demo = model_args.model_name_or_path is None if demo is None else demo
    if demo and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)


DEMO_TRAINED = "outputs/dapo-demo"  # where `trl-ext dapo` (recipes/configs/demo/dapo/config_demo.yaml) saves its model


def demo_models() -> list[tuple[str, str]]:
    """``(name, path)`` of what ``trl-ext eval`` evaluates with no ``--models``: the demo's warm start and DAPO model."""
    models = [("demo warm start", warm_start())]
    if os.path.exists(os.path.join(DEMO_TRAINED, "config.json")):
        models.append((DEMO_TRAINED, DEMO_TRAINED))
    return models
