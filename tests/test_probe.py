"""The pre-flight probe: its statistics against hand-computed references, its recommendations, and runs on the demo
model (cold and warm-started) through the Python API and the command line."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from trl_ext.diagnostics.eval_metrics import pass_at_k
from trl_ext.diagnostics.probe_args import default_run_config, dynamic_sampling_policy
from trl_ext.diagnostics.probe_stats import _expected_cost, fit_beta_prior, mixed_group_prob, recommend, summarize
from trl_ext.rewards.arithmetic import parse_first_int
from trl_ext.scripts.probe import ProbeArguments, main, probe_model, sample_transformers


def test_pass_at_k_hand_values():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 3, 2) == 1.0  # only one failure: any 2 samples hold a success
    with pytest.raises(ValueError, match="k=5"):
        pass_at_k(4, 1, 5)


def test_mixed_group_prob_and_beta_prior():
    assert mixed_group_prob(4, 2, 2) == pytest.approx(1 - 2 / 6)  # 1 - [C(2,2) + C(2,2)] / C(4,2)
    assert mixed_group_prob(4, 0, 8) == 0.0  # k > n without a prior: no information
    # successes (0, 2, 4, 2) of n=4: mu = 1/2, Var(c) = 2, n mu (1-mu) = 1 -> rho = (2 - 1) / 3 -> alpha = beta = 1.
    alpha, beta = fit_beta_prior([0, 2, 4, 2], 4)
    assert (alpha, beta) == (pytest.approx(1.0), pytest.approx(1.0))
    # c=2 of 4 under Beta(1,1): posterior Beta(3,3); E[p^8] = B(11,3)/B(3,3) = 30/858, the same for (1-p)^8.
    assert mixed_group_prob(4, 2, 8, (alpha, beta)) == pytest.approx(1 - 60 / 858)
    # Equally hard prompts (no spread): the prior pins p = 1/16 and the projection is the binomial one.
    prior = fit_beta_prior([1, 1, 1, 1], 16)
    assert mixed_group_prob(16, 1, 32, prior) == pytest.approx(1 - (15 / 16) ** 32 - (1 / 16) ** 32, abs=1e-4)
    assert fit_beta_prior([0, 0, 0], 16) is None and fit_beta_prior([16, 16], 16) is None


def hand_batch():
    """4 prompts x 4 completions: all-correct, all-wrong, 1 of 4, 2 of 3 scorable (one reward is None/NaN)."""
    nan = float("nan")
    rewards = torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, nan]], dtype=torch.float64)
    lengths = torch.tensor([[3, 3, 3, 3], [8, 8, 2, 2], [3, 4, 5, 6], [3, 3, 3, 8]])
    truncated = lengths == 8
    return rewards, lengths, truncated


def test_summarize_hand_computed():
    summary = summarize(*hand_batch(), success_threshold=1.0)
    assert summary["successes"] == [4, 0, 1, 2]
    # pass@1 = mean(4/4, 0, 1/4, 2/4); pass@2 = mean(1, 0, 1 - C(3,2)/C(4,2), 1 - C(2,2)/C(4,2)); pass@4 = 3/4.
    assert summary["pass_at"][1] == pytest.approx(0.4375)
    assert summary["pass_at"][2] == pytest.approx((1 + 0 + 0.5 + 5 / 6) / 4)
    assert summary["pass_at"][4] == pytest.approx(0.75)
    groups = summary["groups"]
    assert (groups["all_correct_frac"], groups["all_wrong_frac"], groups["mixed_frac"]) == (0.25, 0.25, 0.5)
    # one prompt per batch, p = 1/2. A refill asks ceil(1 / 0.5 x 1.05) = 3 groups, capped at 2 (max_round_size 2):
    # after a failed first round (1/2), each round of 2 succeeds with 3/4, so E[R] = 1 + 1/2 x 4/3 = 5/3 (+-0.05).
    assert groups["informative_frac"] == 0.5 and groups["expected_rounds_whole_batch"] == pytest.approx(2.0)
    assert groups["expected_rounds"] == pytest.approx(5 / 3, abs=0.05)
    # rounds of one group (max_round_size 1): geometric, 1/p = 2
    whole = summarize(*hand_batch(), success_threshold=1.0, max_round_size=1.0)["groups"]
    assert whole["expected_rounds"] == pytest.approx(2.0, abs=0.05)
    assert (groups["all_max_frac"], groups["all_min_frac"]) == (0.25, 0.25)
    projection = {row["num_generations"]: row for row in summary["group_size_projection"]}
    assert sorted(projection) == [2, 4, 8, 16]
    # k=2: prompt 3 (1 of 4) -> 1 - C(3,2)/C(4,2) = 1/2; prompt 4 (2 of 4) -> 1 - 2/6 = 2/3.
    assert projection[2]["mixed_frac"] == pytest.approx((0.5 + 2 / 3) / 4)
    assert projection[4]["mixed_frac"] == pytest.approx(0.5) and projection[4]["estimate"] == "unbiased"
    assert projection[8]["estimate"] == "beta-binomial model"
    r = summary["rewards"]
    assert r["mean"] == pytest.approx(7 / 15) and r["unscorable_frac"] == pytest.approx(1 / 16)
    assert (r["min"], r["max"]) == (0.0, 1.0) and sum(r["histogram"]["counts"]) == 15
    ln = summary["lengths"]
    assert ln["mean"] == pytest.approx(67 / 16) and ln["max"] == 8 and ln["truncated_frac"] == pytest.approx(3 / 16)
    assert sum(ln["histogram"]["counts"]) == 16


def codes(summary, **overrides):
    args = ProbeArguments(**{"num_generations": 4, **overrides})
    return [rec.code for rec in recommend(summary, args, max_completion_length=8)]


def test_recommendations_fire_on_their_numbers():
    rewards, lengths, truncated = hand_batch()
    zeros = torch.zeros(8, 4, dtype=torch.long)
    # Cold: nothing solved -> SFT first, and truncation advice is folded into it even with everything truncated.
    cold = summarize(torch.zeros(8, 4), lengths=zeros + 8, truncated=zeros == 0)
    assert codes(cold) == ["sft_first"]
    # Easy: 6 of 8 prompts always solved -> filter them.
    easy = torch.tensor([[1.0] * 4] * 6 + [[1.0, 0, 0, 0], [0.0] * 4])
    assert codes(summarize(easy, zeros + 3, zeros == 1)) == ["filter_easy"]
    # Hard but not cold: 3 of 20 prompts solved once -> a larger group would mix more.
    hard = torch.tensor([[1.0, 0, 0, 0]] * 3 + [[0.0] * 4] * 17)
    zeros20 = torch.zeros(20, 4, dtype=torch.long)
    summary = summarize(hard, zeros20 + 3, zeros20 == 1)
    assert codes(summary) == ["raise_group_size"]
    rows = {row["num_generations"]: row for row in summary["group_size_projection"]}
    assert rows[8]["mixed_frac"] > summary["groups"]["mixed_frac"] == pytest.approx(0.15)
    # Truncation on a warm model: 3/16 > 5%.
    assert "raise_max_completion_length" in codes(summarize(rewards, lengths, truncated))
    # A healthy batch: half the groups mixed, none truncated.
    healthy = torch.tensor([[1.0, 0, 0, 0], [1.0, 1, 0, 0], [0.0] * 4, [1.0, 1, 1, 0]])
    assert codes(summarize(healthy, zeros[:4] + 3, zeros[:4] == 1)) == ["ready"]


def test_arguments_name_the_flag_and_fix():
    with pytest.raises(ValueError, match="--num_generations 2 or more"):
        ProbeArguments(num_generations=1)
    with pytest.raises(ValueError, match="one weight per function"):
        ProbeArguments(reward_funcs=["arithmetic"], reward_weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="--temperature"):
        ProbeArguments(temperature=0.0)


def test_arguments_from_a_grpo_config():
    from trl import GRPOConfig

    config = GRPOConfig(
        output_dir="unused",
        num_generations=8,
        max_completion_length=6,
        temperature=0.7,
        seed=3,
        bf16=False,
        use_cpu=True,
    )
    args = ProbeArguments.from_training_args(config, num_prompts=5)
    assert (args.num_generations, args.max_completion_length, args.temperature, args.seed) == (8, 6, 0.7, 3)
    assert (args.top_p, args.top_k, args.num_prompts) == (config.top_p, config.top_k or 0, 5)


@pytest.fixture(scope="module")
def demo():
    from trl_ext.demo import build_model, build_tokenizer, make_problems

    tokenizer = build_tokenizer()
    train, _ = make_problems()
    return build_model(tokenizer), tokenizer, train


def test_probe_on_cold_demo_model_matches_independent_count(demo):
    from trl_ext.rewards import arithmetic_reward

    model, tokenizer, train = demo
    data = train.select(range(6))
    args = ProbeArguments(num_generations=4, num_prompts=6, max_completion_length=4, generation_batch_size=8)
    report = probe_model(model, tokenizer, data, [arithmetic_reward], args, model_name="demo-random")
    # Re-sample with the same seed and count successes by hand, group by group (TRL's contiguous order).
    texts, lengths, truncated = sample_transformers(model, tokenizer, data["prompt"], args, 4)
    hand = [
        sum(parse_first_int(t.strip()) == answer for t in texts[4 * i : 4 * i + 4])
        for i, answer in enumerate(data["answer"])
    ]
    assert [row["successes"] for row in report.per_prompt] == hand
    assert report.pass_at[1] == pytest.approx(sum(hand) / 24)
    assert report.lengths["truncated_frac"] == pytest.approx(truncated.float().mean().item())
    assert bool((lengths[truncated] == 4).all()) and bool((lengths >= 1).all() & (lengths <= 4).all())
    g = report.groups
    assert g["all_correct_frac"] + g["all_wrong_frac"] + g["mixed_frac"] == pytest.approx(1.0)
    assert report.meta["sampler"] == "transformers.generate" and report.recommendations
    # Seeded: a second probe gives the same numbers.
    again = probe_model(model, tokenizer, data, [arithmetic_reward], args, model_name="demo-random")
    assert again.pass_at == report.pass_at and again.per_prompt == report.per_prompt


def test_probe_rejects_missing_prompt_column(demo):
    from trl_ext.rewards import arithmetic_reward

    model, tokenizer, train = demo
    with pytest.raises(ValueError, match="--prompt_column"):
        probe_model(model, tokenizer, train.select(range(2)), [arithmetic_reward], ProbeArguments(prompt_column="q"))


def test_cli_writes_json_and_plot(tmp_path, capsys):
    out = tmp_path / "probe"
    report = main(["--no_warm_start", "--num_prompts", "4", "--num_generations", "4", "--output_dir", str(out)])
    printed = capsys.readouterr().out
    assert "pass@4" in printed and "Recommendations" in printed and "report.json" in printed
    with open(out / "report.json") as f:
        saved = json.load(f)
    assert saved["meta"]["model"] == "demo-random" and saved["meta"]["max_completion_length"] == 8
    assert saved["pass_at"]["4"] == pytest.approx(report.pass_at[4])
    assert os.path.getsize(out / "histogram.png") > 1000


def test_cli_on_a_saved_model_and_a_local_file(tmp_path, demo):
    model, tokenizer, train = demo
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    train.select(range(10)).to_json(str(tmp_path / "data.jsonl"))
    report = main(
        [
            "--model_name_or_path", str(tmp_path / "model"),
            "--dataset_name", str(tmp_path / "data.jsonl"),
            "--reward_funcs", "arithmetic",
            "--reward_options", "{}",
            "--num_prompts", "3",
            "--num_generations", "2",
            "--max_completion_length", "3",
            "--output_dir", str(tmp_path / "out"),
        ]
    )  # fmt: skip
    assert report.meta["model"] == str(tmp_path / "model") and report.meta["num_prompts"] == 3
    assert report.meta["max_completion_length"] == 3 and report.meta["reward_funcs"] == ["arithmetic_reward"]
    assert (tmp_path / "out" / "report.json").exists()


@pytest.mark.slow
def test_warm_start_moves_the_probe(demo):
    """Before and after the demo's SFT warm start: more prompts solved, more mixed groups, fewer rounds."""
    from transformers import AutoModelForCausalLM

    from trl_ext.demo import warm_start
    from trl_ext.rewards import arithmetic_reward

    model, tokenizer, train = demo
    data = train.shuffle(seed=0).select(range(16))
    args = ProbeArguments(num_generations=8, num_prompts=16)
    cold = probe_model(model, tokenizer, data, [arithmetic_reward], args, model_name="demo-random")
    # The demo's own cache (outputs/demo-warm-start/<settings hash>, git-ignored): the SFT runs once per checkout.
    warm_model = AutoModelForCausalLM.from_pretrained(warm_start())
    warm = probe_model(warm_model, tokenizer, data, [arithmetic_reward], args, model_name="demo-warm-start")
    assert warm.pass_at[1] > cold.pass_at[1] and warm.groups["mixed_frac"] > cold.groups["mixed_frac"]
    assert warm.lengths["truncated_frac"] < cold.lengths["truncated_frac"]
    assert math.isfinite(warm.groups["expected_rounds"])
    assert warm.groups["expected_rounds"] < cold.groups["expected_rounds"]


