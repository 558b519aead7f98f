"""The built-in demo task: arithmetic with a tiny model built in code, so that RL runs on a laptop CPU.

Nothing is downloaded: a character-level tokenizer, a small random Qwen2-style causal LM, and seeded two-number
additions (``"17+25="`` → ``"42"``) split into disjoint train and held-out sets. RL cannot start from a 0% pass rate
(an all-failing group has zero advantage), so the demo first runs a short SFT warm start (TRL's ``SFTTrainer``, as
``recipes/sft.py``), stopped while the policy is right only some of the time: DeepSeek-R1's and DAPO's cold start.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import platform
import random
import shutil
from dataclasses import asdict, dataclass, fields
from typing import Any

import accelerate
import datasets
import torch
import transformers
import trl
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedModel, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from trl import SFTConfig, SFTTrainer

from trl_ext.console import use_console
from trl_ext.diagnostics import evaluation
from trl_ext.rewards.arithmetic import arithmetic_reward

logger = logging.getLogger(__name__)

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
CHARS = "0123456789+-*= "


@dataclass
class DemoTaskConfig:
    """Settings of the demo task (defaults: the measured-feasible setting quoted in the trl-ext brief)."""

    max_operand: int = 29  # operands drawn from 0..max_operand
    num_train: int = 600  # disjoint from the held-out set
    num_eval: int = 240  # held-out problems (the bar asks for at least 200)
    seed: int = 0


@dataclass
class DemoModelConfig:
    """A Qwen2-style decoder of 0.6M parameters (593,792 with the demo vocabulary of 18 tokens)."""

    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 64
    seed: int = 0


class CharTokenizer(PreTrainedTokenizerFast):
    """The demo's character tokenizer: one token per character of ``CHARS``; any other becomes ``<unk>`` (decoding
    drops it), and encoding it logs a warning naming it once, so that a run on text data does not silently train on
    digits and spaces alone. Saved, it loads back as a plain fast tokenizer."""

    def __call__(self, text: Any = None, *args: Any, **kwargs: Any) -> Any:
        self.warn_dropped(text, kwargs.get("text_target"))
        return super().__call__(text, *args, **kwargs)

    def encode(self, text: Any, *args: Any, **kwargs: Any) -> list[int]:
        self.warn_dropped(text)
        return super().encode(text, *args, **kwargs)

    def warn_dropped(self, *texts: Any) -> set[str]:
        """Warn about characters of ``texts`` (strings or nested lists) outside ``CHARS`` and the special tokens not
        named before; returns the characters dropped."""
        strings = [t for t in _strings(texts) if not set(t) <= _KNOWN]
        dropped = {c for t in strings for c in _without_special(t, self.all_special_tokens) if c not in _KNOWN}
        new = dropped - self.__dict__.setdefault("_warned_chars", set())
        if new:
            self._warned_chars |= new
            example = next(t for t in strings if new & set(t))
            logger.warning(dropped_message(new, example))
        return dropped

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> tuple[str, ...]:
        """Save with ``tokenizer_config.json`` naming ``PreTrainedTokenizerFast``, which any transformers release can
        load (this subclass it cannot)."""
        files = super().save_pretrained(save_directory, *args, **kwargs)
        config_path = os.path.join(save_directory, "tokenizer_config.json")
        with open(config_path) as f:
            config = json.load(f)
        config["tokenizer_class"] = PreTrainedTokenizerFast.__name__
        with open(config_path, "w") as f:
            f.write(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        return files


_KNOWN = set(CHARS)


def _strings(values: Any) -> list[str]:
    """Every string in ``values`` (nested lists and tuples; anything else is skipped)."""
    if isinstance(values, str):
        return [values]
    if isinstance(values, list | tuple):
        return [s for value in values for s in _strings(value)]
    return []


def _without_special(text: str, special: list[str]) -> str:
    for token in special:
        text = text.replace(token, "")
    return text


def dropped_message(dropped: set[str], example: str) -> str:
    """The warning for text whose characters ``dropped`` the demo tokenizer has no token for."""
    shown = ", ".join(repr(c) for c in sorted(dropped)[:20]) + (", ..." if len(dropped) > 20 else "")
    example = example if len(example) <= 60 else example[:57] + "..."
    kept = "".join(c for c in example if c in _KNOWN)
    return (
        f"The demo tokenizer (trl_ext.demo.build_tokenizer) has no token for {len(dropped)} character(s) of this "
        f"text: {shown}. Each becomes <unk>, so the model cannot see them and decoding drops them: {example!r} reads "
        f"as {kept!r}. It covers the arithmetic demo only ({CHARS!r}); for text, use a real tokenizer "
        "(AutoTokenizer.from_pretrained of your model)."
    )


def build_tokenizer() -> CharTokenizer:
    """A character-level tokenizer for the arithmetic task (digits, ``+-*=`` and space), with ``<pad>`` and
    ``<eos>`` tokens; other characters are read as ``<unk>`` and warned about (:class:`CharTokenizer`)."""
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for char in CHARS:
        vocab[char] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = CharTokenizer(tokenizer_object=backend, pad_token=PAD, eos_token=EOS, unk_token=UNK)
    tokenizer.padding_side = "left"
    tokenizer.model_max_length = 64
    return tokenizer


def build_model(tokenizer: PreTrainedTokenizerFast, config: DemoModelConfig | None = None) -> Qwen2ForCausalLM:
    """A randomly initialised tiny Qwen2 causal LM (float32, CPU-friendly; 0.6M parameters with the defaults)."""
    config = config or DemoModelConfig()
    torch.manual_seed(config.seed)
    model_config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        max_position_embeddings=config.max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(model_config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def make_problems(config: DemoTaskConfig | None = None) -> tuple[Dataset, Dataset]:
    """Seeded, disjoint train and held-out addition problems with ``prompt``, ``completion`` and ``answer`` columns.

    ``completion`` is the target text (for SFT) ; ``answer`` is the integer the reward checks.
    """
    config = config or DemoTaskConfig()
    pairs = [(a, b) for a in range(config.max_operand + 1) for b in range(config.max_operand + 1)]
    if config.num_train + config.num_eval > len(pairs):
        raise ValueError(
            f"DemoTaskConfig asks for num_train={config.num_train} + num_eval={config.num_eval} problems but "
            f"max_operand={config.max_operand} allows only {len(pairs)} distinct ones; raise max_operand or lower "
            "the counts."
        )
    random.Random(config.seed).shuffle(pairs)
    held_out, train = pairs[: config.num_eval], pairs[config.num_eval : config.num_eval + config.num_train]

    def rows(selected: list[tuple[int, int]]) -> dict[str, list[Any]]:
        return {
            "prompt": [f"{a}+{b}=" for a, b in selected],
            "completion": [str(a + b) for a, b in selected],
            "answer": [a + b for a, b in selected],
        }

    return Dataset.from_dict(rows(train)), Dataset.from_dict(rows(held_out))


def greedy_accuracy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, dataset: Dataset) -> float:
    """Held-out greedy accuracy: the fraction of prompts whose greedy completion (4 new tokens) has the answer as its
    first integer, i.e. the ``arithmetic`` reward of the greedy completion."""
    return evaluation.greedy_accuracy(
        model, tokenizer, dataset, arithmetic_reward, max_new_tokens=4, prompts_per_call=128
    )


@dataclass
class WarmStartConfig:
    """The SFT warm start: short on purpose, so that RL starts from a low but non-zero pass rate."""

    max_steps: int = 600  # measured: about 28% held-out greedy accuracy, ~15 s on 2 cores
    learning_rate: float = 3e-3
    per_device_train_batch_size: int = 32
    seed: int = 0


def warm_start_sft_kwargs(output_dir: str, sft: WarmStartConfig | None = None) -> dict[str, Any]:
    """The ``SFTConfig`` fields of the warm start (shared with the SFT recipe through ``trl_ext.recipe.models``)."""
    sft = sft or WarmStartConfig()
    return dict(
        output_dir=output_dir,
        max_steps=sft.max_steps,
        learning_rate=sft.learning_rate,
        lr_scheduler_type="constant",
        per_device_train_batch_size=sft.per_device_train_batch_size,
        seed=sft.seed,
        logging_steps=max(sft.max_steps // 4, 1),
        save_strategy="no",
        report_to="none",
        bf16=False,
        max_length=32,
        completion_only_loss=True,
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=True,
    )


#: The environment variable that moves trl-ext's cache folder (``cache_dir``).
CACHE_ENV = "TRL_EXT_CACHE"


def cache_dir(*parts: str) -> str:
    """trl-ext's cache folder (``$TRL_EXT_CACHE``, else ``$XDG_CACHE_HOME/trl-ext``, else ``~/.cache/trl-ext``),
    joined with ``parts``: one place per user, whatever the current folder."""
    root = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser(os.path.join("~", ".cache")), "trl-ext"
    )
    return os.path.join(root, *parts)


def warm_start_key(
    task: DemoTaskConfig | None = None, model_config: DemoModelConfig | None = None, sft: WarmStartConfig | None = None
) -> dict[str, Any]:
    """Everything that changes the warm start's weights, and so names its cache folder: the task, model and SFT
    settings, the vocabulary, the source of the functions that build and train it, and the torch, transformers and
    TRL releases (TRL 1.12 and 1.16 train different weights). Not accelerate, datasets or the thread count (the SFT
    runs on one thread), so recipes, notebooks and tests share one cached warm start. ``warm_start.json`` also records
    the machine and every release (another CPU may round differently under the same key)."""
    task, model_config, sft = task or DemoTaskConfig(), model_config or DemoModelConfig(), sft or WarmStartConfig()
    functions = (build_tokenizer, build_model, make_problems, warm_start_sft_kwargs, _train_warm_start)
    code = hashlib.sha256("".join(inspect.getsource(f) for f in functions).encode()).hexdigest()[:12]
    return {
        "task": asdict(task),
        "model": asdict(model_config),
        "sft": asdict(sft),
        "vocab": [PAD, EOS, UNK, CHARS],
        "code": code,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__},
    }


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``; else what ``platform`` knows)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def key_hash(key: dict[str, Any]) -> str:
    """The 12-hex-digit name of a ``warm_start_key``'s cache folder."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]


