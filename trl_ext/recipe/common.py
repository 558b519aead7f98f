"""What every recipe shares: the one parser (with the YAML-key check), the demo configs
(``recipes/configs/demo/<recipe>/config_demo.yaml``), data / model / reward loading, the opening line and the one
report file (``summary.json``).

The recipes themselves are readable ``main()`` functions in ``recipes/*.py`` (open-r1 style: seed, data, tokenizer
and model, rewards, trainer, train, save, report), built from these helpers and ``trl_ext.recipe.grpo``'s.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import logging
import os
import re
import sys
import time
import types
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import torch
import yaml
from accelerate import PartialState
from datasets import Dataset
from peft import AutoPeftModelForCausalLM
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, set_seed
from transformers.utils import is_torch_bf16_gpu_available
from trl import TrlParser, get_quantization_config

from trl_ext.console import format_duration, opening_line, precision_label, quiet_libraries, summary_table
from trl_ext.data import Layout, TaskData, cap_held_out, held_out_label, is_data_file, load_data, load_task_data
from trl_ext.demo import (
    WarmStartConfig,
    build_model,
    build_tokenizer,
    warm_start,
    warm_start_is_cached,
    warm_start_sft_kwargs,
)
from trl_ext.diagnostics.held_out import held_out_accuracy
from trl_ext.errors import MissingFileError, UserError, as_user_errors, missing_path_message
from trl_ext.recipe.help import HELP_ALL, short_help, wants_help
from trl_ext.recipe.paths import RECIPES_DIR
from trl_ext.reliability.checkpoints import list_checkpoints
from trl_ext.reliability.checks import (
    check_config_keys,
    check_quantization,
    check_report_to,
    context_length,
    longest_prompt,
)
from trl_ext.reliability.reward_guard import reward_columns
from trl_ext.reliability.zero_reward import ZeroRewardWatch
from trl_ext.reward_model import is_reward_model, load_reward_model, looks_like_model
from trl_ext.rewards import available_rewards, get_rewards
from trl_ext.rewards.arithmetic import arithmetic_reward

__all__ = ["cap_held_out", "is_data_file", "load_data"]  # re-exported from trl_ext.data, their home

logger = logging.getLogger(__name__)
SUMMARY_FILE = "summary.json"
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


class RecipeParser(TrlParser):
    """``TrlParser`` whose usage errors (a value argparse cannot read, e.g. ``--max_steps ten``) print one line, not
    argparse's usage line of every field (hundreds of lines)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}. (--help lists the flags.)", file=sys.stderr, flush=True)
        raise SystemExit(2)


def make_parser(dataclass_types: Sequence[type]) -> RecipeParser:
    """``TrlParser`` over ``dataclass_types`` that takes no abbreviation (``--learning_rat`` is not
    ``--learning_rate``), reports a bad value in one line (``RecipeParser``) and whose ``--help-all`` works: a bare
    ``%`` in any help text (ours, TRL's, transformers') is escaped, since argparse formats help strings with ``%``."""
    parser = RecipeParser(tuple(dataclass_types), allow_abbrev=False)
    for action in parser._actions:
        if isinstance(action.help, str):
            action.help = re.sub(r"%(?!\()", "%%", action.help)
    return parser


def check_flags(parser: TrlParser, argv: Sequence[str]) -> None:
    """Every ``--flag`` of ``argv`` must be one of the parser's: an unknown one stops here (exit 2) naming the closest
    flag, where ``HfArgumentParser`` raised a traceback listing the leftovers."""
    known = {option for action in parser._actions for option in action.option_strings} | {"--config", HELP_ALL}
    for arg in argv:
        if not arg.startswith("--"):
            continue
        flag = arg.split("=", 1)[0]
        if flag not in known:
            close = difflib.get_close_matches(flag, sorted(known), n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]}?" if close else ""
            print(f"{parser.prog}: error: unknown flag {flag}.{hint} (--help lists the flags.)", file=sys.stderr)
            raise SystemExit(2)