def test_expected_rounds_follow_the_trainers_refill_policy():
    # informative fraction 0.5; a run with 2 prompts per generation batch and at most 3 rounds. With 2 prompts a
    # right-sized refill (missing / 0.5 x 1.25 >= 2.5, capped at the batch) is a whole batch, so the trainer's
    # policy and the whole-batch model agree: E[R] = 1 + P(R > 1) + P(R > 2) = 1 + 3/4 + 5/16 (not 1/p = 2).
    # (rounds of at most one generation batch: max_round_size 1)
    summary = summarize(
        *hand_batch(), success_threshold=1.0, max_generation_batches=3, groups_per_batch=2, max_round_size=1.0
    )
    assert summary["groups"]["expected_rounds_whole_batch"] == pytest.approx(1 + 3 / 4 + 5 / 16)
    assert summary["groups"]["expected_rounds"] == pytest.approx(1 + 3 / 4 + 5 / 16, abs=0.05)
    # 16 prompts at p = 0.25 within 4 batches: right-sized refills generate fewer groups than whole batches would
    # (the simulation runs the trainer's own refill_groups); capped at one batch, in more, smaller rounds; with
    # rounds of up to 2 batches (the default), in fewer rounds too
    small = _expected_cost(0.25, 4, 16, 1.25, max_round_size=1.0)
    assert small["expected_generation_batches"] < small["expected_rounds_whole_batch"] < small["expected_rounds"]
    big = _expected_cost(0.25, 4, 16, None)
    assert big["expected_generation_batches"] < big["expected_rounds_whole_batch"]
    assert big["expected_rounds"] < big["expected_rounds_whole_batch"]
    from trl_ext import DAPOConfig

    args = DAPOConfig(output_dir="x", bf16=False, per_device_train_batch_size=16, num_minibatches=4)
    policy = dynamic_sampling_policy(args)
    assert policy["groups_per_batch"] == 16 * 4 // 16
    assert policy["max_generation_batches"] == args.dynamic_sampling_max_generation_batches == 4
    assert policy["refill_margin"] is None
    assert policy["max_round_size"] == args.dynamic_sampling_max_round_size == 2.0


