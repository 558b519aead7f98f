"""Pre-flight probe: will RL learn anything on this model and data, and what will dynamic sampling cost?

Before a GRPO/DAPO/GSPO run, the probe samples a group of ``num_generations`` completions for each of a sample of
prompts (``transformers.generate`` on CPU or a single GPU; ``vllm.LLM`` when vLLM is installed and a GPU is present),
scores them with the run's reward functions and reports:

- **pass@1 and pass@k** for k = 1, 2, 4, ..., G, with the unbiased estimator of Chen et al. (arXiv 2107.03374):
  ``pass@k = 1 - C(n - c, k) / C(n, k)`` per prompt (n samples, c successes), averaged over prompts;
- the fractions of **all-correct, all-wrong and mixed groups** (by success), and the fraction of groups that
  dynamic sampling keeps (rewards not all equal: ``trl_ext.grpo.group_filter.informative_groups``, DAPO Eq. 11);
- the **expected generation rounds per step** that dynamic sampling needs at this difficulty under the trainer's
  refill policy (``trl_ext.grpo.ds_rounds.expected_refill_rounds``: a first round of ``groups_per_batch`` prompts,
  oversampled where surplus is carried over (``carry_over``), then right-sized refills with ``refill_margin``, rounds of
  at most ``max_round_size`` generation batches, within ``max_rounds`` generation batches; what the trainer logs as ``dynamic_sampling/rounds``), the generation batches that costs, the whole-batch
  upper bound (``group_filter.expected_rounds``), and how the kept fraction would change with a smaller or larger
  group;
- the reward distribution, completion lengths and the fraction truncated (no EOS within ``max_completion_length``,
  TRL's ``completions/clipped_ratio``);
- **recommendations** with the numbers behind them: SFT first when pass@G is near zero (a group without a success
  has zero advantage; the cold-start rule of DeepSeek-R1 and DAPO), filter always-solved prompts, raise the group
  size, raise ``max_completion_length``.

A completion *passes* when its (weighted, summed) reward is ``>= success_threshold`` (default ``1.0``: the "correct"
value of the 0/1 and +1/-1 verifiable rewards). The threshold is fixed rather than "the highest reward observed"
because a cold model that never succeeds would then pass everywhere, which is exactly the case the probe must catch.
For other reward scales, set ``--success_threshold``.

The report is printed as a table, saved as ``report.json`` and plotted as ``histogram.png`` under ``output_dir``
(default ``outputs/probe/<model>``). With no arguments the probe runs on the built-in arithmetic demo after its SFT
warm start (``trl_ext.demo.warm_start``); ``--no_warm_start`` (or ``--model_name_or_path demo-random``) probes the
cold, randomly initialised demo model instead::

    python -m trl_ext.diagnostics.probe                       # demo, warm-started
    python -m trl_ext.diagnostics.probe --no_warm_start       # demo, cold
    python -m trl_ext.diagnostics.probe --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --dataset_name my/math \\
        --reward_funcs accuracy format --num_generations 16

What it does not do: it does not train, and it samples with the model's plain ``generate`` (no chat template beyond
the tokenizer's own, no tools), so its numbers describe the first step of training, not later ones.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import re
import sys
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from datasets import Dataset

from trl_ext.data import TaskData, format_prompts, load_task_data
from trl_ext.demo import build_model, build_tokenizer
from trl_ext.diagnostics.eval_metrics import pass_at_k
from trl_ext.grpo.ds_rounds import carries_surplus, expected_refill_rounds
from trl_ext.grpo.group_filter import expected_rounds, group_stats, informative_groups
from trl_ext.recipe.common import check_flags, load_policy, make_parser, reward_functions
from trl_ext.reward_model import as_callable, is_reward_model, reward_model_name
from trl_ext.scoring import eos_ids, generate_groups, prompt_text, score_completions

DEMO = "demo"
DEMO_RANDOM = "demo-random"
DEMO_MAX_COMPLETION_LENGTH = 8  # the demo's answers are at most 2 digits + EOS
DEFAULT_MAX_COMPLETION_LENGTH = 256
_UNCAPPED_ROUNDS = 1000  # "no cap" for the simulated refill policy: a budget no realistic rate reaches


@dataclass
class ProbeArguments:
    """Settings of the pre-flight probe (also its command line: every field is a ``--flag``).

    Model and data:
        model_name_or_path: a local path or Hub name; ``None`` or ``"demo"`` is the warm-started demo model,
            ``"demo-random"`` the cold one.
        no_warm_start: with the demo model, probe the cold (randomly initialised) model.
        dataset_name, dataset_config, dataset_split: passed to ``datasets.load_dataset``; a local ``.json``,
            ``.jsonl``, ``.csv`` or ``.parquet`` file also works. ``None`` is the demo's train set.
        prompt_column: the column with the prompts (plain text or a list of chat messages). The other columns are
            passed to the reward functions as keyword arguments, as TRL does.
        reward_funcs, reward_options, reward_weights: reward names for the ``rewards`` registry, their options
            (``{"name": {...}}`` or its JSON text, as in the recipes) and their weights (default 1 each).
    Sampling:
        num_generations (G), num_prompts, max_completion_length, temperature, top_p, top_k: as in ``GRPOConfig``;
            use the values you will train with. ``max_completion_length=None`` means 8 for the demo, 256 otherwise.
        generation_batch_size: completions per ``generate`` call (memory knob; does not change the result).
        use_vllm: ``None`` uses vLLM when it is installed and a GPU is present.
        seed: seeds the prompt sample and the sampling.
    Judging and output:
        success_threshold: a completion passes when its reward is ``>=`` this value.
        max_rounds: your run's ``dynamic_sampling_max_rounds`` (``None``: uncapped), for the expected rounds.
        refill_margin, carry_over, max_round_size: your run's ``dynamic_sampling_refill_margin`` (``None``: the
            trainer's default), the share of surplus groups it carries to the next step
            (``dynamic_sampling_carry_over`` where it applies: token-level ratio and off-policy minibatches;
            ``from_training_args`` decides) and ``dynamic_sampling_max_round_size``, for the expected rounds.
        groups_per_batch: prompts per generation batch of your run (``generation_batch_size / num_generations``;
            ``from_training_args`` sets it), for the expected rounds: every refill round generates that many groups.
        sft_pass_at_g, easy_group_frac, mixed_group_frac, truncated_frac: the thresholds of the recommendations.
        output_dir: where ``report.json`` and ``histogram.png`` go (``None``: ``outputs/probe/<model>``).
    """

    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Model path or Hub name; None/'demo' = warm-started demo, 'demo-random' = cold."},
    )
    no_warm_start: bool = field(default=False, metadata={"help": "Demo only: probe the cold, random model."})
    dataset_name: str | None = field(
        default=None, metadata={"help": "datasets.load_dataset name or a local data file; None = the demo task."}
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset configuration name."})
    dataset_split: str = field(default="train", metadata={"help": "Dataset split to sample prompts from."})
    prompt_column: str = field(
        default="prompt",
        metadata={"help": "Column holding the prompts; 'prompt' also lets a known layout (GSM8K, ...) map its own."},
    )
    dataset_answer_column: str | None = field(
        default=None,
        metadata={
            "help": "Column with the reference answer (a dotted path reaches a nested field); None: the layout's."
        },
    )
    system_prompt: str | None = field(default=None, metadata={"help": "System message put before every prompt."})
    reward_funcs: list[str] | None = field(
        default=None,
        metadata={"help": "Reward function names (rewards registry). None: the task reward that fits the data."},
    )
    reward_options: dict | str | None = field(
        default=None, metadata={"help": "Options per reward name: a mapping (YAML) or JSON text."}
    )
    reward_weights: list[float] | None = field(
        default=None, metadata={"help": "One weight per reward function (default 1.0 each)."}
    )
    num_generations: int = field(default=16, metadata={"help": "Group size G: completions sampled per prompt."})
    num_prompts: int = field(default=64, metadata={"help": "Prompts sampled from the dataset (seeded)."})
    max_completion_length: int | None = field(
        default=None, metadata={"help": "Max new tokens per completion (None: 8 for the demo, 256 otherwise)."}
    )
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (as in GRPOConfig)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling (as in GRPOConfig)."})
    top_k: int = field(default=0, metadata={"help": "Top-k sampling; 0 disables it (as in GRPOConfig)."})
    generation_batch_size: int = field(default=256, metadata={"help": "Completions per generate call."})
    use_vllm: bool | None = field(
        default=None, metadata={"help": "Use vllm.LLM; None = when vLLM is installed and a GPU is present."}
    )
    seed: int = field(default=0, metadata={"help": "Seed of the prompt sample and of the sampling."})
    success_threshold: float = field(
        default=1.0, metadata={"help": "A completion passes when its reward is >= this value."}
    )
    max_rounds: int | None = field(
        default=None, metadata={"help": "Cap on dynamic-sampling rounds per step of your run (None: uncapped)."}
    )
    groups_per_batch: int = field(
        default=16,
        metadata={"help": "Prompts per generation batch of your run (generation_batch_size / num_generations)."},
    )
    refill_margin: float | None = field(
        default=None,
        metadata={
            "help": "Your run's dynamic_sampling_refill_margin (refill = missing / rate x this; unset: default)."
        },
    )
    max_round_size: float = field(
        default=2.0, metadata={"help": "Your run's dynamic_sampling_max_round_size (generation batches per round)."}
    )
    carry_over: float = field(
        default=0.0, metadata={"help": "Share of surplus informative groups your run carries to the next step."}
    )
    sft_pass_at_g: float = field(default=0.1, metadata={"help": "Recommend SFT first when pass@G is below this."})
    easy_group_frac: float = field(
        default=0.25,
        metadata={"help": "Recommend filtering solved prompts when this fraction of groups is all-correct."},
    )
    mixed_group_frac: float = field(
        default=0.5, metadata={"help": "Recommend a larger group when fewer than this fraction of groups is mixed."}
    )
    truncated_frac: float = field(
        default=0.05, metadata={"help": "Recommend a longer max_completion_length above this truncated fraction."}
    )
    output_dir: str | None = field(default=None, metadata={"help": "Output folder (None: outputs/probe/<model>)."})

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
        if self.groups_per_batch < 1:
            raise ValueError(f"groups_per_batch={self.groups_per_batch}: pass a positive value (e.g. 16).")
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
        """Probe settings with the sampling of a ``GRPOConfig`` (``num_generations``, ``max_completion_length``,
        ``temperature``, ``top_p``, ``top_k``, ``seed``), so that the probe sees what the first training step will;
        ``overrides`` set any other field (e.g. ``model_name_or_path``, ``num_prompts``)."""
        keys = ("num_generations", "max_completion_length", "temperature", "top_p", "top_k", "seed")
        values = {key: getattr(training_args, key) for key in keys if getattr(training_args, key, None) is not None}
        batch = getattr(training_args, "generation_batch_size", None)
        if batch and values.get("num_generations"):
            values["groups_per_batch"] = max(1, batch // values["num_generations"])
        if getattr(training_args, "dynamic_sampling", False):
            values["max_rounds"] = training_args.dynamic_sampling_max_rounds
            values["refill_margin"] = getattr(training_args, "dynamic_sampling_refill_margin", None)
            values["max_round_size"] = getattr(training_args, "dynamic_sampling_max_round_size", 2.0)
            # the trainer's own rule: old-policy log-probs (off-policy minibatches, vLLM's correction), token ratio
            vllm_correction = bool(
                getattr(training_args, "use_vllm", False)
                and getattr(training_args, "vllm_importance_sampling_correction", False)
            )
            if carries_surplus(training_args, vllm_correction):
                values["carry_over"] = training_args.dynamic_sampling_carry_over
        return cls(**{**values, **overrides})

    @property
    def is_demo(self) -> bool:
        return self.model_name_or_path in (None, DEMO, DEMO_RANDOM)


@dataclass
class Recommendation:
    """One piece of advice: a stable ``code`` for programs, a ``message`` for people, the ``numbers`` behind it."""

    code: str
    message: str
    numbers: dict[str, float] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------------------------
# Pure statistics (hand-checkable; the tests pin them)
# ----------------------------------------------------------------------------------------------------------------


def fit_beta_prior(successes: Sequence[int], num_samples: int) -> tuple[float, float] | None:
    """Empirical-Bayes prior over per-prompt success probabilities: the Beta(alpha, beta) whose beta-binomial
    moments match the mean and (population) variance of the success counts. ``None`` when no prompt or every prompt
    was solved, where the data say nothing about how the unsolved ones would fare.

    With ``mu = mean(c) / n`` and ``Var(c) = n mu (1 - mu) (1 + (n - 1) rho)``, ``rho = 1 / (alpha + beta + 1)``
    (clamped to [1e-6, 1 - 1e-6]; a rho at the lower clamp means "every prompt equally hard")."""
    n, count = num_samples, len(successes)
    if count == 0 or n < 2:
        return None
    mu = sum(successes) / (count * n)
    if mu <= 0.0 or mu >= 1.0:
        return None
    mean_c = mu * n
    var_c = sum((c - mean_c) ** 2 for c in successes) / count
    rho = (var_c / (n * mu * (1.0 - mu)) - 1.0) / (n - 1)
    rho = min(max(rho, 1e-6), 1.0 - 1e-6)
    total = 1.0 / rho - 1.0
    return mu * total, (1.0 - mu) * total


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def mixed_group_prob(num_samples: int, num_correct: int, k: int, prior: tuple[float, float] | None = None) -> float:
    """Probability that a fresh group of ``k`` completions of this prompt is mixed (some pass, some fail).

    For ``k <= n`` it is the unbiased estimate ``1 - [C(n - c, k) + C(c, k)] / C(n, k)`` (the chance that ``k`` of
    the ``n`` observed samples, drawn without replacement, are mixed). No unbiased estimate exists for ``k > n``: a
    prompt never solved in ``n`` samples may or may not be solved in ``k``. There the prompt's success probability
    ``p`` gets the posterior ``Beta(alpha + c, beta + n - c)`` under the dataset-wide ``prior`` (see
    :func:`fit_beta_prior`) and the result is ``1 - E[p^k] - E[(1 - p)^k]``; without a prior, 0.
    """
    n, c = num_samples, num_correct
    if k <= n:
        return 1.0 - (math.comb(n - c, k) + math.comb(c, k)) / math.comb(n, k)
    if prior is None:
        return 0.0
    a, b = prior[0] + c, prior[1] + n - c
    base = _log_beta(a, b)
    return 1.0 - math.exp(_log_beta(a + k, b) - base) - math.exp(_log_beta(a, b + k) - base)


def _quantile(values: torch.Tensor, q: float) -> float:
    return float(torch.quantile(values.double(), q)) if values.numel() else float("nan")


def _expected_cost(
    p: float, max_rounds: int | None, groups: int, margin: float | None, carry: float, max_round_size: float = 2.0
) -> dict[str, float]:
    """Expected rounds and generation batches per step under the trainer's refill policy, and the whole-batch bound."""
    if p <= 0.0:  # nothing is ever informative: every step spends its whole budget
        cap = float(max_rounds) if max_rounds else float("inf")
        return {"expected_rounds": cap, "expected_generation_batches": cap, "expected_rounds_whole_batch": cap}
    budget = max_rounds if max_rounds else _UNCAPPED_ROUNDS
    cost = expected_refill_rounds(p, groups, budget, margin=margin, carry_share=carry, max_round_size=max_round_size)
    return {
        "expected_rounds": cost["rounds"],
        "expected_generation_batches": cost["generation_batches"],
        "expected_rounds_whole_batch": expected_rounds(p, max_rounds, groups),
    }


