"""Dynamic sampling built for a trainer: the metric's reward columns, the ``DynamicSampler``, the untrained-step gate,
and the sampler's checkpointed state, so that a resumed run draws the refill prompts an uninterrupted one would."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from datasets import IterableDataset

from trl_ext.grpo.dynamic_sampling.prompts import IterablePromptStream, PromptStream
from trl_ext.grpo.dynamic_sampling.sampler import DynamicSampler
from trl_ext.grpo.dynamic_sampling.selector import PromptSelector
from trl_ext.grpo.dynamic_sampling.skip import SkipPredictor
from trl_ext.grpo.dynamic_sampling.step_gate import UntrainedStepGate
from trl_ext.rewards.shaping import is_shaping_reward

logger = logging.getLogger(__name__)

STATE_FILE = "dynamic_sampling_state.json"
_STREAM_SEED_OFFSET = 1_000_003  # keeps the refill stream independent of TRL's sampler (seeded with args.seed)


def metric_columns(reward_funcs: list, names: list[str], requested: Any) -> list[int]:
    """Indices of the reward functions whose weighted sum decides whether a group is informative."""
    marked = [is_shaping_reward(func) for func in reward_funcs]
    shaping = [name for name, is_shaping in zip(names, marked, strict=True) if is_shaping]
    if requested is None:
        # DAPO Eq. 11 filters on accuracy: shaping terms (marked, trl_ext.rewards.shaping) are left out
        columns = [i for i, is_shaping in enumerate(marked) if not is_shaping]
        return columns or list(range(len(names)))
    requested = [requested] if isinstance(requested, str) else list(requested)
    unknown = [name for name in requested if name not in names]
    if unknown or not requested:
        raise ValueError(
            f"dynamic_sampling_metric={requested} names no reward function of this trainer ({unknown} unknown). "
            f"Known reward functions: {names}. Name the task reward(s) (e.g. the accuracy reward), or leave it "
            f"unset for every reward function except the shaping ones {shaping}."
        )
    return [i for i, name in enumerate(names) if name in requested]


def dynamic_sampling_for(trainer: Any) -> tuple[DynamicSampler | None, list[int], UntrainedStepGate | None]:
    """The sampler, the metric's reward columns and the step gate (added as a callback) of ``trainer``; ``(None, [],
    None)`` when its config does not ask for dynamic sampling."""
    args = trainer.args
    if not getattr(args, "dynamic_sampling", False):
        return None, [], None
    columns = metric_columns(trainer.reward_funcs, list(trainer.reward_func_names), args.dynamic_sampling_metric)
    seed = args.seed + _STREAM_SEED_OFFSET
    dataset = trainer.train_dataset
    if isinstance(dataset, IterableDataset):
        stream = IterablePromptStream(dataset, seed=seed, shuffle=bool(getattr(trainer, "shuffle_dataset", True)))
    elif hasattr(dataset, "__len__"):
        stream = PromptStream(len(dataset), seed=seed)
    else:
        raise ValueError(
            f"dynamic_sampling=True needs a datasets.Dataset or datasets.IterableDataset train_dataset to draw refill "
            f"prompts from; got {type(dataset).__name__}. Wrap it (e.g. Dataset.from_list or "
            "IterableDataset.from_generator) or set dynamic_sampling=False."
        )
    skip = selector = None
    for name in ("dynamic_sampling_skip_predicted", "dynamic_sampling_select_prompts"):
        if getattr(args, name, False) and isinstance(dataset, IterableDataset):
            raise ValueError(
                f"{name}=True keeps a history per training-set index, which an IterableDataset does not have. Use a "
                f"datasets.Dataset, or set {name}=False."
            )
    if getattr(args, "dynamic_sampling_skip_predicted", False):
        skip = SkipPredictor(seed=seed, target=args.dynamic_sampling_skip_target)
    if getattr(args, "dynamic_sampling_select_prompts", False):
        selector = PromptSelector(
            seed=seed,
            group_size=trainer.num_generations,
            pool=args.dynamic_sampling_selection_pool,
            floor=args.dynamic_sampling_selection_floor,
            decay=args.dynamic_sampling_selection_decay,
        )
    sampler = DynamicSampler(args, trainer.num_generations, stream, skip, selector)
    gate = None
    if getattr(trainer, "is_deepspeed_enabled", False):
        logger.warning(
            "Dynamic sampling under DeepSpeed: an optimizer step whose batch is only zero-weight filler groups still "
            "applies the optimizer's momentum (the DeepSpeed engine owns the step)."
        )
    else:
        metrics = trainer._metrics["train"]
        gate = UntrainedStepGate(
            trainer.accelerator, lambda skipped: metrics["dynamic_sampling/skipped_optimizer_steps"].append(skipped)
        )
        trainer.add_callback(gate)
    return sampler, columns, gate


def save_state(sampler: DynamicSampler, folder: str) -> None:
    with open(os.path.join(folder, STATE_FILE), "w") as f:
        json.dump(sampler.state_dict(), f)


def load_state(sampler: DynamicSampler, checkpoint: str) -> None:
    path = os.path.join(checkpoint, STATE_FILE)
    if not os.path.exists(path):
        logger.warning(
            f"Resuming from {checkpoint} without {STATE_FILE}: the dynamic-sampling refill stream restarts from its "
            "beginning, so the resumed run will not reproduce an uninterrupted one exactly."
        )
        return
    with open(path) as f:
        sampler.load_state_dict(json.load(f))
