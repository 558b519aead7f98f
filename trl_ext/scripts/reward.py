"""Train a reward model with TRL's ``RewardTrainer``: RLHF's second stage, between SFT and RL against it.

    python recipes/reward.py                                     # the demo: pairs mined from the warm start, CPU
    trl-ext reward --model_name_or_path outputs/sft --dataset_name prefs.jsonl --output_dir outputs/rm
    trl-ext dapo --reward_funcs outputs/reward-demo              # then optimize a policy against it

Data: TRL's preference layouts (on the demo, best-vs-worst pairs mined from the warm start's groups). The model, a
scalar head on the policy's checkpoint (Bradley-Terry loss), is scored by held-out pairwise accuracy; its folder is
a reward function for every RL recipe (``--reward_funcs <folder>``) and PPO's ``reward_model_path``.
"""

from __future__ import annotations

from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
from trl import ModelConfig, RewardConfig, RewardTrainer, get_peft_config

from trl_ext.console import use_console
from trl_ext.demo import warm_start
from trl_ext.dpo.pairs import mine_pairs
from trl_ext.recipe.args import RewardScriptArguments
from trl_ext.recipe.models import load_tokenizer
from trl_ext.recipe.parsing import parse
from trl_ext.recipe.report import announce
from trl_ext.recipe.rewards import task_rewards
from trl_ext.recipe.steps import finish, run, start
from trl_ext.reward_model import PREFERENCE_COLUMNS, preference_splits


def main(script_args: RewardScriptArguments, training_args: RewardConfig, model_args: ModelConfig) -> dict:
    # No dataset given: the demo's problems, mined into pairs below
    started, train, held_out, layout = start(script_args, training_args, model_args, strict=False)
    announce("reward", "RewardTrainer", script_args, training_args, model_args, (train, held_out), layout=layout)
    path = model_args.model_name_or_path or warm_start()
    tokenizer = load_tokenizer(path, script_args.chat_template)

    # Pairs: the data's own, or (demo) best vs worst of the warm start's groups by the rule reward
    if script_args.dataset_name is None:
        policy = AutoModelForCausalLM.from_pretrained(path)
        rule = task_rewards(script_args, layout)[0]
        mined = [
            mine_pairs(
                policy,
                tokenizer,
                split,
                rule,
                script_args.num_generations,
                script_args.mining_max_new_tokens,
                pairs_per_group=script_args.pairs_per_group,
            )
            for split in (train, held_out)
        ]
        (train_pairs, train_stats), (held_out_pairs, _) = mined
        print(
            f"[reward] mined {len(train_pairs)} training and {len(held_out_pairs)} held-out pairs from the warm "
            f"start's groups ({train_stats.informative_frac:.0%} of the training groups were informative)",
            flush=True,
        )
    else:
        train_pairs, held_out_pairs = preference_splits(
            train, held_out, script_args.held_out_fraction, training_args.seed
        )
    keep = [c for c in ("prompt", *PREFERENCE_COLUMNS) if c in train_pairs.column_names]
    train_pairs, held_out_pairs = train_pairs.select_columns(keep), held_out_pairs.select_columns(keep)

    # The reward model: a scalar head on the policy's checkpoint
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id
    trainer = RewardTrainer(
        model=model,
        args=training_args,
        train_dataset=train_pairs,
        eval_dataset=held_out_pairs,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    use_console(trainer, "reward model")

    # Pairwise accuracy on held-out pairs before and after; save a folder TRL's trainers load as a reward function
    pairwise_accuracy = lambda *_: trainer.evaluate()["eval_accuracy"]  # noqa: E731
    before = pairwise_accuracy()
    trainer.train()
    pairs = {"train_pairs": len(train_pairs), "held_out_pairs": len(held_out_pairs)}
    metric = "held-out pairwise accuracy"
    return finish("reward", trainer, tokenizer, model, pairwise_accuracy, before, started, metric=metric, **pairs)


def cli(argv: list[str] | None = None) -> dict:
    """Parse the command line (``argv``, default ``sys.argv[1:]``) and run ``main``."""
    return run("reward", main, lambda: parse((RewardScriptArguments, RewardConfig, ModelConfig), "reward", argv))


if __name__ == "__main__":
    cli()
