"""PPO with TRL's own ``PPOTrainer`` (``trl.experimental.ppo``, trl 1.12): policy, reference, value model, and either
a trained reward model or the rule-based rewards of ``rewards/`` through ``trl_ext.ppo.RuleRewardModel``.

    python recipes/ppo.py                                              # the demo task, on CPU
    python recipes/ppo.py --config recipes/configs/demo/ppo/config_demo.yaml --total_episodes 640
    python recipes/ppo.py --model_name_or_path outputs/sft --reward_model_path my-rm --dataset_name prompts.jsonl

The value model is a scalar head on ``value_model_path`` (default: the policy's checkpoint). With no
``reward_model_path`` (TRL's default is a Hub model: set it to null) the ``reward_funcs`` score the completions.
"""

from __future__ import annotations

from transformers import AutoModelForSequenceClassification
from transformers.utils import logging as hf_logging
from trl import ModelConfig, get_peft_config

from trl_ext.console import library_lines_dropped, quiet_libraries, use_console
from trl_ext.data import format_prompts
from trl_ext.ppo import RuleRewardModel, tokenize_prompts
from trl_ext.recipe.args import PPOScriptArguments
from trl_ext.recipe.evaluation import held_out_evaluator
from trl_ext.recipe.models import load_policy
from trl_ext.recipe.parsing import parse
from trl_ext.recipe.report import announce
from trl_ext.recipe.rewards import task_rewards
from trl_ext.recipe.steps import finish, run, start
from trl_ext.reliability.checks import require_ppo
from trl_ext.reward_model import load_reward_model

quiet_libraries()  # before the import below: TRL's "importing from trl.experimental" notice is our choice, not yours
PPOConfig, PPOTrainer = require_ppo()  # trl 1.12 only: on a newer TRL this says so and names the install line


def main(script_args: PPOScriptArguments, training_args: PPOConfig, model_args: ModelConfig) -> dict:
    # Data: prompts (plus the columns the rewards read); PPO itself consumes token ids only
    started, train_dataset, eval_dataset, layout = start(script_args, training_args, model_args)
    data = (train_dataset, eval_dataset)
    announce("ppo", "PPOTrainer", script_args, training_args, model_args, data, layout=layout)

    # Policy (left padding: PPO generates from padded queries) and value model (default: the policy's checkpoint).
    policy, tokenizer, policy_path = load_policy(
        model_args.model_name_or_path, model_args.dtype, model_args, script_args.chat_template
    )
    train_dataset = format_prompts(train_dataset, tokenizer, script_args.system_prompt)
    eval_dataset = format_prompts(eval_dataset, tokenizer, script_args.system_prompt, "the held-out split")

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the value head is new on purpose: no "score.weight MISSING" load report
    try:
        value_model = AutoModelForSequenceClassification.from_pretrained(
            script_args.value_model_path or policy_path, num_labels=1
        )
    finally:
        hf_logging.set_verbosity(verbosity)

    # Reward: a trained reward model, or the rule-based functions behind TRL's reward-model interface.
    if training_args.reward_model_path:
        reward_model = load_reward_model(training_args.reward_model_path)  # e.g. a `trl-ext reward` folder
        task_reward = None  # the held-out check builds the data's task reward itself
    else:
        reward_funcs = task_rewards(script_args, layout)[0]
        prompt_sets = [d for d in (train_dataset, eval_dataset) if d is not None]
        reward_model = RuleRewardModel(reward_funcs, tokenizer, prompt_sets, script_args.reward_weights)
        task_reward = reward_funcs[0]

    length = training_args.response_length
    evaluate = held_out_evaluator(script_args, layout, tokenizer, eval_dataset, length, task_reward)
    before = evaluate(policy, "before")
    trainer = PPOTrainer(
        args=training_args,
        processing_class=tokenizer,
        model=policy,
        ref_model=None,
        reward_model=reward_model,
        value_model=value_model,
        train_dataset=tokenize_prompts(train_dataset, tokenizer),
        eval_dataset=tokenize_prompts(eval_dataset, tokenizer) if eval_dataset is not None else None,
        peft_config=get_peft_config(model_args),
    )

    use_console(trainer, "ppo")
    with library_lines_dropped("===training policy==="):  # TRL's PPOTrainer prints it at every update
        trainer.train()
    return finish("ppo", trainer, tokenizer, trainer.policy_model, evaluate, before, started)


def cli(argv: list[str] | None = None) -> dict:
    """Parse the command line (``argv``, default ``sys.argv[1:]``) and run ``main``."""
    return run("ppo", main, lambda: parse((PPOScriptArguments, PPOConfig, ModelConfig), "ppo", argv))


if __name__ == "__main__":
    cli()
