"""The bodies of the SFT, DPO and PPO recipes, and the SFT -> DAPO -> DPO pipeline on the demo task.

Recipes (``recipes/sft.py``, ``dpo.py``, ``ppo.py``) only parse (``parse_recipe_args``: with neither ``--config`` nor
``--model_name_or_path`` the demo YAML ``recipes/configs/demo/<recipe>/config_demo.yaml`` supplies the settings) and
call ``run_sft`` / ``run_dpo`` / ``run_ppo``, which read top to bottom like open-r1's recipes: seed, data, model and
tokenizer, rewards, trainer, train, save, report (held-out greedy accuracy before and after, ``accuracy.json``).
The GRPO-family recipes (``trl_ext.recipe.grpo``) use the same data / model / reward helpers.

The pipeline (``recipes/pipeline.py``; one command: 1.5 min measured on 2 idle CPU cores with one torch thread, 11-17
min when the cores were shared with three other jobs and torch used two threads) chains the recipes' own code paths,
each stage starting from the previous stage's saved model:

1. **SFT warm start**: ``trl_ext.demo.warm_start`` (TRL's ``SFTTrainer`` with ``warm_start_sft_config``, exactly
   what ``recipes/sft.py`` runs with no arguments): the cold start of DeepSeek-R1 and DAPO, stopped early so that RL
   starts from a low but non-zero pass rate (a group that is always wrong has no advantage).
2. **DAPO**: ``trl_ext.recipe.grpo.run`` with ``recipes/configs/demo/dapo/config_demo.yaml`` (what ``recipes/dapo.py`` runs):
   clip-higher, token-level loss, dynamic sampling, soft overlong punishment, on the verifiable arithmetic reward;
   fewer steps than the standalone demo to fit the time budget (``dapo_overrides``).
3. **DPO for style**: ``run_dpo`` with ``recipes/configs/demo/dpo/config_style.yaml``: pairs mined from groups
   sampled from the DAPO policy, scored by correctness plus a style reward, filtered by the same all-equal-group
   rule as DAPO's dynamic sampling, matched on length, trained with DPO + RPO's NLL term for a few rounds. On the
   demo the style is already saturated after DAPO (every greedy answer is "<number><eos>", ``style_report``), so
   what this stage measurably moves is accuracy: preference learning on the policy's own right and wrong answers.

Each stage prints its held-out greedy accuracy (``trl_ext.demo.greedy_accuracy``, 240 problems); the table at the
end sums them up. Nothing is downloaded; everything is written under ``output_dir`` (git-ignored ``outputs/``).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from datasets import Dataset, load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from trl_ext.demo import (
    DemoTaskConfig,
    WarmStartConfig,
    build_model,
    build_tokenizer,
    greedy_accuracy,
    make_problems,
    warm_start,
    warm_start_sft_kwargs,
)
from trl_ext.diagnostics.held_out import held_out_accuracy  # noqa: F401  (re-exported: the recipes' held-out metric)

# ---------------------------------------------------------------------------------------------------------------------
# Helpers shared by recipes/sft.py, recipes/dpo.py, recipes/ppo.py
# ---------------------------------------------------------------------------------------------------------------------

_FILE_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
DEMO_CONFIG_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes", "configs", "demo"
)


def demo_config_path(recipe: str) -> str:
    """``recipes/configs/demo/<recipe>/config_demo.yaml``: the settings a recipe runs with when given no arguments."""
    return os.path.join(DEMO_CONFIG_DIR, recipe, "config_demo.yaml")


def parse_recipe_args(dataclass_types: tuple, recipe: str, argv: list[str] | None = None) -> tuple:
    """``TrlParser`` over ``dataclass_types``. With neither ``--config`` nor ``--model_name_or_path`` the demo's YAML
    (``demo_config_path(recipe)``) supplies the values; CLI flags override it either way."""
    from trl import TrlParser

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--config" not in argv and not any(a.startswith("--model_name_or_path") for a in argv):
        argv = ["--config", demo_config_path(recipe), *argv]
    return TrlParser(dataclass_types).parse_args_and_config(args=supported_precision(argv))


def _setting(argv: list[str], name: str) -> tuple[bool, Any]:
    """``(given, value)`` of a boolean training flag, from the command line (``--name``, ``--name X``,
    ``--name=X``) or else from the ``--config`` YAML."""
    flag = f"--{name}"
    for i, arg in enumerate(argv):
        if arg == flag:
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else "true"
            return True, str(value).lower() in ("true", "1", "yes")
        if arg.startswith(flag + "="):
            return True, arg.split("=", 1)[1].lower() in ("true", "1", "yes")
    if "--config" in argv and argv.index("--config") + 1 < len(argv):
        import yaml

        path = argv[argv.index("--config") + 1]
        if os.path.exists(path):
            with open(path) as f:
                config = yaml.safe_load(f) or {}
            if isinstance(config, dict) and config.get(name) is not None:
                return True, bool(config[name])
    return False, None


def supported_precision(argv: list[str]) -> list[str]:
    """``argv`` fitted to the hardware: ``--bf16 false`` when ``bf16`` is not set and no GPU here supports it, and
    ``--use_cpu true`` when ``use_cpu`` is not set and there is no GPU or other accelerator at all.

    TRL's configs default to bf16, which transformers refuses without a bf16-capable GPU ("Your setup doesn't support
    bf16/gpu"); a recipe picks what the hardware supports instead and says which in its opening line. An explicit
    ``bf16: true`` without such a GPU (and without ``use_cpu``, which runs bf16 autocast on the CPU) fails here, with
    the fix. ``use_cpu`` on a machine that has nothing else changes no result; it only spares the data loader's
    "pin_memory ... no accelerator is found" warning."""
    import torch
    from transformers.utils import is_torch_bf16_gpu_available

    if is_torch_bf16_gpu_available():
        return argv
    argv = list(argv)
    given, bf16 = _setting(argv, "bf16")
    if given and bf16 and not _setting(argv, "use_cpu")[1]:
        raise ValueError(
            "bf16=True, but this machine has no GPU that supports bf16. Drop --bf16 (and bf16 from the config) to "
            "let the recipe use fp32 here, or pass --use_cpu true to train with bf16 autocast on the CPU."
        )
    if not given:
        argv += ["--bf16", "false"]
    mps = getattr(torch.backends, "mps", None)
    xpu = getattr(torch, "xpu", None)
    accelerator = (
        torch.cuda.is_available()
        or (mps is not None and mps.is_available())
        or (xpu is not None and xpu.is_available())
    )
    if not accelerator and not _setting(argv, "use_cpu")[0]:
        argv += ["--use_cpu", "true"]
    return argv


def reward_functions(names: list[str], options: dict | str | None = None) -> list:
    """Reward callables by name from the ``rewards`` registry (``options``: a mapping or its JSON text)."""
    if isinstance(options, str):
        try:
            options = json.loads(options)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"reward_options={options!r} is not valid JSON; write e.g. "
                '\'{"length_budget": {"budget": 3}}\' or set it as a mapping in the YAML config.'
            ) from error
    try:
        from rewards import get_rewards
    except ImportError:  # the registry is not there: only the demo reward is available
        from rewards import arithmetic_reward

        if list(names) not in (["arithmetic"], ["arithmetic_reward"]):
            raise ValueError(
                f"reward_funcs={names}: without rewards.get_rewards only ['arithmetic'] exists."
            ) from None
        return [arithmetic_reward]
    return get_rewards(list(names), options)


def _load_file(path: str, field_name: str) -> Dataset:
    extension = os.path.splitext(path)[1].lower()
    if not os.path.exists(path):
        raise FileNotFoundError(f"{field_name}={path!r}: no such file. Give a path to an existing file.")
    return load_dataset(_FILE_FORMATS[extension], data_files=path, split="train")


def load_data(
    dataset_name: str | None, dataset_config: str | None = None, train_split: str = "train", test_split: str = "test"
) -> tuple[Dataset, Dataset | None]:
    """``(train, eval)``: the demo problems when ``dataset_name`` is None; a local ``.json/.jsonl/.csv/.parquet``
    file (all of it for training); or a dataset loadable by ``datasets.load_dataset`` (Hub name, or a local folder
    such as one holding ``train.jsonl`` and ``test.jsonl``), whose ``test_split`` is the eval set when it exists.
    ``test_split`` may also be a local file of held-out problems."""
    if dataset_name is None:
        return make_problems(DemoTaskConfig())
    test_file = os.path.splitext(test_split or "")[1].lower() in _FILE_FORMATS
    held_out = _load_file(test_split, "dataset_test_split") if test_file else None
    if os.path.splitext(dataset_name)[1].lower() in _FILE_FORMATS:
        return _load_file(dataset_name, "dataset_name"), held_out
    data = load_dataset(dataset_name, dataset_config)
    if train_split not in data:
        raise ValueError(f"dataset_train_split={train_split!r} is not a split of {dataset_name}: {list(data)}.")
    if test_file:
        return data[train_split], held_out
    return data[train_split], data[test_split] if test_split in data else None


def load_policy(model_name_or_path: str | None, dtype: str | None = None) -> tuple[PreTrainedModel, Any, str]:
    """``(model, tokenizer, path)``; ``None`` loads the demo's SFT warm start (built and cached on first use)."""
    path = model_name_or_path or warm_start()
    torch_dtype = "auto" if dtype in (None, "auto") else getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    tokenizer = build_tokenizer() if model_name_or_path is None else AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # generation (GRPO family, PPO, DPO mining) needs left padding
    return model, tokenizer, path


