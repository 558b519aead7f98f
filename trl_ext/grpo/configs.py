"""Algorithm presets: TRL ``GRPOConfig`` subclasses whose defaults are the papers' settings.

Clip-higher, token-level loss, sequence-level ratios and loss aggregation are already fields of TRL's ``GRPOConfig``;
the classes here change defaults (each naming its source), add the fields TRL lacks (dynamic sampling, overlong
shaping, GSPO minibatches, GSPO-token) and reject contradictory settings at construction, naming the field and the
fix. Which trainer runs which config, and the preset names, are one table: ``trl_ext.grpo.presets.PRESETS``.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass, field

import torch
from transformers.utils import is_torch_bf16_gpu_available
from trl import GRPOConfig

from trl_ext.grpo.async_checks import check_async_config
from trl_ext.reliability.preemption import DEFAULT_PREEMPTION_SIGNALS, parse_signals
from trl_ext.reliability.reward_guard import validate_reward_settings

logger = logging.getLogger(__name__)

#: ``dynamic_sampling_max_generation_batches`` when unset: generation batches one step may generate.
DEFAULT_MAX_GENERATION_BATCHES = 4
#: Deprecated field names and the fields that replaced them (the recipes' parser maps their flags too).
RENAMED_FIELDS = {"dynamic_sampling_max_rounds": "dynamic_sampling_max_generation_batches"}


#: The shortest overlong buffer (L_cache of DAPO Eq. 13) that still ramps: below it the penalty is a step (see
#: ``warn_step_like_overlong_buffer``).
MIN_RAMP_TOKENS = 4


def warn_step_like_overlong_buffer(max_completion_length: int, buffer_len: int, factor: float) -> bool:
    """Warn at construction when the default overlong buffer is too short for DAPO Eq. 13's ramp (from 0 at
    ``L_max - L_cache`` to -1 at ``L_max``) to be more than a step; True if it warned."""
    if buffer_len >= MIN_RAMP_TOKENS:
        return False
    first = max_completion_length - buffer_len + 1
    penalized = f"{first}" if first == max_completion_length else f"{first}-{max_completion_length}"
    logger.warning(
        f"overlong_buffer_len={buffer_len} token(s) (20% of max_completion_length={max_completion_length}): DAPO's "
        f"soft overlong punishment (Eq. 13) is then a step, not a ramp. Completions of {penalized} tokens (the last "
        f"{buffer_len} of {max_completion_length} lengths) are penalized, and every completion cut at "
        f"max_completion_length gets the full -{factor:g} (overlong_penalty_factor), so the logged reward can be "
        "negative while rewards/<accuracy>/mean is positive. Raise max_completion_length (20% of "
        f"{5 * MIN_RAMP_TOKENS} or more is a ramp of {MIN_RAMP_TOKENS}+ tokens), set overlong_buffer_len explicitly, "
        "or set soft_overlong_punishment=False."
    )
    return True


@dataclass
class GRPOFamilyConfig(GRPOConfig):
    r"""TRL's ``GRPOConfig`` plus DAPO's dynamic sampling, which any preset of the family can switch on.

    Each field's help says what it does; what it leaves out:
        dynamic_sampling: DAPO section 3.2 / Eq. 11 (``trl_ext.grpo.dynamic_sampling``, docs/DYNAMIC_SAMPLING.md).
        dynamic_sampling_max_rounds: sets the new name with a ``FutureWarning`` (the new name wins when both are set).
        dynamic_sampling_metric: shaping functions are those marked in ``trl_ext.rewards.shaping``. Unknown names
            fail when the trainer is built; advantages still use every function.
        dynamic_sampling_skip_predicted: GRESO (arXiv 2506.02177); needs a ``datasets.Dataset`` (history per index).
        dynamic_sampling_select_prompts: ``trl_ext.grpo.dynamic_sampling.selector``; a ``datasets.Dataset`` too.
        reward_errors, reward_timeout, max_unscorable_rounds, preemption_signals: ``trl_ext.reliability``
            (``docs/PREEMPTION.md``). ``max_unscorable_rounds`` counts optimizer steps; its default None trains on
            as TRL does (the recipes set 3).
        async_generation: ``trl_ext.grpo.async_rollout`` (``docs/ASYNC_GENERATION.md``).
        bf16: TRL's default is bf16 everywhere, which stops a CPU-only machine at construction and, once a trainer has
            run in fp32 in the same process (the demo's warm start), the next one.
        gradient_checkpointing: off on a CPU, where it saves no accelerator memory and costs a second forward. Passed
            to transformers as ``activation_checkpointing`` where it has that name (no deprecation warning).
    """

    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO dynamic sampling: drop all-equal-reward groups and refill the batch with new prompts."
        },
    )
    dynamic_sampling_max_generation_batches: int | None = field(
        default=None,
        metadata={
            "help": "Generation budget per generation batch, in whole generation batches (first round included; "
            "refills are right-sized, so there may be more rounds than this). None: 4."
        },
    )
    dynamic_sampling_max_rounds: int | None = field(
        default=None,
        metadata={
            "help": "Deprecated: the old name of dynamic_sampling_max_generation_batches (warns, maps onto it)."
        },
    )
    dynamic_sampling_atol: float = field(
        default=1e-6,
        metadata={"help": "Tolerance under which a group's reward range counts as 'all equal'."},
    )
    dynamic_sampling_metric: list[str] | None = field(
        default=None,
        metadata={
            "help": "Reward function name(s) whose weighted sum decides whether a group is informative (DAPO Eq. 11: "
            "the accuracy). None: all reward functions except the shaping ones (overlong, length; "
            "trl_ext.rewards.shaping)."
        },
    )
    dynamic_sampling_reward_range: list[float] | None = field(
        default=None,
        metadata={"help": "[min, max] of the reward scale, to label uninformative groups too hard / too easy."},
    )
    dynamic_sampling_carry_over: float = field(
        default=0.0,
        metadata={"help": "Removed (only 0 is accepted): every trained group is generated by the current policy."},
    )
    dynamic_sampling_skip_predicted: bool = field(
        default=False,
        metadata={
            "help": "GRESO pre-rollout skipping: skip a prompt with probability 1 - p^z after z consecutive "
            "zero-variance visits (beyond the DAPO paper; off by default)."
        },
    )
    dynamic_sampling_skip_target: float = field(
        default=0.25,
        metadata={"help": "Zero-variance fraction of generated groups that GRESO's exploration probability targets."},
    )
    dynamic_sampling_select_prompts: bool = field(
        default=False,
        metadata={
            "help": "Predictive prompt selection: keep a Beta posterior of each prompt's solve rate and generate for "
            "the prompts most likely to give an informative group (beyond the DAPO paper; off by default)."
        },
    )
    dynamic_sampling_selection_pool: float = field(
        default=4.0,
        metadata={"help": "Candidates looked at per prompt taken by the selector (>= 1; 1 takes the stream as is)."},
    )
    dynamic_sampling_selection_floor: float = field(
        default=0.05,
        metadata={"help": "Share of the prompts taken whatever their prediction (exploration), in [0, 1]."},
    )
    dynamic_sampling_selection_decay: float = field(
        default=0.95,
        metadata={
            "help": "Weight a prompt's evidence keeps per generation batch, in [0, 1] (the policy moves; 0.95 halves "
            "it in 14 batches)."
        },
    )
    dynamic_sampling_refill_margin: float | None = field(
        default=None,
        metadata={
            "help": "A refill round generates missing / (estimated informative rate) x this many groups, rounded to "
            "whole groups per process. Default: 1.05 (at most ~5% of the groups generated are surplus, discarded)."
        },
    )
    dynamic_sampling_max_round_size: float = field(
        default=2.0,
        metadata={
            "help": "The most groups one generation round may hold, in generation batches (bounds the memory of one "
            "generate call; 1.0: TRL's own size)."
        },
    )
    reward_errors: str = field(
        default="raise",
        metadata={
            "help": "What a reward function raising on a completion does: 'raise' stops the run naming the function "
            "and the completion; 'skip' scores that completion None (unscorable, left out of the group baseline) "
            "and counts it in rewards/<name>/errors."
        },
    )
    reward_timeout: float | None = field(
        default=None,
        metadata={
            "help": "Seconds one reward-function call may take; past it the batch's scores from that function are "
            "None and rewards/<name>/timeouts counts it. None: no limit."
        },
    )
    max_unscorable_rounds: int | None = field(
        default=None,
        metadata={
            "help": "Stop after this many consecutive optimizer steps in which no task reward scored any completion "
            "(all None/NaN; a dynamic-sampling step's refill rounds count as one step). Until then: one warning, and "
            "training goes on as in TRL. None or 0: never stop (the trainers' default, as TRL's)."
        },
    )
    preemption_signals: list[str] = field(
        default_factory=lambda: list(DEFAULT_PREEMPTION_SIGNALS),
        metadata={
            "help": "Signals on which training finishes the step in progress, writes a checkpoint and exits with code "
            "75 (a second signal stops at once): names such as SIGTERM SIGUSR1 SIGUSR2 SIGINT, or 'none' for off."
        },
    )

    bf16: bool | None = field(
        default=None,
        metadata={"help": "bf16 mixed precision. None: where the device supports it (a bf16 GPU), else fp32."},
    )
    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={"help": "Activation checkpointing. None: on with an accelerator, off on a CPU."},
    )
    async_generation: bool = field(
        default=False,
        metadata={
            "help": "Generate the next batch (refill rounds included) on the vLLM server while this one trains "
            "(one-step off-policy; needs use_vllm=True, vllm_mode='server')."
        },
    )
    max_staleness: int = field(
        default=1,
        metadata={
            "help": "Oldest a trained group may be, in generation batches, with async_generation (1: one-step "
            "off-policy); logged as async/staleness."
        },
    )
    vllm_lora_sync: str = field(
        default="merge",
        metadata={
            "help": "How a LoRA policy reaches vLLM: 'merge' (TRL: merge, send every weight, unmerge) or 'adapter' "
            "(only the adapter, served as a LoRA request; trl_ext.generation.vllm_lora, docs/VLLM.md)."
        },
    )

    def __post_init__(self) -> None:
        self._resolve_renamed_fields()
        self._resolve_device_defaults()
        self._validate_group()  # before TRL's checks, whose messages do not name the field
        try:
            super().__post_init__()
        except ValueError as error:
            if "must be divisible by num_generations" not in str(error):
                raise
            per_step = self.per_device_train_batch_size * self.world_size
            raise ValueError(
                f"num_generations={self.num_generations} does not divide the generation batch of "
                f"{self.generation_batch_size} completions (per_device_train_batch_size="
                f"{self.per_device_train_batch_size} x {self.world_size} processes x steps_per_generation): a batch "
                f"must hold whole groups. Set per_device_train_batch_size to a multiple of {self.num_generations} "
                f"(e.g. {max(self.num_generations, per_step // self.num_generations * self.num_generations)}) or "
                f"change num_generations. ({error})"
            ) from error
        self._validate_family()
        validate_reward_settings(self.reward_errors, self.reward_timeout)
        check_async_config(self)
        parse_signals(self.preemption_signals)  # an unknown or uncatchable name fails here, not at the first signal

    def _resolve_renamed_fields(self) -> None:
        """The deprecated ``dynamic_sampling_max_rounds``. Both names default to None so that a rebuild from the
        serialized fields (both present, equal) warns about nothing."""
        old, new = self.dynamic_sampling_max_rounds, self.dynamic_sampling_max_generation_batches
        self._max_generation_batches_given_as = None
        if old is not None and old != new:
            if new is None:
                named = f"dynamic_sampling_max_generation_batches. Use dynamic_sampling_max_generation_batches={old}."
                self._max_generation_batches_given_as, new = "dynamic_sampling_max_rounds", old
            else:
                named = f"dynamic_sampling_max_generation_batches, which is set ({new}): {old} is ignored."
            warnings.warn(
                "dynamic_sampling_max_rounds is deprecated: it is a budget in generation batches (refills are "
                f"right-sized, so there may be more rounds than this), now named {named}",
                FutureWarning,
                stacklevel=4,
            )
        self.dynamic_sampling_max_generation_batches = DEFAULT_MAX_GENERATION_BATCHES if new is None else new
        self.dynamic_sampling_max_rounds = self.dynamic_sampling_max_generation_batches

    def _resolve_device_defaults(self) -> None:
        """``bf16`` and ``gradient_checkpointing`` when unset, from the device (see the class docstring)."""
        on_cpu = self.use_cpu or not (torch.cuda.is_available() or is_torch_bf16_gpu_available())
        if self.bf16 is None:
            self.bf16 = not self.fp16 and not on_cpu and is_torch_bf16_gpu_available()
        if self.gradient_checkpointing is None:
            self.gradient_checkpointing = not on_cpu
        if getattr(self, "activation_checkpointing", False) is None:  # transformers >= 5.x: the current name
            self.activation_checkpointing = self.gradient_checkpointing

    def _validate_group(self) -> None:
        if self.num_generations is not None and self.num_generations < 2:
            raise ValueError(
                f"num_generations={self.num_generations}: group methods normalize rewards within a group, which needs "
                "at least 2 completions per prompt. Set num_generations >= 2 (DAPO uses 16)."
            )
        if self.epsilon is not None and self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            raise ValueError(
                f"epsilon_high={self.epsilon_high} is below epsilon={self.epsilon}: clip-higher (DAPO section 3.1) "
                "needs epsilon_high >= epsilon (DAPO: 0.2 / 0.28; GSPO: 3e-4 / 4e-4)."
            )

    def _validate_family(self) -> None:
        if self.dynamic_sampling:
            budget = self.dynamic_sampling_max_generation_batches
            if budget < 1:
                name = self._max_generation_batches_given_as or "dynamic_sampling_max_generation_batches"
                raise ValueError(
                    f"{name}={budget}: at least 1 generation batch is needed. Set "
                    "dynamic_sampling_max_generation_batches to 2 or more for dynamic sampling to refill anything, or "
                    "set dynamic_sampling=False."
                )
            if not 0 <= self.dynamic_sampling_skip_target < 1:
                raise ValueError(
                    f"dynamic_sampling_skip_target={self.dynamic_sampling_skip_target} must be in [0, 1) (e.g. 0.25)."
                )
            if self.dynamic_sampling_select_prompts and self.dynamic_sampling_skip_predicted:
                raise ValueError(
                    "dynamic_sampling_select_prompts=True and dynamic_sampling_skip_predicted=True are two predictors "
                    "of the same thing; set one of them."
                )
            if self.dynamic_sampling_selection_pool < 1:
                raise ValueError(
                    f"dynamic_sampling_selection_pool={self.dynamic_sampling_selection_pool}: the selector needs at "
                    "least one candidate per prompt it takes. Set a number >= 1 (e.g. 4)."
                )
            for name in ("dynamic_sampling_selection_floor", "dynamic_sampling_selection_decay"):
                if not 0 <= getattr(self, name) <= 1:
                    raise ValueError(f"{name}={getattr(self, name)} must be in [0, 1].")
            if self.dynamic_sampling_carry_over:
                raise ValueError(
                    f"dynamic_sampling_carry_over={self.dynamic_sampling_carry_over}: carrying surplus groups to the "
                    "next step was removed (every trained group is generated by the current policy). Remove the field "
                    "from your config."
                )
            margin = self.dynamic_sampling_refill_margin
            if margin is not None and not (math.isfinite(margin) and margin > 0):
                raise ValueError(
                    f"dynamic_sampling_refill_margin={margin} must be a finite number > 0 (e.g. 1.25, GRESO's margin; "
                    "1.0 asks for exactly the expected need), or unset for the default."
                )
            size = self.dynamic_sampling_max_round_size
            if not (math.isfinite(size) and size > 0):
                raise ValueError(
                    f"dynamic_sampling_max_round_size={size} must be a finite number of generation batches > 0 "
                    "(e.g. 2.0; 1.0 keeps every generate call at TRL's generation batch size)."
                )
            if self.dynamic_sampling_atol < 0 or not math.isfinite(self.dynamic_sampling_atol):
                raise ValueError(
                    f"dynamic_sampling_atol={self.dynamic_sampling_atol} must be a finite number >= 0 (e.g. 1e-6)."
                )
            if self.generation_batch_size < self.num_generations:
                raise ValueError(
                    f"dynamic_sampling with a generation batch of {self.generation_batch_size} completions cannot hold "
                    f"one group of num_generations={self.num_generations}. Raise per_device_train_batch_size, "
                    "gradient_accumulation_steps or steps_per_generation so that the generation batch holds whole "
                    "groups."
                )
        if isinstance(self.dynamic_sampling_metric, str):
            self.dynamic_sampling_metric = [self.dynamic_sampling_metric]
        if self.dynamic_sampling_metric is not None and (
            not self.dynamic_sampling_metric or not all(isinstance(n, str) for n in self.dynamic_sampling_metric)
        ):
            raise ValueError(
                f"dynamic_sampling_metric={self.dynamic_sampling_metric} must be a non-empty list of reward function "
                "names (e.g. ['accuracy']), or None for every reward function except the shaping ones (overlong, "
                "length)."
            )
        if self.dynamic_sampling_reward_range is not None:
            low_high = list(self.dynamic_sampling_reward_range)
            if len(low_high) != 2 or not low_high[0] < low_high[1]:
                raise ValueError(
                    f"dynamic_sampling_reward_range={self.dynamic_sampling_reward_range} must be [min, max] with "
                    "min < max, e.g. [0.0, 1.0], or None to use the extremes seen in training."
                )


def _set_minibatches(config: GRPOFamilyConfig, paper: str) -> None:
    """``steps_per_generation = num_minibatches * gradient_accumulation_steps`` unless it or ``generation_batch_size``
    is given (DAPO, GSPO)."""
    if config.num_minibatches < 1:
        raise ValueError(f"num_minibatches={config.num_minibatches} must be >= 1 ({paper}).")
    if config.steps_per_generation is None and config.generation_batch_size is None:
        config.steps_per_generation = config.num_minibatches * config.gradient_accumulation_steps


@dataclass
class GRPOPaperConfig(GRPOFamilyConfig):
    """GRPO as DeepSeekMath (arXiv 2402.03300, Eq. 3) defines it: per-sequence mean loss and a k3 KL term with beta
    0.04 (section 4.2). TRL's own ``GRPOConfig`` defaults differ (DAPO loss, no KL)."""

    loss_type: str = field(default="grpo", metadata={"help": "GRPO Eq. 3: (1/|o_i|) sum_t, then mean over i."})
    beta: float = field(default=0.04, metadata={"help": "DeepSeekMath 4.2: KL coefficient 0.04."})


@dataclass
class DrGRPOConfig(GRPOFamilyConfig):
    """Dr. GRPO (arXiv 2503.20783): no 1/|o_i| length normalization and no division by std(r)."""

    loss_type: str = field(default="dr_grpo", metadata={"help": "Dr. GRPO: sum over tokens / constant."})
    scale_rewards: str = field(default="none", metadata={"help": "Dr. GRPO: do not divide advantages by std(r)."})


@dataclass
class DAPOConfig(GRPOFamilyConfig):
    r"""DAPO (arXiv 2503.14476) defaults. Each default names its source.

    ``num_minibatches`` (section 4.1: "16 gradient updates for each rollout step") sets ``steps_per_generation`` to
    ``num_minibatches * gradient_accumulation_steps`` unless that or ``generation_batch_size`` is given: the updates
    after the first are off-policy, so the ratio moves away from 1 and clip-higher acts (with 1 it never does). The
    soft overlong punishment is added to the rule reward by the trainer.
    """

    epsilon: float = field(default=0.2, metadata={"help": "DAPO 3.1: eps_low = 0.2."})
    epsilon_high: float | None = field(default=0.28, metadata={"help": "DAPO 3.1: eps_high = 0.28 (clip-higher)."})
    loss_type: str = field(default="dapo", metadata={"help": "DAPO 3.3: token-level loss."})
    beta: float = field(default=0.0, metadata={"help": "DAPO 2.3: no KL penalty."})
    num_generations: int | None = field(default=16, metadata={"help": "DAPO 4.1: 16 responses per prompt."})
    num_minibatches: int = field(
        default=16, metadata={"help": "DAPO 4.1: mini-batch 512 of 512 x 16 responses = 16 updates per rollout."}
    )
    dynamic_sampling: bool = field(default=True, metadata={"help": "DAPO 3.2: dynamic sampling."})
    soft_overlong_punishment: bool = field(
        default=True, metadata={"help": "DAPO 3.4, Eq. 13: soft overlong punishment added to the reward."}
    )
    overlong_buffer_len: int | None = field(
        default=None, metadata={"help": "L_cache of Eq. 13; None = 20% of max_completion_length (4096 of 20480)."}
    )
    overlong_penalty_factor: float = field(default=1.0, metadata={"help": "Weight of the overlong reward (1.0)."})

    def __post_init__(self) -> None:
        _set_minibatches(self, "DAPO uses 16 gradient updates per rollout")
        super().__post_init__()
        if self.soft_overlong_punishment:
            if self.overlong_buffer_len is None:
                self.overlong_buffer_len = max(1, int(0.2 * self.max_completion_length))
                warn_step_like_overlong_buffer(
                    self.max_completion_length, self.overlong_buffer_len, self.overlong_penalty_factor
                )
            if not 0 < self.overlong_buffer_len <= self.max_completion_length:
                raise ValueError(
                    f"overlong_buffer_len={self.overlong_buffer_len} must be in (0, max_completion_length="
                    f"{self.max_completion_length}]; DAPO uses 20% (4096 of 20480). Leave it None for that default."
                )
            if self.mask_truncated_completions:
                raise ValueError(
                    "soft_overlong_punishment=True with mask_truncated_completions=True: DAPO uses one or the other "
                    "(overlong filtering masks truncated samples, soft punishment penalizes them; with the mask the "
                    "penalty never reaches the loss). Set one of them to False."
                )


@dataclass
class GSPOConfig(GRPOFamilyConfig):
    r"""GSPO (arXiv 2507.18071) defaults.

    The ratio is s_i = exp(mean_t log(pi/pi_old)) (Eq. 7), clipped at 3e-4 / 4e-4 (a per-token geometric mean);
    ``loss_type="grpo"`` is (1/G) sum_i min(s_i A_i, clip(s_i) A_i) (Eq. 5), where a token sum ("dapo", "bnpo") would
    weigh each sequence by its length (TRL issue #3823). ``num_minibatches`` sets ``steps_per_generation`` as in
    ``DAPOConfig`` (with one on-policy update s_i = 1 and GSPO equals GRPO). ``gspo_token``: GSPO-token (Eq. 13-14,
    ``trl_ext.grpo.gspo_token``); TRL 1.12's ``"sequence_token"`` level means the same.
    """

    importance_sampling_level: str = field(default="sequence", metadata={"help": "GSPO: sequence-level ratio."})
    epsilon: float = field(default=3e-4, metadata={"help": "GSPO 5.1: left clip range 3e-4."})
    epsilon_high: float | None = field(default=4e-4, metadata={"help": "GSPO 5.1: right clip range 4e-4."})
    beta: float = field(default=0.0, metadata={"help": "GSPO: no KL term."})
    loss_type: str = field(default="grpo", metadata={"help": "GSPO Eq. 5: mean over sequences."})
    num_minibatches: int = field(default=4, metadata={"help": "GSPO 5.1: 4 minibatches per rollout batch."})
    gspo_token: bool = field(default=False, metadata={"help": "Use the GSPO-token variant (Eq. 13)."})

    def __post_init__(self) -> None:
        _set_minibatches(self, "GSPO uses 4")
        if self.importance_sampling_level == "sequence_token":  # TRL 1.12's experimental name for GSPO-token
            self.gspo_token = True
        if self.gspo_token:
            if self.importance_sampling_level not in ("sequence", "sequence_token", "token"):
                raise ValueError(
                    f"gspo_token=True with importance_sampling_level={self.importance_sampling_level!r}: GSPO-token "
                    "forms its ratio from TRL's token level. Leave importance_sampling_level unset or set "
                    "gspo_token=False."
                )
            # TRL >= 1.14 rejects "sequence_token": the token level plus this switch is GSPO-token on every release
            self.importance_sampling_level = "token"
        super().__post_init__()
        sequence_ratio = self.importance_sampling_level == "sequence" or self.gspo_token
        if sequence_ratio and self.epsilon >= 0.01:
            setting = "gspo_token=True" if self.gspo_token else "importance_sampling_level='sequence'"
            raise ValueError(
                f"epsilon={self.epsilon} with {setting}: "
                "a sequence ratio is a per-token geometric mean, so token-level clip ranges like 0.2 never clip. "
                "Use GSPO's 3e-4 / 4e-4 (the defaults), or importance_sampling_level='token' for token-level eps."
            )
        if self.loss_type in ("dapo", "bnpo"):
            raise ValueError(
                f"loss_type={self.loss_type!r} sums over tokens, which weighs each GSPO sequence by its length "
                "(TRL issue #3823). Use loss_type='grpo' (sequence mean, GSPO Eq. 5, the default)."
            )
