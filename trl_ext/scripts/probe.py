"""The pre-flight probe: will RL learn anything on this model and data, and what will dynamic sampling cost?

    trl-ext probe                                                     # the demo after its SFT warm start
    trl-ext probe --config recipes/configs/qwen2.5-0.5b-instruct/dapo/config_gsm8k.yaml   # a run's own YAML
    python -m trl_ext.scripts.probe --model_name_or_path <model> --dataset_name <data> --num_generations 16

It samples ``num_generations`` completions for each of a sample of prompts, scores them with the run's reward functions
and reports the figures of ``probe_stats`` (pass@k, the groups dynamic sampling keeps (DAPO Eq. 11) and what refilling
them costs under the run's own refill policy) as a ``ProbeReport``. ``trl-ext probe --config <training YAML>`` takes
the run's model, data, rewards, sampling and config; flags override them.

A completion *passes* when its weighted reward is ``>= success_threshold`` (default 1.0), not "the highest reward
observed": a cold model that never succeeds would then pass everywhere. Sampling is the model's plain ``generate``, so
the numbers describe the first step of training, not later ones.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re
import sys
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
import yaml
from datasets import Dataset

from trl_ext.data import TaskData, format_prompts, load_task_data
from trl_ext.demo import build_model, build_tokenizer
from trl_ext.diagnostics.evaluation import Completion, Sampling, generate, generate_vllm, vllm_engine
from trl_ext.diagnostics.probe_args import (
    DEFAULT_GROUPS_PER_BATCH,
    DEMO,
    DEMO_RANDOM,
    ProbeArguments,
    default_run_config,
    dynamic_sampling_policy,
    sampling_values,
)
from trl_ext.diagnostics.probe_report import ProbeReport
from trl_ext.diagnostics.probe_stats import recommend, reward_model_spread, summarize
from trl_ext.errors import UserError, as_user_errors
from trl_ext.grpo.configs import GRPOFamilyConfig
from trl_ext.grpo.presets import lookup
from trl_ext.recipe import steps
from trl_ext.recipe.models import load_policy
from trl_ext.recipe.parsing import check_config_file, check_flags, make_parser
from trl_ext.recipe.rewards import reward_functions
from trl_ext.reward_model import as_callable, is_reward_model, reward_model_name
from trl_ext.scoring import prompt_text, score_completions

DEMO_MAX_COMPLETION_LENGTH = 8  # the demo's answers are at most 2 digits + EOS
DEFAULT_MAX_COMPLETION_LENGTH = 256
#: The probe's former refill-policy flags and the run's config fields that set the policy now.
REMOVED_FLAGS = {
    "--max_rounds": "dynamic_sampling_max_generation_batches",
    "--refill_margin": "dynamic_sampling_refill_margin",
    "--max_round_size": "dynamic_sampling_max_round_size",
    "--groups_per_batch": "generation_batch_size (prompts per generation batch x num_generations)",
}
#: Keys of a run's YAML that name a probe setting under another name; and run keys that are not the probe's own.
YAML_KEYS_FOR_PROBE = {"dataset_prompt_column": "prompt_column", "dataset_train_split": "dataset_split"}
RUN_ONLY_KEYS = {"use_vllm", "output_dir", "generation_batch_size"}


def sample_transformers(
    model: Any, tokenizer: Any, prompts: Sequence[str], args: ProbeArguments, max_completion_length: int
) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """G seeded samples per prompt with ``model.generate``: texts (groups contiguous), lengths and truncation flags."""
    torch.manual_seed(args.seed)
    per_call = max(1, args.generation_batch_size // args.num_generations)
    return _columns(generate(model, tokenizer, prompts, max_completion_length, _sampling(args), per_call))


def sample_vllm(
    model_path: str, tokenizer: Any, prompts: Sequence[str], args: ProbeArguments, max_completion_length: int
) -> tuple[list[str], torch.Tensor, torch.Tensor]:  # pragma: no cover - needs vLLM and a GPU; not in the CPU suite
    """The same as :func:`sample_transformers` with a vLLM engine (``evaluation.generate_vllm``: ``n=G`` samples)."""
    engine = vllm_engine(model_path, args.seed)
    return _columns(generate_vllm(engine, tokenizer, prompts, max_completion_length, _sampling(args), args.seed))


def _sampling(args: ProbeArguments) -> Sampling:
    return Sampling(args.num_generations, False, args.temperature, args.top_p, args.top_k)


def _columns(groups: list[list[Completion]]) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    flat = [completion for group in groups for completion in group]
    return [c.text for c in flat], torch.tensor([c.length for c in flat]), torch.tensor([c.truncated for c in flat])


def _use_vllm(args: ProbeArguments, model_path: str | None) -> bool:
    """vLLM when asked, or (``use_vllm=None``) when it is installed and a GPU is present; never for the demo model
    unless asked (its character-level tokenizer gains nothing from vLLM)."""
    if args.use_vllm is False or model_path is None or (args.use_vllm is None and args.is_demo):
        return False
    available = importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()
    if args.use_vllm and not available:
        raise ValueError("use_vllm=True but vLLM is not installed or no GPU is present; drop --use_vllm.")
    return available


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def score(
    reward_funcs: Sequence[Callable],
    weights: Sequence[float],
    rows: list[dict[str, Any]],
    prompts: list[Any],
    completions: list[Any],
    prompt_column: str,
) -> torch.Tensor:
    """Weighted sum of the reward functions, called as TRL calls them (``trl_ext.scoring.score_completions``)."""
    keys = [key for key in rows[0] if key not in (prompt_column, "prompt", "completion", "completion_ids")]
    columns = {key: [row[key] for row in rows] for key in keys}
    extra = {"trainer_state": None, "log_extra": _noop, "log_metric": _noop}
    return score_completions(reward_funcs, prompts, completions, weights, extra=extra, dtype=torch.float64, **columns)


def load_task(args: ProbeArguments) -> TaskData:
    """The probed split, mapped by its layout as the recipes map it, cut to a seeded sample of ``num_prompts`` rows."""
    data = load_task_data(
        types.SimpleNamespace(
            dataset_name=args.dataset_name,
            dataset_config=args.dataset_config,
            dataset_train_split=args.dataset_split,
            dataset_test_split="test",
            dataset_prompt_column=None if args.prompt_column == "prompt" else args.prompt_column,
            dataset_answer_column=args.dataset_answer_column,
        )
    )
    held_out_names = ("test", "eval", "validation", "held_out")
    dataset = data.held_out if args.dataset_name is None and args.dataset_split in held_out_names else data.train
    if len(dataset) > args.num_prompts:
        dataset = dataset.shuffle(seed=args.seed).select(range(args.num_prompts))
    return TaskData(dataset, None, data.layout)


def probe_model(
    model: Any,
    tokenizer: Any,
    dataset: Dataset,
    reward_funcs: Sequence[Callable],
    args: ProbeArguments | None = None,
    model_name: str = "model",
    model_path: str | None = None,
    training_args: GRPOFamilyConfig | None = None,
) -> ProbeReport:
    """Probe an already loaded model on all rows of ``dataset`` with ``reward_funcs``. ``model_path`` enables the
    vLLM sampler; ``training_args`` is the run whose dynamic sampling is projected (None: ``default_run_config``)."""
    args = args or ProbeArguments()
    policy = dynamic_sampling_policy(training_args or default_run_config(args))
    if len(dataset) == 0:
        raise ValueError("the dataset has no rows to probe; check --dataset_name / --dataset_split.")
    if args.prompt_column not in dataset.column_names:
        raise ValueError(
            f"dataset has no column {args.prompt_column!r} (columns: {dataset.column_names}); pass --prompt_column."
        )
    max_len = args.max_completion_length or (
        DEMO_MAX_COMPLETION_LENGTH if args.is_demo else DEFAULT_MAX_COMPLETION_LENGTH
    )
    weights = args.reward_weights or [1.0] * len(reward_funcs)
    if len(weights) != len(reward_funcs):
        raise ValueError(f"{len(weights)} reward_weights for {len(reward_funcs)} reward functions; pass one each.")
    rows = dataset.to_list()
    raw_prompts = [row[args.prompt_column] for row in rows]
    prompt_texts = [prompt_text(p, tokenizer) for p in raw_prompts]

    start = time.perf_counter()
    if _use_vllm(args, model_path):  # pragma: no cover - GPU only
        sampler = "vllm"
        texts, lengths, truncated = sample_vllm(model_path, tokenizer, prompt_texts, args, max_len)
    else:
        sampler = "transformers.generate"
        texts, lengths, truncated = sample_transformers(model, tokenizer, prompt_texts, args, max_len)
    group_size = args.num_generations
    conversational = isinstance(raw_prompts[0], list)
    completions = [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts
    flat_prompts = [p for p in raw_prompts for _ in range(group_size)]
    flat_rows = [row for row in rows for _ in range(group_size)]
    rewards = score(reward_funcs, weights, flat_rows, flat_prompts, completions, args.prompt_column)
    elapsed = time.perf_counter() - start

    shape = (len(rows), group_size)
    spread = {
        reward_model_name(f): reward_model_spread(as_callable(f)(flat_prompts, completions), group_size)
        for f in reward_funcs
        if is_reward_model(f)
    }
    rewards_grouped = rewards.view(shape)
    summary = summarize(rewards_grouped, lengths.view(shape), truncated.view(shape), args.success_threshold, **policy)
    finite = torch.where(torch.isfinite(rewards_grouped), rewards_grouped, torch.nan)
    means = [None if math.isnan(m) else m for m in finite.nanmean(dim=1).tolist()]  # None: nothing scorable
    per_prompt = [
        {"prompt": str(p)[:300], "successes": c, "mean_reward": m, "sample": texts[i * group_size][:200]}
        for i, (p, c, m) in enumerate(zip(raw_prompts, summary["successes"], means, strict=True))
    ]
    meta = {
        "model": model_name,
        "dataset": "demo" if args.dataset_name is None else args.dataset_name,
        "dataset_split": args.dataset_split,
        "num_prompts": len(rows),
        "num_generations": group_size,
        "max_completion_length": max_len,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "reward_funcs": [getattr(f, "__name__", type(f).__name__) for f in reward_funcs],
        "reward_weights": list(weights),
        "success_threshold": args.success_threshold,
        "sampler": sampler,
        "seed": args.seed,
        "elapsed_s": elapsed,
        "reward_model_spread": spread,
        "dynamic_sampling_policy": policy,
    }
    sections = {key: value for key, value in summary.items() if key != "successes"}
    return ProbeReport(meta, **sections, recommendations=recommend(summary, args, max_len), per_prompt=per_prompt)


def load_model(args: ProbeArguments) -> tuple[Any, Any, str, str | None]:
    """The model and tokenizer to probe (loaded as the recipes load them), a display name, and its path (for vLLM)."""
    if args.no_warm_start or args.model_name_or_path == DEMO_RANDOM:
        tokenizer = build_tokenizer()
        return build_model(tokenizer), tokenizer, DEMO_RANDOM, None
    model, tokenizer, path = load_policy(None if args.model_name_or_path == DEMO else args.model_name_or_path)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return model, tokenizer, "demo-warm-start" if args.is_demo else path, path


def run_probe(
    args: ProbeArguments | None = None, save: bool = True, training_args: GRPOFamilyConfig | None = None
) -> ProbeReport:
    """Load the model, data and rewards named in ``args``, probe, and (``save=True``) write the report files."""
    args = args or ProbeArguments()
    model, tokenizer, name, path = load_model(args)
    task = load_task(args)
    reward_funcs = reward_functions(args.reward_funcs or list(task.layout.task_rewards), args.reward_options)
    dataset = format_prompts(task.train, tokenizer, args.system_prompt)
    args = dataclasses.replace(args, prompt_column="prompt")  # the layout wrote the prompts there
    report = probe_model(model, tokenizer, dataset, reward_funcs, args, name, path, training_args)
    if save:
        output_dir = args.output_dir or os.path.join("outputs", "probe", re.sub(r"[^A-Za-z0-9_.-]+", "_", name))
        report.meta["files"] = list(report.save(output_dir))
    return report


def _pop_option(argv: list[str], flag: str) -> str | None:
    """Remove ``flag VALUE`` / ``flag=VALUE`` from ``argv``; its value (None when absent)."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
            del argv[i : i + 2]
            return value
        if arg.startswith(flag + "="):
            del argv[i]
            return arg.split("=", 1)[1]
    return None