def config_yaml(argv: Sequence[str]) -> dict[str, Any]:
    """The mapping of the ``--config`` YAML named in ``argv`` ({} without one, or when it is missing or not a
    mapping: ``check_config_keys`` and ``TrlParser`` report those)."""
    if "--config" not in argv or argv.index("--config") + 1 >= len(argv):
        return {}
    path = argv[argv.index("--config") + 1]
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        config = yaml.safe_load(f) or {}
    return config if isinstance(config, dict) else {}


def given_fields(argv: Sequence[str]) -> set[str]:
    """The fields the user set: ``--name`` flags and the keys of the ``--config`` YAML."""
    given = {arg[2:].split("=", 1)[0] for arg in argv if arg.startswith("--")} - {"config"}
    return given | set(config_yaml(argv))


def given_sources(argv: Sequence[str]) -> dict[str, str]:
    """Where each field of ``given_fields`` was set, for the opening line: ``"--name"`` for a flag (it wins over the
    YAML), ``"demo config"`` for a key of the demo YAML a recipe loads when given no model or config, else ``"config
    YAML"``."""
    config = argv[argv.index("--config") + 1] if "--config" in argv and argv.index("--config") + 1 < len(argv) else ""
    demo = os.path.abspath(config).startswith(os.path.abspath(DEMO_CONFIG_DIR) + os.sep)
    sources = dict.fromkeys(config_yaml(argv), "demo config" if demo else "config YAML")
    for arg in argv:
        if arg.startswith("--") and arg != "--config":
            name = arg[2:].split("=", 1)[0]
            sources[name] = f"--{name}"
    return sources


def recipe_prog(recipe: str | None) -> str:
    """``trl-ext <recipe>``: how help and errors name the command (the script's name when ``recipe`` is None)."""
    return f"trl-ext {recipe or os.path.splitext(os.path.basename(sys.argv[0]))[0]}"


def print_help(parser: TrlParser, dataclass_types: Sequence[type], recipe: str | None, argv: Sequence[str]) -> None:
    """``--help``: the short, grouped help (``trl_ext.recipe.help``); ``--help-all``: every field, as TRL prints it."""
    if wants_help(argv) == "all":
        parser.print_help()
    else:
        demo = os.path.relpath(demo_config_path(recipe), os.path.dirname(RECIPES_DIR)) if recipe else None
        print(short_help(parser, dataclass_types, parser.prog, demo), end="")


def check_config_file(argv: Sequence[str]) -> None:
    """``--config`` must name an existing file (the closest name is suggested), not end the command line."""
    index = argv.index("--config")
    if index + 1 >= len(argv):
        raise UserError("--config needs a YAML file: --config recipes/configs/<model>/<algo>/config_<variant>.yaml.")
    if not os.path.isfile(argv[index + 1]):
        raise MissingFileError(missing_path_message(argv[index + 1], "--config"))


