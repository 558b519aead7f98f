"""Drop-in trainers of the GRPO family: TRL's ``GRPOTrainer`` plus one small mixin each, taking exactly its arguments
(``reward_funcs`` optional: an ``environment_factory`` whose environments define ``get_reward`` may own the reward).

The algorithm lives in the config (``trl_ext.grpo.configs``); a trainer class exists only where behaviour changes
(table: ``trl_ext.grpo.presets``). Every one is ``trl_ext.reliability.Reliable`` over TRL's trainer (atomic checkpoints,
the finite-loss stop, exact resume, preemption) plus the construction checks. Nothing here imports
``trl.experimental``: TRL removes experimental modules without notice.
"""

from __future__ import annotations

import copy
import inspect
import logging
from typing import Any

import torch
import trl
from trl.rewards import get_soft_overlong_punishment

from trl_ext.errors import UserError
from trl_ext.generation import vllm_setup, vllm_sync
from trl_ext.grpo import rollout_rhythm
from trl_ext.grpo.async_checks import warn_truncated_importance_sampling
from trl_ext.grpo.configs import DAPOConfig, GRPOFamilyConfig, GSPOConfig
from trl_ext.grpo.dynamic_sampling import setup
from trl_ext.grpo.dynamic_sampling.loop import sample_informative_batch
from trl_ext.grpo.dynamic_sampling.old_logps import DeferredOldLogps
from trl_ext.grpo.gspo_token import gspo_token_old_logps
from trl_ext.grpo.moe import attach_moe_monitor
from trl_ext.reliability import checks
from trl_ext.reliability.checks import tokenizer_of
from trl_ext.reliability.reliable import Reliable
from trl_ext.reliability.unscorable import UnscorableWatch
from trl_ext.rewards.shaping import is_shaping_reward, mark_shaping
from trl_ext.scoring import combine_rewards

logger = logging.getLogger(__name__)


def _environment_factory(model: Any, args: Any, rest: tuple, kw: dict) -> Any:
    """The ``environment_factory`` argument of a ``trl.GRPOTrainer`` call (positional or keyword), or None."""
    bound = inspect.signature(trl.GRPOTrainer.__init__).bind_partial(None, model, None, args, *rest, **kw)
    return bound.arguments.get("environment_factory")


def _model_name(model: Any) -> str:
    if isinstance(model, str):
        return model.split("/")[-1]
    return getattr(getattr(model, "config", None), "_name_or_path", "model").split("/")[-1] or "model"


def _check_ratio_level(args: Any) -> None:
    """GSPO-token is ``gspo_token=True`` over the token level; TRL >= 1.14 rejects ``"sequence_token"``."""
    level = getattr(args, "importance_sampling_level", "token")
    if level == "sequence_token":
        raise ValueError(
            "importance_sampling_level='sequence_token' (GSPO-token in TRL 1.12's experimental trainer) is not a level "
            "TRL's GRPOTrainer knows (TRL >= 1.14 rejects it). Use trl_ext.GSPOConfig(gspo_token=True), which runs "
            "GSPO-token on every supported TRL release."
        )
    if getattr(args, "gspo_token", False) and getattr(args, "use_liger_kernel", False):
        raise ValueError(
            "gspo_token=True with use_liger_kernel=True: Liger's fused GRPO loss bypasses the ratio GSPO-token forms. "
            "Set use_liger_kernel=False."
        )
    if getattr(args, "gspo_token", False) and level != "token":
        raise ValueError(
            f"gspo_token=True needs importance_sampling_level='token' (GSPO-token's ratio is formed from TRL's token "
            f"level), got {level!r}. Build the config with GSPOConfig(gspo_token=True), which sets it."
        )