def fresh_demo_policy() -> tuple[PreTrainedModel, Any]:
    """The demo's randomly initialised model and its tokenizer (the starting point of the SFT warm start)."""
    tokenizer = build_tokenizer()
    return build_model(tokenizer), tokenizer


def report(
    recipe: str,
    output_dir: str,
    before: float | None,
    after: float | None,
    steps: int | None = None,
    started: float | None = None,
    **extra: Any,
) -> dict:
    """Print the summary table (held-out accuracy before / after / gain, steps, wall time since ``started``,
    outputs) and write the same to ``output_dir/accuracy.json``."""
    from trl_ext.console import format_duration, summary_table

    wall = round(time.time() - started, 1) if started is not None else None
    result = {"recipe": recipe, "accuracy_before": before, "accuracy_after": after, **extra}
    if steps is not None:
        result["optimizer_steps"] = steps
    if wall is not None:
        result["wall_time_s"] = wall
    measured = before is not None and after is not None
    rows = [
        ("held-out greedy accuracy", f"{before:.3f} -> {after:.3f}" if measured else None),
        ("gain", f"{100 * (after - before):+.1f} points" if measured else None),
        ("optimizer steps", steps),
        ("wall time", format_duration(wall) if wall is not None else None),
        ("outputs", f"{output_dir}/: accuracy.json, model"),
    ]
    print(summary_table(f"== {recipe} ==", rows), flush=True)
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, "accuracy.json"), "w") as f:
        json.dump(result, f, indent=2)
    return result


