"""``trl_ext.grpo.advantages``: hand-computed advantages for each aggregation and ``scale_rewards`` mode, fillers kept
out of the statistics, and bit-for-bit equality with the advantages TRL's own ``_generate_and_score_completions``
returns for an all-informative round."""

from __future__ import annotations

import math

import pytest
import torch
import trl
from helpers import tiny_args

from trl_ext.grpo.advantages import kept_group_advantages, needs_recompute

NAN = math.nan
EPS = 1e-4

# two groups of 3; f2 returned None for the whole first group
F1 = [0.0, 1.0, 2.0, 0.0, 1.0, 2.0]
F2 = [NAN, NAN, NAN, 0.0, 1.0, 2.0]


def table(*columns: list[float]) -> torch.Tensor:
    return torch.tensor(list(zip(*columns, strict=True)), dtype=torch.float32)


def advantages(rewards, weights, scale="group", aggregation="sum_then_normalize", fillers=None, generations=3):
    return kept_group_advantages(
        rewards,
        torch.tensor(weights),
        generations,
        scale,
        aggregation,
        None if fillers is None else torch.tensor(fillers),
    )


def test_needs_recompute_only_where_statistics_span_the_batch():
    assert needs_recompute("batch", "sum_then_normalize") and needs_recompute("group", "normalize_then_sum")
    assert needs_recompute("none", "normalize_then_sum")
    assert not needs_recompute("group", "sum_then_normalize") and not needs_recompute("none", "sum_then_normalize")
    with pytest.raises(ValueError, match="scale_rewards='batchwise'"):
        needs_recompute("batchwise", "sum_then_normalize")
    with pytest.raises(ValueError, match="multi_objective_aggregation='sum'"):
        needs_recompute("group", "sum")


# -- sum_then_normalize ----------------------------------------------------------------------------------------------
# weights [1, 1]: r = [0, 1, 2 | 0, 2, 4] (f2's None left out of the first group's sum); group means 1 and 2, Bessel
# stds 1 and 2; batch mean 1.5, squared deviations 2.25 .25 .25 2.25 .25 6.25 = 11.5, / 5 -> std sqrt(2.3)


def test_sum_then_normalize_group():
    expected = [-1 / (1 + EPS), 0.0, 1 / (1 + EPS), -2 / (2 + EPS), 0.0, 2 / (2 + EPS)]
    torch.testing.assert_close(advantages(table(F1, F2), [1.0, 1.0], "group"), torch.tensor(expected))


def test_sum_then_normalize_batch():
    expected = [d / (math.sqrt(2.3) + EPS) for d in [-1.0, 0.0, 1.0, -2.0, 0.0, 2.0]]
    torch.testing.assert_close(advantages(table(F1, F2), [1.0, 1.0], "batch"), torch.tensor(expected))


def test_sum_then_normalize_none_is_centered_only():
    got = advantages(table(F1, F2), [1.0, 1.0], "none")
    torch.testing.assert_close(got, torch.tensor([-1.0, 0.0, 1.0, -2.0, 0.0, 2.0]))


def test_weights_multiply_each_function():
    # weights [2, 0.5]: r = [0, 2, 4 | 0, 2.5, 5]; centered [-2, 0, 2 | -2.5, 0, 2.5]
    got = advantages(table(F1, F2), [2.0, 0.5], "none")
    torch.testing.assert_close(got, torch.tensor([-2.0, 0.0, 2.0, -2.5, 0.0, 2.5]))


def test_a_completion_no_function_scored_is_out_of_its_group_and_gets_zero():
    rewards = table([NAN, 1.0, 3.0], [NAN, NAN, NAN])  # group [-, 1, 3]: mean 2, std sqrt(2)
    expected = [0.0, -1 / (math.sqrt(2) + EPS), 1 / (math.sqrt(2) + EPS)]
    torch.testing.assert_close(advantages(rewards, [1.0, 1.0], "group"), torch.tensor(expected))