def parse(dataclass_types: Sequence[type], recipe: str | None, argv: list[str] | None = None) -> tuple:
    """The one recipe parser: ``TrlParser`` over ``dataclass_types`` (``make_parser``: no abbreviations, unknown
    flags named with the closest one); ``--help`` prints the short help, ``--help-all`` every field
    (``print_help``). A missing ``--config`` file, and a value a config refuses (its ``__post_init__`` checks:
    TRL's, transformers', a preset's), are ``UserError``s. With neither ``--config`` nor ``--model_name_or_path``
    the demo's YAML (``demo_config_path(recipe)``) supplies the values; CLI flags override it either way. Every YAML file is checked
    first: an unknown key fails, naming the key and the closest field (``check_config_keys``), where ``TrlParser``
    would silently ignore a typo. ``bf16`` / ``use_cpu`` are fitted to the hardware unless set
    (``supported_precision``); ``report_to`` trackers must be installed (``check_report_to``). The first dataclass
    (the script arguments) gets ``given_fields``: the fields set by flag or YAML, and ``given_sources``: which of the
    two set each. ``recipe=None``: no demo YAML
    (``trl-ext eval``, whose defaults are its dataclass's)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = make_parser(dataclass_types)
    parser.prog = recipe_prog(recipe)  # errors and help say `trl-ext dapo`, not `dapo.py`
    if wants_help(argv):
        print_help(parser, dataclass_types, recipe, argv)
        raise SystemExit(0)
    check_flags(parser, argv)
    if recipe and "--config" not in argv and not any(a.startswith("--model_name_or_path") for a in argv):
        argv = ["--config", demo_config_path(recipe), *argv]
    with as_user_errors(ValueError):  # a config value refused at construction: the user's to fix, not a bug
        if "--config" in argv:
            check_config_file(argv)
            check_config_keys(argv[argv.index("--config") + 1], list(dataclass_types))
        given = given_fields(argv)
        trains = any("bf16" in getattr(t, "__dataclass_fields__", {}) for t in dataclass_types)
        parsed = parser.parse_args_and_config(args=supported_precision(argv) if trains else argv)
        for values in parsed:
            if hasattr(values, "report_to"):
                check_report_to(values.report_to)
    parsed[0].given_fields = given
    parsed[0].given_sources = given_sources(argv)
    return parsed


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
    config = config_yaml(argv)
    if config.get(name) is not None:
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
        raise UserError(
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
    """Reward callables by name from the ``rewards`` registry (``options``: a mapping or its JSON text); a name the
    registry does not know that is a folder or a Hub id is loaded as a reward model (``trl_ext.reward_model``), and
    one that is neither fails naming both."""
    if isinstance(options, str):
        try:
            options = json.loads(options)
        except json.JSONDecodeError as error:
            raise UserError(
                f"reward_options={options!r} is not valid JSON; write e.g. "
                '\'{"length_budget": {"budget": 3}}\' or set it as a mapping in the YAML config.'
            ) from error
    known = set(available_rewards())
    rules = [n for n in names if n in known]
    with as_user_errors(ValueError):  # an option a reward does not take: the registry names it and the closest
        built = iter(get_rewards(rules, {k: v for k, v in (options or {}).items() if k in rules}) if rules else [])
    funcs = []
    for name in names:
        if name in known:
            funcs.append(next(built))
            continue
        if not looks_like_model(name):
            with as_user_errors(ValueError):
                get_rewards([name])  # raises: unknown reward, with the known names and the closest one
        try:
            funcs.append(load_reward_model(name))
        except ValueError as error:
            raise UserError(
                f"reward {name!r} is neither a registry name ({', '.join(sorted(known))}) nor a loadable reward "
                f"model: {error} Give a registry name, or a folder written by `trl-ext reward` (or any "
                "AutoModelForSequenceClassification checkpoint)."
            ) from error
    return funcs


def gold_reward(funcs: Sequence[Callable], script_args: Any, layout: Layout) -> Callable | None:
    """The rule reward that scores held-out accuracy: the first rule among ``funcs``; with only reward models, the
    task reward of the data (the gold a learned reward stands in for); None when there is none."""
    rule = next((f for f in funcs if not is_reward_model(f)), None)
    if rule is not None or script_args.dataset_name is None:
        return rule
    if layout.reference_column is None:
        return None
    return reward_functions([layout.task_rewards[0]])[0]


def task_rewards(script_args: Any, layout: Layout | None) -> tuple[list, list[str]]:
    """``(reward functions, names)`` of a run: ``reward_funcs`` when given, else the task reward that fits the data's
    layout (``Layout.task_rewards``: ``accuracy`` for math, ``code`` for code tests, ``arithmetic`` on the demo),
    never the demo's reward on user data. A name that is a folder or a Hub id is a reward model
    (``reward_functions``). The first rule function is the task reward: it is wrapped in ``ZeroRewardWatch`` (one
    warning when it scores 0 or unscorable on every completion of the first steps).
    ``layout`` may be None when ``reward_funcs`` names the rewards (built before the data is loaded)."""
    names = list(getattr(script_args, "reward_funcs", None) or [])
    if not names:
        if layout is None:
            raise ValueError("task_rewards: no reward_funcs named and no data layout to choose the task reward from.")
        if layout.reference_column is None:
            raise UserError(
                f"the dataset has no reference column that trl-ext recognizes ({layout.describe()}), so no task reward "
                "can score it. Name the column with the final answer, --dataset_answer_column <column> (a dotted path "
                "reaches a nested field), or choose rewards with --reward_funcs (trl_ext.rewards.available_rewards())."
            )
        names = list(layout.task_rewards)
    funcs = reward_functions(names, getattr(script_args, "reward_options", None))
    index = next((i for i, f in enumerate(funcs) if not is_reward_model(f)), None)
    if index is not None:  # the first rule reward (a reward model's scores are never all zero)
        first = funcs[index]
        column = getattr(first, "solution_column", None) or getattr(first, "tests_column", None)
        funcs[index] = ZeroRewardWatch(first, column or next(iter(reward_columns(first) or []), None))
    return funcs, names


def load_policy(
    model_name_or_path: str | None,
    dtype: str | None = None,
    model_args: Any = None,
    chat_template: str | None = None,
    warm_start_seed: int | None = None,
) -> tuple[PreTrainedModel, Any, str]:
    """``(model, tokenizer, path)``; ``None`` loads the demo's SFT warm start (built and cached on first use; of SFT
    seed ``warm_start_seed``, default the demo's).

    ``model_args`` (TRL's ``ModelConfig``): ``load_in_4bit`` / ``load_in_8bit`` load the weights through TRL's
    ``get_quantization_config`` onto this process's GPU (QLoRA with ``use_peft``), or stop first naming what is
    missing (``check_quantization``: bitsandbytes, a CUDA GPU, LoRA adapters). ``chat_template``: a ``.jinja`` file
    or the template text, set on the tokenizer."""
    quantization = None
    if model_args is not None and (model_args.load_in_4bit or model_args.load_in_8bit):
        check_quantization(model_args)
        quantization = {
            "quantization_config": get_quantization_config(model_args),
            "device_map": {"": PartialState().local_process_index},
        }
    path = model_name_or_path or warm_start(sft=demo_warm_start_config(warm_start_seed))
    check_model_folder(path)
    torch_dtype = "auto" if dtype in (None, "auto") else getattr(torch, dtype)
    if os.path.exists(os.path.join(path, "adapter_config.json")):  # a LoRA run's output: base model + adapter, merged
        model = AutoPeftModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **(quantization or {}))
        model = model.merge_and_unload() if quantization is None else model
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **(quantization or {}))
    return model, load_tokenizer(model_name_or_path and path, chat_template), path


def demo_warm_start_config(seed: int | None) -> WarmStartConfig:
    """The demo's warm-start settings with SFT seed ``seed`` (None: the default seed)."""
    return WarmStartConfig() if seed is None else WarmStartConfig(seed=seed)


def load_tokenizer(path: str | None, chat_template: str | None = None) -> Any:
    """The tokenizer saved with a model (None: the demo's, built in code), set up for generation: a pad token (EOS
    when it has none), left padding, and ``chat_template`` (a ``.jinja`` file or the template text) when given."""
    tokenizer = build_tokenizer() if path is None else AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # generation (GRPO family, PPO, DPO mining) needs left padding
    if chat_template:
        if os.path.exists(chat_template):
            with open(chat_template) as f:
                chat_template = f.read()
        tokenizer.chat_template = chat_template
    return tokenizer


def load_for_vllm(path: str, chat_template: str | None = None) -> tuple[Any, Any]:
    """``(model stand-in, tokenizer)`` for generation by vLLM, which loads the weights itself: the stand-in carries
    the model's ``config`` (its context length) and ``name_or_path``, so no second copy of the weights is loaded."""
    check_model_folder(path)
    config = AutoConfig.from_pretrained(path)
    return types.SimpleNamespace(config=config, name_or_path=path), load_tokenizer(path, chat_template)


def check_model_folder(path: str) -> None:
    """A local folder given as a model must hold one (``config.json``, or a LoRA ``adapter_config.json``): a run's
    output_dir whose training stopped before the final save holds only checkpoints, so name the newest of them."""
    if not os.path.isdir(path) or any(
        os.path.exists(os.path.join(path, name)) for name in ("config.json", "adapter_config.json")
    ):
        return
    checkpoints = sorted(
        (n for n in os.listdir(path) if re.fullmatch(r"checkpoint-\d+", n)), key=lambda n: int(n.split("-")[1])
    )
    hint = (
        f"It holds checkpoints only (the run stopped before its final save): give {os.path.join(path, checkpoints[-1])}"
        if checkpoints
        else "Give a folder written by save_pretrained (a run's output_dir or checkpoint-N folder) or a Hub id"
    )
    raise UserError(f"{path} holds no model (no config.json or adapter_config.json). {hint}.")


def written_files(output_dir: str) -> list[str]:
    """What a run left in ``output_dir``: its files, sorted (``summary.json`` among them), then its ``checkpoint-N/``
    folders in step order (``(incomplete)`` after one a killed save left half-written). What the summary lists, so
    that it says ``adapter_model.safetensors`` under PEFT and ``model.safetensors`` otherwise, and which checkpoints
    there are to resume from or evaluate."""
    if not os.path.isdir(output_dir):
        return []
    names = {n for n in os.listdir(output_dir) if os.path.isfile(os.path.join(output_dir, n))}
    checkpoints = [
        f"{os.path.basename(path)}/{'' if complete else ' (incomplete)'}"
        for _, path, complete in list_checkpoints(output_dir)
    ]
    return sorted(names | {SUMMARY_FILE}) + checkpoints


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
    metric: str = "held-out greedy accuracy",
    **extra: Any,
) -> dict:
    """Print the summary table (held-out accuracy before / after / gain, steps, wall time since ``started``,
    outputs) and write the same to ``output_dir/summary.json`` (``write_summary``). ``metric`` names the figure
    (the reward recipe's is pairwise accuracy on held-out pairs)."""
    wall = round(time.time() - started, 1) if started is not None else None
    result = {"recipe": recipe, "accuracy_before": before, "accuracy_after": after, **extra}
    if steps is not None:
        result["optimizer_steps"] = steps
    if wall is not None:
        result["wall_time_s"] = wall
    measured = before is not None and after is not None
    rows = [
        (metric, f"{before:.3f} -> {after:.3f}" if measured else None),
        ("gain", f"{100 * (after - before):+.1f} points" if measured else None),
        ("optimizer steps", steps),
        ("wall time", format_duration(wall) if wall is not None else None),
        ("outputs", f"{output_dir}/: {', '.join(written_files(output_dir))}"),
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


def demo_threads(model_args: Any = None, demo: bool | None = None) -> None:
    """One intra-op thread for the demo model (no ``model_name_or_path``, or ``demo=True``): at 0.6M parameters
    threads gain nothing and thrash on a busy machine. Set ``OMP_NUM_THREADS`` to choose yourself."""
    demo = model_args.model_name_or_path is None if demo is None else demo
    if demo and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)