def warm_start_sft_config(output_dir: str, sft: WarmStartConfig | None = None) -> dict[str, Any]:
    """The ``SFTConfig`` fields of the demo warm start (``trl_ext.demo.warm_start``): the defaults of
    ``recipes/sft.py`` with no arguments, so that the recipe and the demo train the same way."""
    return warm_start_sft_kwargs(output_dir, sft)


# ---------------------------------------------------------------------------------------------------------------------
# Recipe bodies
# ---------------------------------------------------------------------------------------------------------------------


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


def _demo_threads(model_args: Any) -> None:
    """One intra-op thread for the demo model (as ``trl_ext.recipe.grpo``): at 0.6M parameters threads gain nothing and
    thrash on a busy machine. Set ``OMP_NUM_THREADS`` to choose yourself."""
    if model_args.model_name_or_path is None and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)


def _load(script_args: SFTScriptArguments) -> tuple[Dataset, Dataset | None]:
    return load_data(
        script_args.dataset_name,
        script_args.dataset_config,
        script_args.dataset_train_split,
        script_args.dataset_test_split,
    )


def _announce(
    recipe: str, trainer_name: str, script_args: Any, training_args: Any, model_args: Any, data: tuple
) -> None:
    """The opening line of a recipe (``trl_ext.console``): what runs, on what, for how long, in what precision."""
    from trl_ext.console import opening_line, precision_label, quiet_libraries

    quiet_libraries()
    if getattr(training_args, "process_index", 0) != 0:
        return
    train_dataset, eval_dataset = data
    name = "built-in arithmetic demo" if script_args.dataset_name is None else script_args.dataset_name
    held_out = f"{len(eval_dataset)} held-out" if eval_dataset is not None else "no held-out split"
    default_model = (
        "demo model, random init" if recipe == "sft" else "demo model + SFT warm start (cached after a first run)"
    )
    steps = getattr(training_args, "max_steps", -1)
    parts = [
        trainer_name,
        f"model {model_args.model_name_or_path or default_model}",
        f"data {name} ({len(train_dataset)} train / {held_out})",
        f"{steps} steps" if steps and steps > 0 else None,
        precision_label(training_args),
        f"outputs in {training_args.output_dir}",
    ]
    print(opening_line(recipe, parts), flush=True)