def _check_removed_flags(argv: Sequence[str]) -> None:
    """A former refill-policy flag (``REMOVED_FLAGS``) fails naming the config field that replaces it."""
    for flag in (arg.split("=", 1)[0] for arg in argv):
        if flag in REMOVED_FLAGS:
            raise UserError(
                f"trl-ext probe {flag} was removed: the probe reads the refill policy from the run's config. Set "
                f"{REMOVED_FLAGS[flag]} in the run's YAML and pass it with --config."
            )


def _run_config(args: ProbeArguments, run: dict[str, Any], preset: str | None) -> GRPOFamilyConfig:
    """The run's config: the preset's class (``preset``, else the YAML's ``preset:``, else DAPO) over the YAML's keys
    and the probe's sampling; ``default_run_config`` without a YAML or a preset."""
    if not run and preset is None:
        return default_run_config(args)
    with as_user_errors(ValueError):
        row = lookup(preset or str(run.get("preset") or "dapo"))
    fields = {f.name for f in dataclasses.fields(row.config) if f.init}
    kwargs: dict[str, Any] = {**row.overrides, **{k: v for k, v in run.items() if k in fields}}
    kwargs |= sampling_values(args)
    if not {"generation_batch_size", "steps_per_generation", "per_device_train_batch_size"} & set(run):
        kwargs["generation_batch_size"] = DEFAULT_GROUPS_PER_BATCH * args.num_generations  # no batch given
    kwargs |= {"bf16": False, "fp16": False, "report_to": "none"}
    kwargs.setdefault("output_dir", "outputs/probe")
    return row.config(**kwargs)


