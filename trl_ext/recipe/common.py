"""What every recipe shares: the one parser (with the YAML-key check), the demo configs
(``recipes/configs/demo/<recipe>/config_demo.yaml``), data / model / reward loading, the opening line and the one
report file (``summary.json``).

The recipes themselves are readable ``main()`` functions in ``recipes/*.py`` (open-r1 style: seed, data, tokenizer
and model, rewards, trainer, train, save, report), built from these helpers and ``trl_ext.recipe.grpo``'s.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
import time
import types
from collections.abc import Sequence
from typing import Any

import torch
import yaml
from datasets import Dataset, load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, set_seed
from transformers.utils import is_torch_bf16_gpu_available
from trl import TrlParser

from trl_ext.console import format_duration, opening_line, precision_label, quiet_libraries, summary_table
from trl_ext.demo import (
    DemoTaskConfig,
    WarmStartConfig,
    build_model,
    build_tokenizer,
    make_problems,
    warm_start,
    warm_start_is_cached,
    warm_start_sft_kwargs,
)
from trl_ext.diagnostics.held_out import held_out_accuracy
from trl_ext.reliability.checks import check_config_keys
from trl_ext.rewards import get_rewards

logger = logging.getLogger(__name__)
SUMMARY_FILE = "summary.json"
_FILE_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
RECIPES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "recipes")
DEMO_CONFIG_DIR = os.path.join(RECIPES_DIR, "configs", "demo")


def demo_config_path(recipe: str) -> str:
    """``recipes/configs/demo/<recipe>/config_demo.yaml``: the settings a recipe runs with when given no arguments."""
    return os.path.join(DEMO_CONFIG_DIR, recipe, "config_demo.yaml")


def load_recipe(name: str) -> types.ModuleType:
    """``recipes/<name>.py`` as a module (its ``main`` is the recipe): how the pipeline runs its stages and how
    ``trl-ext <name>`` finds a recipe. The recipes folder sits next to the package in a source checkout or an
    editable install (``pip install -e .``)."""
    path = os.path.join(RECIPES_DIR, f"{name}.py")
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"recipe {name!r}: {path} does not exist. The recipes ship with the source tree: run from a checkout, or "
            "install it with `pip install -e .`."
        )
    spec = importlib.util.spec_from_file_location(f"trl_ext_recipe_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse(dataclass_types: Sequence[type], recipe: str, argv: list[str] | None = None) -> tuple:
    """The one recipe parser: ``TrlParser`` over ``dataclass_types``. With neither ``--config`` nor
    ``--model_name_or_path`` the demo's YAML (``demo_config_path(recipe)``) supplies the values; CLI flags override it
    either way. Every YAML file is checked first: an unknown key fails, naming the key and the closest field
    (``check_config_keys``), where ``TrlParser`` would silently ignore a typo. ``bf16`` / ``use_cpu`` are fitted to
    the hardware unless set (``supported_precision``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--config" not in argv and not any(a.startswith("--model_name_or_path") for a in argv):
        argv = ["--config", demo_config_path(recipe), *argv]
    if "--config" in argv:
        check_config_keys(argv[argv.index("--config") + 1], list(dataclass_types))
    return TrlParser(tuple(dataclass_types)).parse_args_and_config(args=supported_precision(argv))


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
    outputs) and write the same to ``output_dir/summary.json`` (``write_summary``)."""
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
        ("outputs", f"{output_dir}/: {SUMMARY_FILE}, model"),
    ]
    print(summary_table(f"== {recipe} ==", rows), flush=True)
    write_summary(output_dir, result)
    return result


def write_summary(output_dir: str, summary: dict[str, Any]) -> str:
    """The one report file of every recipe and of the pipeline: ``output_dir/summary.json``."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, SUMMARY_FILE)
    with open(path, "w") as f:
        json.dump(summary, f, indent=2, default=str)
    return path


def warm_start_sft_config(output_dir: str, sft: WarmStartConfig | None = None) -> dict[str, Any]:
    """The ``SFTConfig`` fields of the demo warm start (``trl_ext.demo.warm_start``): the defaults of
    ``recipes/sft.py`` with no arguments, so that the recipe and the demo train the same way."""
    return warm_start_sft_kwargs(output_dir, sft)


