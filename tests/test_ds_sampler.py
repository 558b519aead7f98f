"""Dynamic sampling's core without a trainer: refills sized, groups selected, figures computed, state saved
(``trl_ext.grpo.dynamic_sampling.sampler``), and rows of rounds of different widths assembled
(``trl_ext.grpo.dynamic_sampling.batch``), on plain tensors against hand-computed numbers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from trl_ext.grpo.dynamic_sampling.batch import Round, assemble, plan_rows, select_groups
from trl_ext.grpo.dynamic_sampling.prompts import PromptStream
from trl_ext.grpo.dynamic_sampling.sampler import DynamicSampler

G = 2  # completions per group


def _args(**overrides):
    values = dict(
        dynamic_sampling_atol=1e-6,
        dynamic_sampling_max_generation_batches=4,
        dynamic_sampling_max_round_size=2.0,
        dynamic_sampling_refill_margin=None,
        dynamic_sampling_reward_range=(0.0, 1.0),
    )
    return SimpleNamespace(**{**values, **overrides})


def _sampler(**overrides) -> DynamicSampler:
    return DynamicSampler(_args(**overrides), G, PromptStream(100, seed=0))


def _round(pattern: str, seconds: float = 1.0, output=None) -> Round:
    """One round, a group per character: "i" informative ([0, 1]), "w" all wrong, "r" all right."""
    rows = {"i": [0.0, 1.0], "w": [0.0, 0.0], "r": [1.0, 1.0]}
    metric = torch.tensor([v for group in pattern for v in rows[group]])
    informative = torch.tensor([group == "i" for group in pattern])
    return Round(output or {}, metric.unsqueeze(1), metric, informative, seconds)


def test_refill_is_sized_from_the_rate_and_stops_when_full_or_spent():
    sampler = _sampler()
    # 4 groups wanted, 2 informative of 4: missing 2, rate 2/4 -> ceil(2 / 0.5 x 1.05) = 5
    assert sampler.refill_size([_round("iwiw")], num_groups=4, world_size=1) == 5
    assert sampler.refill_size([_round("iwiw")], num_groups=4, world_size=2) == 6  # whole groups per process
    assert sampler.refill_size([_round("iiii")], num_groups=4, world_size=1) == 0  # full
    # budget 4 generation batches = 16 groups; 14 generated: at most 2 more
    assert sampler.refill_size([_round("w" * 14)], num_groups=4, world_size=1) == 2
    assert sampler.refill_size([_round("w" * 16)], num_groups=4, world_size=1) == 0  # spent


def test_selection_takes_informative_groups_in_generation_order_then_fillers():
    rounds = [_round("iwwi"), _round("wiii")]
    assert select_groups(rounds, 4) == ([(0, 0), (0, 3), (1, 1), (1, 2)], [])
    chosen, fillers = select_groups([_round("iwwr")], 3)
    assert chosen == [(0, 0)] and fillers == [(0, 2), (0, 3)]  # the last uninformative groups fill


def test_finish_step_figures_hand_computed_and_state_round_trips():
    sampler = _sampler()
    stats = sampler.finish_step([_round("iwri", seconds=2.0), _round("ii", seconds=1.0)], num_groups=3)
    assert stats["dynamic_sampling/rounds"] == 2.0
    assert stats["dynamic_sampling/generated_groups"] == 6.0
    assert stats["dynamic_sampling/kept_group_frac"] == pytest.approx(4 / 6)
    assert stats["dynamic_sampling/all_min_frac"] == pytest.approx(1 / 6)
    assert stats["dynamic_sampling/all_max_frac"] == pytest.approx(1 / 6)
    assert stats["dynamic_sampling/surplus_groups"] == 1.0
    assert stats["dynamic_sampling/filler_groups"] == 0.0
    assert stats["dynamic_sampling/dropped_time"] == pytest.approx(2.0 * 0.5)
    assert stats["dynamic_sampling/surplus_time"] == pytest.approx(1.0 * 1 / 2)  # 1 of the last round's 2 groups
    assert sampler.rate.estimate() == pytest.approx(4 / 6)
    sampler.stream.take(7)
    again = _sampler()
    again.load_state_dict(sampler.state_dict())
    assert again.stream.take(3) == sampler.stream.take(3) and again.rate.estimate() == sampler.rate.estimate()


def _output(prompt_rows, completion_rows, advantages):
    """A round's output on one process: prompts left-padded with 0 (pad id), completions right-padded."""
    width_p = max(len(r) for r in prompt_rows)
    width_c = max(len(r) for r in completion_rows)
    prompt_ids = torch.tensor([[0] * (width_p - len(r)) + r for r in prompt_rows])
    completion_ids = torch.tensor([r + [0] * (width_c - len(r)) for r in completion_rows])
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": (prompt_ids != 0).long(),
        "completion_ids": completion_ids,
        "completion_mask": (completion_ids != 0).long(),
        # a per-token key TRL might add: prompt and completion columns together (like Gemma's token_type_ids)
        "token_type_ids": torch.cat([torch.ones_like(prompt_ids), 2 * torch.ones_like(completion_ids)], 1),
        "image_sizes": torch.tensor([[7, 7]] * len(prompt_rows)),  # per row, not a sequence: never padded
        "num_images": [1] * len(prompt_rows),
        "advantages": torch.tensor(advantages),
        "num_items_in_batch": torch.tensor(99),
    }


