"""What one call of TRL's ``_generate_and_score_completions`` scored, read back from what TRL logged.

TRL writes every call's per-function rewards (gathered across processes, NaN where a function returned None) into its
completions table, ``_logs["rewards"][name]``, one entry per completion in global order. ``ScoredRoundsMixin`` sits
directly above TRL's trainer, so every generation round passes through it (a dynamic-sampling refill as much as TRL's
own batch); after each it reads those entries back (``round_rewards``) and

- keeps them, with the completions' lengths and truncation (``completion_lengths``, TRL's definitions), for dynamic
  sampling (``last_round``);
- counts the unscorable ones per function (``rewards/<name>/none_frac``) and watches the first rounds for functions
  that score nothing (``trl_ext.reliability.unscorable``).

Reading the rewards back rather than wrapping TRL's ``_calculate_rewards`` keeps the number of TRL internals this
package depends on small: the completions table is already read and written by dynamic sampling's logs.
"""

from __future__ import annotations

from typing import Any

import torch

from trl_ext.reliability.checks import tokenizer_of
from trl_ext.reliability.unscorable import UnscorableWatch
from trl_ext.rewards.shaping import is_shaping_reward


def round_rewards(reward_logs: dict[str, Any], names: list[str], rows: int) -> torch.Tensor:
    """The last ``rows`` entries of each reward function's column of TRL's completions table: ``[rows, functions]``."""
    columns = []
    for name in names:
        entries = list(reward_logs[name])
        if len(entries) < rows:
            raise RuntimeError(
                f"TRL's completions table holds {len(entries)} rewards of {name!r} after a round of {rows} completions: "
                "TRL's _generate_and_score_completions no longer logs one reward per completion. trl-ext is tested "
                "against trl 1.12 to 1.16; pin one of those versions."
            )
        columns.append(torch.tensor(entries[len(entries) - rows :], dtype=torch.float32))
    return torch.stack(columns, dim=1) if columns else torch.zeros(rows, 0)


def completion_lengths(
    output: dict[str, Any], eos_id: int | None, pad_id: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per local row of TRL's generation output: the completion's length (the number of sampled ids) and whether it
    was truncated (its last id is neither EOS nor padding), as TRL computes them for ``completions/*``.

    TRL's ``completion_mask`` is one on exactly the sampled ids, unless ``mask_truncated_completions`` zeroed the
    row of a truncated completion; such a row's sampled ids end at its last non-padding id (a truncated completion
    does not end in padding)."""
    ids, mask = output["completion_ids"], output["completion_mask"]
    lengths = mask.sum(dim=1).long()
    positions = torch.arange(ids.size(1), device=ids.device).expand_as(ids)
    non_pad = ids != pad_id if pad_id is not None else torch.ones_like(ids, dtype=torch.bool)
    last_non_pad = torch.where(non_pad, positions + 1, torch.zeros_like(positions)).max(dim=1).values
    masked = (lengths == 0) & (last_non_pad > 0)
    lengths = torch.where(masked, last_non_pad, lengths)
    last = ids.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    ends = torch.zeros_like(last, dtype=torch.bool)
    for token in (eos_id, pad_id):
        if token is not None:
            ends |= last == token
    truncated = (lengths > 0) & ~ends
    return lengths, truncated


class ScoredRoundsMixin:
    """Reads each generation round's rewards back from TRL's completions table (module docstring). Put it directly
    before ``trl.GRPOTrainer`` in the bases."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last_round: dict[str, torch.Tensor] | None = None
        self.unscorable_watch = UnscorableWatch(
            list(self.reward_func_names), [is_shaping_reward(f) for f in self.reward_funcs]
        )

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        rows = output["completion_ids"].size(0) * self.accelerator.num_processes
        rewards = round_rewards(self._logs["rewards"], list(self.reward_func_names), rows)
        training = self.model.training
        metrics = self._metrics["train" if training else "eval"]
        main = self.accelerator.is_main_process
        for key, value in self.unscorable_watch.observe(rewards, training=training, main_process=main).items():
            metrics[key].append(value)
        tokenizer = tokenizer_of(self.processing_class)
        lengths, truncated = completion_lengths(output, tokenizer.eos_token_id, tokenizer.pad_token_id)
        self.last_round = {
            "rewards_per_func": rewards,
            "lengths": self.accelerator.gather(lengths).cpu(),
            "truncated": self.accelerator.gather(truncated).cpu(),
        }
        return output
