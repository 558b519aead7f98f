"""DAPO's dynamic sampling (arXiv 2503.14476, section 3.2, Eq. 11) as one loop over TRL's own round.

``sample_informative_batch`` is the whole algorithm, read top to bottom:

1. run a round through TRL's own ``_generate_and_score_completions`` (``trainer.generate_and_score``), so every
   rollout TRL knows runs unchanged (tools, environments, ``rollout_func``, multimodal prompts, vLLM in either mode);
2. keep the informative groups: those whose metric (the accuracy rewards, shaping terms left out) is not the same for
   every completion;
3. repeat with fresh prompts (``refill_inputs``) until the batch holds as many informative groups as it was meant to,
   or the generation budget is spent; each refill is sized from the running informative rate;
4. assemble the batch (``batch.assemble``): the first informative groups in generation order, zero-weight fillers
   when the budget ran out.

The old-policy pass runs on the trained rows only (``old_logps``); when the first round is all informative the step is
exactly TRL's. TRL's logs describe every round generated; ``dynamic_sampling/*`` describes what was kept.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from trl_ext.generation.engine_awake import engine_awake
from trl_ext.grpo.dynamic_sampling.batch import Round, assemble, select_groups
from trl_ext.grpo.dynamic_sampling.prompts import IterablePromptStream


def sample_informative_batch(
    trainer: Any, inputs: list[dict[str, Any]], rounds_ahead: Sequence[tuple[list[dict], list | None]] = ()
) -> dict[str, Any]:
    """One generation batch of informative groups, from TRL's batch ``inputs`` (this process's rows).
    ``rounds_ahead``: (inputs, prompt indices) of rounds already submitted to the engine (overlapped generation), used
    first; a refill beyond them is sized and drawn here."""
    sampler, accelerator = trainer.dynamic_sampler, trainer.accelerator
    world, group_size = accelerator.num_processes, trainer.num_generations
    num_groups = len(inputs) * world // group_size
    ahead = list(rounds_ahead)
    round_inputs, indices = inputs, None
    if ahead:
        round_inputs, indices = ahead.pop(0)
    elif sampler.draws_every_round and num_groups % world == 0:  # else TRL's batch (groups straddle processes)
        round_inputs, indices = refill_inputs(trainer, inputs, num_groups)
    rounds: list[Round] = []
    with engine_awake(trainer):  # one weight push per step under vLLM's sleep mode
        while True:
            started = time.perf_counter()
            output, rewards_per_func = trainer.generate_and_score(round_inputs)
            metric = trainer.dynamic_sampling_metric(rewards_per_func)
            informative = sampler.informative(metric)
            rounds.append(Round(output, rewards_per_func, metric, informative, time.perf_counter() - started, indices))
            size = sampler.refill_size(rounds, num_groups, world)
            if size == 0:
                break
            round_inputs, indices = ahead.pop(0) if ahead else refill_inputs(trainer, inputs, size)

    chosen, fillers = select_groups(rounds, num_groups)
    for key, value in sampler.finish_step(rounds, num_groups).items():
        trainer._metrics["train"][key].append(value)
    if trainer.step_gate is not None:
        trainer.step_gate.arm(bool(fillers))
    if len(rounds) == 1 and len(chosen) == num_groups:
        return trainer.deferred_old_logps.fill(rounds[0].output)  # nothing dropped: TRL's own batch
    advantage_args = (trainer.reward_weights, trainer.scale_rewards, trainer.multi_objective_aggregation)
    batch = assemble(rounds, chosen, fillers, accelerator, group_size, trainer.pad_token_id, advantage_args)
    return trainer.deferred_old_logps.fill(batch)  # the old-policy pass, on the trained rows only


def refill_inputs(
    trainer: Any, template: list[dict[str, Any]], num_prompts: int, stream: Any = None
) -> tuple[list[dict], list | None]:
    """Fresh prompts for one round of ``num_prompts`` groups in TRL's ``RepeatSampler`` layout (this process's slice)
    and each prompt's training-set index (None for an ``IterableDataset``); every process reads the same stream."""
    accelerator = trainer.accelerator
    world, rank, group_size = accelerator.num_processes, accelerator.process_index, trainer.num_generations
    if num_prompts % world:
        raise ValueError(f"A refill of {num_prompts} groups cannot be split evenly over {world} processes.")
    if stream is not None:
        indices = stream.take(num_prompts)
        prompts = [trainer.train_dataset[i] for i in indices]
    elif isinstance(trainer.dynamic_sampler.stream, IterablePromptStream):
        prompts, indices = trainer.dynamic_sampler.stream.take_rows(num_prompts), None
    else:
        indices = trainer.dynamic_sampler.take_indices(num_prompts)
        prompts = [trainer.train_dataset[i] for i in indices]
    local_rows = num_prompts * group_size // world
    rows = [row for row in prompts for _ in range(group_size)][rank * local_rows : (rank + 1) * local_rows]
    keys = set(template[0])
    return [{k: v for k, v in row.items() if k in keys} for row in rows], indices