def start(
    script_args: Any, training_args: Any, model_args: Any, strict: bool = True, with_completion: bool = False
) -> tuple[float, Dataset, Dataset | None, Layout]:
    """The first steps of a recipe: the clock, the seed, the demo's thread count and the data (``(started, train,
    held-out, layout)``; see ``load_script_data``)."""
    started = time.time()
    set_seed(training_args.seed)
    demo_threads(model_args)
    data = load_script_data(script_args, strict=strict, with_completion=with_completion)
    return started, data.train, data.held_out, data.layout


def evaluation_reward(script_args: Any, layout: Layout, reward: Callable | None = None) -> Callable | None:
    """The reward that held-out evaluation and ``trl-ext eval`` score with: on the demo its own answer check
    (``arithmetic_reward``, whatever ``reward``); on user data ``reward`` (the run's task reward, built once by the
    recipe) or, when None, the rule reward of ``reward_funcs`` / the layout (``gold_reward``: never a reward model);
    None when nothing names a reward and the data has no reference column."""
    if script_args.dataset_name is None:
        return arithmetic_reward
    if reward is not None:
        return reward
    if not getattr(script_args, "reward_funcs", None) and layout.reference_column is None:
        return None
    return gold_reward(task_rewards(script_args, layout)[0], script_args, layout)


