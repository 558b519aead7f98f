"""Preference pairs mined from groups of scored rollouts: the data side of group-mined / iterative DPO.

Iterative RPO (Pang et al., arXiv 2404.19733, section 2) pairs correct with incorrect samples of the current model.
``mine_pairs`` samples groups, scores them with any GRPO-family reward functions and pairs the best-reward tier with
the worst in each informative group (DAPO Eq. 11), the pair of closest lengths, so that no length difference rides
along with the preference (Park et al., arXiv 2403.19159). A truncated completion is never chosen (TRL's
``DPOTrainer`` appends EOS: it would teach stopping at a cut), and one whose text does not re-tokenize to its sampled
ids (``round_trips``) enters no pair.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from datasets import Dataset

from trl_ext.grpo.dynamic_sampling.groups import DEFAULT_ATOL, informative_groups
from trl_ext.rewards.text import completion_text
from trl_ext.scoring import generate_groups, is_conversational, prompt_text, score_completions

PAIR_COLUMNS = ("prompt", "chosen", "rejected", "chosen_reward", "rejected_reward", "chosen_length", "rejected_length")


@dataclass
class PairStats:
    """What mining produced, for logs and for deciding whether to sample more."""

    num_groups: int
    num_informative: int
    num_pairs: int
    mean_reward: float  # over scorable completions
    mean_length_gap: float  # mean of len(chosen) - len(rejected) over the pairs (0 when there are none)
    mean_abs_length_gap: float
    num_truncated: int = 0  # completions without EOS (never chosen)
    num_not_round_trip: int = 0  # completions whose text does not re-tokenize to the sampled ids (left out)

    @property
    def informative_frac(self) -> float:
        return self.num_informative / self.num_groups if self.num_groups else 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "mining/num_groups": self.num_groups,
            "mining/informative_frac": self.informative_frac,
            "mining/num_pairs": self.num_pairs,
            "mining/mean_reward": self.mean_reward,
            "mining/length_gap": self.mean_length_gap,
            "mining/abs_length_gap": self.mean_abs_length_gap,
            "mining/truncated": self.num_truncated,
            "mining/not_round_trip": self.num_not_round_trip,
        }


def select_pairs(
    rewards: torch.Tensor,
    lengths: Sequence[int],
    num_generations: int,
    atol: float = DEFAULT_ATOL,
    pairs_per_group: int = 1,
    max_length_gap: int | None = None,
    truncated: Sequence[bool] | None = None,
    excluded: Sequence[bool] | None = None,
) -> list[tuple[int, int]]:
    """Indices ``(chosen, rejected)`` into the flat, group-contiguous ``rewards`` (TRL's ``view(-1, G)`` order). Per
    informative group, chosen within ``atol`` of the best reward of the completions that ended (not ``truncated``),
    rejected within ``atol`` of the worst; pairs by smallest length gap (ties: lowest indices), no completion reused,
    up to ``pairs_per_group`` and ``max_length_gap``. NaN rewards and ``excluded`` completions enter no pair."""
    if pairs_per_group < 1:
        raise ValueError(f"pairs_per_group={pairs_per_group} must be >= 1.")
    if max_length_gap is not None and max_length_gap < 0:
        raise ValueError(f"max_length_gap={max_length_gap} must be >= 0 or None (no limit).")
    rewards = rewards.detach().float().flatten()
    for name, values in (("lengths", lengths), ("truncated", truncated), ("excluded", excluded)):
        if values is not None and len(values) != rewards.numel():
            raise ValueError(
                f"{name} has {len(values)} entries for {rewards.numel()} rewards; give one per completion."
            )
    truncated = [False] * rewards.numel() if truncated is None else [bool(t) for t in truncated]
    excluded = [False] * rewards.numel() if excluded is None else [bool(e) for e in excluded]
    informative = informative_groups(rewards, num_generations, atol)
    pairs: list[tuple[int, int]] = []
    for group in torch.nonzero(informative).flatten().tolist():
        idx = range(group * num_generations, (group + 1) * num_generations)
        scorable = [i for i in idx if math.isfinite(rewards[i].item()) and not excluded[i]]
        ended = [i for i in scorable if not truncated[i]]
        if not ended:
            continue
        best = max(rewards[i].item() for i in ended)
        worst = min(rewards[i].item() for i in scorable)
        top = [i for i in ended if rewards[i].item() >= best - atol]
        bottom = [i for i in scorable if rewards[i].item() <= worst + atol]
        candidates = [
            (c, r)
            for c, r in itertools.product(top, bottom)
            if rewards[c] - rewards[r] > atol
            and (max_length_gap is None or abs(lengths[c] - lengths[r]) <= max_length_gap)
        ]
        candidates.sort(key=lambda cr: (abs(lengths[cr[0]] - lengths[cr[1]]), cr[0], cr[1]))
        used: set[int] = set()
        for c, r in candidates:
            if len(used) == 2 * pairs_per_group:
                break
            if c not in used and r not in used:
                pairs.append((c, r))
                used.update((c, r))
    return pairs


def _per_completion(values: Sequence[Any], num_completions: int, num_generations: int, name: str) -> list[Any]:
    if len(values) == num_completions:
        return list(values)
    if len(values) * num_generations == num_completions:
        return [v for v in values for _ in range(num_generations)]
    raise ValueError(
        f"{name} has {len(values)} entries: give one per completion ({num_completions}) or one per group "
        f"({num_completions // num_generations} with num_generations={num_generations})."
    )


def build_pairs(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    rewards: torch.Tensor | Sequence[float],
    num_generations: int,
    lengths: Sequence[int] | None = None,
    atol: float = DEFAULT_ATOL,
    pairs_per_group: int = 1,
    max_length_gap: int | None = None,
    truncated: Sequence[bool] | None = None,
    excluded: Sequence[bool] | None = None,
) -> Dataset:
    """Scored rollouts to a preference ``Dataset`` (``prompt``, ``chosen``, ``rejected``, both sides' rewards and
    lengths) by ``select_pairs``; prompts once per group or per completion, ``lengths`` by default in characters."""
    rewards = torch.as_tensor(rewards, dtype=torch.float32).flatten()
    n = len(completions)
    if rewards.numel() != n:
        raise ValueError(f"rewards has {rewards.numel()} entries for {n} completions; give one per completion.")
    prompts = _per_completion(prompts, n, num_generations, "prompts")
    lengths = [len(completion_text(c)) for c in completions] if lengths is None else list(lengths)
    pairs = select_pairs(
        rewards,
        lengths,
        num_generations,
        atol,
        pairs_per_group,
        max_length_gap,
        truncated=truncated,
        excluded=excluded,
    )
    rows: dict[str, list[Any]] = {column: [] for column in PAIR_COLUMNS}
    for c, r in pairs:
        rows["prompt"].append(prompts[c])
        rows["chosen"].append(completions[c])
        rows["rejected"].append(completions[r])
        rows["chosen_reward"].append(rewards[c].item())
        rows["rejected_reward"].append(rewards[r].item())
        rows["chosen_length"].append(int(lengths[c]))
        rows["rejected_length"].append(int(lengths[r]))
    return Dataset.from_dict(rows)


def pair_stats(rewards: torch.Tensor, num_generations: int, pairs: Dataset, atol: float = DEFAULT_ATOL) -> PairStats:
    finite = rewards[torch.isfinite(rewards)]
    gaps = [c - r for c, r in zip(pairs["chosen_length"], pairs["rejected_length"], strict=True)] if len(pairs) else []
    return PairStats(
        num_groups=rewards.numel() // num_generations,
        num_informative=int(informative_groups(rewards, num_generations, atol).sum()),
        num_pairs=len(pairs),
        mean_reward=finite.mean().item() if finite.numel() else math.nan,
        mean_length_gap=sum(gaps) / len(gaps) if gaps else 0.0,
        mean_abs_length_gap=sum(abs(g) for g in gaps) / len(gaps) if gaps else 0.0,
    )


@torch.no_grad()
def sample_groups(
    model: torch.nn.Module,
    tokenizer: Any,
    prompts: Sequence[Any],
    num_generations: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    batch_size: int = 64,
) -> tuple[list[Any], list[list[int]]]:
    """``num_generations`` sampled completions per prompt, group-contiguous, and their token ids (up to and including
    EOS). Conversational prompts come back as ``[{"role": "assistant", "content": text}]``, as ``DPOTrainer`` expects."""
    if num_generations < 2:
        raise ValueError(f"num_generations={num_generations}: a group needs at least 2 completions to compare.")
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer has no pad token; set tokenizer.pad_token (e.g. to tokenizer.eos_token).")
    eos = tokenizer.eos_token_id
    texts = [prompt_text(p, tokenizer) for p in prompts]
    eos_ids = [] if eos is None else [eos]
    completion_ids, _ = generate_groups(
        model,
        tokenizer,
        texts,
        num_generations,
        max_new_tokens,
        batch_size,
        eos_ids,
        tokenizer.pad_token_id,
        add_special_tokens=False,
        temperature=temperature,
        top_p=top_p,
        top_k=0,
    )
    completions: list[Any] = []
    for k, ids in enumerate(completion_ids):
        text = tokenizer.decode(ids, skip_special_tokens=True)
        prompt = prompts[k // num_generations]
        completions.append([{"role": "assistant", "content": text}] if is_conversational(prompt) else text)
    return completions, completion_ids


def round_trips(tokenizer: Any, text: str, ids: Sequence[int]) -> bool:
    """Whether TRL's ``DPOTrainer``, which appends EOS to the completion text and tokenizes it, trains on exactly the
    sampled ``ids``. Checked on the completion alone (TRL tokenizes it after the prompt): exact for tokenizers that do
    not merge across the prompt boundary, and errs on the side of leaving a completion out otherwise."""
    eos, eos_id = tokenizer.eos_token, tokenizer.eos_token_id
    expected = list(ids) if ids and ids[-1] == eos_id else [*ids, eos_id]
    full = text if text.endswith(eos) else text + eos
    return tokenizer(full, add_special_tokens=False)["input_ids"] == expected


def mine_pairs(
    model: torch.nn.Module,
    tokenizer: Any,
    dataset: Dataset,
    reward_funcs: Sequence[Callable],
    num_generations: int,
    max_new_tokens: int,
    reward_weights: Sequence[float] | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    atol: float = DEFAULT_ATOL,
    pairs_per_group: int = 1,
    max_length_gap: int | None = None,
    batch_size: int = 64,
) -> tuple[Dataset, PairStats]:
    """Sample groups from ``model`` for every row of ``dataset`` (a ``prompt`` column plus the reward functions'
    columns), score them as TRL's GRPO does, and build best-vs-worst pairs matched on token length."""
    if "prompt" not in dataset.column_names:
        raise ValueError(
            f"the prompt dataset has columns {dataset.column_names} but no 'prompt' column; rename the column that "
            "holds the prompts to 'prompt'."
        )
    prompts = list(dataset["prompt"])
    completions, completion_ids = sample_groups(
        model, tokenizer, prompts, num_generations, max_new_tokens, temperature, top_p, batch_size
    )
    repeated = {c: [v for v in dataset[c] for _ in range(num_generations)] for c in dataset.column_names}
    flat_prompts = repeated.pop("prompt")
    rewards = score_completions(
        reward_funcs, flat_prompts, completions, reward_weights, completion_ids=completion_ids, **repeated
    )
    lengths = [len(ids) for ids in completion_ids]
    eos = tokenizer.eos_token_id
    truncated = [eos is not None and (not ids or ids[-1] != eos) for ids in completion_ids]
    excluded = [
        not is_conversational(p) and not round_trips(tokenizer, completion_text(c), ids)
        for p, c, ids in zip(flat_prompts, completions, completion_ids, strict=True)
    ]
    pairs = build_pairs(
        prompts,
        completions,
        rewards,
        num_generations,
        lengths,
        atol,
        pairs_per_group,
        max_length_gap,
        truncated=truncated,
        excluded=excluded,
    )
    stats = pair_stats(rewards, num_generations, pairs, atol)
    stats.num_truncated, stats.num_not_round_trip = sum(truncated), sum(excluded)
    return pairs, stats
