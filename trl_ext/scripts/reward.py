"""Train a reward model with TRL's ``RewardTrainer``: RLHF's second stage, between SFT and RL against it.

    python recipes/reward.py                                     # the demo: pairs mined from the warm start, CPU
    trl-ext reward --model_name_or_path outputs/sft --dataset_name prefs.jsonl --output_dir outputs/rm
    trl-ext dapo --reward_funcs outputs/reward-demo              # then optimize a policy against it

Data: TRL's preference layouts (on the demo, the warm start's rollouts of the training problems labelled by the rule
reward: each problem's correct answer against its distinct mistakes). The model, a scalar head on the policy's
checkpoint (on the demo, a longer SFT run of the same data; Bradley-Terry loss), is trained on the tokens GRPO scores
and measured by held-out pairwise accuracy (on the demo, the committed benchmarks/data/reward_held_out_pairs.jsonl);
its folder is a reward function for every RL recipe (``--reward_funcs <folder>``) and PPO's ``reward_model_path``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from datasets import Dataset, load_dataset
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
from trl import ModelConfig, RewardConfig, RewardTrainer, get_peft_config

from trl_ext.console import use_console
from trl_ext.demo import WarmStartConfig, warm_start
from trl_ext.dpo.pairs import sample_groups
from trl_ext.recipe.args import RewardScriptArguments
from trl_ext.recipe.models import load_tokenizer
from trl_ext.recipe.parsing import parse
from trl_ext.recipe.report import announce
from trl_ext.recipe.rewards import task_rewards
from trl_ext.recipe.steps import finish, run, start
from trl_ext.reward_model import (
    PREFERENCE_COLUMNS,
    as_scored_ids,
    held_out_pairwise_accuracy,
    preference_splits,
    rollout_pairs,
)
from trl_ext.scoring import score_completions

#: The demo's held-out pairs, committed before the reward model changed (benchmarks/reward_held_out_pairs.py).
HELD_OUT_PAIRS = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "reward_held_out_pairs.jsonl"


def main(script_args: RewardScriptArguments, training_args: RewardConfig, model_args: ModelConfig) -> dict:
    # No dataset given: the demo's problems, their rollouts labelled into pairs below
    started, train, held_out, layout = start(script_args, training_args, model_args, strict=False)
    announce("reward", "RewardTrainer", script_args, training_args, model_args, (train, held_out), layout=layout)
    path = model_args.model_name_or_path or warm_start()
    tokenizer = load_tokenizer(path, script_args.chat_template)

    # Pairs: the data's own, or (demo) the warm start's rollouts of the training problems labelled by the rule reward
    if script_args.dataset_name is None:
        policy = AutoModelForCausalLM.from_pretrained(path)
        rules = task_rewards(script_args, layout)[0]
        train_pairs, accuracy = rollout_pairs_of(policy, tokenizer, train, rules, script_args)
        held_out_pairs = demo_held_out_pairs(policy, tokenizer, held_out, rules, script_args)
        print(
            f"[reward] {len(train_pairs)} training pairs from {script_args.num_generations} rollouts of each of "
            f"{len(train)} training problems ({accuracy:.0%} of the rollouts correct); {len(held_out_pairs)} held-out "
            "pairs",
            flush=True,
        )
    else:
        train_pairs, held_out_pairs = preference_splits(
            train, held_out, script_args.held_out_fraction, training_args.seed
        )
    keep = [c for c in ("prompt", *PREFERENCE_COLUMNS) if c in train_pairs.column_names]
    train_pairs, held_out_pairs = train_pairs.select_columns(keep), held_out_pairs.select_columns(keep)

    # The reward model: a scalar head on the policy's checkpoint (or, demo, on a longer SFT run of the same data)
    init = (
        warm_start(sft=WarmStartConfig(max_steps=script_args.init_sft_steps)) if script_args.init_sft_steps else path
    )
    model = AutoModelForSequenceClassification.from_pretrained(init, num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id
    # Text pairs are trained on the tokens GRPO scores (prompt + completion, no EOS appended)
    as_scored = "prompt" in keep and isinstance(train_pairs[0]["chosen"], str)
    train_data, held_out_data = (
        (as_scored_ids(train_pairs, tokenizer), as_scored_ids(held_out_pairs, tokenizer))
        if as_scored
        else (train_pairs, held_out_pairs)
    )
    trainer = RewardTrainer(
        model=model,
        args=training_args,
        train_dataset=train_data,
        eval_dataset=held_out_data,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    use_console(trainer, "reward model")

    # Pairwise accuracy on held-out pairs before and after; save a folder TRL's trainers load as a reward function
    def pairwise_accuracy(*_: Any) -> float:
        if as_scored:
            return held_out_pairwise_accuracy(trainer.model, held_out_pairs, tokenizer)
        return trainer.evaluate()["eval_accuracy"]

    before = pairwise_accuracy()
    trainer.train()
    pairs = {"train_pairs": len(train_pairs), "held_out_pairs": len(held_out_pairs)}
    metric = "held-out pairwise accuracy"
    return finish("reward", trainer, tokenizer, model, pairwise_accuracy, before, started, metric=metric, **pairs)


def rollout_pairs_of(
    policy: Any, tokenizer: Any, problems: Dataset, rules: list, script_args: RewardScriptArguments
) -> tuple[Dataset, float]:
    """``(pairs, share of rollouts correct)``: ``num_generations`` rollouts of each problem labelled by the ``rules``
    (``rollout_pairs``; with ``reference_pairs`` the known answer stands in where no rollout is correct)."""
    n = script_args.num_generations
    completions, ids = sample_groups(policy, tokenizer, list(problems["prompt"]), n, script_args.mining_max_new_tokens)
    columns = {c: [v for v in problems[c] for _ in range(n)] for c in problems.column_names}
    labels = score_completions(rules, columns.pop("prompt"), completions, completion_ids=ids, **columns).tolist()
    references = [str(a) for a in problems["answer"]] if script_args.reference_pairs else None
    pairs = rollout_pairs(list(problems["prompt"]), completions, labels, n, script_args.pairs_per_group, references)
    return pairs, sum(label == 1.0 for label in labels) / len(labels)


def demo_held_out_pairs(
    policy: Any, tokenizer: Any, held_out: Dataset, rules: list, script_args: RewardScriptArguments
) -> Dataset:
    """The held-out pairs of the demo: ``held_out_pairs``, else the committed file where the package runs from the
    repository (benchmarks/reward_held_out_pairs.py wrote it), else rollouts of the held-out problems."""
    path = script_args.held_out_pairs or (HELD_OUT_PAIRS if HELD_OUT_PAIRS.exists() else None)
    if path is not None:
        return load_dataset("json", data_files=str(path), split="train")
    script_args = replace(script_args, reference_pairs=False)  # the model's own completions only
    return rollout_pairs_of(policy, tokenizer, held_out, rules, script_args)[0]


def cli(argv: list[str] | None = None) -> dict:
    """Parse the command line (``argv``, default ``sys.argv[1:]``) and run ``main``."""
    return run("reward", main, lambda: parse((RewardScriptArguments, RewardConfig, ModelConfig), "reward", argv))


if __name__ == "__main__":
    cli()