def completion_budget(model: Any, longest: tuple[int, Any] | None, max_new_tokens: int) -> int:
    """``max_new_tokens``, cut so that the longest prompt (``longest_prompt``) plus the completion fits the model's
    context; at least 1."""
    context = context_length(getattr(model, "config", None))
    room = context - longest[0] if context is not None and longest is not None else max_new_tokens
    return max(1, min(max_new_tokens, room))


def held_out_evaluator(
    script_args: Any,
    layout: Layout,
    tokenizer: Any,
    eval_dataset: Dataset | None,
    max_new_tokens: int,
    reward: Callable | None = None,
    is_main: bool = True,
) -> Callable[..., float | None]:
    """``evaluate(model, phase=False)``: held-out greedy accuracy of every recipe, i.e. ``trl-ext eval``'s
    ``pass@1 (greedy)`` (``phase``, e.g. ``"before RL"``, titles a progress bar on the main process), scored by
    ``evaluation_reward`` on completions of up to ``max_new_tokens`` (the demo: 4), never past the model's context
    after the longest prompt of the first rows (measured once, here); None without a held-out split or a reference
    to score against."""
    reward = evaluation_reward(script_args, layout, reward)
    if reward is None:
        return lambda model, phase=False: None
    longest = longest_prompt(eval_dataset, tokenizer)

    def evaluate(model: Any, phase: str | bool = False) -> float | None:
        label = f"evaluation ({phase})" if is_main and isinstance(phase, str) else False
        length = completion_budget(model, longest, max_new_tokens)
        return held_out_accuracy(model, tokenizer, eval_dataset, reward, length, progress=label)

    return evaluate


