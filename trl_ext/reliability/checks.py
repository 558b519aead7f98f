"""Checks that run before training starts, so that a misconfigured run fails in seconds, not at step 5,000; each
names the field, the value and the fix. GRPO-family trainers run them at construction (``check_grpo_arguments``),
recipes the rest.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
from collections.abc import Sequence
from typing import Any

import torch

from trl_ext.errors import did_you_mean
from trl_ext.reliability.reward_guard import guard_reward_funcs, reward_columns

_PROMPT_SAMPLE = 256  # prompts tokenized to estimate the longest prompt (cheap at any dataset size)


def _columns(dataset: Any) -> list[str] | None:
    columns = getattr(dataset, "column_names", None)
    return list(columns) if isinstance(columns, list | tuple) else None


def check_prompt_column(dataset: Any, name: str = "train_dataset", environment_factory: Any = None) -> None:
    """The GRPO family reads prompts from a ``prompt`` column; as in ``trl.GRPOTrainer``, none is needed with an
    ``environment_factory`` (each environment's ``reset()`` supplies the prompt)."""
    columns = _columns(dataset)
    if environment_factory is None and columns is not None and "prompt" not in columns:
        raise ValueError(
            f"{name} has no 'prompt' column (columns: {columns}). Rename the column that holds the prompts, e.g. "
            f"dataset.rename_column({_guess_prompt(columns)!r}, 'prompt'), or map the layout with "
            f"trl_ext.data.load_task_data (recipes: --dataset_prompt_column {_guess_prompt(columns)})."
        )


def check_dataset_size(dataset: Any, args: Any, name: str = "train_dataset") -> None:
    """TRL's ``RepeatSampler`` draws ``generation_batch_size / num_generations`` distinct prompts per generation batch
    and drops an incomplete one: a smaller map-style dataset would train zero steps without a word."""
    if args is None or dataset is None or not hasattr(dataset, "__len__") or _columns(dataset) is None:
        return
    num_generations = getattr(args, "num_generations", None)
    batch = getattr(args, "generation_batch_size", None)
    if not num_generations or not batch:
        return
    needed = batch // num_generations
    if len(dataset) < needed:
        steps = getattr(args, "steps_per_generation", None)
        raise ValueError(
            f"{name} has {len(dataset)} prompts, but one generation batch samples {needed} distinct prompts "
            f"(generation_batch_size={batch} / num_generations={num_generations}; steps_per_generation={steps}), so "
            "nothing would train. Add prompts, or lower num_minibatches / steps_per_generation / "
            f"per_device_train_batch_size so that a generation batch needs at most {len(dataset)} prompts."
        )


def _guess_prompt(columns: Sequence[str]) -> str:
    candidates = ("question", "problem", "query", "instruction", "input", "text", "messages")
    return next((c for c in candidates if c in columns), columns[0] if columns else "<column>")


def check_reward_columns(
    reward_funcs: Any, dataset: Any, name: str = "train_dataset", rollout_func: Any = None
) -> None:
    """Every column a reward function reads must be in the training set; with a ``rollout_func`` (extra fields known
    only at run time) the check is left to the first call (``GuardedReward``)."""
    columns = _columns(dataset)
    if columns is None or rollout_func is not None:
        return
    for func in reward_funcs if isinstance(reward_funcs, list | tuple) else [reward_funcs]:
        if isinstance(func, str) or not callable(func) or hasattr(func, "config"):  # reward models read text only
            continue
        missing = [c for c in reward_columns(func) or [] if c not in columns]
        if missing:
            func_name = getattr(func, "__name__", type(func).__name__)
            column = missing[0]
            close = difflib.get_close_matches(column, columns, n=1, cutoff=0.6)
            fix = (
                f"Did you mean {close[0]!r}? Rename the parameter to {close[0]!r}, or the column with "
                f"dataset.rename_column({close[0]!r}, {column!r})."
                if close
                else f"Add a {column!r} column to the dataset (or rename the column that holds it, "
                f"dataset.rename_column(<old>, {column!r}))."
            )
            raise ValueError(
                f"reward function {func_name!r} reads the column {column!r}, but {name} has no such column (columns: "
                f"{columns}). {fix} If the argument is optional, give {column!r} a default value."
            )


def tokenizer_of(processing_class: Any) -> Any:
    """The tokenizer of a trainer's ``processing_class`` (a processor's ``tokenizer``, or the tokenizer itself)."""
    return getattr(processing_class, "tokenizer", processing_class)


def check_tokenizer(tokenizer: Any) -> None:
    """TRL pads with the pad token, else the EOS token; with neither every batch fails at the first step."""
    tokenizer = tokenizer_of(tokenizer)
    if tokenizer is None:
        return
    if getattr(tokenizer, "pad_token", None) is None and getattr(tokenizer, "eos_token", None) is None:
        raise ValueError(
            f"processing_class ({type(tokenizer).__name__}) has neither a pad_token nor an eos_token, so batches "
            "cannot be padded and completions never end. Set one before building the trainer: "
            "tokenizer.pad_token = tokenizer.eos_token, or tokenizer.add_special_tokens({'pad_token': '<pad>'}) and "
            "model.resize_token_embeddings(len(tokenizer))."
        )


def check_tools(tools: Any, environment_factory: Any, processing_class: Any) -> None:
    """``tools=`` or an ``environment_factory`` needs a tool-rendering chat template (TRL's own check names no fix)."""
    if not (tools or environment_factory) or processing_class is None:
        return
    from trl.chat_template_utils import supports_tool_calling

    if supports_tool_calling(processing_class):
        return
    raise ValueError(
        f"tools= needs a chat template that renders tool conversations; this {type(processing_class).__name__} "
        f"{'has no chat template' if not getattr(processing_class, 'chat_template', None) else 'drops tool calls'}. "
        "For the demo, use trl_ext.demo_tools.build_tool_tokenizer() or the model of tool_warm_start(); for your own "
        "model, an instruct model whose template supports tools (Qwen2.5, Qwen3, Llama 3.1, ...) or set "
        "tokenizer.chat_template and tokenizer.response_template (docs/TOOLS.md)."
    )


def context_length(model_config: Any) -> int | None:
    """The model's context in tokens (``max_position_embeddings`` or its equivalent), or None when the config has none."""
    if model_config is None:
        return None
    text_config = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(text_config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def longest_prompt(dataset: Any, tokenizer: Any, sample: int = _PROMPT_SAMPLE) -> tuple[int, int] | None:
    """``(tokens, row)`` of the longest of the first ``sample`` prompts (text or chat), or None if unknown."""
    tokenizer = tokenizer_of(tokenizer)
    if tokenizer is None or dataset is None or not hasattr(dataset, "__len__") or not hasattr(dataset, "select"):
        return None
    try:
        prompts = dataset.select(range(min(sample, len(dataset))))["prompt"]
    except Exception:  # noqa: BLE001 - no prompt column or exotic dataset: other checks report it
        return None
    best = None
    for row, prompt in enumerate(prompts):
        try:
            if isinstance(prompt, str):
                ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            else:
                ids = tokenizer.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True)
                # transformers 5 returns a BatchEncoding (a UserDict, not a dict): its len() is its number of keys
                ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        except Exception:  # noqa: BLE001 - e.g. no chat template: TRL reports that itself
            return None
        if best is None or len(ids) > best[0]:
            best = (len(ids), row)
    return best


def check_context_length(model_config: Any, args: Any, tokenizer: Any = None, dataset: Any = None) -> None:
    """``max_completion_length`` (plus the longest prompt seen in the first rows) must fit in the model's context:
    past ``max_position_embeddings`` learned position embeddings fail and rotary ones produce garbage."""
    context = context_length(model_config)
    max_completion_length = getattr(args, "max_completion_length", None)
    if context is None or max_completion_length is None:
        return
    if max_completion_length > context:
        raise ValueError(
            f"max_completion_length={max_completion_length} is longer than the model's context "
            f"(max_position_embeddings={context}). Set max_completion_length <= {context} minus the prompt length, "
            "or use a model with a longer context."
        )
    tokens, row = longest_prompt(dataset, tokenizer) or (0, None)
    if tokens >= context:
        raise ValueError(
            f"prompt {row} of train_dataset is {tokens} tokens long, as long as the model's whole context or longer "
            f"(max_position_embeddings={context}): no completion fits after it. Drop such prompts from the dataset "
            f"(dataset.filter: keep prompts of at most {max(context - max_completion_length, 1)} tokens), shorten "
            "the system prompt, or use a model with a longer context."
        )
    if tokens + max_completion_length > context:
        raise ValueError(
            f"prompt {row} of train_dataset is {tokens} tokens long; with max_completion_length={max_completion_length} "
            f"a sequence reaches {tokens + max_completion_length} tokens, past the model's context "
            f"(max_position_embeddings={context}). Lower max_completion_length to {context - tokens} or less, or drop "
            f"prompts longer than {context - max_completion_length} tokens from the dataset (dataset.filter)."
        )


# report_to name -> (modules any one of which makes it work, the install line)
TRACKERS = {
    "tensorboard": (("tensorboard", "tensorboardX"), "pip install tensorboard"),
    "wandb": (("wandb",), 'pip install -e ".[wandb]" (in the trl-ext clone)'),
    "trackio": (("trackio",), 'pip install -e ".[trackio]" (in the trl-ext clone)'),
    "mlflow": (("mlflow",), "pip install mlflow"),
    "comet_ml": (("comet_ml",), "pip install comet_ml"),
    "clearml": (("clearml",), "pip install clearml"),
    "swanlab": (("swanlab",), "pip install swanlab"),
}


def check_report_to(report_to: Any) -> None:
    """Every tracker of ``report_to`` must be installed: transformers only fails at the first log or evaluation."""
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    for name in names:
        if name not in TRACKERS:
            continue
        modules, install = TRACKERS[name]
        if not any(importlib.util.find_spec(module) is not None for module in modules):
            raise ValueError(
                f"report_to={name!r}, but {modules[0]} is not installed here. Install it ({install}), or choose another "
                "tracker with --report_to (none: metrics.jsonl and the console only)."
            )


def check_quantization(model_args: Any) -> None:
    """``load_in_4bit`` / ``load_in_8bit`` need bitsandbytes, a CUDA GPU and LoRA (frozen quantized weights)."""
    bits = "4" if getattr(model_args, "load_in_4bit", False) else "8"
    flag = f"--load_in_{bits}bit"
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ValueError(
            f"{flag} needs bitsandbytes, which is not installed here. Install it (pip install bitsandbytes) on a "
            "machine with a CUDA GPU, or drop the flag to load full-precision weights (LoRA alone: --use_peft true)."
        )
    if not torch.cuda.is_available():
        raise ValueError(
            f"{flag}: bitsandbytes quantization needs a CUDA GPU and this machine has none. Drop the flag here "
            "(LoRA alone: --use_peft true), or run on a GPU."
        )
    if not getattr(model_args, "use_peft", False):
        raise ValueError(
            f"{flag} loads frozen {bits}-bit weights, which cannot be trained directly: add --use_peft true to "
            "train LoRA adapters over them (QLoRA)."
        )


def vllm_installed() -> bool:
    """Whether vLLM is installed (``trl_ext.generation.vllm_setup.check_vllm_setup`` says what to install)."""
    return importlib.util.find_spec("vllm") is not None


def require_ppo() -> tuple[type, type]:
    """``(PPOConfig, PPOTrainer)`` from TRL, or an ImportError saying which TRL has them."""
    try:
        from trl.experimental.ppo import PPOConfig, PPOTrainer
    except ImportError as error:
        import trl

        raise ImportError(
            f"PPO needs trl.experimental.ppo.PPOTrainer, which the installed trl=={trl.__version__} does not have (TRL "
            'removed PPO in 1.13). Install the PPO extra, which pins trl 1.12: pip install -e ".[ppo]" in the clone '
            '(or pip install "trl==1.12.0"), ideally in its own virtual environment; or train with a GRPO-family '
            "recipe (recipes/dapo.py, recipes/grpo.py)."
        ) from error
    return PPOConfig, PPOTrainer


def check_config_keys(config: str | dict[str, Any], dataclass_types: Sequence[type]) -> None:
    """Every key of a recipe's YAML file must be a field of ``dataclass_types`` (``env`` aside): a typo is an error."""
    import yaml

    path = config if isinstance(config, str) else "<config>"
    if isinstance(config, str):
        with open(config) as f:
            config = yaml.safe_load(f) or {}
    if not isinstance(config, dict):
        raise ValueError(f"config file {path} must hold a YAML mapping of field: value, not {type(config).__name__}.")
    known = {"env"}
    for cls in dataclass_types:
        known |= {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = [key for key in config if key not in known]
    if unknown:
        key = unknown[0]
        names = ", ".join(cls.__name__ for cls in dataclass_types)
        raise ValueError(
            f"config file {path}: unknown key {key!r}{' (and ' + str(unknown[1:]) + ')' if unknown[1:] else ''}."
            f"{did_you_mean(key, sorted(known))} Keys must be fields of {names}; fix the spelling or remove the line."
        )


def check_grpo_arguments(params: dict[str, Any]) -> None:
    """The construction checks of a GRPO-family trainer, on ``trl.GRPOTrainer.__init__``'s arguments bound by name
    (``inspect.signature(...).bind``); ``params["reward_funcs"]`` becomes the guarded functions (``reward_guard``)."""
    config, dataset = params.get("args"), params.get("train_dataset")
    funcs = guard_reward_funcs(
        params.get("reward_funcs"),
        errors=getattr(config, "reward_errors", "raise"),
        timeout=getattr(config, "reward_timeout", None),
    )
    check_prompt_column(dataset, environment_factory=params.get("environment_factory"))
    check_reward_columns(funcs, dataset, rollout_func=params.get("rollout_func"))
    check_dataset_size(dataset, config)
    check_tokenizer(params.get("processing_class"))
    check_tools(params.get("tools"), params.get("environment_factory"), params.get("processing_class"))
    model = params["model"]
    if not isinstance(model, str):  # fail before TRL copies the model or loads a reference model
        check_context_length(getattr(model, "config", None), config, params.get("processing_class"), dataset)
    params["reward_funcs"] = funcs


def check_built_grpo_trainer(trainer: Any, model: Any, dataset: Any) -> None:
    """What ``check_grpo_arguments`` could not see before TRL built the trainer: its tokenizer, and a model TRL
    loaded from a name."""
    check_tokenizer(trainer.processing_class)
    if isinstance(model, str):
        tokenizer = tokenizer_of(trainer.processing_class)
        check_context_length(getattr(trainer.model, "config", None), trainer.args, tokenizer, dataset)
