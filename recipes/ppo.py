"""PPO with TRL's own ``PPOTrainer`` (``trl.experimental.ppo``, trl 1.12): policy, reference, value model, and either
a trained reward model or the rule-based rewards of ``rewards/`` through ``trl_ext.ppo.RuleRewardModel``.

    python recipes/ppo.py                                              # the demo task, on CPU
    python recipes/ppo.py --config recipes/configs/demo/ppo/config_demo.yaml --total_episodes 640
    python recipes/ppo.py --model_name_or_path outputs/sft --reward_model_path my-rm --dataset_name prompts.jsonl

The value model is a sequence-classification head on ``value_model_path`` (default: the policy's checkpoint, the
usual initialisation). With no ``reward_model_path`` (TRL's default is a Hub model: set it to null outside the demo
config) the rewards named in ``reward_funcs`` are called on the decoded completions with the dataset's other columns
(e.g. ``answer``), exactly as the GRPO family calls them. With neither ``--config`` nor ``--model_name_or_path`` the
settings come from ``recipes/configs/demo/ppo/config_demo.yaml``: the demo's SFT warm start, the arithmetic problems
and reward, held-out greedy accuracy printed before and after, outputs in ``outputs/ppo``. The body is
``trl_ext.recipe.common.run_ppo``; this file only parses and calls.
"""

from trl import ModelConfig

from trl_ext.console import quiet_libraries
from trl_ext.recipe.common import PPOScriptArguments, parse_recipe_args, run_ppo
from trl_ext.reliability.checks import require_ppo

PPOConfig, _ = require_ppo()  # trl 1.12 only: on a newer TRL this says so and names the install line

if __name__ == "__main__":
    quiet_libraries()  # before the import below: TRL's "importing from trl.experimental" notice is our choice, not yours

from trl.experimental.ppo import PPOConfig  # noqa: E402


def main(script_args: PPOScriptArguments, training_args: PPOConfig, model_args: ModelConfig) -> dict:
    return run_ppo(script_args, training_args, model_args)


if __name__ == "__main__":
    main(*parse_recipe_args((PPOScriptArguments, PPOConfig, ModelConfig), "ppo"))