def finish(
    recipe: str,
    trainer: Any,
    tokenizer: Any,
    policy: Any,
    evaluate: Callable[[Any, str], float | None],
    before: float | None,
    started: float,
) -> dict:
    """The last steps of a recipe after ``trainer.train()``: save the model and tokenizer to ``output_dir``, measure
    the held-out greedy accuracy of ``policy`` (``evaluate``, from ``held_out_evaluator``) and report (``report``:
    table and ``summary.json``)."""
    output_dir = trainer.args.output_dir
    trainer.save_model(output_dir)
    tokenizer.save_pretrained(output_dir)
    after = evaluate(policy, "after")
    return report(recipe, output_dir, before, after, trainer.state.global_step, started)


def load_script_data(
    script_args: Any, strict: bool = True, with_completion: bool = False, hold_out: bool = True
) -> TaskData:
    """The recipe's data (``trl_ext.data.load_task_data``): training and held-out sets mapped by their layout, the
    held-out set cut to ``held_out_max_problems``. ``strict=False`` (SFT, DPO on preference pairs) keeps a layout it
    does not recognize as it is; ``with_completion`` (SFT) maps a worked solution to ``completion``. ``hold_out``
    (the training recipes; not ``trl-ext eval``, which evaluates a lone file whole): data with a reference column
    but no held-out split gets one carved from its rows (``trl_ext.data.carve_held_out``)."""
    return load_task_data(script_args, strict=strict, with_completion=with_completion, hold_out=hold_out)