def test_the_probe_takes_the_runs_config_for_its_projection(demo):
    """The refill policy comes from the run's ``GRPOFamilyConfig``: a smaller budget caps the rounds of a cold model,
    and with no config the default run is ``GRPOFamilyConfig``'s (dynamic sampling on, 16 prompts per batch)."""
    from trl_ext import DAPOConfig
    from trl_ext.rewards import arithmetic_reward

    model, tokenizer, train = demo
    args = ProbeArguments(num_generations=4, num_prompts=4, max_completion_length=2)
    default = default_run_config(args)
    assert default.dynamic_sampling and dynamic_sampling_policy(default)["groups_per_batch"] == 16
    assert dynamic_sampling_policy(default)["max_generation_batches"] == 4
    run = DAPOConfig(
        output_dir="x", bf16=False, num_generations=4, per_device_train_batch_size=8, num_minibatches=1,
        dynamic_sampling_max_generation_batches=2, max_completion_length=2,
    )  # fmt: skip
    report = probe_model(model, tokenizer, train.select(range(4)), [arithmetic_reward], args, training_args=run)
    assert report.meta["dynamic_sampling_policy"] == dynamic_sampling_policy(run)
    assert report.meta["dynamic_sampling_policy"]["groups_per_batch"] == 2
    assert report.groups["expected_rounds"] <= 2 * 2  # a budget of 2 batches in rounds of at least half a batch
    assert "prompts per generation batch, a budget of 2 generation batches" in report.format()