class GRPOTrainer(Reliable, trl.GRPOTrainer):
    """``trl.GRPOTrainer`` with DAPO dynamic sampling available to any config (``GRPOFamilyConfig`` fields) and the
    reliability layer (module docstring). A config with ``gspo_token=True`` needs ``GSPOTokenTrainer``."""

    _default_config: type[GRPOFamilyConfig] = GRPOFamilyConfig
    _default_suffix = "GRPO"
    _default_overrides: dict[str, Any] = {}
    #: Hub tags added to the model (``PreTrainedModel.add_model_tags``) besides TRL's
    model_tags: tuple[str, ...] = ("trl-ext",)
    #: whether this class overlaps generation with training (``trl_ext.grpo.async_rollout``)
    overlaps_generation = False

    def __init__(
        self, model: Any, reward_funcs: Any = None, args: trl.GRPOConfig | None = None, *rest: Any, **kw: Any
    ):
        if args is None:
            args = self._default_args(model)
        _check_ratio_level(args)
        if getattr(args, "gspo_token", False) and not isinstance(self, GSPOTokenTrainer):
            raise UserError(
                f"{type(self).__name__} got a config with gspo_token=True; GSPO-token is its own trainer: use "
                "trl_ext.GSPOTokenTrainer (or trl_ext.trainer_class_for(args), which picks it), or GSPOTrainer."
            )
        if getattr(args, "async_generation", False) and not self.overlaps_generation:
            raise UserError(
                f"{type(self).__name__} got a config with async_generation=True; overlapped generation is its own "
                f"trainer: use trl_ext.Async{type(self).__name__} (or trl_ext.trainer_class_for(args), which picks it), "
                "or set async_generation=False."
            )
        warn_truncated_importance_sampling(args)
        # no vLLM, vLLM outside TRL's range, broken torchvision: fail here; an in-memory model gets an engine snapshot
        vllm_setup.check_trainer_args(args, model, *rest, **kw)
        # bound against TRL's own signature: every argument is found by name, and a call TRL rejects fails alike
        bound = inspect.signature(trl.GRPOTrainer.__init__).bind(self, model, reward_funcs, args, *rest, **kw)
        checks.check_grpo_arguments(bound.arguments)
        super().__init__(*bound.args[1:], **bound.kwargs)
        checks.check_built_grpo_trainer(self, model, bound.arguments.get("train_dataset"))
        attach_moe_monitor(self)  # MoE: router-logits guard and moe/* metrics; nothing for a dense model
        if hasattr(self.model, "add_model_tags"):
            self.model.add_model_tags(list(self.model_tags))
        vllm_sync.adopt_for_trainer(self)  # colocate sync that works where vLLM repacks weights (its CPU build)
        self._logs_rollout = rollout_rhythm.steps_per_rollout(self.args) > 1
        warning = rollout_rhythm.rhythm_warning(self.args)
        if warning is not None and self.accelerator.is_main_process:
            logger.warning(warning)
        self.pad_token_id = tokenizer_of(self.processing_class).pad_token_id
        self.unscorable_watch = UnscorableWatch(
            list(self.reward_func_names),
            [is_shaping_reward(f) for f in self.reward_funcs],
            getattr(self.args, "max_unscorable_rounds", None),
        )
        self.scored_rewards: torch.Tensor | None = None  # what TRL's _calculate_rewards returned for the last round
        self.dynamic_sampler, self.metric_columns, self.step_gate = setup.dynamic_sampling_for(self)
        if self.step_gate is not None:
            self.loss_observers.append(self.step_gate.count)
        if self._logs_rollout:
            self.loss_observers.append(self._log_rollout)
        self.deferred_old_logps = DeferredOldLogps(self)

    def _default_args(self, model: Any) -> GRPOFamilyConfig:
        """The config used when none is given: this class's defaults, writing to ``<model name>-<suffix>``."""
        return self._default_config(
            output_dir=f"{_model_name(model)}-{self._default_suffix}", **self._default_overrides
        )

    # -- TRL hooks -----------------------------------------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        training = self.model.training
        watched = self.unscorable_watch.observe(
            rewards_per_func.cpu(), self.state.global_step, training, self.accelerator.is_main_process
        )
        for key, value in watched.items():
            self._metrics["train" if training else "eval"][key].append(value)
        self.scored_rewards = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        if self.dynamic_sampler is None or not self.model.training:
            return super()._generate_and_score_completions(inputs)
        return sample_informative_batch(self, inputs)

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        if self.deferred_old_logps.skips(model):  # a round's old-policy pass: run for the trained rows (old_logps)
            return None, None, None
        return super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
        )

    def _log_rollout(self, inputs: dict[str, Any]) -> None:
        """Several optimizer steps per rollout: every training row says which rollout it trained on (rollout_rhythm)."""
        every = rollout_rhythm.generate_every(self.args)
        self._metrics["train"]["rollout"].append(float(rollout_rhythm.rollout_index(self._step + 1, every)))

    # -- dynamic sampling's round (trl_ext.grpo.dynamic_sampling.loop) ----------------------------------------------

    def generate_and_score(self, inputs: list[dict[str, Any]]) -> tuple[dict[str, Any], torch.Tensor]:
        """One round through TRL's ``_generate_and_score_completions``: its output (this process's rows) and the
        per-function rewards its ``_calculate_rewards`` returned (every process's rows, NaN for None), on the CPU."""
        self.scored_rewards = None
        with self.deferred_old_logps.during_round():
            output = super()._generate_and_score_completions(inputs)
        rewards, self.scored_rewards = self.scored_rewards, None
        if rewards is None:
            raise RuntimeError(
                "TRL's _generate_and_score_completions returned without calling _calculate_rewards: this TRL release "
                "scores rounds in another way. Set dynamic_sampling=False, or use a TRL release from 1.12 to 1.16."
            )
        return output, rewards.detach().cpu()

    def dynamic_sampling_metric(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """Per completion, what decides whether its group is informative (DAPO Eq. 11's accuracy): the weighted sum of
        the ``dynamic_sampling_metric`` functions' rewards, NaN where none of them scored it."""
        weights = self.reward_weights.detach().cpu()[self.metric_columns]
        return combine_rewards(rewards_per_func[:, self.metric_columns], weights)

    def _save_extra_state(self, folder: str) -> None:
        super()._save_extra_state(folder)
        if self.dynamic_sampler is not None and self.args.should_save:
            setup.save_state(self.dynamic_sampler, folder)

    def _load_extra_state(self, checkpoint: str) -> None:
        super()._load_extra_state(checkpoint)
        if self.dynamic_sampler is not None:
            setup.load_state(self.dynamic_sampler, checkpoint)


class DAPOTrainer(GRPOTrainer):
    """DAPO (arXiv 2503.14476): clip-higher, token-level loss and dynamic sampling come from ``DAPOConfig``; this
    class adds the soft overlong punishment (Eq. 13) as one more reward function with weight
    ``overlong_penalty_factor``, logged by TRL as ``rewards/soft_overlong_punishment_reward/mean``."""

    _default_config = DAPOConfig
    _default_suffix = "DAPO"
    model_tags = ("trl-ext", "dapo")
    _name = "DAPO"
    _paper = {
        "title": "DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
        "id": "2503.14476",
        "citation": "@article{yu2025dapo,\n    title  = {{DAPO: An Open-Source LLM Reinforcement Learning System at "
        "Scale}},\n    author = {Qiying Yu and others},\n    year   = 2025,\n    eprint = {arXiv:2503.14476},\n}",
    }

    def __init__(
        self, model: Any, reward_funcs: Any = None, args: trl.GRPOConfig | None = None, *rest: Any, **kw: Any
    ):
        if args is None:
            args = self._default_args(model)
        elif not isinstance(args, DAPOConfig):
            logger.warning(
                f"DAPOTrainer got a {type(args).__name__}, not a DAPOConfig: training follows that config as given "
                "(no soft overlong punishment; dynamic sampling only if its fields say so). Use trl_ext.DAPOConfig "
                "for DAPO's defaults."
            )
        if reward_funcs is None and _environment_factory(model, args, rest, kw) is not None:
            reward_funcs = []  # the environment owns the task reward; the overlong shaping is still DAPO's
        if getattr(args, "soft_overlong_punishment", False) and reward_funcs is not None:
            # (reward_funcs None and no environment: no reward source, TRL raises its own error)
            reward_funcs, args = self._with_overlong_reward(reward_funcs, args)
            if kw.get("reward_processing_classes") is not None:  # one per function: none for the overlong rule
                kw["reward_processing_classes"] = [*kw["reward_processing_classes"], None]
        super().__init__(model, reward_funcs, args, *rest, **kw)

    @staticmethod
    def _with_overlong_reward(reward_funcs: Any, args: DAPOConfig) -> tuple[list, DAPOConfig]:
        funcs = list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]
        # a shaping term: dynamic sampling's default metric leaves it out (DAPO Eq. 11 filters on accuracy)
        overlong = mark_shaping(get_soft_overlong_punishment(args.max_completion_length, args.overlong_buffer_len))
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
    (``importance_sampling_level="sequence"``, TRL's implementation of Eq. 7). Given a config with ``gspo_token=True``
    it builds a ``GSPOTokenTrainer``."""

    def __new__(cls, *args: Any, **kwargs: Any):
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        if cls is GSPOTrainer and getattr(config, "gspo_token", False):
            cls = GSPOTokenTrainer
        return super().__new__(cls)

    _default_config = GSPOConfig
    _default_suffix = "GSPO"
    model_tags = ("trl-ext", "gspo")
    _name = "GSPO"
    _paper = {
        "title": "Group Sequence Policy Optimization",
        "id": "2507.18071",
        "citation": "@article{zheng2025gspo,\n    title  = {{Group Sequence Policy Optimization}},\n    author = "
        "{Chujie Zheng and others},\n    year   = 2025,\n    eprint = {arXiv:2507.18071},\n}",
    }


class GSPOTokenTrainer(GSPOTrainer):
    """GSPO-token (arXiv 2507.18071, Eq. 13): s_{i,t} = sg[s_i] * pi(o_t) / sg[pi(o_t)] (``trl_ext.grpo.gspo_token``,
    over TRL's token-level loss); needs ``gspo_token=True``.

    The one side channel of this class: TRL's ``_compute_loss`` forms ``log_ratio = per_token_logps -
    old_per_token_logps`` from a policy forward it runs itself, and Eq. 13 needs that forward's log-probabilities in
    the old ones. ``compute_loss`` hands TRL a copy of the batch and keeps it for the length of the call; the policy
    forward of that call (``_get_per_token_logps_and_entropies``) writes GSPO-token's old log-probabilities into the
    copy. A TRL loss hook that received the policy log-probabilities with the batch would remove it."""

    _default_suffix = "GSPO-token"
    _default_overrides = {"gspo_token": True}

    def __init__(
        self, model: Any, reward_funcs: Any = None, args: trl.GRPOConfig | None = None, *rest: Any, **kw: Any
    ):
        if args is None:
            args = self._default_args(model)
        if not getattr(args, "gspo_token", False):
            raise ValueError(
                f"GSPOTokenTrainer needs a config with gspo_token=True, got a {type(args).__name__} without it. Use "
                "GSPOConfig(gspo_token=True)."
            )
        super().__init__(model, reward_funcs, args, *rest, **kw)

    _gspo_token_batch: dict[str, Any] | None = None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        batch = dict(inputs)  # the caller's buffered batch is reused by later steps: never edit it
        self._gspo_token_batch = batch
        try:  # TRL's compute_loss hands this batch to its _compute_loss, whose policy forward is the next call below
            return super().compute_loss(model, batch, return_outputs, num_items_in_batch)
        finally:
            self._gspo_token_batch = None

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        result = super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
        )
        batch, self._gspo_token_batch = self._gspo_token_batch, None  # only the policy forward of this loss
        if batch is None or result[0] is None:  # generation-time passes (old / reference log-probs): TRL's own
            return result
        mask = batch["completion_mask"] * batch["tool_mask"] if "tool_mask" in batch else batch["completion_mask"]
        old = batch.get("old_per_token_logps")
        if getattr(self, "off_policy_mask_threshold", None) is not None and "sampling_per_token_logps" not in batch:
            batch["sampling_per_token_logps"] = result[0].detach() if old is None else old
        batch["old_per_token_logps"] = gspo_token_old_logps(result[0], old, mask)
        return result