def test_assemble_pads_each_key_by_where_its_columns_sit_and_zero_weights_fillers():
    accelerator = SimpleNamespace(num_processes=1, process_index=0, device="cpu", gather=lambda t: t.reshape(1))
    first = _round("wi", output=_output([[5], [5], [6, 6], [6, 6]], [[1, 2, 3]] * 2 + [[4]] * 2, [0, 0, 1, -1]))
    second = _round("iw", output=_output([[7, 7, 7]] * 4, [[8, 9]] * 4, [2, -2, 0, 0]))
    chosen, fillers = select_groups([first, second], 3)
    assert chosen == [(0, 1), (1, 0)] and fillers == [(1, 1)]
    batch = assemble([first, second], chosen, fillers, accelerator, G, pad_id=0)
    assert batch["prompt_ids"].tolist() == [[0, 6, 6], [0, 6, 6], [7, 7, 7], [7, 7, 7], [7, 7, 7], [7, 7, 7]]
    assert batch["completion_ids"].tolist() == [[4, 0, 0], [4, 0, 0], [8, 9, 0], [8, 9, 0], [8, 9, 0], [8, 9, 0]]
    # prompt part left-padded, completion part right-padded
    assert batch["token_type_ids"][0].tolist() == [0, 1, 1, 2, 2, 2]  # round 1: prompt width 2, completion 3
    assert batch["token_type_ids"][2].tolist() == [1, 1, 1, 2, 2, 0]  # round 2: 3 + 2
    assert batch["image_sizes"].tolist() == [[7, 7]] * 6 and batch["num_images"] == [1] * 6
    assert batch["advantages"].tolist() == [1, -1, 2, -2, 0, 0]
    assert batch["completion_mask"][4:].sum() == 0  # fillers train nothing
    assert batch["num_items_in_batch"].item() == 1 * 2 + 2 * 2  # the trained tokens, not the rounds' counts


def test_plan_keeps_each_process_rows_and_moves_only_the_surplus_hand_computed():
    # 2 processes, groups of 2, rounds of 8 rows (4 per process): group g of a round holds rows 2g, 2g + 1, so
    # groups 0-1 were generated on process 0 and groups 2-3 on process 1
    groups = [(0, 0), (0, 1), (1, 0), (0, 3)]  # process 0 generated 6 of the 8 trained rows, process 1 two
    plan = plan_rows(groups, num_fillers=1, rows_per_process=[4, 4], num_generations=2, world=2)
    assert plan.origin.tolist() == [0, 0, 0, 0, 0, 0, 1, 1]
    assert plan.local_row.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert plan.round.tolist() == [0, 0, 0, 0, 1, 1, 0, 0]
    # each trains 4: process 0 keeps its first 4 rows, its surplus (round 1's group 0) moves to process 1
    assert plan.dest.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    # a batch holds its own rows first, then the rows it receives: process 1 trains its 2 rows, then 2 from process 0
    assert plan.slot.tolist() == [0, 1, 2, 3, 2, 3, 0, 1]
    assert plan.trained_on(1).tolist() == [6, 7, 4, 5]
    assert plan.filler.tolist() == [False] * 6 + [True] * 2
    assert plan.moved(0, 1).tolist() == [4, 5] and plan.moved(1, 0).tolist() == []
    # balanced already: nothing moves, each process trains what it generated
    balanced = plan_rows([(0, 0), (0, 2)], 0, [4, 4], 2, 2)
    assert balanced.dest.tolist() == balanced.origin.tolist() == [0, 0, 1, 1]