def test_cli_reads_the_runs_yaml_and_names_the_config_field_of_a_former_flag(tmp_path):
    from trl_ext.scripts.probe import parse_args

    # A recipe's YAML by its documented name: its sampling and data fill the probe, its config is the run
    args, run = parse_args(["--config", "recipes/configs/demo/dapo/config_demo.yaml", "--num_prompts", "3"])
    assert type(run).__name__ == "DAPOConfig" and args.num_prompts == 3
    assert args.num_generations == run.num_generations and args.max_completion_length == run.max_completion_length
    assert run.dynamic_sampling_max_generation_batches == 4 and not run.bf16
    # The former refill-policy flags fail naming the run's config field that replaces each
    from trl_ext.errors import UserError

    with pytest.raises(UserError, match="--max_rounds was removed.*dynamic_sampling_max_generation_batches"):
        parse_args(["--num_generations", "4", "--max_rounds", "7"])
    with pytest.raises(UserError, match="--refill_margin was removed.*dynamic_sampling_refill_margin"):
        parse_args(["--preset", "grpo", "--refill_margin=1.1"])
    _, run = parse_args(["--preset", "grpo", "--num_generations", "4"])  # a preset without a YAML
    assert type(run).__name__ == "GRPOPaperConfig" and run.generation_batch_size == 16 * 4
