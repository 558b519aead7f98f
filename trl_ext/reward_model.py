"""Learned rewards: a reward model (RM) as a reward function of the RL recipes, and the preference data it learns from.

RLHF's second stage (Ouyang et al. 2022, arXiv 2203.02155, section 3.5): a scalar head trained with the Bradley-Terry
loss by TRL's ``RewardTrainer`` (``recipes/reward.py``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel

PREFERENCE_COLUMNS = ("chosen", "rejected")


def looks_like_model(spec: str) -> bool:
    """Whether a reward name could be a model: a local folder, or a Hub id (``owner/name``)."""
    return os.path.isdir(spec) or (spec.count("/") == 1 and not spec.startswith((".", "/")))


def load_reward_model(spec: str, dtype: Any = "auto") -> PreTrainedModel:
    """``spec`` (a folder or a Hub id) as a one-output reward model; a ``ValueError`` saying why when it is not one."""
    try:
        model = AutoModelForSequenceClassification.from_pretrained(spec, num_labels=1, dtype=dtype)
    except Exception as error:  # OSError (not found), ValueError (not a classification architecture), ...
        raise ValueError(
            f"{spec!r} could not be loaded as a reward model ({type(error).__name__}: {error})."
        ) from error
    return model


def reward_tokenizer(model: PreTrainedModel) -> Any:
    """The tokenizer saved with a reward model, with a pad token (TRL pads reward inputs)."""
    tokenizer = AutoTokenizer.from_pretrained(model.config._name_or_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def is_reward_model(func: Any) -> bool:
    """A reward function that is a model (TRL scores it with a forward pass), not a rule."""
    return isinstance(func, PreTrainedModel)


def reward_model_name(model: PreTrainedModel) -> str:
    """The name TRL's GRPO trainer logs a model reward under: the last part of its ``_name_or_path``."""
    return model.config._name_or_path.rstrip("/").split("/")[-1]


def check_preferences(dataset: Dataset, name: str) -> None:
    """A preference dataset has ``chosen`` and ``rejected`` (and maybe ``prompt``): TRL's layouts for rewards."""
    missing = [c for c in PREFERENCE_COLUMNS if c not in dataset.column_names]
    if missing:
        raise ValueError(
            f"{name} has columns {dataset.column_names} but no {missing}: a reward model learns from pairs, "
            "'chosen' and 'rejected' (and optionally 'prompt'; text or chat messages, TRL's preference layouts)."
        )


def preference_splits(
    train: Dataset, held_out: Dataset | None, held_out_fraction: float, seed: int = 0
) -> tuple[Dataset, Dataset]:
    """``(train, held_out)`` pairs: the given held-out split, else a seeded ``held_out_fraction`` of the training
    pairs (at least one), so that pairwise accuracy is always measured on pairs the model did not train on."""
    check_preferences(train, "the training split")
    if held_out is not None and all(c in held_out.column_names for c in PREFERENCE_COLUMNS):
        return train, held_out
    if not 0 < held_out_fraction < 1:
        raise ValueError(f"held_out_fraction must be in (0, 1), got {held_out_fraction}.")
    count = max(1, round(held_out_fraction * len(train)))
    if count >= len(train):
        raise ValueError(f"{len(train)} preference pairs are too few to hold {count} out; give more pairs.")
    shuffled = train.shuffle(seed=seed)
    return shuffled.select(range(count, len(shuffled))), shuffled.select(range(count))


class RewardModelScorer:
    """A reward model called like a rule reward, on the text TRL's GRPO trainer builds for a model reward."""

    def __init__(self, model: PreTrainedModel, tokenizer: Any = None, batch_size: int = 64):
        self.model = model
        self.tokenizer = tokenizer or reward_tokenizer(model)
        self.batch_size = batch_size
        self.__name__ = reward_model_name(model)

    @torch.no_grad()
    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        texts = [
            self.tokenizer.apply_chat_template(p + c, tokenize=False) if isinstance(p, list) else p + c
            for p, c in zip(prompts, completions, strict=True)
        ]
        was_training = self.model.training
        self.model.eval()
        device = next(self.model.parameters()).device
        scores: list[float] = []
        try:
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(
                    texts[start : start + self.batch_size],
                    return_tensors="pt",
                    padding=True,
                    padding_side="right",
                    add_special_tokens=False,
                ).to(device)
                scores += self.model(**batch).logits[:, 0].float().tolist()
        finally:
            self.model.train(was_training)
        return scores