def demo_threads(model_args: Any) -> None:
    """One intra-op thread for the demo model (as ``trl_ext.recipe.grpo``): at 0.6M parameters threads gain nothing and
    thrash on a busy machine. Set ``OMP_NUM_THREADS`` to choose yourself."""
    if model_args.model_name_or_path is None and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)


def start(script_args: Any, training_args: Any, model_args: Any) -> tuple[float, Dataset, Dataset | None]:
    """The first steps of a recipe: the clock, the seed, the demo's thread count and the data (``(started, train,
    held-out)``; see ``load_script_data``)."""
    started = time.time()
    set_seed(training_args.seed)
    demo_threads(model_args)
    return (started, *load_script_data(script_args))


def finish(
    recipe: str,
    trainer: Any,
    tokenizer: Any,
    policy: Any,
    eval_dataset: Dataset | None,
    before: float | None,
    started: float,
) -> dict:
    """The last steps of a recipe after ``trainer.train()``: save the model and tokenizer to ``output_dir``, measure
    the held-out greedy accuracy of ``policy`` and report (``report``: table and ``summary.json``)."""
    output_dir = trainer.args.output_dir
    trainer.save_model(output_dir)
    tokenizer.save_pretrained(output_dir)
    after = held_out_accuracy(policy, tokenizer, eval_dataset, progress="evaluation (after)")
    return report(recipe, output_dir, before, after, trainer.state.global_step, started)


def load_script_data(script_args: Any) -> tuple[Dataset, Dataset | None]:
    """The recipe's training and held-out sets (``load_data``), the held-out set cut to ``held_out_max_problems``."""
    train, held_out = load_data(
        script_args.dataset_name,
        script_args.dataset_config,
        script_args.dataset_train_split,
        script_args.dataset_test_split,
    )
    return train, cap_held_out(held_out, getattr(script_args, "held_out_max_problems", None))


def cap_held_out(held_out: Dataset | None, max_problems: int | None, seed: int = 0) -> Dataset | None:
    """At most ``max_problems`` held-out problems: a seeded random subset (the same on every run and process) when
    the split is larger, said in a warning; ``None`` or 0: all of them. Greedy evaluation of a large split before,
    during and after training would otherwise cost more than the training itself."""
    if held_out is None or not max_problems or len(held_out) <= max_problems:
        return held_out
    logger.warning(
        f"The held-out split has {len(held_out):,} problems: evaluating a seeded random {max_problems:,} of them "
        f"(held_out_max_problems={max_problems}; set it to 0 to evaluate all)."
    )
    return held_out.shuffle(seed=seed).select(range(max_problems))


def announce(
    recipe: str,
    trainer_name: str,
    script_args: Any,
    training_args: Any,
    model_args: Any,
    data: tuple,
    steps: str | None = None,
) -> None:
    """The opening line of a recipe (``trl_ext.console``): what runs, on what, for how long, in what precision."""
    quiet_libraries()
    if getattr(training_args, "process_index", 0) != 0:
        return
    train_dataset, eval_dataset = data
    name = "built-in arithmetic demo" if script_args.dataset_name is None else script_args.dataset_name
    held_out = f"{len(eval_dataset)} held-out" if eval_dataset is not None else "no held-out split"
    if recipe == "sft":
        default_model = "demo model, random init"
    elif warm_start_is_cached():
        default_model = "demo model + SFT warm start (cached)"
    else:
        default_model = "demo model + SFT warm start (trained first, then cached)"
    max_steps = getattr(training_args, "max_steps", -1)
    parts = [
        trainer_name,
        f"model {model_args.model_name_or_path or default_model}",
        f"data {name} ({len(train_dataset)} train / {held_out})",
        steps or (f"{max_steps} steps" if max_steps and max_steps > 0 else None),
        precision_label(training_args),
        f"outputs in {training_args.output_dir}",
    ]
    print(opening_line(recipe, parts), flush=True)