def warm_start_dir(
    output_dir: str | None = None,
    task: DemoTaskConfig | None = None,
    model_config: DemoModelConfig | None = None,
    sft: WarmStartConfig | None = None,
) -> str:
    """``output_dir/<hash of warm_start_key>`` (``output_dir`` None: ``cache_dir("demo-warm-start")``)."""
    return os.path.join(output_dir or cache_dir("demo-warm-start"), key_hash(warm_start_key(task, model_config, sft)))


def warm_start_record(path: str) -> dict[str, Any]:
    """A cached warm start's ``warm_start.json``: ``key``, ``key_hash``, ``machine``, ``releases``, ``final_loss``."""
    with open(os.path.join(path, "warm_start.json")) as f:
        return json.load(f)


def warm_start_is_cached(sft: WarmStartConfig | None = None) -> bool:
    """Whether ``warm_start(sft=sft)`` with the default task and model would load a cached warm start."""
    return os.path.exists(os.path.join(warm_start_dir(sft=sft), "warm_start.json"))


def warm_start(
    output_dir: str | None = None,
    task: DemoTaskConfig | None = None,
    model_config: DemoModelConfig | None = None,
    sft: WarmStartConfig | None = None,
    use_cache: bool = True,
) -> str:
    """The folder of the demo model after its SFT warm start (``warm_start_dir``): trained on first use, then cached
    (``use_cache=False`` trains anew). Written to a temporary folder and renamed into place when complete, so an
    interrupted run or two processes at once never leave a half-written entry."""
    task, model_config, sft = task or DemoTaskConfig(), model_config or DemoModelConfig(), sft or WarmStartConfig()
    run_dir = warm_start_dir(output_dir, task, model_config, sft)
    if use_cache and os.path.exists(os.path.join(run_dir, "warm_start.json")):
        return run_dir
    partial = f"{run_dir}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    losses = _train_warm_start(partial, task, model_config, sft)
    key = warm_start_key(task, model_config, sft)
    record = {
        "key_hash": key_hash(key),
        "key": key,
        "machine": f"{cpu_name()}, {os.cpu_count()} CPUs ({platform.platform()})",
        "releases": {m.__name__: m.__version__ for m in (torch, transformers, trl, accelerate, datasets)},
        "final_loss": losses[-1] if losses else None,
    }
    with open(os.path.join(partial, "warm_start.json"), "w") as f:
        json.dump(record, f, indent=2)
    if not use_cache:
        shutil.rmtree(run_dir, ignore_errors=True)
    try:
        os.rename(partial, run_dir)
    except OSError:  # another process published the same warm start first: same key, same weights
        shutil.rmtree(partial, ignore_errors=True)
    return run_dir


def _train_warm_start(
    path: str, task: DemoTaskConfig, model_config: DemoModelConfig, sft: WarmStartConfig
) -> list[float]:
    """Train the warm start and save model and tokenizer to ``path``, on one thread (its weights then depend on no
    thread count); returns the logged SFT losses."""
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, model_config)
    train, _ = make_problems(task)
    # transformers 5 names activation checkpointing so; the old name (TRL's default) warns. Off: a 0.6M model.
    new_name = "activation_checkpointing" in {f.name for f in fields(SFTConfig)}
    checkpointing = {"activation_checkpointing" if new_name else "gradient_checkpointing": False}
    args = SFTConfig(**warm_start_sft_kwargs(os.path.join(path, "trainer"), sft), **checkpointing)
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # TRL's five preprocessing passes over 600 rows: nothing worth a bar
    try:
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=train.select_columns(["prompt", "completion"]),
            processing_class=tokenizer,
        )
    finally:
        if bars:
            datasets.enable_progress_bars()
    use_console(trainer, "warm start (SFT)", bar=True)  # disable_tqdm above only kept transformers' output away
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer.train()
    finally:
        torch.set_num_threads(threads)
    trainer.model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return [row["loss"] for row in trainer.state.log_history if "loss" in row]