def run_sft(script_args: SFTScriptArguments, training_args: Any, model_args: Any) -> dict:
    """``recipes/sft.py``: TRL's ``SFTTrainer`` on prompt/completion (demo) or any format it accepts."""
    from transformers import set_seed
    from trl import SFTTrainer, get_peft_config

    from trl_ext.console import use_console

    started = time.time()
    set_seed(training_args.seed)
    _demo_threads(model_args)
    train_dataset, eval_dataset = _load(script_args)
    _announce("sft", "SFTTrainer", script_args, training_args, model_args, (train_dataset, eval_dataset))

    # No model given: the demo's randomly initialised model (the warm start starts from scratch).
    if model_args.model_name_or_path is None:
        model, tokenizer = fresh_demo_policy()
    else:
        model, tokenizer, _ = load_policy(model_args.model_name_or_path, model_args.dtype)

    before = held_out_accuracy(model, tokenizer, eval_dataset, progress="evaluation (before)")
    columns = [c for c in ("prompt", "completion", "messages", "text") if c in train_dataset.column_names]
    trainer = SFTTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset.select_columns(columns),
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    use_console(trainer, "sft")
    trainer.train()
    trainer.save_model(training_args.output_dir)
    tokenizer.save_pretrained(training_args.output_dir)

    after = held_out_accuracy(trainer.model, tokenizer, eval_dataset, progress="evaluation (after)")
    return report("sft", training_args.output_dir, before, after, trainer.state.global_step, started)


