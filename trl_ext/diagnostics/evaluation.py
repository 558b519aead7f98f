"""Evaluation of a model on held-out problems as the papers report it: a greedy completion and K samples per problem,
scored by the task reward as TRL calls it, and the figures of :mod:`trl_ext.diagnostics.eval_metrics`. The recipes'
held-out accuracy and ``trl-ext eval``'s ``pass@1 (greedy)`` are one code path (:func:`greedy_accuracy`)."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from datasets import Dataset
from tqdm import tqdm
from transformers import set_seed

from trl_ext.diagnostics.eval_metrics import CORRECT_AT, default_ks, is_correct, mean_figures, problem_figures
from trl_ext.generation.vllm_setup import check_vllm_setup
from trl_ext.reliability.zero_reward import REFERENCE_COLUMNS
from trl_ext.rewards.arithmetic import arithmetic_reward, parse_first_int
from trl_ext.rewards.extract import extract_answer
from trl_ext.rewards.math import MathAccuracy
from trl_ext.scoring import eos_ids, generate_groups, is_conversational, prompt_text


@dataclass
class Completion:
    """A completion: its text, its tokens up to and including the first EOS, whether it hit the length limit."""

    text: str
    length: int
    truncated: bool


@dataclass
class Sample:
    """One scored completion as ``per_problem.jsonl`` stores it."""

    text: str
    answer: str | None
    reward: float | None
    length: int
    truncated: bool


@dataclass(frozen=True)
class Sampling:
    """One greedy completion, or ``num_samples`` at ``temperature``, ``top_p`` and ``top_k`` (0: off; None: the
    generation config's, off in vLLM)."""

    num_samples: int = 1
    greedy: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None

    @property
    def per_prompt(self) -> int:
        return 1 if self.greedy else self.num_samples


GREEDY = Sampling()


@dataclass
class EvalSettings:
    """How a model is evaluated. Sampling defaults are DAPO's evaluation (arXiv 2503.14476, section 4.1: avg@32 at
    temperature 1.0, top-p 0.7). ``batch_size``: completions per generation call; ``greedy_batch_size``: prompts."""

    num_samples: int = 32
    temperature: float = 1.0
    top_p: float = 0.7
    max_new_tokens: int = 1024
    greedy: bool = True
    seed: int = 0
    batch_size: int = 512
    greedy_batch_size: int = 64
    pass_ks: list[int] | None = None
    correct_at: float = CORRECT_AT
    use_vllm: bool = False

    def ks(self) -> list[int]:
        """The k of pass@k: ``pass_ks`` checked against K, or 1, 2, 4, ..., K."""
        if not isinstance(self.num_samples, int) or self.num_samples < 1:
            raise ValueError(
                f"--num_samples must be a whole number >= 1 (samples per problem), got {self.num_samples}."
            )
        if not self.pass_ks:
            return default_ks(self.num_samples)
        too_large = [k for k in self.pass_ks if k > self.num_samples]
        if too_large or any(k < 1 for k in self.pass_ks):
            raise ValueError(
                f"--pass_ks {self.pass_ks}: every k must be between 1 and --num_samples ({self.num_samples}) since "
                f"pass@k needs k samples per problem; drop {too_large or [k for k in self.pass_ks if k < 1]} or raise "
                "--num_samples."
            )
        return sorted(set(self.pass_ks))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"pass_ks": self.ks()}

    def sampling(self) -> Sampling:
        return Sampling(self.num_samples, False, self.temperature, self.top_p)


@dataclass
class ModelEvaluation:
    """A model's figures (means over problems), its per-problem records and the wall time of its evaluation."""

    name: str
    figures: dict[str, float | None]
    records: list[dict[str, Any]] = field(repr=False)
    seconds: float


def answer_extractor(reward: Callable) -> Callable[[str], str | None] | None:
    """The answer a reward reads from a completion (``reward.extract_answer(text)`` if it has one), for the majority
    vote; None for a reward without one."""
    func = getattr(reward, "func", reward)  # trl_ext.reliability.zero_reward.ZeroRewardWatch wraps the task reward
    own = getattr(func, "extract_answer", None)
    if callable(own):
        return own
    if isinstance(func, MathAccuracy):
        strategies = "auto" if func.extraction == "math_verify" else func.extraction
        return lambda text: extract_answer(text, strategies, func.multiple_boxed)[0]
    if func is arithmetic_reward:
        return lambda text: None if (value := parse_first_int(text.strip())) is None else str(value)
    return None


