"""Drop-in trainers of the GRPO family: TRL's ``GRPOTrainer`` plus one small mixin each.

All take exactly the arguments of ``trl.GRPOTrainer``. The algorithm lives in the config (``trl_ext.presets``); a
trainer class exists only where behaviour changes. Every one of them checks its inputs at construction, guards the
reward functions, stops on a non-finite loss, writes atomic checkpoints and resumes exactly
(``trl_ext.reliability``).

- ``GRPOTrainer``: TRL's trainer plus dynamic sampling (off unless ``args.dynamic_sampling``).
- ``DAPOTrainer``: defaults to ``DAPOConfig`` and adds DAPO's soft overlong punishment (Eq. 13, TRL's
  ``get_soft_overlong_punishment``) to the reward functions when ``args.soft_overlong_punishment``.
- ``GSPOTrainer``: defaults to ``GSPOConfig``; logs GSPO's sequence-level clip fractions under ``gspo/*``; with
  ``args.gspo_token`` it builds a ``GSPOTokenTrainer``, composed over TRL's ``trl.experimental.gspo_token``.
"""

from __future__ import annotations

import copy
import logging
import os
from typing import Any

import trl

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # GSPO-token is deliberately TRL's experimental trainer
from trl.experimental.gspo_token import GRPOTrainer as _TRLGSPOTokenTrainer
from trl.rewards import get_soft_overlong_punishment

from trl_ext.dynamic_sampling import DynamicSamplingMixin
from trl_ext.presets import DAPOConfig, GRPOFamilyConfig, GSPOConfig
from trl_ext.reliability import GRPOReliabilityMixin

logger = logging.getLogger(__name__)


def _model_name(model: Any) -> str:
    if isinstance(model, str):
        return model.split("/")[-1]
    return getattr(getattr(model, "config", None), "_name_or_path", "model").split("/")[-1] or "model"


class GRPOTrainer(GRPOReliabilityMixin, DynamicSamplingMixin, trl.GRPOTrainer):
    """``trl.GRPOTrainer`` with DAPO dynamic sampling available to any config (``GRPOFamilyConfig`` fields), and the
    reliability layer (construction checks, guarded rewards, atomic checkpoints, exact resume)."""

    _default_config: type[GRPOFamilyConfig] = GRPOFamilyConfig
    _default_suffix = "GRPO"

    def __init__(self, model: Any, reward_funcs: Any, args: trl.GRPOConfig | None = None, *rest: Any, **kw: Any):
        if args is None:
            args = self._default_config(output_dir=f"{_model_name(model)}-{self._default_suffix}")
        super().__init__(model, reward_funcs, args, *rest, **kw)


class DAPOTrainer(GRPOTrainer):
    """DAPO (arXiv 2503.14476): clip-higher, token-level loss and dynamic sampling come from ``DAPOConfig``; this
    class adds the soft overlong punishment (Eq. 13) as one more reward function with weight
    ``overlong_penalty_factor``, logged by TRL as ``rewards/soft_overlong_punishment_reward/mean``."""

    _default_config = DAPOConfig
    _default_suffix = "DAPO"
    _tag_names = ["trl", "trl-ext", "dapo"]
    _name = "DAPO"
    _paper = {
        "title": "DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
        "id": "2503.14476",
        "citation": "@article{yu2025dapo,\n    title  = {{DAPO: An Open-Source LLM Reinforcement Learning System at "
        "Scale}},\n    author = {Qiying Yu and others},\n    year   = 2025,\n    eprint = {arXiv:2503.14476},\n}",
    }

    def __init__(self, model: Any, reward_funcs: Any, args: trl.GRPOConfig | None = None, *rest: Any, **kw: Any):
        if args is None:
            args = DAPOConfig(output_dir=f"{_model_name(model)}-DAPO")
        elif not isinstance(args, DAPOConfig):
            logger.warning(
                f"DAPOTrainer got a {type(args).__name__}, not a DAPOConfig: training follows that config as given "
                "(no soft overlong punishment; dynamic sampling only if its fields say so). Use trl_ext.DAPOConfig "
                "for DAPO's defaults."
            )
        if getattr(args, "soft_overlong_punishment", False):
            reward_funcs, args = self._with_overlong_reward(reward_funcs, args)
        super().__init__(model, reward_funcs, args, *rest, **kw)

    @staticmethod
    def _with_overlong_reward(reward_funcs: Any, args: DAPOConfig) -> tuple[list, DAPOConfig]:
        funcs = list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]
        overlong = get_soft_overlong_punishment(args.max_completion_length, args.overlong_buffer_len)
        if args.reward_weights is not None and len(args.reward_weights) != len(funcs):
            raise ValueError(
                f"reward_weights has {len(args.reward_weights)} values but {len(funcs)} reward functions were given "
                "(DAPOTrainer appends the overlong reward itself). Give one weight per reward function you pass."
            )
        weights = list(args.reward_weights) if args.reward_weights is not None else [1.0] * len(funcs)
        args = copy.copy(args)  # never mutate the caller's config: it may build another trainer
        args.reward_weights = [*weights, args.overlong_penalty_factor]
        return [*funcs, overlong], args