def run_dpo(script_args: DPOScriptArguments, training_args: Any, model_args: Any) -> dict:
    """``recipes/dpo.py``: offline DPO on a preference dataset, or group-mined iterative DPO on a prompt dataset."""
    from transformers import set_seed
    from trl import get_peft_config

    from trl_ext.console import use_console
    from trl_ext.dpo.trainer import DPOTrainer, train_iterative_dpo

    started = time.time()
    set_seed(training_args.seed)
    _demo_threads(model_args)

    # Data: preference pairs (trained on as they are), or prompts to mine pairs from.
    train_dataset, eval_dataset = _load(script_args)
    offline = {"chosen", "rejected"} <= set(train_dataset.column_names)
    mode = "offline DPO" if offline else "group-mined iterative DPO"
    _announce("dpo", f"DPOTrainer ({mode})", script_args, training_args, model_args, (train_dataset, eval_dataset))

    # Model and tokenizer (no model given: the demo's SFT warm start).
    model, tokenizer, _ = load_policy(model_args.model_name_or_path, model_args.dtype)
    before = held_out_accuracy(model, tokenizer, eval_dataset, progress="evaluation (before)")

    if offline:
        preference_eval = eval_dataset if eval_dataset is not None and "chosen" in eval_dataset.column_names else None
        trainer = DPOTrainer(
            model=model,
            args=training_args,
            train_dataset=train_dataset,
            eval_dataset=preference_eval,
            processing_class=tokenizer,
            peft_config=get_peft_config(model_args),
        )
        use_console(trainer, "dpo")
        trainer.train()
        model = trainer.accelerator.unwrap_model(trainer.model)
        rounds = []
    else:
        reward_funcs = reward_functions(script_args.reward_funcs, script_args.reward_options)
        rounds = train_iterative_dpo(
            model,
            reward_funcs,
            training_args,
            train_dataset,
            tokenizer,
            on_trainer=lambda k, trainer: use_console(trainer, f"dpo round {k + 1}/{training_args.mining_rounds}"),
        )

    model.save_pretrained(training_args.output_dir)
    tokenizer.save_pretrained(training_args.output_dir)
    for r in rounds:  # reusable offline: --dataset_name <output_dir>/pairs-round-0.jsonl
        r.pairs.to_json(os.path.join(training_args.output_dir, f"pairs-round-{r.round}.jsonl"))
    after = held_out_accuracy(model, tokenizer, eval_dataset, progress="evaluation (after)")
    mined = [{**r.stats.as_dict(), "train_loss": r.train_loss} for r in rounds]
    steps = trainer.state.global_step if offline else None
    mode = "offline" if offline else "mined"
    return report("dpo", training_args.output_dir, before, after, steps, started, mode=mode, rounds=mined)


def run_ppo(script_args: PPOScriptArguments, training_args: Any, model_args: Any) -> dict:
    """``recipes/ppo.py``: TRL's ``PPOTrainer`` with a value model and a trained reward model or the rule rewards."""
    from transformers import AutoModelForSequenceClassification, set_seed
    from trl import get_peft_config
    from trl.experimental.ppo import PPOTrainer

    from trl_ext.ppo import RuleRewardModel, tokenize_prompts

    started = time.time()
    set_seed(training_args.seed)
    _demo_threads(model_args)

    # Data: prompts (plus the columns the rewards read); PPO itself consumes token ids only.
    train_dataset, eval_dataset = _load(script_args)
    _announce("ppo", "PPOTrainer", script_args, training_args, model_args, (train_dataset, eval_dataset))

    # Policy (left padding: PPO generates from padded queries) and value model (default: the policy's checkpoint).
    policy, tokenizer, policy_path = load_policy(model_args.model_name_or_path, model_args.dtype)
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the value head is new on purpose: no "score.weight MISSING" load report
    try:
        value_model = AutoModelForSequenceClassification.from_pretrained(
            script_args.value_model_path or policy_path, num_labels=1
        )
    finally:
        hf_logging.set_verbosity(verbosity)

    # Reward: a trained reward model, or the rule-based functions behind TRL's reward-model interface.
    if training_args.reward_model_path:
        reward_model = AutoModelForSequenceClassification.from_pretrained(
            training_args.reward_model_path, num_labels=1
        )
    else:
        reward_funcs = reward_functions(script_args.reward_funcs, script_args.reward_options)
        prompt_sets = [d for d in (train_dataset, eval_dataset) if d is not None]
        reward_model = RuleRewardModel(reward_funcs, tokenizer, prompt_sets, script_args.reward_weights)

    before = held_out_accuracy(policy, tokenizer, eval_dataset, progress="evaluation (before)")
    trainer = PPOTrainer(
        args=training_args,
        processing_class=tokenizer,
        model=policy,
        ref_model=None,
        reward_model=reward_model,
        value_model=value_model,
        train_dataset=tokenize_prompts(train_dataset, tokenizer),
        eval_dataset=tokenize_prompts(eval_dataset, tokenizer) if eval_dataset is not None else None,
        peft_config=get_peft_config(model_args),
    )
    from trl_ext.console import use_console

    use_console(trainer, "ppo")
    trainer.train()
    trainer.save_model(training_args.output_dir)
    tokenizer.save_pretrained(training_args.output_dir)

    after = held_out_accuracy(trainer.policy_model, tokenizer, eval_dataset, progress="evaluation (after)")
    return report("ppo", training_args.output_dir, before, after, trainer.state.global_step, started)


