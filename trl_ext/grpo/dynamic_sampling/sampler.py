"""Dynamic sampling's state across steps and its decisions on plain tensors (DAPO, arXiv 2503.14476, section 3.2):
no trainer, no TRL call, no collective. The loop that uses it is ``loop.sample_informative_batch``.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from trl_ext.grpo.dynamic_sampling.batch import Round
from trl_ext.grpo.dynamic_sampling.groups import group_stats, informative_groups
from trl_ext.grpo.dynamic_sampling.prompts import IterablePromptStream, PromptStream
from trl_ext.grpo.dynamic_sampling.selector import PromptSelector
from trl_ext.grpo.dynamic_sampling.sizing import DEFAULT_MARGIN, InformativeRate, refill_groups, round_cap
from trl_ext.grpo.dynamic_sampling.skip import SkipPredictor

logger = logging.getLogger(__name__)

#: consecutive steps without a single informative group before the second warning
EMPTY_STEPS_WARNING = 10
#: at most this many stream prompts are looked at per prompt taken when GRESO skips predicted zero-variance prompts
_SKIP_ATTEMPTS = 10


class DynamicSampler:
    """Owns the refill prompt stream, the informative-rate estimate, the prompt predictor (GRESO's skip history or
    the posterior selector), the reward range seen and the warnings given; sizes refill rounds, draws their prompts
    and describes a finished step."""

    def __init__(
        self,
        args: Any,
        num_generations: int,
        stream: PromptStream | IterablePromptStream,
        skip: SkipPredictor | None = None,
        selector: PromptSelector | None = None,
    ) -> None:
        self.num_generations = num_generations
        self.atol = float(args.dynamic_sampling_atol)
        self.max_generation_batches = int(args.dynamic_sampling_max_generation_batches)
        self.max_round_size = float(args.dynamic_sampling_max_round_size)
        margin = args.dynamic_sampling_refill_margin
        self.margin = DEFAULT_MARGIN if margin is None else float(margin)
        self.reward_range = args.dynamic_sampling_reward_range
        self.stream = stream
        self.skip = skip
        self.selector = selector
        self.rate = InformativeRate()
        self.warned = False
        self.empty_steps = 0
        self.reward_low, self.reward_high = float("inf"), float("-inf")
        self.skipped = 0  # prompts skipped (GRESO) or passed over (selector) in the current step

    @property
    def draws_every_round(self) -> bool:
        """Whether the first round too comes from the stream (a predictor: TRL's sampler cannot skip prompts)."""
        return self.skip is not None or self.selector is not None

    def informative(self, metric: torch.Tensor) -> torch.Tensor:
        """Per group: whether its metric varies (DAPO Eq. 11: 0 < #correct < G)."""
        return informative_groups(metric, self.num_generations, self.atol)

    def refill_size(self, rounds: list[Round], num_groups: int, world_size: int) -> int:
        """Groups the next refill round generates (0: the batch is full or the budget is spent), sized from the
        running informative rate with this step's rounds folded in (``sizing.refill_groups``)."""
        informative = sum(int(r.informative.sum()) for r in rounds)
        generated = sum(int(r.informative.numel()) for r in rounds)
        return refill_groups(
            missing=num_groups - informative,
            rate=self.rate.estimate(informative, generated),
            margin=self.margin,
            world_size=world_size,
            cap=round_cap(num_groups, self.max_round_size),
            remaining=self.max_generation_batches * num_groups - generated,
        )

    def take_indices(self, num_prompts: int) -> list[int]:
        """``num_prompts`` training-set indices from the refill stream; with GRESO's skipping, a prompt predicted to
        give a zero-variance group is skipped, at most 10 candidates per prompt; with the selector, the prompts most
        likely to be informative of a larger pool are taken."""
        if self.selector is not None:
            indices, passed = self.selector.choose(self.stream, num_prompts)
            self.skipped += passed
        elif self.skip is None:
            indices = self.stream.take(num_prompts)
        else:
            indices, attempts = [], 0
            while len(indices) < num_prompts:
                index = self.stream.take(1)[0]
                attempts += 1
                if attempts <= _SKIP_ATTEMPTS * num_prompts and self.skip.should_skip(index):
                    self.skipped += 1
                    continue
                indices.append(index)
        return indices

    def finish_step(self, rounds: list[Round], num_groups: int) -> dict[str, float]:
        """Fold a finished step into the rate estimate, the reward range seen and GRESO's history; returns its
        ``dynamic_sampling/*`` figures."""
        metric = torch.cat([r.metric for r in rounds])
        keep = torch.cat([r.informative for r in rounds])
        generated, informative = keep.numel(), int(keep.sum())
        self.rate.update(informative, generated)
        finite = metric[torch.isfinite(metric)]
        if finite.numel():
            self.reward_low = min(self.reward_low, finite.min().item())
            self.reward_high = max(self.reward_high, finite.max().item())
        low, high = self.reward_range if self.reward_range is not None else (self.reward_low, self.reward_high)
        if self.selector is not None:
            for round_ in rounds:
                if round_.indices is not None:
                    self.selector.observe(round_.indices, round_.metric, low, high)
            self.selector.tick()
        stats = group_stats(metric, self.num_generations, self.atol, reward_max=high, reward_min=low)
        kept = min(informative, num_groups)  # the batch's informative groups
        self.empty_steps = self.empty_steps + 1 if kept == 0 else 0
        if kept < num_groups and not self.warned:
            self.warned = True
            self._warn_budget_spent(kept, num_groups, generated, stats.all_max_frac, stats.all_min_frac)
        if self.empty_steps == EMPTY_STEPS_WARNING:
            logger.warning(
                f"Dynamic sampling found no informative group at all in the last {EMPTY_STEPS_WARNING} steps: the "
                "policy is not being trained (every step is zero-weight fillers). Stop the run and fix the cold start "
                "(SFT first), the group size (num_generations) or the reward function."
            )
        surplus, last = informative - kept, rounds[-1]
        dropped_time = sum(r.seconds * (1.0 - r.informative.float().mean().item()) for r in rounds)
        return {
            "dynamic_sampling/rounds": float(len(rounds)),
            "dynamic_sampling/generated_groups": float(generated),
            "dynamic_sampling/informative_rate_estimate": self.rate.estimate(),
            "dynamic_sampling/kept_group_frac": informative / generated,
            "dynamic_sampling/all_max_frac": stats.all_max_frac,
            "dynamic_sampling/all_min_frac": stats.all_min_frac,
            "dynamic_sampling/filler_groups": float(num_groups - kept),
            "dynamic_sampling/surplus_groups": float(surplus),
            "dynamic_sampling/limit_hit": float(kept < num_groups),
            "dynamic_sampling/generation_time": sum(r.seconds for r in rounds),
            "dynamic_sampling/dropped_time": dropped_time,
            # Surplus groups all come from the last round: the batch was full as soon as it had enough.
            "dynamic_sampling/surplus_time": last.seconds * surplus * self.num_generations / last.num_rows,
            **self._update_skip_history(rounds),
            **({"dynamic_sampling/skipped_prompts": float(self._take_skipped())} if self.selector is not None else {}),
        }

    def _take_skipped(self) -> int:
        skipped, self.skipped = self.skipped, 0
        return skipped

    def _update_skip_history(self, rounds: list[Round]) -> dict[str, float]:
        """GRESO's per-prompt zero-variance streaks and exploration probability, after a step's rounds."""
        if self.skip is None:
            return {}
        zero, total = 0, 0
        for round_ in rounds:
            keep = round_.informative
            zero, total = zero + int((~keep).sum()), total + keep.numel()
            if round_.indices is not None:
                for index, informative in zip(round_.indices, keep.tolist(), strict=True):
                    self.skip.record(index, zero_variance=not informative)
        self.skip.adapt(zero / max(total, 1))
        return {
            "dynamic_sampling/skipped_prompts": float(self._take_skipped()),
            "dynamic_sampling/skip_exploration_p": self.skip.p,
        }

    def _warn_budget_spent(self, kept: int, num_groups: int, generated: int, too_easy: float, too_hard: float) -> None:
        if too_hard or too_easy:
            seen = f"{too_hard:.0%} of the groups were all-wrong and {too_easy:.0%} all-right"
        else:
            seen = "every uninformative group had one reward for all its completions"
        advice = [
            "if the model rarely succeeds (cold start), warm-start it with SFT on the task first (trl-ext sft)",
            f"raise num_generations (now {self.num_generations}) so that a group is more likely to hold different "
            "rewards",
            "check the reward function: rewards/<name>/std near 0 in the logs means it hardly varies",
        ]
        if too_easy > 0:
            advice.append("filter always-solved prompts out of the data")
        advice.append("or raise dynamic_sampling_max_generation_batches")
        logger.warning(
            f"Dynamic sampling spent its generation budget (dynamic_sampling_max_generation_batches="
            f"{self.max_generation_batches}) with only {kept}/{num_groups} informative groups ({kept / generated:.0%} "
            f"of the {generated} generated; {seen}); the rest are zero-weight fillers. What to do: "
            f"{'; '.join(advice)}. (Shown once; see dynamic_sampling/limit_hit and dynamic_sampling/kept_group_frac.)"
        )

    # -- checkpoint state ----------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state across steps, JSON-serializable (written into every checkpoint)."""
        state: dict[str, Any] = {"stream": self.stream.state_dict(), "warned": self.warned}
        state["informative_rate"] = self.rate.state_dict()
        if self.skip is not None:
            state["skip"] = self.skip.state_dict()
        if self.selector is not None:
            state["selector"] = self.selector.state_dict()
        state["reward_range"] = [self.reward_low, self.reward_high]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.load_state_dict(state["stream"])
        self.warned = state.get("warned", False)
        if "informative_rate" in state:
            self.rate.load_state_dict(state["informative_rate"])
        if self.skip is not None and "skip" in state:
            self.skip.load_state_dict(state["skip"])
        if self.selector is not None and "selector" in state:
            self.selector.load_state_dict(state["selector"])
        self.reward_low, self.reward_high = state.get("reward_range", [float("inf"), float("-inf")])
