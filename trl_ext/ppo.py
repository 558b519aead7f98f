"""PPO with TRL's own trainer (``trl.experimental.ppo.PPOTrainer``, trl 1.12) and the rule-based rewards of ``rewards/``.

PPO (Schulman et al., arXiv 1707.06347; Ziegler et al., arXiv 1909.08593) in TRL reads its reward model as a
sequence classifier: ``get_reward`` runs ``getattr(model, model.base_model_prefix)(...)``, applies ``model.score`` to
``hidden_states[-1]`` and reads each sequence's last non-pad token. ``RuleRewardModel`` is the smallest module of that
shape: its backbone is itself, its forward finds the dataset row of each query by its token ids (so columns such as
``answer`` reach the reward functions as in GRPO) and returns the combined reward at every position, and ``score`` is
the identity. It has no parameters (under DeepSpeed, use a trained reward model or DDP).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from datasets import Dataset
from transformers.modeling_outputs import BaseModelOutput

from trl_ext.reliability.checks import require_ppo
from trl_ext.scoring import prompt_text, score_completions


def prompt_token_ids(prompt: Any, tokenizer: Any) -> list[int]:
    """Token ids of one prompt as ``tokenize_prompts`` and the adapter see it (chat template for conversations)."""
    return tokenizer(prompt_text(prompt, tokenizer), add_special_tokens=False)["input_ids"]


def tokenize_prompts(dataset: Dataset, tokenizer: Any) -> Dataset:
    """The ``input_ids``-only dataset TRL's ``PPOTrainer`` expects (other columns would break its collator)."""
    if "prompt" not in dataset.column_names:
        raise ValueError(
            f"PPO needs a 'prompt' column; the dataset has {dataset.column_names}. Rename the prompt column to "
            "'prompt'."
        )
    return dataset.map(
        lambda row: {"input_ids": prompt_token_ids(row["prompt"], tokenizer)},
        remove_columns=dataset.column_names,
    )


class RuleRewardModel(torch.nn.Module):
    """Rule-based reward functions in the place of TRL PPO's reward model (module docstring). ``datasets``: the
    untokenized dataset(s) PPO will present (train and eval), with the columns the reward functions read."""

    base_model_prefix = "backbone"  # get_reward() calls getattr(model, base_model_prefix)(...): ourselves

    def __init__(
        self,
        reward_funcs: Callable | Sequence[Callable],
        tokenizer: Any,
        datasets: Dataset | Sequence[Dataset],
        reward_weights: Sequence[float] | None = None,
        unscored_reward: float = 0.0,
    ) -> None:
        require_ppo()  # fail here, naming the install line, rather than when TRL's PPOTrainer is imported
        super().__init__()
        self.reward_funcs = list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]
        self.reward_weights = reward_weights
        self.tokenizer = tokenizer
        self.unscored_reward = unscored_reward
        self.score = torch.nn.Identity()
        self._rows: dict[tuple[int, ...], dict[str, Any]] = {}
        for dataset in [datasets] if isinstance(datasets, Dataset) else datasets:
            if "prompt" not in dataset.column_names:
                raise ValueError(f"RuleRewardModel needs a 'prompt' column; got columns {dataset.column_names}.")
            for row in dataset:
                self._rows.setdefault(tuple(prompt_token_ids(row["prompt"], tokenizer)), row)
        if not self._rows:
            raise ValueError("RuleRewardModel got no prompts: pass the train (and eval) dataset(s) PPO will use.")
        self._prompt_lengths = sorted({len(key) for key in self._rows}, reverse=True)

    @property
    def backbone(self) -> RuleRewardModel:
        return self

    def _split(self, tokens: list[int]) -> tuple[dict[str, Any], list[int]]:
        for length in self._prompt_lengths:
            row = self._rows.get(tuple(tokens[:length])) if length <= len(tokens) else None
            if row is not None:
                return row, tokens[length:]
        text = self.tokenizer.decode(tokens)
        raise KeyError(
            f"RuleRewardModel was asked to score {text!r}, whose prompt is not in the datasets it was built with. "
            "Build it with every dataset PPOTrainer sees (train_dataset and eval_dataset), untokenized."
        )

    @torch.no_grad()
    def compute_rewards(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """One reward per row of ``input_ids`` (query + response, padding where ``attention_mask`` is 0)."""
        if attention_mask is None:
            attention_mask = input_ids != self.tokenizer.pad_token_id
        rows, completions, completion_ids = [], [], []
        for ids, mask in zip(input_ids.tolist(), attention_mask.bool().tolist(), strict=True):
            row, response = self._split([t for t, keep in zip(ids, mask, strict=True) if keep])
            rows.append(row)
            completion_ids.append(response)
            completions.append(self.tokenizer.decode(response, skip_special_tokens=True))
        columns = {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"}
        rewards = score_completions(
            self.reward_funcs,
            [row["prompt"] for row in rows],
            completions,
            self.reward_weights,
            completion_ids=completion_ids,
            **columns,
        )
        return torch.nan_to_num(rewards, nan=self.unscored_reward)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs: Any
    ) -> BaseModelOutput:
        rewards = self.compute_rewards(input_ids, attention_mask).to(input_ids.device)
        hidden = rewards.view(-1, 1, 1).expand(input_ids.shape[0], input_ids.shape[1], 1)
        return BaseModelOutput(last_hidden_state=hidden, hidden_states=(hidden,))
