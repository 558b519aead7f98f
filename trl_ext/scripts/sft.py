"""Supervised fine-tuning with TRL's ``SFTTrainer``: the cold-start step before RL (DeepSeek-R1, DAPO).

    python recipes/sft.py                                              # the demo warm start, on CPU
    python recipes/sft.py --config recipes/configs/demo/sft/config_demo.yaml --max_steps 100
    python recipes/sft.py --model_name_or_path Qwen/Qwen2.5-0.5B --dataset_name trl-lib/Capybara --output_dir ...

With neither ``--config`` nor ``--model_name_or_path`` the demo's tiny model is trained from scratch with exactly the
settings of ``trl_ext.demo.warm_start`` (a test keeps the two equal).
"""

from __future__ import annotations

from trl import ModelConfig, SFTConfig, SFTTrainer, get_peft_config

from trl_ext.console import use_console
from trl_ext.data import format_prompts
from trl_ext.recipe.args import SFTScriptArguments
from trl_ext.recipe.evaluation import held_out_evaluator
from trl_ext.recipe.models import fresh_demo_policy, load_policy
from trl_ext.recipe.parsing import parse
from trl_ext.recipe.report import announce
from trl_ext.recipe.steps import finish, run, start


def main(script_args: SFTScriptArguments, training_args: SFTConfig, model_args: ModelConfig) -> dict:
    # Data: a known layout maps to prompt + completion (GSM8K's worked answer, a MATH solution)
    started, train_dataset, eval_dataset, layout = start(
        script_args, training_args, model_args, strict=False, with_completion=True
    )
    data = (train_dataset, eval_dataset)
    announce("sft", "SFTTrainer", script_args, training_args, model_args, data, layout=layout)

    # No model given: the demo's randomly initialised model (the warm start starts from scratch)
    if model_args.model_name_or_path is None:
        model, tokenizer = fresh_demo_policy()
    else:
        model, tokenizer, _ = load_policy(
            model_args.model_name_or_path, model_args.dtype, model_args, script_args.chat_template
        )
    train_dataset = format_prompts(train_dataset, tokenizer, script_args.system_prompt)
    eval_dataset = format_prompts(eval_dataset, tokenizer, script_args.system_prompt, "the held-out split")

    evaluate = held_out_evaluator(script_args, layout, tokenizer, eval_dataset, max_new_tokens=256)
    before = evaluate(model, "before")
    columns = [c for c in ("prompt", "completion", "messages", "text") if c in train_dataset.column_names]
    trainer = SFTTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset.select_columns(columns),
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    use_console(trainer, "sft")
    trainer.train()
    return finish("sft", trainer, tokenizer, trainer.model, evaluate, before, started)


def cli(argv: list[str] | None = None) -> dict:
    """Parse the command line (``argv``, default ``sys.argv[1:]``) and run ``main``."""
    return run("sft", main, lambda: parse((SFTScriptArguments, SFTConfig, ModelConfig), "sft", argv))


if __name__ == "__main__":
    cli()