class GSPOTrainer(GRPOTrainer):
    """GSPO (arXiv 2507.18071): the sequence-level ratio and its clipping come from ``GSPOConfig``
    (``importance_sampling_level="sequence"``, TRL's implementation of Eq. 7). TRL reports clip fractions per
    sequence when the ratio is sequence-level; this class also logs them as ``gspo/seq_clip_frac_{low,high,region}``
    so GSPO dashboards do not depend on that detail. ``GSPOConfig(gspo_token=True)`` returns a ``GSPOTokenTrainer``.
    """

    _default_config = GSPOConfig
    _default_suffix = "GSPO"
    _tag_names = ["trl", "trl-ext", "gspo"]
    _name = "GSPO"
    _paper = {
        "title": "Group Sequence Policy Optimization",
        "id": "2507.18071",
        "citation": "@article{zheng2025gspo,\n    title  = {{Group Sequence Policy Optimization}},\n    author = "
        "{Chujie Zheng and others},\n    year   = 2025,\n    eprint = {arXiv:2507.18071},\n}",
    }

    def __new__(cls, model: Any = None, reward_funcs: Any = None, args: Any = None, *rest: Any, **kw: Any):
        if cls is GSPOTrainer and getattr(args, "gspo_token", False):
            return super().__new__(GSPOTokenTrainer)
        return super().__new__(cls)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        # TRL averages self._metrics into the logs inside its own log(); alias the per-sequence clip fractions there.
        if self.args.importance_sampling_level in ("sequence", "sequence_token"):
            metrics = self._metrics["train" if self.model.training else "eval"]
            for side in ("low", "high", "region"):
                key = f"clip_ratio/{side}_mean"
                if key in metrics:
                    metrics[f"gspo/seq_clip_frac_{side}"] = list(metrics[key])
        super().log(logs, start_time)


class GSPOTokenTrainer(GSPOTrainer, _TRLGSPOTokenTrainer):
    """GSPO-token (arXiv 2507.18071, Eq. 13): s_{i,t} = sg[s_i] * pi(o_t) / sg[pi(o_t)], through TRL's
    ``trl.experimental.gspo_token.GRPOTrainer`` (``importance_sampling_level="sequence_token"``), with dynamic
    sampling and ``gspo/*`` logging from this package."""

    def __init__(self, model: Any, reward_funcs: Any, args: trl.GRPOConfig | None = None, *rest: Any, **kw: Any):
        if args is None:
            args = GSPOConfig(output_dir=f"{_model_name(model)}-GSPO-token", gspo_token=True)
        if args.importance_sampling_level != "sequence_token":
            raise ValueError(
                f"GSPOTokenTrainer needs importance_sampling_level='sequence_token', got "
                f"{args.importance_sampling_level!r}. Use GSPOConfig(gspo_token=True)."
            )
        super().__init__(model, reward_funcs, args, *rest, **kw)


def trainer_class_for(args: trl.GRPOConfig) -> type[GRPOTrainer]:
    """The trainer class matching a config (used by the recipes)."""
    if isinstance(args, DAPOConfig):
        return DAPOTrainer
    if isinstance(args, GSPOConfig):
        return GSPOTokenTrainer if args.gspo_token else GSPOTrainer
    return GRPOTrainer