def generate(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Any],
    max_new_tokens: int,
    sampling: Sampling = GREEDY,
    prompts_per_call: int = 64,
) -> list[list[Completion]]:
    """``sampling.per_prompt`` completions of each prompt (``trl_ext.scoring.generate_groups``), decoded without
    special tokens and grouped per prompt."""
    n = sampling.per_prompt
    options = {} if sampling.greedy else {"temperature": sampling.temperature, "top_p": sampling.top_p}
    if sampling.top_k is not None and not sampling.greedy:
        options["top_k"] = sampling.top_k
    texts = [prompt_text(p, tokenizer) for p in prompts]
    ids, truncated = generate_groups(
        model,
        tokenizer,
        texts,
        n,
        max_new_tokens,
        prompts_per_call,
        eos_ids(model, tokenizer),
        tokenizer.pad_token_id,
        add_special_tokens=not is_conversational(prompts[0]),
        greedy=sampling.greedy,
        **options,
    )
    decoded = tokenizer.batch_decode(ids, skip_special_tokens=True)
    flat = [Completion(t, len(c), cut) for t, c, cut in zip(decoded, ids, truncated, strict=True)]
    return [flat[i : i + n] for i in range(0, len(flat), n)]


CPU_KV_CACHE_GIB = 2  # the KV cache of an evaluation engine on vLLM's CPU build, unless VLLM_CPU_KVCACHE_SPACE says


def vllm_engine(model_path: str, seed: int = 0, max_model_len: int | None = None) -> Any:
    """A vLLM engine on ``model_path``. Without a GPU the KV cache gets ``CPU_KV_CACHE_GIB`` GiB unless
    ``VLLM_CPU_KVCACHE_SPACE`` sets it: the CPU engine would reserve 0.9 of the RAM, and refuse to start short of it."""
    import torch
    from vllm import LLM  # optional dependency: check_vllm has said what is missing before this is called

    cpu_cache = {}
    if not torch.cuda.is_available() and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        cpu_cache = {"kv_cache_memory_bytes": CPU_KV_CACHE_GIB * 2**30}
    return LLM(model=model_path, seed=seed, dtype="auto", max_model_len=max_model_len, **cpu_cache)


def generate_vllm(
    engine: Any,
    tokenizer: Any,
    prompts: Sequence[Any],
    max_new_tokens: int,
    sampling: Sampling = GREEDY,
    seed: int = 0,
) -> list[list[Completion]]:
    """:func:`generate` with a vLLM engine: ``SamplingParams(n=K)``, greedy as temperature 0; ``finish_reason ==
    "length"`` is a truncation."""
    from vllm import SamplingParams  # optional dependency, as in vllm_engine

    params = SamplingParams(
        n=sampling.per_prompt,
        temperature=0.0 if sampling.greedy else sampling.temperature,
        top_p=1.0 if sampling.greedy else sampling.top_p,
        top_k=sampling.top_k if sampling.top_k and not sampling.greedy else -1,
        max_tokens=max_new_tokens,
        seed=seed,
    )
    texts = [prompt_text(p, tokenizer) for p in prompts]
    outputs = engine.generate(texts, params, use_tqdm=True)
    return [
        [Completion(o.text, len(o.token_ids), o.finish_reason == "length") for o in output.outputs]
        for output in outputs
    ]


def check_vllm() -> None:
    """``--use_vllm`` needs a working vLLM inside the installed TRL's range: a ``UserError`` naming the fix otherwise."""
    check_vllm_setup("--use_vllm", instead="drop --use_vllm")


def score(
    reward: Callable, dataset: Dataset, generations: Sequence[Sequence[Completion]], extract: Callable | None
) -> list[list[Sample]]:
    """Each completion of each problem scored by ``reward`` as TRL calls it, with the answer ``extract`` reads."""
    counts = [len(group) for group in generations]
    prompts = [p for p, k in zip(dataset["prompt"], counts, strict=True) for _ in range(k)]
    flat = [completion for group in generations for completion in group]
    if not flat:
        return [[] for _ in generations]
    conversational = is_conversational(prompts[0])
    completions = [[{"role": "assistant", "content": c.text}] if conversational else c.text for c in flat]
    columns = {
        name: [value for value, k in zip(dataset[name], counts, strict=True) for _ in range(k)]
        for name in dataset.column_names
        if name != "prompt"
    }
    rewards = reward(prompts=prompts, completions=completions, **columns)
    samples = [
        Sample(c.text, extract(c.text) if extract else None, None if r is None else float(r), c.length, c.truncated)
        for c, r in zip(flat, rewards, strict=True)
    ]
    remaining = iter(samples)
    return [list(itertools.islice(remaining, k)) for k in counts]


