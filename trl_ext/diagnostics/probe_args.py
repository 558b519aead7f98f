"""The pre-flight probe's settings (``ProbeArguments``) and the run it projects dynamic sampling for (a
``GRPOFamilyConfig``, read by ``dynamic_sampling_policy`` exactly as the trainer will use it)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trl_ext.diagnostics import option
from trl_ext.grpo.configs import GRPOFamilyConfig

DEMO = "demo"
DEMO_RANDOM = "demo-random"
#: What the probe samples that a ``GRPOConfig`` also sets: ``from_training_args`` copies these.
SAMPLING_FIELDS = ("num_generations", "max_completion_length", "temperature", "top_p", "top_k", "seed")
#: Prompts per generation batch of the run the probe assumes when given no config.
DEFAULT_GROUPS_PER_BATCH = 16


def sampling_values(config: Any) -> dict[str, Any]:
    """The ``SAMPLING_FIELDS`` that ``config`` (probe settings or a ``GRPOConfig``) sets, not None."""
    return {key: getattr(config, key) for key in SAMPLING_FIELDS if getattr(config, key, None) is not None}


@dataclass
class ProbeArguments:
    """Settings of the pre-flight probe, also its command line (every field is a ``--flag``).

    The run's refill policy is read from its own ``GRPOFamilyConfig`` (``dynamic_sampling_policy``), never copied
    here. The sampling fields are what the probe generates with: use the values you will train with
    (``from_training_args``). ``generation_batch_size`` is a memory knob of the probe's ``generate`` calls, not the run's.
    """

    model_name_or_path: str | None = option(
        None, "Model path or Hub name; None/'demo' = warm-started demo, 'demo-random' = cold."
    )
    no_warm_start: bool = option(False, "Demo only: probe the cold, random model.")
    dataset_name: str | None = option(None, "datasets.load_dataset name or a local data file; None = the demo task.")
    dataset_config: str | None = option(None, "Dataset configuration name.")
    dataset_split: str = option("train", "Dataset split to sample prompts from.")
    prompt_column: str = option(
        "prompt", "Column holding the prompts; 'prompt' also lets a known layout (GSM8K, ...) map its own."
    )
    dataset_answer_column: str | None = option(
        None, "Column with the reference answer (a dotted path reaches a nested field); None: the layout's."
    )
    system_prompt: str | None = option(None, "System message put before every prompt.")
    reward_funcs: list[str] | None = option(
        None, "Reward function names (rewards registry). None: the task reward that fits the data."
    )
    reward_options: dict | str | None = option(None, "Options per reward name: a mapping (YAML) or JSON text.")
    reward_weights: list[float] | None = option(None, "One weight per reward function (default 1.0 each).")
    num_generations: int = option(16, "Group size G: completions sampled per prompt.")
    num_prompts: int = option(64, "Prompts sampled from the dataset (seeded).")
    max_completion_length: int | None = option(
        None, "Max new tokens per completion (None: 8 for the demo, 256 otherwise)."
    )
    temperature: float = option(1.0, "Sampling temperature (as in GRPOConfig).")
    top_p: float = option(1.0, "Nucleus sampling (as in GRPOConfig).")
    top_k: int = option(0, "Top-k sampling; 0 disables it (as in GRPOConfig).")
    generation_batch_size: int = option(256, "Completions per generate call.")
    use_vllm: bool | None = option(None, "Use vllm.LLM; None = when vLLM is installed and a GPU is present.")
    seed: int = option(0, "Seed of the prompt sample and of the sampling.")
    success_threshold: float = option(1.0, "A completion passes when its reward is >= this value.")
    sft_pass_at_g: float = option(0.1, "Recommend SFT first when pass@G is below this.")
    easy_group_frac: float = option(
        0.25, "Recommend filtering solved prompts when this fraction of groups is all-correct."
    )
    mixed_group_frac: float = option(0.5, "Recommend a larger group when fewer than this fraction of groups is mixed.")
    truncated_frac: float = option(0.05, "Recommend a longer max_completion_length above this truncated fraction.")
    output_dir: str | None = option(None, "Output folder (None: outputs/probe/<model>).")

    def __post_init__(self) -> None:
        if self.num_generations < 2:
            raise ValueError(
                f"num_generations={self.num_generations}: a group needs at least 2 completions to be compared; pass "
                "--num_generations 2 or more (use your run's value, e.g. 16)."
            )
        if self.num_prompts < 1:
            raise ValueError(f"num_prompts={self.num_prompts}: pass --num_prompts 1 or more (e.g. 64).")
        if self.max_completion_length is not None and self.max_completion_length < 1:
            raise ValueError(
                f"max_completion_length={self.max_completion_length}: pass a positive --max_completion_length."
            )
        if not self.temperature > 0:
            raise ValueError(f"temperature={self.temperature}: the probe samples; pass --temperature > 0 (e.g. 1.0).")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p}: pass --top_p in (0, 1].")
        if self.top_k < 0:
            raise ValueError(f"top_k={self.top_k}: pass --top_k 0 (off) or a positive integer.")
        if self.generation_batch_size < 1:
            raise ValueError(f"generation_batch_size={self.generation_batch_size}: pass a positive value.")
        if self.reward_funcs is not None and not self.reward_funcs:
            raise ValueError("reward_funcs is empty: pass at least one name, e.g. --reward_funcs arithmetic.")
        if (
            self.reward_weights is not None
            and self.reward_funcs
            and len(self.reward_weights) != len(self.reward_funcs)
        ):
            raise ValueError(
                f"reward_weights has {len(self.reward_weights)} values for {len(self.reward_funcs)} reward_funcs "
                f"{self.reward_funcs}; pass one weight per function or none."
            )
        if not math.isfinite(self.success_threshold):
            raise ValueError(f"success_threshold={self.success_threshold}: pass a finite value (e.g. 1.0).")

    @classmethod
    def from_training_args(cls, training_args: Any, **overrides: Any) -> ProbeArguments:
        """Probe settings with the sampling of a ``GRPOConfig`` (``SAMPLING_FIELDS``), so that the probe sees what the
        first training step will; ``overrides`` set any other field."""
        return cls(**{**sampling_values(training_args), **overrides})

    @property
    def is_demo(self) -> bool:
        return self.model_name_or_path in (None, DEMO, DEMO_RANDOM)


def default_run_config(args: ProbeArguments) -> GRPOFamilyConfig:
    """The run the probe projects for when given none: ``GRPOFamilyConfig``'s defaults with dynamic sampling on, the
    probe's sampling and ``DEFAULT_GROUPS_PER_BATCH`` prompts per generation batch."""
    defaults = {
        "output_dir": "outputs/probe",
        "dynamic_sampling": True,
        "per_device_train_batch_size": DEFAULT_GROUPS_PER_BATCH * args.num_generations,
        "bf16": False,  # nothing is trained: no precision to check against the hardware
        "report_to": "none",
    }
    return GRPOFamilyConfig(**{**defaults, **sampling_values(args)})


def dynamic_sampling_policy(training_args: GRPOFamilyConfig) -> dict[str, Any]:
    """The refill policy of the run ``training_args`` describes, as ``summarize`` takes it."""
    return {
        "max_generation_batches": training_args.dynamic_sampling_max_generation_batches,
        "groups_per_batch": max(1, training_args.generation_batch_size // training_args.num_generations),
        "refill_margin": training_args.dynamic_sampling_refill_margin,
        "max_round_size": training_args.dynamic_sampling_max_round_size,
    }
