"""DPO with ``trl_ext.DPOTrainer`` (TRL's ``DPOTrainer`` plus length-bias diagnostics): offline on a preference
file, or on pairs mined from groups of the current policy (iterative DPO / RPO, arXiv 2404.19733).

    python recipes/dpo.py                                              # group-mined DPO on the demo task, on CPU
    python recipes/dpo.py --config recipes/configs/demo/dpo/config_offline.yaml     # offline, on the mined pairs
    python recipes/dpo.py --model_name_or_path outputs/sft --dataset_name prefs.jsonl --output_dir outputs/my-dpo

The data decide the mode: ``chosen`` / ``rejected`` columns are trained on as they are; prompts are mined into pairs
from the policy's groups for ``mining_rounds`` rounds (saved as ``<output_dir>/pairs-round-<k>.jsonl``).
"""

from __future__ import annotations

import os

from trl import ModelConfig, get_peft_config

from trl_ext.console import use_console
from trl_ext.data import format_prompts
from trl_ext.dpo.trainer import DPOConfig, DPOTrainer, train_iterative_dpo
from trl_ext.recipe.args import DPOScriptArguments
from trl_ext.recipe.evaluation import held_out_evaluator
from trl_ext.recipe.models import load_policy
from trl_ext.recipe.parsing import parse
from trl_ext.recipe.report import announce, report
from trl_ext.recipe.rewards import task_rewards
from trl_ext.recipe.steps import run, start


def main(script_args: DPOScriptArguments, training_args: DPOConfig, model_args: ModelConfig) -> dict:
    started, train_dataset, eval_dataset, layout = start(script_args, training_args, model_args, strict=False)

    offline = {"chosen", "rejected"} <= set(train_dataset.column_names)
    mode = "offline DPO" if offline else "group-mined iterative DPO"
    data = (train_dataset, eval_dataset)
    announce("dpo", f"DPOTrainer ({mode})", script_args, training_args, model_args, data, layout=layout)

    model, tokenizer, _ = load_policy(
        model_args.model_name_or_path, model_args.dtype, model_args, script_args.chat_template
    )
    train_dataset = format_prompts(train_dataset, tokenizer, script_args.system_prompt)
    eval_dataset = format_prompts(eval_dataset, tokenizer, script_args.system_prompt, "the held-out split")
    # Rewards that score mined groups (the data's task reward unless named), also the held-out check
    reward_funcs = None if offline else task_rewards(script_args, layout)[0]
    max_new_tokens = training_args.mining_max_new_tokens  # the length pairs are mined at
    task_reward = reward_funcs[0] if reward_funcs else None
    evaluate = held_out_evaluator(script_args, layout, tokenizer, eval_dataset, max_new_tokens, task_reward)
    before = evaluate(model, "before")

    if offline:
        preference_eval = eval_dataset if eval_dataset is not None and "chosen" in eval_dataset.column_names else None
        trainer = DPOTrainer(
            model=model,
            args=training_args,
            train_dataset=train_dataset,
            eval_dataset=preference_eval,
            processing_class=tokenizer,
            peft_config=get_peft_config(model_args),
        )
        use_console(trainer, "dpo")
        trainer.train()
        model = trainer.accelerator.unwrap_model(trainer.model)
        rounds = []
    else:
        rounds = train_iterative_dpo(
            model,
            reward_funcs,
            training_args,
            train_dataset,
            tokenizer,
            on_trainer=lambda k, trainer: use_console(trainer, f"dpo round {k + 1}/{training_args.mining_rounds}"),
        )

    model.save_pretrained(training_args.output_dir)
    tokenizer.save_pretrained(training_args.output_dir)
    for r in rounds:  # reusable offline: --dataset_name <output_dir>/pairs-round-0.jsonl
        r.pairs.to_json(os.path.join(training_args.output_dir, f"pairs-round-{r.round}.jsonl"))
    after = evaluate(model, "after")
    mined = [{**r.stats.as_dict(), "train_loss": r.train_loss} for r in rounds]
    steps = trainer.state.global_step if offline else None
    mode = "offline" if offline else "mined"
    return report("dpo", training_args.output_dir, before, after, steps, started, mode=mode, rounds=mined)


def cli(argv: list[str] | None = None) -> dict:
    """Parse the command line (``argv``, default ``sys.argv[1:]``) and run ``main``."""
    return run("dpo", main, lambda: parse((DPOScriptArguments, DPOConfig, ModelConfig), "dpo", argv))


if __name__ == "__main__":
    cli()