def parse_args(argv: Sequence[str] | None = None) -> tuple[ProbeArguments, GRPOFamilyConfig]:
    """``(probe settings, the run's config)`` from the command line. The keys of the ``--config`` YAML that are probe
    settings fill those not given as flags; the rest configure the run (``_run_config``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _check_removed_flags(argv)
    preset = _pop_option(argv, "--preset")
    run: dict[str, Any] = {}
    if "--config" in argv:
        check_config_file(argv)  # a missing file is named; a packaged name becomes its file
        config = _pop_option(argv, "--config")
        with open(config) as f:
            run = yaml.safe_load(f) or {}
        if not isinstance(run, dict):
            raise UserError(f"--config {config}: not a YAML mapping of config keys.")
    parser = make_parser([ProbeArguments])
    parser.prog = "trl-ext probe"
    check_flags(parser, argv)
    with as_user_errors(ValueError):
        (args,) = parser.parse_args_into_dataclasses(args=argv)
        flags = {arg[2:].split("=", 1)[0] for arg in argv if arg.startswith("--")}
        probe_fields = {f.name for f in dataclasses.fields(ProbeArguments)}
        from_run = {YAML_KEYS_FOR_PROBE.get(key, key): value for key, value in run.items() if key not in RUN_ONLY_KEYS}
        from_run = {k: v for k, v in from_run.items() if k in probe_fields and k not in flags}
        args = dataclasses.replace(args, **from_run)
        return args, _run_config(args, run, preset)


def main(argv: Sequence[str] | None = None) -> ProbeReport:
    """Command-line entry point: parse, probe, print the table."""
    args, training_args = parse_args(argv)
    report = run_probe(args, training_args=training_args)
    print(report.format())
    if "files" in report.meta:
        print("\nSaved " + ", ".join(report.meta["files"]))
    return report


def cli(argv: Sequence[str] | None = None) -> ProbeReport:
    """Parse the command line (``argv``, default ``sys.argv[1:]``), probe, print the table and save the report."""
    return steps.run("probe", main, lambda: (argv,))


if __name__ == "__main__":
    cli()