# -- normalize_then_sum ----------------------------------------------------------------------------------------------
# per group and function: f1's z-scores [-1, 0, 1] / (1 + 1e-4) = [-a, 0, a] in both groups, f2's [-a, 0, a] in the
# second group (NaN in the first); weights [1, 0.5]: r = [-a, 0, a | -1.5a, 0, 1.5a]; batch mean 0, std a sqrt(1.3)
# (squared values a^2 (1 + 1 + 2.25 + 2.25) = 6.5 a^2, / 5)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_normalize_then_sum_ignores_scale_rewards(scale):
    a = 1 / (1 + EPS)
    std = a * math.sqrt(1.3)
    expected = [r / (std + EPS) for r in [-a, 0.0, a, -1.5 * a, 0.0, 1.5 * a]]
    torch.testing.assert_close(
        advantages(table(F1, F2), [1.0, 0.5], scale, "normalize_then_sum"), torch.tensor(expected)
    )


def test_normalize_then_sum_counts_a_lone_scored_completion_as_zero():
    # first group: f1 scores only its first completion (std NaN: z NaN, TRL's nansum makes it 0), the others unscored
    rewards = table([5.0, NAN, NAN, 0.0, 1.0, 2.0])
    a = 1 / (1 + EPS)
    std = math.sqrt(2 * a * a / 3)  # r = [0, -, -, -a, 0, a]: mean 0, squared 2a^2, / 3
    expected = [0.0, 0.0, 0.0, -a / (std + EPS), 0.0, a / (std + EPS)]
    torch.testing.assert_close(advantages(rewards, [1.0], "group", "normalize_then_sum"), torch.tensor(expected))


# -- fillers ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scale", "aggregation"),
    [("batch", "sum_then_normalize"), ("group", "sum_then_normalize"), ("group", "normalize_then_sum")],
)
def test_fillers_are_out_of_every_statistic_and_get_zero(scale, aggregation):
    kept = table(F1, F2)
    filler = table([7.0, 9.0, 30.0], [1.0, NAN, -4.0])  # an uninformative group would be equal; any values work
    joined = torch.cat([kept[:3], filler, kept[3:]])
    fillers = [False] * 3 + [True] * 3 + [False] * 3
    got = advantages(joined, [1.0, 0.5], scale, aggregation, fillers)
    alone = advantages(kept, [1.0, 0.5], scale, aggregation)
    assert torch.equal(got[3:6], torch.zeros(3))
    assert torch.equal(torch.cat([got[:3], got[6:]]), alone)


def test_rows_must_be_whole_groups():
    with pytest.raises(ValueError, match="5 rows are not whole groups of num_generations=3"):
        advantages(table(F1[:5]), [1.0])


# -- TRL's own advantages, bit for bit ----------------------------------------------------------------------------


def position_reward(completions, answer, **kwargs):
    """(position in the group of 4) x (1 + the answer): every group informative."""
    return [float(i % 4) * (1 + int(a)) for i, a in enumerate(answer)]


def length_reward(completions, **kwargs):
    return [float(len(c)) for c in completions]


def sometimes_none(completions, **kwargs):
    """None for every third completion: NaN in TRL's table, left out of means and stds."""
    return [None if i % 3 == 0 else float(i % 5) - 2.0 for i in range(len(completions))]


class RecordingGRPOTrainer(trl.GRPOTrainer):
    """TRL's trainer, keeping the per-function rewards its ``_calculate_rewards`` returned."""

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self.recorded = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self.recorded


@pytest.mark.parametrize(
    ("scale", "aggregation"),
    [
        ("group", "sum_then_normalize"),
        ("batch", "sum_then_normalize"),
        ("none", "sum_then_normalize"),
        ("group", "normalize_then_sum"),
    ],
)
def test_bitwise_equal_to_trl_on_an_all_informative_round(
    tiny_model, tokenizer, problems, tmp_path, scale, aggregation
):
    args = tiny_args(
        trl.GRPOConfig,
        tmp_path,
        per_device_train_batch_size=12,
        scale_rewards=scale,
        multi_objective_aggregation=aggregation,
        reward_weights=[1.0, 0.3, 2.0],
    )
    trainer = RecordingGRPOTrainer(
        tiny_model,
        [position_reward, length_reward, sometimes_none],
        args=args,
        train_dataset=problems[0],
        processing_class=tokenizer,
    )
    trainer.model.train()
    rows = [problems[0][i] for i in (0, 1, 2) for _ in range(4)]
    output = trainer._generate_and_score_completions(rows)
    assert torch.isnan(trainer.recorded).any()  # the None path is exercised
    ours = kept_group_advantages(trainer.recorded, trainer.reward_weights, 4, scale, aggregation)
    assert torch.equal(ours, output["advantages"]), (ours, output["advantages"])
