"""The GRPO-family recipe: one readable ``main`` for every preset of the table (``trl_ext.grpo.presets.PRESETS``).

    python recipes/grpo.py                                        # GRPO (DeepSeekMath) on the built-in demo, CPU
    python recipes/grpo.py --preset dr_grpo                       # any preset by name (also `preset:` in a YAML)
    trl-ext grpo --preset gspo_token                              # the same through the console script
    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/grpo.py \
        --config recipes/configs/<model>/<algo>/config_<variant>.yaml
    python recipes/grpo.py --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --dataset_name <dataset> \
        --reward_funcs accuracy format --output_dir outputs/my-run

GRPO as DeepSeekMath (arXiv 2402.03300) defines it: per-sequence mean loss with a k3 KL term (beta 0.04). With no
model and no config, ``recipes/configs/demo/<preset>/config_demo.yaml``. ``dapo``, ``gspo`` and ``dr_grpo`` run this
``main`` with their own preset. Outputs under ``output_dir``: ``metrics.jsonl``, ``curves.png``, ``summary.json``.
"""

from __future__ import annotations

import time

from transformers import set_seed
from trl import ModelConfig, get_peft_config

from trl_ext.data import format_prompts, load_task_data
from trl_ext.demo_tools import ToolDemo
from trl_ext.grpo.configs import GRPOFamilyConfig
from trl_ext.grpo.presets import trainer_class_for
from trl_ext.recipe.args import RLScriptArguments
from trl_ext.recipe.evaluation import held_out_evaluator
from trl_ext.recipe.grpo import (
    MetricsFileCallback,
    accuracy_after,
    announce,
    attach_monitors,
    fit_to_model,
    parse,
    prepare_output_dir,
    resolve_checkpoint,
    summarize,
)
from trl_ext.recipe.models import demo_threads, load_policy
from trl_ext.recipe.rewards import gold_reward, task_rewards
from trl_ext.recipe.steps import run
from trl_ext.recipe.tools import load_tools, tool_evaluator


def main(script_args: RLScriptArguments, training_args: GRPOFamilyConfig, model_args: ModelConfig) -> dict:
    recipe, output_dir = script_args.preset, training_args.output_dir
    started = time.time()

    # Output folder: a fresh one unless resuming
    set_seed(training_args.seed)
    demo_threads(model_args)
    resume = resolve_checkpoint(training_args.resume_from_checkpoint, output_dir)
    overwrite = getattr(script_args, "overwrite_output_dir", None) or getattr(training_args, "overwrite_output_dir", 0)
    metrics_path = prepare_output_dir(output_dir, resume, training_args.process_index == 0, bool(overwrite))

    # Named rewards are built first (a typo fails before any download); none named: the data's task reward
    named = task_rewards(script_args, None) if script_args.reward_funcs else None
    tools, tool_demo = load_tools(script_args.tools), ToolDemo.of(script_args, model_args)
    data = tool_demo.data if tool_demo else load_task_data(script_args, hold_out=True)
    reward_funcs, reward_names = (tool_demo and tool_demo.rewards) or named or task_rewards(script_args, data.layout)

    trainer_class = trainer_class_for(training_args)
    trainer_name = f"{trainer_class.__name__} ({type(training_args).__name__})"

    demo_model = tool_demo.describe() if tool_demo else None  # the tool demo's warm start trains after this line
    announce(recipe, trainer_name, script_args, training_args, model_args, data, reward_names, demo_model)

    # Model and tokenizer (none given: the demo's SFT warm start); a given model's context bounds the completions
    model, tokenizer, model_path = load_policy(
        tool_demo.model_path if tool_demo else model_args.model_name_or_path,
        model_args.dtype,
        model_args,
        script_args.chat_template,
        warm_start_seed=script_args.demo_warm_start_seed,
    )
    train_dataset = format_prompts(data.train, tokenizer, script_args.system_prompt)
    eval_dataset = format_prompts(data.held_out, tokenizer, script_args.system_prompt, "the held-out split")
    if model_args.model_name_or_path is not None:
        fit_to_model(recipe, training_args, model, tokenizer, train_dataset, script_args)

    # Held-out greedy accuracy before RL, by the first rule reward (with only a reward model: the data's task reward)
    is_main = training_args.process_index == 0
    gold = gold_reward(reward_funcs, script_args, data.layout)
    evaluate = held_out_evaluator(
        script_args, data.layout, tokenizer, eval_dataset, training_args.max_completion_length, gold, is_main
    )
    if tools:  # with the tools run, as the rollouts run them
        evaluate = tool_evaluator(tokenizer, eval_dataset, tools, gold)
    before = evaluate(model, "before RL")
    if before is not None and is_main:
        print(
            f"[{recipe}] held-out greedy accuracy before RL: {before:.3f} ({len(eval_dataset)} problems)", flush=True
        )

    # Trainer: every log line also goes to metrics.jsonl
    trainer = trainer_class(
        model=model,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        callbacks=[MetricsFileCallback(metrics_path)],
        tools=tools,
    )
    held_out = attach_monitors(trainer, recipe, script_args, evaluate, before, reward_funcs)

    train_started = time.time()
    trainer.train(resume_from_checkpoint=resume)
    train_seconds = time.time() - train_started
    trainer.save_model(output_dir)
    if trainer.accelerator.is_main_process:
        tokenizer.save_pretrained(output_dir)

    after = accuracy_after(trainer, evaluate, held_out)
    return summarize(recipe, trainer, model_path, eval_dataset, before, after, held_out, started, train_seconds)


def cli(preset: str = "grpo", argv: list[str] | None = None) -> dict:
    """Parse the command line (``argv``, default ``sys.argv[1:]``) for ``preset`` (``--preset`` / a YAML ``preset:``
    may choose another) and run ``main``: also the entry point of ``dapo``, ``gspo`` and ``dr_grpo``."""
    return run(preset, main, lambda: parse(preset, argv=argv))


if __name__ == "__main__":
    cli()