def summarize(
    rewards: torch.Tensor,
    lengths: torch.Tensor,
    truncated: torch.Tensor,
    success_threshold: float = 1.0,
    max_rounds: int | None = None,
    reward_bins: int = 10,
    groups_per_batch: int = 1,
    refill_margin: float | None = None,
    carry_over: float = 0.0,
    max_round_size: float = 2.0,
) -> dict[str, Any]:
    """The probe's numbers from ``[num_prompts, G]`` tensors of rewards (NaN = unscorable), completion lengths in
    tokens (EOS included, as TRL counts) and truncation flags. Returns the JSON-ready ``pass_at``, ``groups``,
    ``group_size_projection``, ``rewards``, ``lengths`` sections and the per-prompt success counts."""
    if rewards.dim() != 2 or rewards.shape != lengths.shape or rewards.shape != truncated.shape:
        raise ValueError(
            f"rewards, lengths and truncated must share one [num_prompts, num_generations] shape, got "
            f"{tuple(rewards.shape)}, {tuple(lengths.shape)}, {tuple(truncated.shape)}."
        )
    num_prompts, group_size = rewards.shape
    rewards = rewards.double()
    passed = rewards >= success_threshold  # NaN compares False: an unscorable completion fails
    successes = passed.sum(dim=1).tolist()

    ks = sorted({2**i for i in range(int(math.log2(group_size)) + 1)} | {group_size})
    pass_at = {k: sum(pass_at_k(group_size, c, k) for c in successes) / num_prompts for k in ks}

    all_correct = sum(c == group_size for c in successes) / num_prompts
    all_wrong = sum(c == 0 for c in successes) / num_prompts
    flat = rewards.flatten()
    informative_frac = float(informative_groups(flat, group_size).float().mean())
    stats = group_stats(flat, group_size)
    groups = {
        "all_correct_frac": all_correct,
        "all_wrong_frac": all_wrong,
        "mixed_frac": 1.0 - all_correct - all_wrong,
        # What dynamic sampling keeps (rewards not all equal) and, among the rest, groups at the top / bottom of the
        # observed reward range: the same quantities as the trainer's dynamic_sampling/* metrics.
        "informative_frac": informative_frac,
        "all_max_frac": stats.all_max_frac,
        "all_min_frac": stats.all_min_frac,
        **_expected_cost(informative_frac, max_rounds, groups_per_batch, refill_margin, carry_over, max_round_size),
    }

    prior = fit_beta_prior(successes, group_size)
    projection = []
    for k in sorted({max(2, group_size // 4), max(2, group_size // 2), group_size, 2 * group_size, 4 * group_size}):
        mixed = sum(mixed_group_prob(group_size, c, k, prior) for c in successes) / num_prompts
        projection.append(
            {
                "num_generations": k,
                "mixed_frac": mixed,
                "expected_rounds": _expected_cost(
                    mixed, max_rounds, groups_per_batch, refill_margin, carry_over, max_round_size
                )["expected_rounds"],
                "estimate": "unbiased" if k <= group_size else "beta-binomial model",
            }
        )

    finite = flat[torch.isfinite(flat)]
    if finite.numel():
        low, high = float(finite.min()), float(finite.max())
        counts = torch.histc(finite, bins=reward_bins, min=low, max=high if high > low else low + 1.0)
        edges = torch.linspace(low, high if high > low else low + 1.0, reward_bins + 1)
        reward_section = {
            "mean": float(finite.mean()),
            "std": float(finite.std(unbiased=False)),
            "min": low,
            "p10": _quantile(finite, 0.1),
            "p50": _quantile(finite, 0.5),
            "p90": _quantile(finite, 0.9),
            "max": high,
            "unscorable_frac": 1.0 - finite.numel() / flat.numel(),
            "histogram": {"edges": [round(e, 6) for e in edges.tolist()], "counts": [int(c) for c in counts.tolist()]},
        }
    else:
        reward_section = {"mean": float("nan"), "unscorable_frac": 1.0, "histogram": {"edges": [], "counts": []}}

    lengths_f = lengths.double().flatten()
    top = int(lengths_f.max()) if lengths_f.numel() else 1
    width = max(1, math.ceil(top / 50))  # integer-width bins, at most about 50 of them
    length_edges = [edge - 0.5 for edge in range(0, top + width + 1, width)]  # integer lengths sit mid-bin
    length_counts = torch.histogram(lengths_f.float(), bins=torch.tensor(length_edges, dtype=torch.float)).hist
    length_section = {
        "mean": float(lengths_f.mean()),
        "p50": _quantile(lengths_f, 0.5),
        "p90": _quantile(lengths_f, 0.9),
        "max": float(lengths_f.max()),
        "truncated_frac": float(truncated.double().mean()),
        "histogram": {"edges": length_edges, "counts": [int(c) for c in length_counts.tolist()]},
    }
    return {
        "pass_at": pass_at,
        "groups": groups,
        "group_size_projection": projection,
        "rewards": reward_section,
        "lengths": length_section,
        "successes": successes,
    }


def recommend(summary: dict[str, Any], args: ProbeArguments, max_completion_length: int) -> list[Recommendation]:
    """Turn the numbers into advice. Each rule states its trigger in its message.

    - ``sft_first``: pass@G below ``sft_pass_at_g`` (default 0.1: fewer than one prompt in ten solved even once,
      so at most one group in ten is informative and dynamic sampling needs more than ten rounds per step). A group
      with no success has zero advantage in GRPO-family losses, so RL gets (almost) no gradient: warm-start with SFT
      (the cold-start rule of DeepSeek-R1 and DAPO).
      Truncation advice is then folded in here, since an untrained model's lengths say little.
    - ``filter_easy``: at least ``easy_group_frac`` of groups all-correct: those prompts carry no gradient and cost
      generation; drop them (per-prompt counts are in the JSON) or keep dynamic sampling on.
    - ``raise_group_size``: fewer than ``mixed_group_frac`` of groups mixed, at least as many all-wrong as
      all-correct groups (too hard rather than too easy), and a group twice as large would mix more (projection):
      more completions per prompt raise the chance that a hard prompt gets a success.
    - ``raise_max_completion_length``: more than ``truncated_frac`` of completions hit the limit without EOS; a
      truncated answer is usually scored wrong for its length, not its content (DAPO's overlong filtering).
    - ``ready``: none of the above; the run should learn, at the quoted dynamic-sampling cost.
    """
    group_size = args.num_generations
    pass_g = summary["pass_at"][group_size]
    groups, lengths = summary["groups"], summary["lengths"]
    trunc = lengths["truncated_frac"]
    solved = sum(c > 0 for c in summary["successes"])
    num_prompts = len(summary["successes"])
    advice: list[Recommendation] = []

    cold = pass_g < args.sft_pass_at_g
    if cold:
        advice.append(
            Recommendation(
                "sft_first",
                f"SFT first: pass@{group_size} = {pass_g:.3f} < {args.sft_pass_at_g} ({solved} of {num_prompts} "
                f"prompts solved at least once in {group_size} samples; dynamic sampling would need "
                f"{_rounds(groups['expected_rounds'])} rounds per step). A group with no success has zero advantage, "
                f"so RL has almost nothing to learn from; warm-start with supervised fine-tuning (recipes/sft.py) or "
                f"use easier prompts, then probe again ({trunc:.0%} of completions were truncated at "
                f"{max_completion_length} tokens; re-check after SFT).",
                {"pass_at_g": pass_g, "solved_prompts": solved, "truncated_frac": trunc},
            )
        )
    if groups["all_correct_frac"] >= args.easy_group_frac:
        advice.append(
            Recommendation(
                "filter_easy",
                f"Filter or down-weight always-solved prompts: {groups['all_correct_frac']:.0%} of groups were "
                f"all-correct (>= {args.easy_group_frac:.0%}); they have zero advantage and only cost generation. "
                "Drop prompts whose per-prompt successes equal num_generations (report.json, per_prompt) or keep "
                "dynamic sampling on.",
                {"all_correct_frac": groups["all_correct_frac"]},
            )
        )
    projection = {row["num_generations"]: row for row in summary["group_size_projection"]}
    mixed, larger = groups["mixed_frac"], projection.get(2 * group_size)
    too_hard = groups["all_wrong_frac"] >= groups["all_correct_frac"]  # too easy is filter_easy's case
    if not cold and too_hard and mixed < args.mixed_group_frac and larger and larger["mixed_frac"] > mixed + 0.02:
        advice.append(
            Recommendation(
                "raise_group_size",
                f"Raise the group size: only {mixed:.0%} of groups are mixed at num_generations={group_size} "
                f"(< {args.mixed_group_frac:.0%}; {groups['all_wrong_frac']:.0%} all-wrong, "
                f"{groups['all_correct_frac']:.0%} all-correct). At num_generations={2 * group_size} an estimated "
                f"{larger['mixed_frac']:.0%} would be (beta-binomial fit), and dynamic sampling would need "
                f"{larger['expected_rounds']:.2f} instead of {groups['expected_rounds']:.2f} rounds per step. "
                "A curriculum (easier prompts first) helps the all-wrong ones too.",
                {
                    "mixed_frac": mixed,
                    "projected_mixed_frac": larger["mixed_frac"],
                    "projected_group_size": 2 * group_size,
                },
            )
        )
    if not cold and trunc > args.truncated_frac:
        advice.append(
            Recommendation(
                "raise_max_completion_length",
                f"Raise max_completion_length: {trunc:.0%} of completions hit the limit of {max_completion_length} "
                f"tokens without EOS (> {args.truncated_frac:.0%}; mean length {lengths['mean']:.1f}). Try "
                f"{2 * max_completion_length}, or keep the limit and use overlong reward shaping / "
                "mask_truncated_completions=True (DAPO).",
                {"truncated_frac": trunc, "max_completion_length": max_completion_length},
            )
        )
    if not advice:
        advice.append(
            Recommendation(
                "ready",
                f"Ready for RL: {mixed:.0%} of groups are mixed, pass@1 = {summary['pass_at'][1]:.3f}, "
                f"pass@{group_size} = {pass_g:.3f}; dynamic sampling needs about {groups['expected_rounds']:.2f} "
                "rounds per step.",
                {"mixed_frac": mixed, "expected_rounds": groups["expected_rounds"]},
            )
        )
    return advice


# ----------------------------------------------------------------------------------------------------------------
# Sampling
# ----------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def sample_transformers(
    model: Any, tokenizer: Any, prompts: Sequence[str], args: ProbeArguments, max_completion_length: int
) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """G seeded samples per prompt with ``model.generate``; returns the completion texts (groups contiguous, TRL's
    order), their lengths in tokens (up to and including the first EOS) and whether each was truncated."""
    ends = eos_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(ends)
    per_call = max(1, args.generation_batch_size // args.num_generations)
    torch.manual_seed(args.seed)
    sampling = {"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k}
    ids, truncated = generate_groups(
        model, tokenizer, prompts, args.num_generations, max_completion_length, per_call, ends, pad_id, **sampling
    )
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    return texts, torch.tensor([len(c) for c in ids]), torch.tensor(truncated)


def sample_vllm(
    model_path: str, prompts: Sequence[str], args: ProbeArguments, max_completion_length: int
) -> tuple[list[str], torch.Tensor, torch.Tensor]:  # pragma: no cover - needs vLLM and a GPU; not in the CPU suite
    """The same as :func:`sample_transformers` with ``vllm.LLM`` (one engine, ``n=G`` samples per prompt)."""
    from vllm import LLM, SamplingParams

    llm = LLM(model=model_path, seed=args.seed)
    params = SamplingParams(
        n=args.num_generations,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k if args.top_k > 0 else -1,
        max_tokens=max_completion_length,
        seed=args.seed,
    )
    texts, lengths, truncated = [], [], []
    for request in llm.generate(list(prompts), params):
        for out in request.outputs:
            texts.append(out.text)
            lengths.append(len(out.token_ids))
            truncated.append(out.finish_reason == "length")
    return texts, torch.tensor(lengths), torch.tensor(truncated)


def _use_vllm(args: ProbeArguments, model_path: str | None) -> bool:
    """vLLM when asked, or (``use_vllm=None``) when it is installed and a GPU is present; never for the demo model
    unless asked (its character-level tokenizer gains nothing from vLLM)."""
    if args.use_vllm is False or model_path is None or (args.use_vllm is None and args.is_demo):
        return False
    available = importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()
    if args.use_vllm and not available:
        raise ValueError("use_vllm=True but vLLM is not installed or no GPU is present; drop --use_vllm.")
    return available


# ----------------------------------------------------------------------------------------------------------------
# Rewards and data
# ----------------------------------------------------------------------------------------------------------------


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
    """Weighted sum of the reward functions, called with TRL's signature and keyword columns
    (``trl_ext.scoring.score_completions``: ``None`` is NaN, NaNs skipped in the sum as TRL does, a completion is
    NaN only when every function returned ``None``)."""
    keys = [key for key in rows[0] if key not in (prompt_column, "prompt", "completion", "completion_ids")]
    columns = {key: [row[key] for row in rows] for key in keys}
    extra = {"trainer_state": None, "log_extra": _noop, "log_metric": _noop}
    return score_completions(reward_funcs, prompts, completions, weights, extra=extra, dtype=torch.float64, **columns)


def load_task(args: ProbeArguments) -> TaskData:
    """The probed data, mapped by its layout as the recipes map it (``trl_ext.data.load_task_data``): the split
    (for the demo: ``train``, or the held-out set for ``test``) cut to a seeded sample of ``num_prompts`` rows in
    ``train``."""
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
    if "prompt" not in dataset.column_names:
        raise ValueError(
            f"dataset has no column {args.prompt_column!r} (columns: {dataset.column_names}); pass --prompt_column."
        )
    if len(dataset) > args.num_prompts:
        dataset = dataset.shuffle(seed=args.seed).select(range(args.num_prompts))
    return TaskData(dataset, None, data.layout)


def load_prompts(args: ProbeArguments) -> Dataset:
    """The probed prompts (``load_task``'s training rows)."""
    return load_task(args).train


# ----------------------------------------------------------------------------------------------------------------
# The probe
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class ProbeReport:
    """The probe's result: ``meta`` (what was probed, how), the ``summarize`` sections, the recommendations and the
    per-prompt success counts (to filter prompts)."""

    meta: dict[str, Any]
    pass_at: dict[int, float]
    groups: dict[str, float]
    group_size_projection: list[dict[str, Any]]
    rewards: dict[str, Any]
    lengths: dict[str, float]
    recommendations: list[Recommendation]
    per_prompt: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["pass_at"] = {str(k): v for k, v in self.pass_at.items()}
        return out

    def format(self) -> str:
        """A readable plain-text table."""
        m, g, r, ln = self.meta, self.groups, self.rewards, self.lengths
        group_size = m["num_generations"]
        lines = [
            "trl-ext pre-flight probe",
            f"  model     {m['model']}",
            f"  dataset   {m['dataset']}: {m['num_prompts']} prompts x {group_size} generations, "
            f"max_completion_length {m['max_completion_length']}, temperature {m['temperature']}",
            f"  sampler   {m['sampler']} (seed {m['seed']}), {m['elapsed_s']:.1f} s",
            "",
            f"Success (reward >= {m['success_threshold']:g})",
            "  " + "  ".join(f"pass@{k:<3d}" for k in self.pass_at),
            "  " + "  ".join(f"{v:<8.3f}" for v in self.pass_at.values()),
            "",
            "Groups                    fraction",
            f"  all-correct             {g['all_correct_frac']:8.3f}",
            f"  all-wrong               {g['all_wrong_frac']:8.3f}",
            f"  mixed                   {g['mixed_frac']:8.3f}",
            f"  kept by dyn. sampling   {g['informative_frac']:8.3f}   -> {_rounds(g['expected_rounds'])} rounds/step",
            "",
            "Group size   mixed   rounds/step   estimate",
        ]
        for row in self.group_size_projection:
            lines.append(
                f"  {row['num_generations']:<9d}{row['mixed_frac']:7.3f}   {_rounds(row['expected_rounds']):>11}   "
                f"{row['estimate']}"
            )
        lines += [
            "",
            "Rewards   "
            + "  ".join(f"{key} {r.get(key, float('nan')):.3g}" for key in ("mean", "std", "min", "p50", "p90", "max"))
            + f"  unscorable {r['unscorable_frac']:.3f}",
            f"Lengths   mean {ln['mean']:.2f}  p50 {ln['p50']:g}  p90 {ln['p90']:g}  max {ln['max']:g}  "
            f"truncated {ln['truncated_frac']:.3f}",
        ]
        lines += [
            f"Reward model {name}: within-group std {v['within_group_std']:.3g}, std {v['std']:.3g}, range "
            f"[{v['min']:.3g}, {v['max']:.3g}]"
            for name, v in m.get("reward_model_spread", {}).items()
        ]
        lines += [
            "",
            "Recommendations",
        ]
        lines += [f"  {i}. [{rec.code}] {rec.message}" for i, rec in enumerate(self.recommendations, 1)]
        return "\n".join(lines)

    def save(self, output_dir: str) -> tuple[str, str]:
        """Write ``report.json`` and ``histogram.png`` to ``output_dir``; returns their paths."""
        os.makedirs(output_dir, exist_ok=True)
        json_path = os.path.join(output_dir, "report.json")
        with open(json_path, "w") as f:
            json.dump(self.to_dict(), f, indent=2, default=float)
        png_path = os.path.join(output_dir, "histogram.png")
        self.plot(png_path)
        return json_path, png_path

    def plot(self, path: str) -> None:
        """Three histograms: per-prompt success rate (mass at 0 and 1 = uninformative groups), rewards, lengths."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        group_size = self.meta["num_generations"]
        rates = [row["successes"] / group_size for row in self.per_prompt]
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
        bins = [(i - 0.5) / group_size for i in range(group_size + 2)]
        axes[0].hist(rates, bins=bins, color="tab:blue", edgecolor="white")
        axes[0].set(
            xlabel="per-prompt success rate (c / G)", ylabel="prompts", title="Groups: 0 and 1 are uninformative"
        )
        for ax, hist, color in ((axes[1], self.rewards["histogram"], "tab:green"),
                                (axes[2], self.lengths["histogram"], "tab:orange")):  # fmt: skip
            if hist["counts"]:
                edges = hist["edges"]
                widths = [b - a for a, b in zip(edges, edges[1:], strict=False)]
                ax.bar(edges[:-1], hist["counts"], width=widths, align="edge", color=color, edgecolor="white")
        axes[1].set(xlabel="reward", ylabel="completions", title="Reward distribution")
        axes[2].axvline(self.meta["max_completion_length"], color="k", linestyle="--", label="max_completion_length")
        axes[2].set(xlabel="completion length (tokens)", ylabel="completions",
                    title=f"Lengths ({self.lengths['truncated_frac']:.0%} truncated)")  # fmt: skip
        axes[2].legend(loc="upper left", fontsize=8)
        fig.suptitle(
            f"{self.meta['model']}: pass@1 {self.pass_at[1]:.3f}, pass@{group_size} {self.pass_at[group_size]:.3f}",
            fontsize=10,
        )
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)


def _rounds(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2f}"


def reward_model_spread(scores: Sequence[float], group_size: int) -> dict[str, float]:
    """How a reward model's scores spread on the probed groups: the mean within-group standard deviation (what its
    group-normalized advantages feed on: near 0 means it cannot tell a group's completions apart), the overall
    standard deviation, and the range."""
    values = torch.tensor(list(scores), dtype=torch.float64)
    groups = values.view(-1, group_size)
    return {
        "within_group_std": float(groups.std(dim=1, unbiased=False).mean()),
        "std": float(values.std(unbiased=False)),
        "min": float(values.min()),
        "max": float(values.max()),
    }


def probe_model(
    model: Any,
    tokenizer: Any,
    dataset: Dataset,
    reward_funcs: Sequence[Callable],
    args: ProbeArguments | None = None,
    model_name: str = "model",
    model_path: str | None = None,
) -> ProbeReport:
    """Probe an already loaded model on ``dataset`` (all its rows; sample them first) with ``reward_funcs``.

    This is the function behind the command line, for recipes and notebooks that hold the model already.
    ``model_path`` enables the vLLM sampler (vLLM loads from a path).
    """
    args = args or ProbeArguments()
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
        texts, lengths, truncated = sample_vllm(model_path, prompt_texts, args, max_len)
    else:
        sampler = "transformers.generate"
        texts, lengths, truncated = sample_transformers(model, tokenizer, prompt_texts, args, max_len)
    group_size = args.num_generations
    conversational = isinstance(raw_prompts[0], list)
    completions = [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts
    rewards = score(
        reward_funcs,
        weights,
        [row for row in rows for _ in range(group_size)],
        [p for p in raw_prompts for _ in range(group_size)],
        completions,
        args.prompt_column,
    )
    elapsed = time.perf_counter() - start

    shape = (len(rows), group_size)
    flat_prompts = [p for p in raw_prompts for _ in range(group_size)]
    spread = {
        reward_model_name(f): reward_model_spread(as_callable(f)(flat_prompts, completions), group_size)
        for f in reward_funcs
        if is_reward_model(f)
    }
    summary = summarize(
        rewards.view(shape),
        lengths.view(shape),
        truncated.view(shape),
        args.success_threshold,
        args.max_rounds,
        groups_per_batch=args.groups_per_batch,
        refill_margin=args.refill_margin,
        carry_over=args.carry_over,
        max_round_size=args.max_round_size,
    )
    rewards_grouped = rewards.view(shape)
    per_prompt = [
        {
            "prompt": str(p)[:300],
            "successes": c,
            "mean_reward": float(rewards_grouped[i][torch.isfinite(rewards_grouped[i])].mean())
            if torch.isfinite(rewards_grouped[i]).any()
            else None,
            "sample": texts[i * group_size][:200],
        }
        for i, (p, c) in enumerate(zip(raw_prompts, summary["successes"], strict=True))
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
    }
    return ProbeReport(
        meta=meta,
        pass_at=summary["pass_at"],
        groups=summary["groups"],
        group_size_projection=summary["group_size_projection"],
        rewards=summary["rewards"],
        lengths=summary["lengths"],
        recommendations=recommend(summary, args, max_len),
        per_prompt=per_prompt,
    )


def load_model(args: ProbeArguments) -> tuple[Any, Any, str, str | None]:
    """The model and tokenizer to probe, a display name, and its path (for vLLM; None for the cold demo model).
    Loading is the recipes' (``trl_ext.recipe.common.load_policy``: no name = the demo's cached SFT warm start)."""
    if args.no_warm_start or args.model_name_or_path == DEMO_RANDOM:
        tokenizer = build_tokenizer()
        return build_model(tokenizer), tokenizer, DEMO_RANDOM, None
    model, tokenizer, path = load_policy(None if args.model_name_or_path == DEMO else args.model_name_or_path)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return model, tokenizer, "demo-warm-start" if args.is_demo else path, path


def run_probe(args: ProbeArguments | None = None, save: bool = True) -> ProbeReport:
    """Load the model, data and rewards named in ``args``, probe, and (``save=True``) write the report files."""
    args = args or ProbeArguments()
    model, tokenizer, name, path = load_model(args)
    task = load_task(args)
    reward_funcs = reward_functions(args.reward_funcs or list(task.layout.task_rewards), args.reward_options)
    dataset = format_prompts(task.train, tokenizer, args.system_prompt)
    args = dataclasses.replace(args, prompt_column="prompt")  # the layout wrote the prompts there
    report = probe_model(model, tokenizer, dataset, reward_funcs, args, name, path)
    if save:
        output_dir = args.output_dir or os.path.join("outputs", "probe", re.sub(r"[^A-Za-z0-9_.-]+", "_", name))
        report.meta["files"] = list(report.save(output_dir))
    return report


def main(argv: Sequence[str] | None = None) -> ProbeReport:
    """Command-line entry point: parse ``ProbeArguments``, probe, print the table."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = make_parser([ProbeArguments])
    check_flags(parser, argv)
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    report = run_probe(args)
    print(report.format())
    if "files" in report.meta:
        print("\nSaved " + ", ".join(report.meta["files"]))
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