def greedy_accuracy(
    model: Any,
    tokenizer: Any,
    dataset: Dataset,
    reward: Callable,
    max_new_tokens: int,
    prompts_per_call: int = 64,
    progress: bool | str = False,
    correct_at: float = CORRECT_AT,
) -> float:
    """The recipes' held-out accuracy, ``trl-ext eval``'s ``pass@1 (greedy)``: the fraction of problems whose greedy
    completion the task reward scores correct (``eval_metrics.is_correct``)."""
    with tqdm(total=len(dataset), desc=progress or None, unit="problem", leave=False, disable=not progress) as bar:
        scored = scored_completions(model, tokenizer, dataset, reward, max_new_tokens, GREEDY, prompts_per_call, bar)
    return sum(is_correct(group[0].reward, correct_at) for group in scored) / max(len(dataset), 1)


def scored_completions(
    model: Any,
    tokenizer: Any,
    dataset: Dataset,
    reward: Callable,
    max_new_tokens: int,
    sampling: Sampling = GREEDY,
    prompts_per_call: int = 64,
    bar: tqdm | None = None,
    engine: Any = None,
    seed: int = 0,
) -> list[list[Sample]]:
    """The scored completions of each problem, generated and scored in chunks of ``prompts_per_call`` prompts
    (transformers), or all at once by a vLLM ``engine``."""
    extract = answer_extractor(reward)
    if engine is not None:
        generations = generate_vllm(engine, tokenizer, dataset["prompt"], max_new_tokens, sampling, seed)
        if bar is not None:
            bar.update(len(dataset))
        return score(reward, dataset, generations, extract)
    scored: list[list[Sample]] = []
    for start in range(0, len(dataset), prompts_per_call):
        chunk = dataset.select(range(start, min(start + prompts_per_call, len(dataset))))
        generations = generate(model, tokenizer, chunk["prompt"], max_new_tokens, sampling, prompts_per_call)
        scored.extend(score(reward, chunk, generations, extract))
        if bar is not None:
            bar.update(len(chunk))
    return scored


def summarize(records: Sequence[dict[str, Any]], settings: EvalSettings) -> dict[str, float | None]:
    """A model's figures from its per-problem records (what ``per_problem.jsonl`` holds)."""
    ks = settings.ks()
    has_answers = any(s["answer"] is not None for r in records for s in r["samples"])
    per_problem = [
        problem_figures(
            [s["reward"] for s in r["samples"]],
            [s["answer"] for s in r["samples"]] if has_answers else None,
            ks,
            settings.correct_at,
        )
        for r in records
    ]
    samples = [s for r in records for s in r["samples"]]
    figures: dict[str, float | None] = {}
    if records and all(r.get("greedy") for r in records):
        figures["pass@1 (greedy)"] = sum(
            is_correct(r["greedy"]["reward"], settings.correct_at) for r in records
        ) / len(records)
    figures.update(mean_figures(per_problem))
    scored = [s["reward"] for s in samples if s["reward"] is not None]
    count = max(len(samples), 1)
    figures["mean reward"] = sum(scored) / len(scored) if scored else None
    figures["mean length"] = sum(s["length"] for s in samples) / count
    figures["truncated"] = sum(s["truncated"] for s in samples) / count
    figures["unscorable"] = (len(samples) - len(scored)) / count
    return figures


def evaluate_model(
    name: str,
    model: Any,
    tokenizer: Any,
    dataset: Dataset,
    reward: Callable,
    settings: EvalSettings,
    model_path: str | None = None,
    progress: bool = True,
) -> ModelEvaluation:
    """Greedy pass (``settings.greedy``) and K samples of every problem, scored, recorded and summarized; the
    sampling is seeded with ``settings.seed`` (the same for every model, so models are compared on equal draws)."""
    settings.ks()  # bad k fails before any generation
    started = time.time()
    engine = vllm_engine(model_path or model.name_or_path, settings.seed) if settings.use_vllm else None

    def scored(phase: str, sampling: Sampling, per_call: int) -> list[list[Sample]]:
        with tqdm(total=len(dataset), desc=f"eval {name}: {phase}", unit="problem", disable=not progress) as bar:
            return scored_completions(
                model, tokenizer, dataset, reward, settings.max_new_tokens, sampling, per_call, bar, engine, settings.seed
            )  # fmt: skip

    greedy = scored("greedy", GREEDY, settings.greedy_batch_size) if settings.greedy else None
    set_seed(settings.seed)
    k = settings.num_samples
    samples = scored(f"{k} samples", settings.sampling(), max(1, settings.batch_size // k))
    records = [
        {
            "model": name,
            "problem": index,
            "prompt": row["prompt"],
            "reference": next((row[c] for c in REFERENCE_COLUMNS if c in row), None),  # what it is scored against
            "greedy": asdict(greedy[index][0]) if greedy else None,
            "samples": [asdict(s) for s in samples[index]],
        }
        for index, row in enumerate(dataset)
    ]
    return ModelEvaluation(name, summarize(records, settings), records, time.time() - started)