# ---------------------------------------------------------------------------------------------------------------------
# The pipeline
# ---------------------------------------------------------------------------------------------------------------------


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


def _flags(overrides: list[str]) -> list[str]:
    flags = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override {item!r} is not key=value; write e.g. max_steps=100.")
        flags += [f"--{key}", *value.split(",")] if "," in value else [f"--{key}", value]
    return flags


def run_pipeline(args: PipelineArguments) -> dict[str, Any]:
    """SFT warm start -> DAPO -> DPO for style on the demo task; prints and returns each stage's accuracy."""
    from trl import ModelConfig

    from trl_ext.console import opening_line, quiet_libraries
    from trl_ext.dpo.trainer import DPOConfig
    from trl_ext.grpo.configs import DAPOConfig
    from trl_ext.recipe.grpo import DEMO_CONFIG_DIR as RL_DEMO_DIR
    from trl_ext.recipe.grpo import parse as parse_rl
    from trl_ext.recipe.grpo import run as run_rl

    quiet_libraries()
    start = time.time()
    print(
        opening_line(
            "pipeline",
            [
                "SFT warm start -> DAPO -> DPO for style",
                "model demo model, random init",
                "data built-in arithmetic demo",
                f"outputs in {args.output_dir}",
            ],
        ),
        flush=True,
    )
    if "OMP_NUM_THREADS" not in os.environ:  # the 0.6M-parameter demo model gains nothing from threads
        torch.set_num_threads(1)  # and on a busy machine they thrash
    timings: dict[str, float] = {}
    accuracies: dict[str, float] = {}
    _, held_out = make_problems(DemoTaskConfig())
    tokenizer = build_tokenizer()

    # 0. The random initialisation, for reference.
    model, _ = fresh_demo_policy()
    accuracies["0. random init"] = greedy_accuracy(model, tokenizer, held_out)

    # 1. SFT warm start (cached under output_dir/sft/<hash of the settings>).
    t = time.time()
    sft_dir = warm_start(os.path.join(args.output_dir, "sft"), sft=WarmStartConfig(max_steps=args.sft_max_steps))
    accuracies["1. SFT warm start"] = greedy_accuracy(
        AutoModelForCausalLM.from_pretrained(sft_dir), tokenizer, held_out
    )
    timings["sft"] = time.time() - t
    print(f"[pipeline] 1. SFT warm start: held-out accuracy {accuracies['1. SFT warm start']:.3f}", flush=True)

    # 2. DAPO from the warm start: recipes/dapo.py's code path and YAML.
    t = time.time()
    dapo_dir = os.path.join(args.output_dir, "dapo")
    dapo_config = args.dapo_config or os.path.join(RL_DEMO_DIR, "dapo.yaml")
    argv = [
        "--config",
        dapo_config,
        "--model_name_or_path",
        sft_dir,
        "--output_dir",
        dapo_dir,
        "--seed",
        str(args.seed),
        *_flags(args.dapo_overrides),
    ]
    dapo = run_rl(*parse_rl(DAPOConfig, "dapo", argv=argv), recipe="dapo")
    accuracies["2. DAPO"] = dapo["accuracy_after"]
    timings["dapo"] = time.time() - t
    print(f"[pipeline] 2. DAPO: held-out accuracy {accuracies['2. DAPO']:.3f}", flush=True)

    # 3. DPO for style from the DAPO policy: recipes/dpo.py's code path, style YAML.
    t = time.time()
    dpo_dir = os.path.join(args.output_dir, "dpo")
    dpo_config = args.dpo_config or os.path.join(DEMO_CONFIG_DIR, "dpo", "config_style.yaml")
    argv = [
        "--config",
        dpo_config,
        "--model_name_or_path",
        dapo_dir,
        "--output_dir",
        dpo_dir,
        "--seed",
        str(args.seed),
        *_flags(args.dpo_overrides),
    ]
    dpo = run_dpo(*parse_recipe_args((DPOScriptArguments, DPOConfig, ModelConfig), "dpo", argv=argv))
    accuracies["3. DPO for style"] = dpo["accuracy_after"]
    timings["dpo"] = time.time() - t
    style = {
        "after DAPO": style_report(AutoModelForCausalLM.from_pretrained(dapo_dir), tokenizer, held_out),
        "after DPO": style_report(AutoModelForCausalLM.from_pretrained(dpo_dir), tokenizer, held_out),
    }

    total = time.time() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime  # independent of other jobs sharing the cores
    lines = ["", "| stage | held-out accuracy |", "|---|---|"]
    lines += [f"| {stage} | {value:.3f} |" for stage, value in accuracies.items()]
    lines.append(
        f"\nwall time {total / 60:.1f} min (sft {timings['sft']:.0f} s, dapo {timings['dapo']:.0f} s, "
        f"dpo {timings['dpo']:.0f} s), CPU time {cpu / 60:.1f} min. Greedy answers that are exactly '<number><eos>': "
        f"{style['after DAPO']['clean_frac']:.3f} after DAPO, {style['after DPO']['clean_frac']:.3f} after DPO; "
        f"mean completion tokens {style['after DAPO']['mean_tokens']:.2f} -> {style['after DPO']['mean_tokens']:.2f}"
    )
    print("\n".join(lines), flush=True)
    summary = {
        "accuracies": accuracies,
        "timings_s": timings,
        "wall_time_s": total,
        "cpu_time_s": cpu,
        "dpo_rounds": dpo["rounds"],
        "style": style,
        "args": asdict(args),
    }
    with open(os.path.join(args.output_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2, default=str)
    return summary


@torch.no_grad()
def style_report(model: PreTrainedModel, tokenizer: Any, dataset: Dataset, max_new_tokens: int = 6) -> dict:
    """How the greedy completions look: the fraction that are exactly a number then EOS (the style the pipeline's DPO
    stage rewards) and their mean length in tokens (EOS included)."""
    model.eval()
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "left"
    inputs = tokenizer(list(dataset["prompt"]), return_tensors="pt", padding=True)
    tokenizer.padding_side = padding_side
    output = model.generate(
        **inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
    )
    clean, tokens = 0, 0
    eos = tokenizer.eos_token_id
    for ids in output[:, inputs["input_ids"].shape[1] :].tolist():
        ended = eos in ids
        ids = ids[: ids.index(eos) + 1] if ended else [i for i in ids if i != tokenizer.pad_token_id]
        text = tokenizer.decode(ids, skip_special_tokens=True)
        clean += ended and text.lstrip("-").isdigit()
        tokens += len(ids)
    return {"clean_frac": clean / len(dataset), "mean_tokens": tokens / len(dataset)}
