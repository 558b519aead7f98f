r"""DPO over TRL's ``DPOTrainer``: length-bias diagnostics, and pairs mined from groups of the current policy.

``DPOTrainer`` takes exactly the arguments of ``trl.DPOTrainer`` and computes exactly its loss (DPO, arXiv
2305.18290, Eq. 7, or whichever ``loss_type`` the config names). On top it logs how much of the implicit reward
margin comes from length, an exact split of each pair's margin:

    margin = beta (L_w a_w - L_l a_l)                     a = per-token log-ratio log(pi/pi_ref) / L
           = beta (L_w - L_l)(a_w + a_l)/2   +   beta (a_w - a_l)(L_w + L_l)/2
             ^ length part: the length gap    ^ per-token part: what the model prefers
               at the pair's mean rate           token for token

Logged: ``length_bias/chosen_len``, ``rejected_len``, ``gap`` (L_w - L_l), ``margin_from_length`` (the length part)
and ``length_share`` (sum |length part| / (sum |length part| + sum |per-token part|)), from the unweighted sequence
log-ratios (DPO's implicit reward, Eq. 5) of TRL's own forwards, read through forward hooks: no extra forward pass.

Iterative RPO (arXiv 2404.19733, section 2): ``DPOTrainer.from_groups`` trains on pairs mined from the current
policy (``trl_ext.dpo.pairs``); ``train_iterative_dpo`` repeats that for ``mining_rounds`` rounds, each model the
next one's reference. The paper's gold-answer check is whatever your reward function checks.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import trl
from datasets import Dataset
from transformers import ProcessorMixin
from trl.trainer.utils import selective_log_softmax

from trl_ext.dpo.pairs import PairStats, mine_pairs
from trl_ext.grpo.dynamic_sampling.groups import DEFAULT_ATOL

logger = logging.getLogger(__name__)

try:  # PEFT is optional
    from peft import PeftModel
except ImportError:  # pragma: no cover
    PeftModel = ()  # type: ignore[assignment,misc]


@dataclass
class DPOConfig(trl.DPOConfig):
    r"""``trl.DPOConfig`` (every TRL default kept) plus group mining and the length-bias diagnostics. Iterative RPO
    samples N = 30 on GSM8K (8 is enough on the demo task) at temperature 0.8, and runs 4 ``mining_rounds``."""

    length_diagnostics: bool = field(
        default=True, metadata={"help": "Log length_bias/* (length gap, share of the margin explained by length)."}
    )
    num_generations: int = field(default=8, metadata={"help": "Completions sampled per prompt when mining pairs."})
    mining_rounds: int = field(
        default=1,
        metadata={"help": "Iterative DPO rounds: re-sample from the improved policy, which becomes the ref."},
    )
    mining_max_new_tokens: int = field(default=256, metadata={"help": "Max new tokens per mined completion."})
    mining_temperature: float = field(default=1.0, metadata={"help": "Sampling temperature when mining."})
    mining_top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling top_p when mining."})
    mining_batch_size: int = field(default=64, metadata={"help": "Prompts per generate() call when mining."})
    prompts_per_round: int | None = field(
        default=None, metadata={"help": "Prompts sampled per mining round (seeded); None = all prompts."}
    )
    reward_weights: list[float] | None = field(
        default=None, metadata={"help": "One weight per reward function (None = all 1.0)."}
    )
    reward_atol: float = field(
        default=DEFAULT_ATOL, metadata={"help": "Groups whose reward range is <= atol are uninformative and dropped."}
    )
    pairs_per_group: int = field(default=1, metadata={"help": "Length-matched best-vs-worst pairs per group."})
    max_length_gap: int | None = field(
        default=None, metadata={"help": "Drop pairs whose completions differ by more tokens (None = no limit)."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = {
            "num_generations": (self.num_generations >= 2, "at least 2 completions per prompt are needed to compare"),
            "mining_rounds": (self.mining_rounds >= 1, "at least 1 round"),
            "mining_max_new_tokens": (self.mining_max_new_tokens >= 1, "must be >= 1"),
            "mining_temperature": (
                self.mining_temperature > 0,
                "must be > 0 (sampling, not greedy: greedy groups are all equal and every group would be dropped)",
            ),
            "pairs_per_group": (self.pairs_per_group >= 1, "must be >= 1"),
            "reward_atol": (self.reward_atol >= 0, "must be >= 0"),
            "prompts_per_round": (
                self.prompts_per_round is None or self.prompts_per_round >= 1,
                "must be >= 1, or None for all",
            ),
            "max_length_gap": (
                self.max_length_gap is None or self.max_length_gap >= 0,
                "must be >= 0, or None for no limit",
            ),
        }
        for name, (ok, why) in checks.items():
            if not ok:
                raise ValueError(f"DPOConfig.{name}={getattr(self, name)!r}: {why}.")


def length_margin_decomposition(
    chosen_logratios: torch.Tensor,
    rejected_logratios: torch.Tensor,
    chosen_lengths: torch.Tensor,
    rejected_lengths: torch.Tensor,
    beta: float,
) -> dict[str, torch.Tensor]:
    """Exact per-pair split of DPO's implicit reward margin into ``length_part`` and ``per_token_part`` (module
    docstring), from sequence sums of log(pi / pi_ref) and completion token counts."""
    lw, ll = chosen_lengths.float().clamp(min=1), rejected_lengths.float().clamp(min=1)
    aw, al = chosen_logratios.float() / lw, rejected_logratios.float() / ll
    length_part = beta * (lw - ll) * (aw + al) / 2
    per_token_part = beta * (aw - al) * (lw + ll) / 2
    return {
        "margin": beta * (chosen_logratios.float() - rejected_logratios.float()),
        "length_part": length_part,
        "per_token_part": per_token_part,
    }


def _next_token_logps(output: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """``(batch, seq - 1)`` log p(input_ids[t + 1] | ...): TRL's fused-head ``log_probs`` (TRL >= 1.15), else
    gathered from ``logits``. The last ``seq - 1`` positions, as TRL slices them (prompt-learning PEFT prepends some)."""
    width = input_ids.size(1) - 1
    log_probs = getattr(output, "log_probs", None)
    if log_probs is not None:
        return log_probs.detach()[:, -width:]
    logits = output.logits.detach()[:, -input_ids.size(1) :]
    return selective_log_softmax(logits[:, :-1, :], input_ids[:, 1:])


class DPOTrainer(trl.DPOTrainer):
    """``trl.DPOTrainer`` (same constructor, same loss) plus ``length_bias/*`` metrics and group-mined pairs."""

    mining_stats: PairStats | None = None
    mined_pairs: Dataset | None = None

    def _length_diagnostics_on(self) -> bool:
        # TRL <= 1.14 sets `use_liger_kernel` (Liger's DPO loss builds no per-token outputs to read); TRL >= 1.15
        # always uses its fused LM head, Liger or not, and no longer has the attribute.
        liger_loss = getattr(self, "use_liger_kernel", False)
        return (
            getattr(self.args, "length_diagnostics", True)
            and not liger_loss
            and not isinstance(self.processing_class, ProcessorMixin)
        )

    @contextlib.contextmanager
    def _capture_sequence_logps(self) -> Iterator[dict[str, list[torch.Tensor]]]:
        """Next-token log-probs of the forwards TRL runs in one ``compute_loss``, by hooks: ``captured["policy"]`` and
        ``["reference"]`` (without a ``ref_model``, PEFT: the adapter-disabled policy's pass, after the policy's)."""
        captured: dict[str, list[torch.Tensor]] = {"policy": [], "reference": []}
        policy = self.accelerator.unwrap_model(self.model)

        def hook_for(key: str) -> Callable:
            def hook(module: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
                input_ids = kwargs.get("input_ids", args[0] if args else None)
                captured[key].append(_next_token_logps(output, input_ids))

            return hook

        handles = [policy.register_forward_hook(hook_for("policy"), with_kwargs=True)]
        if self.ref_model is not None and not self.precompute_ref_logps:
            handles.append(self.ref_model.register_forward_hook(hook_for("reference"), with_kwargs=True))
        try:
            yield captured
        finally:
            for handle in handles:
                handle.remove()
        if self.ref_model is None and len(captured["policy"]) > 1:  # PEFT: policy pass, then adapter-disabled pass
            captured["reference"] = captured["policy"][1:2]

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if not self._length_diagnostics_on():
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        with self._capture_sequence_logps() as captured:
            result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if captured["policy"]:
            reference = captured["reference"][0] if captured["reference"] else None
            self._log_length_bias(inputs, captured["policy"][0], reference)
        return result

    @torch.no_grad()
    def _log_length_bias(
        self, inputs: dict, token_logps: torch.Tensor, ref_token_logps: torch.Tensor | None = None
    ) -> None:
        """Log ``length_bias/*`` from the policy's and the reference's (or ``ref_*_logps``) next-token log-probs."""
        mask = inputs["completion_mask"][..., 1:].bool()
        policy = token_logps.detach().float().masked_fill(~mask, 0.0).sum(1)
        if "ref_chosen_logps" in inputs:
            ref = torch.cat([inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]]).to(policy)
        elif ref_token_logps is not None:
            ref = ref_token_logps.float().masked_fill(~mask, 0.0).sum(1)
        else:
            return
        lengths = mask.sum(1)
        chosen_ratio, rejected_ratio = (policy - ref).chunk(2)
        chosen_len, rejected_len = lengths.chunk(2)
        parts = length_margin_decomposition(chosen_ratio, rejected_ratio, chosen_len, rejected_len, self.beta)
        gather = self.accelerator.gather_for_metrics
        length_abs = gather(parts["length_part"].abs()).sum()
        token_abs = gather(parts["per_token_part"].abs()).sum()
        total = (length_abs + token_abs).item()
        mode = "train" if self.model.training else "eval"
        metrics = self._metrics[mode]
        metrics["length_bias/chosen_len"].append(gather(chosen_len.float()).mean().item())
        metrics["length_bias/rejected_len"].append(gather(rejected_len.float()).mean().item())
        metrics["length_bias/gap"].append(gather((chosen_len - rejected_len).float()).mean().item())
        metrics["length_bias/margin_from_length"].append(gather(parts["length_part"]).mean().item())
        metrics["length_bias/length_share"].append(length_abs.item() / total if total > 0 else 0.0)

    @classmethod
    def from_groups(
        cls,
        model: torch.nn.Module,
        reward_funcs: Callable | Sequence[Callable],
        args: DPOConfig,
        train_dataset: Dataset,
        processing_class: Any,
        ref_model: torch.nn.Module | None = None,
        eval_dataset: Dataset | None = None,
        callbacks: list | None = None,
        peft_config: Any = None,
    ) -> DPOTrainer:
        """A trainer on pairs mined from the current ``model`` for the prompts of ``train_dataset`` (outcome in
        ``trainer.mining_stats``). ``ref_model=None`` with a full model uses a frozen copy of ``model`` as it is now
        (TRL would reload the checkpoint from disk, an earlier policy). ``eval_dataset`` must hold preference pairs."""
        if not isinstance(args, DPOConfig):
            raise TypeError(
                f"from_groups needs a trl_ext.dpo.DPOConfig (it holds num_generations, reward_weights, ...); got "
                f"{type(args).__name__}. Build one with DPOConfig(output_dir=..., num_generations=...)."
            )
        if isinstance(model, str):
            raise TypeError("from_groups samples from the model before training: pass a loaded model, not a name.")
        funcs = list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]
        prompts = train_dataset
        if args.prompts_per_round is not None and args.prompts_per_round < len(prompts):
            prompts = prompts.shuffle(seed=args.seed).select(range(args.prompts_per_round))
        pairs, stats = mine_pairs(
            model,
            processing_class,
            prompts,
            funcs,
            num_generations=args.num_generations,
            max_new_tokens=args.mining_max_new_tokens,
            reward_weights=args.reward_weights,
            temperature=args.mining_temperature,
            top_p=args.mining_top_p,
            atol=args.reward_atol,
            pairs_per_group=args.pairs_per_group,
            max_length_gap=args.max_length_gap,
            batch_size=args.mining_batch_size,
        )
        if len(pairs) == 0:
            raise ValueError(
                f"no preference pair could be mined: all {stats.num_groups} groups of num_generations="
                f"{args.num_generations} completions had equal rewards (mean reward {stats.mean_reward:.3f}). "
                "Raise num_generations or mining_temperature, or start from a model that is right some of the time "
                "(e.g. an SFT warm start)."
            )
        is_peft = isinstance(model, PeftModel) or peft_config is not None
        if ref_model is None and not is_peft and not args.precompute_ref_log_probs:
            ref_model = copy.deepcopy(model).eval()
        trainer = cls(
            model=model,
            ref_model=ref_model,
            args=args,
            train_dataset=pairs.select_columns(["prompt", "chosen", "rejected"]),
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
            peft_config=peft_config,
        )
        trainer.mining_stats = stats
        trainer.mined_pairs = pairs
        return trainer

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.mining_stats is not None and self.model.training and not getattr(self, "_mining_logged", False):
            logs.update(self.mining_stats.as_dict())
            self._mining_logged = True  # once per trainer (one mining round)
        super().log(logs, start_time)


@dataclass
class RoundResult:
    """One round of ``train_iterative_dpo``."""

    round: int
    stats: PairStats
    train_loss: float
    pairs: Dataset  # the mined pairs (prompt, chosen, rejected, rewards and lengths of both sides)
    metrics: dict[str, float] = field(default_factory=dict)


def train_iterative_dpo(
    model: torch.nn.Module,
    reward_funcs: Callable | Sequence[Callable],
    args: DPOConfig,
    train_dataset: Dataset,
    processing_class: Any,
    eval_dataset: Dataset | None = None,
    callbacks: list | None = None,
    on_round_end: Callable[[int, torch.nn.Module], dict[str, float] | None] | None = None,
    on_trainer: Callable[[int, DPOTrainer], Any] | None = None,
) -> list[RoundResult]:
    """Iterative RPO (arXiv 2404.19733): for ``args.mining_rounds`` rounds, mine pairs from the current model and
    train it in place on them, itself the reference. Round k writes to ``<output_dir>/round-<k>`` with seed
    ``args.seed + k``; ``on_round_end(k, model)`` may return metrics, ``on_trainer(k, trainer)`` sees each trainer."""
    results = []
    for k in range(args.mining_rounds):
        round_args = copy.copy(args)
        round_args.output_dir = os.path.join(args.output_dir, f"round-{k}")
        round_args.seed = args.seed + k
        trainer = DPOTrainer.from_groups(
            model,
            reward_funcs,
            round_args,
            train_dataset,
            processing_class,
            eval_dataset=eval_dataset,
            callbacks=callbacks,
        )
        stats, pairs = trainer.mining_stats, trainer.mined_pairs
        if on_trainer is not None:
            on_trainer(k, trainer)
        output = trainer.train()
        model = trainer.accelerator.unwrap_model(trainer.model)
        extra = on_round_end(k, model) if on_round_end is not None else None
        results.append(RoundResult(k, stats, output.training_loss, pairs, dict(extra or {})))
        logger.info("iterative DPO round %d: %s, train loss %.4f", k, stats, output.training_loss)
        del trainer
    return results
