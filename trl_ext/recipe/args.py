"""The script arguments of the recipes (data, rewards, run options); the training options are each trainer's own
config (a preset for the GRPO family, ``SFTConfig``, ``DPOConfig``, ``PPOConfig``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl_ext.demo import WarmStartConfig


def held_out_max_problems_field() -> Any:
    """``held_out_max_problems``, one field for every recipe's script arguments (``common.cap_held_out`` applies it)."""
    return field(
        default=500,
        metadata={
            "help": "At most this many held-out problems are evaluated (greedy, before, during and after training): "
            "a seeded random subset of a larger split, with a warning. None or 0: all of them."
        },
    )


@dataclass
class RLScriptArguments:
    """Data, rewards and run options of the GRPO-family recipes (the training options are the preset's config)."""

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Hub dataset, local folder (train.jsonl / test.jsonl, ...) or .json/.jsonl/.csv/.parquet file "
            "with a 'prompt' column. None: the built-in arithmetic demo."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset configuration name."})
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    dataset_test_split: str = field(
        default="test",
        metadata={"help": "Held-out split, or a local file of held-out problems (demo: 240 problems)."},
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["arithmetic"],
        metadata={"help": "Reward functions by registry name (see rewards.available_rewards())."},
    )
    reward_options: str | None = field(
        default=None, metadata={"help": 'JSON options per reward, e.g. \'{"accuracy": {"extraction": "boxed"}}\'.'}
    )
    preset: str | None = field(
        default=None,
        metadata={
            "help": "GRPO-family preset by name (trl_ext.grpo.presets.PRESETS: grpo, dr_grpo, dapo, gspo, gspo_token, "
            "...); selects the config class and the trainer. Also a YAML key. None: the recipe's own preset."
        },
    )
    health_monitor: bool = field(default=True, metadata={"help": "Warn on KL blow-up, entropy collapse, etc."})
    held_out_eval_steps: int | None = field(
        default=None,
        metadata={
            "help": "Held-out greedy accuracy every N optimizer steps during RL (rounded up to a multiple of "
            "logging_steps), logged as held_out/accuracy. None: adaptive, starting at logging_steps and widening "
            "so that evaluating costs under 5% of the run. 0: only before and after."
        },
    )
    held_out_max_problems: int | None = held_out_max_problems_field()


@dataclass
class SFTScriptArguments:
    """Data of the recipes (the fields of TRL's ``ScriptArguments`` that they use)."""

    dataset_name: str | None = field(
        default=None,
        metadata={"help": "Hub dataset or local .json/.jsonl/.csv/.parquet file. None: the built-in arithmetic demo."},
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset configuration name."})
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    dataset_test_split: str = field(default="test", metadata={"help": "Held-out split (demo: 240 problems)."})
    held_out_max_problems: int | None = held_out_max_problems_field()


@dataclass
class DPOScriptArguments(SFTScriptArguments):
    """Data, and the rule-based rewards that score mined groups (unused on a preference dataset). Their weights are
    ``DPOConfig.reward_weights``."""

    reward_funcs: list[str] = field(
        default_factory=lambda: ["arithmetic"], metadata={"help": "Rewards by registry name (rewards.get_rewards)."}
    )
    reward_options: dict | str | None = field(
        default=None, metadata={"help": "Options per reward name: a mapping (YAML) or JSON text."}
    )


@dataclass
class PPOScriptArguments(DPOScriptArguments):
    """Data, the rule-based rewards (used when ``PPOConfig.reward_model_path`` is None) and the value model's start."""

    reward_weights: list[float] | None = field(
        default=None, metadata={"help": "One weight per reward function (None = all 1.0)."}
    )
    value_model_path: str | None = field(
        default=None, metadata={"help": "Initialisation of the value model; None = the policy's checkpoint."}
    )


@dataclass
class PipelineArguments:
    """Settings of ``run_pipeline``. Each stage runs its recipe's code path with its YAML; ``*_overrides`` are
    ``key=value`` settings applied on top (like CLI flags of that recipe)."""

    output_dir: str = field(default="outputs/pipeline", metadata={"help": "Every stage writes under it."})
    seed: int = field(default=0, metadata={"help": "Seed of every stage."})
    sft_max_steps: int = field(default=WarmStartConfig.max_steps, metadata={"help": "SFT warm-start steps."})
    dapo_config: str | None = field(
        default=None, metadata={"help": "DAPO stage YAML; None = recipes/configs/demo/dapo/config_demo.yaml."}
    )
    dapo_overrides: list[str] = field(
        default_factory=lambda: ["max_steps=300"],
        metadata={"help": "key=value settings over the DAPO YAML (default: fewer steps than the standalone demo)."},
    )
    dpo_config: str | None = field(
        default=None, metadata={"help": "DPO stage YAML; None = recipes/configs/demo/dpo/config_style.yaml."}
    )
    dpo_overrides: list[str] = field(default_factory=list, metadata={"help": "key=value settings over the DPO YAML."})