def announce(
    recipe: str,
    trainer_name: str,
    script_args: Any,
    training_args: Any,
    model_args: Any,
    data: tuple,
    steps: str | None = None,
    layout: Layout | None = None,
    rewards: Sequence[str] | None = None,
) -> None:
    """The opening line of a recipe (``trl_ext.console``): what runs, on what (the data's layout and how it maps,
    the rewards), for how long, at what learning rate (``learning_rate_part``), in what precision."""
    quiet_libraries()
    if getattr(training_args, "process_index", 0) != 0:
        return
    train_dataset, eval_dataset = data
    name = "built-in arithmetic demo" if script_args.dataset_name is None else script_args.dataset_name
    held_out = held_out_label(eval_dataset)
    if recipe == "sft":
        default_model = "demo model, random init"
    elif warm_start_is_cached(sft=demo_warm_start_config(getattr(script_args, "demo_warm_start_seed", None))):
        default_model = "demo model + SFT warm start (cached)"
    else:
        default_model = "demo model + SFT warm start (trained first, then cached)"
    max_steps = getattr(training_args, "max_steps", -1)
    parts = [
        trainer_name,
        f"model {model_args.model_name_or_path or default_model}",
        f"data {name} ({len(train_dataset)} train / {held_out})",
        layout.describe() if layout is not None and script_args.dataset_name is not None else None,
        f"reward {', '.join(rewards)}{'' if getattr(script_args, 'reward_funcs', None) else ' (fits the data)'}"
        if rewards
        else None,
        steps or (f"{max_steps} steps" if max_steps and max_steps > 0 else None),
        learning_rate_part(script_args, training_args),
        precision_label(training_args),
        f"outputs in {training_args.output_dir}",
    ]
    print(opening_line(recipe, parts), flush=True)


def learning_rate_source(script_args: Any, training_args: Any) -> str:
    """Where the learning rate came from: a flag (``"--learning_rate"``), the user's YAML (``"config YAML"``), the
    demo's YAML (``"demo config"``), else a default: the preset's (``"dapo preset default"``) or the config class's
    (``"SFTConfig default"``)."""
    source = getattr(script_args, "given_sources", {}).get("learning_rate")
    if source is None and "learning_rate" in getattr(script_args, "given_fields", set()):
        source = "given"
    if source is not None:
        return source
    preset = getattr(script_args, "preset", None)
    return f"{preset} preset default" if preset else f"{type(training_args).__name__} default"


def learning_rate_part(script_args: Any, training_args: Any) -> str | None:
    """``"lr 5e-05 (--learning_rate)"`` for the opening line: a preset's paper default left in place on a small model
    is the first thing to check when the policy does not move, so the line says the value and who chose it."""
    lr = getattr(training_args, "learning_rate", None)
    if not isinstance(lr, int | float):
        return None
    return f"lr {lr:g} ({learning_rate_source(script_args, training_args)})"


DEMO_TRAINED = "outputs/dapo-demo"  # where `trl-ext dapo` (recipes/configs/demo/dapo/config_demo.yaml) saves its model


def demo_models() -> list[tuple[str, str]]:
    """``(name, path)`` of what ``trl-ext eval`` evaluates with no ``--models``: the demo's SFT warm start (trained
    and cached on first use) and, when ``trl-ext dapo`` has saved it, the demo's trained model."""
    models = [("demo warm start", warm_start())]
    if os.path.exists(os.path.join(DEMO_TRAINED, "config.json")):
        models.append((DEMO_TRAINED, DEMO_TRAINED))
    return models


def announce_eval(args: Any, data: TaskData, split: str, problems: int, models: Sequence[str], settings: Any) -> None:
    """The opening line of ``trl-ext eval``: the models, the data and its layout, the reward, the sampling."""
    quiet_libraries()
    name = "built-in arithmetic demo" if args.dataset_name is None else args.dataset_name
    sampling = f"K={settings.num_samples} samples at temperature {settings.temperature}, top-p {settings.top_p}"
    parts = [
        f"{len(models)} model{'s' if len(models) > 1 else ''}: {', '.join(models)}",
        f"data {name} ({problems} problems of {split})",
        data.describe() if args.dataset_name is not None else None,
        f"reward {', '.join(args.reward_funcs) if args.reward_funcs else ', '.join(data.layout.task_rewards)}",
        sampling + (" + greedy" if settings.greedy else ""),
        f"up to {settings.max_new_tokens} new tokens",
        "vLLM" if settings.use_vllm else "transformers",
        f"outputs in {args.output_dir}",
    ]
    print(opening_line("eval", parts), flush=True)
