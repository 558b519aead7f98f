"""PPO with TRL's own ``PPOTrainer`` (``trl.experimental.ppo``, trl 1.12): policy, reference, value model, and either
a trained reward model or the rule-based rewards of ``rewards/`` through ``trl_ext.ppo.RuleRewardModel``.

    python recipes/ppo.py                                              # the demo task, on CPU
    python recipes/ppo.py --config recipes/configs/demo/ppo/config_demo.yaml --total_episodes 640
    python recipes/ppo.py --model_name_or_path outputs/sft --reward_model_path my-rm --dataset_name prompts.jsonl

The recipe is ``trl_ext/scripts/ppo.py`` (``trl_ext.scripts.ppo``): this entry point only calls its ``cli``.
"""

from trl_ext.scripts.ppo import cli

if __name__ == "__main__":
    cli()