def as_callable(func: Any) -> Callable:
    """A reward function as the package's scoring calls it: a reward model wrapped once in a ``RewardModelScorer``."""
    if not is_reward_model(func):
        return func
    if getattr(func, "_trl_ext_scorer", None) is None:
        func._trl_ext_scorer = RewardModelScorer(func)
    return func._trl_ext_scorer


def pairwise_accuracy(chosen_scores: Sequence[float], rejected_scores: Sequence[float]) -> float:
    """The share of pairs whose chosen completion scores above its rejected one; a tie counts one half (a reward
    that cannot tell the two apart is at chance, not wrong)."""
    if len(chosen_scores) != len(rejected_scores) or not chosen_scores:
        raise ValueError(
            f"pairwise_accuracy needs as many chosen as rejected scores, at least one: got {len(chosen_scores)} and "
            f"{len(rejected_scores)}."
        )
    wins = sum(1.0 if c > r else 0.5 if c == r else 0.0 for c, r in zip(chosen_scores, rejected_scores, strict=True))
    return wins / len(chosen_scores)


def score_pairs(reward: Callable, pairs: Dataset, tokenizer: Any = None) -> tuple[list[float], list[float]]:
    """``reward``'s scores of each pair's ``prompt + chosen`` and ``prompt + rejected``, called as TRL's GRPO calls a
    reward (``prompts=``, ``completions=``); a reward model scores the text GRPO scores (``RewardModelScorer``, with
    ``tokenizer`` or the one saved with it)."""
    score = RewardModelScorer(reward, tokenizer) if is_reward_model(reward) else reward
    prompts = list(pairs["prompt"])
    chosen = score(prompts=prompts, completions=list(pairs["chosen"]))
    return chosen, score(prompts=prompts, completions=list(pairs["rejected"]))


def held_out_pairwise_accuracy(reward: Callable, pairs: Dataset, tokenizer: Any = None) -> float:
    """``pairwise_accuracy`` of ``reward`` on ``pairs`` (``prompt``, ``chosen``, ``rejected``) as RL scores them."""
    return pairwise_accuracy(*score_pairs(reward, pairs, tokenizer))


def as_scored_ids(pairs: Dataset, tokenizer: Any) -> Dataset:
    """Text pairs as ``chosen_ids`` / ``rejected_ids`` of ``prompt + completion`` with no EOS added: the tokens TRL's
    GRPO scores a reward model on (completions decoded without special tokens). ``RewardTrainer`` appends EOS to text
    pairs, so a model trained on them reads its score at an EOS it never sees during RL."""

    def ids(row: dict) -> dict:
        encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
        return {
            "chosen_ids": encode(row["prompt"] + row["chosen"]),
            "rejected_ids": encode(row["prompt"] + row["rejected"]),
        }

    return pairs.map(ids, remove_columns=pairs.column_names)


def rollout_pairs(
    prompts: Sequence[str],
    completions: Sequence[str],
    labels: Sequence[float],
    num_generations: int,
    max_pairs_per_prompt: int,
    references: Sequence[str] | None = None,
) -> Dataset:
    """Pairs from ``num_generations`` rule-labelled rollouts of each prompt (group-contiguous ``completions``, 1.0 =
    correct): the most frequent correct text against each distinct incorrect text, most frequent first (the mistakes
    the policy makes most), up to ``max_pairs_per_prompt``. A group with no correct rollout is paired against its
    ``references`` entry (the known answer) when given, else skipped; one with no incorrect rollout is skipped."""
    if len(completions) != len(labels) or len(completions) != len(prompts) * num_generations:
        raise ValueError(
            f"{len(prompts)} prompts x num_generations={num_generations} needs {len(prompts) * num_generations} "
            f"completions and labels, got {len(completions)} and {len(labels)}."
        )
    rows: dict[str, list[str]] = {"prompt": [], "chosen": [], "rejected": []}
    for k, prompt in enumerate(prompts):
        group = range(k * num_generations, (k + 1) * num_generations)
        correct = Counter(completions[i] for i in group if labels[i] == 1.0)
        wrong = Counter(completions[i] for i in group if labels[i] != 1.0)
        if not correct and references is not None:
            correct = Counter([references[k]])
        if not correct or not wrong:
            continue
        chosen = min(correct, key=lambda t: (-correct[t], t))
        for rejected in sorted(wrong, key=lambda t: (-wrong[t], t))[:max_pairs_per_prompt]:
            rows["prompt"].append(prompt)
            rows["chosen"].append(chosen)
            rows["rejected"].append(rejected)
    return Dataset.from_dict(rows)
