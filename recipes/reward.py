"""Train a reward model with TRL's ``RewardTrainer``: RLHF's second stage, between SFT and RL against it.

    python recipes/reward.py                                     # the demo: pairs mined from the warm start, CPU
    trl-ext reward --model_name_or_path outputs/sft --dataset_name prefs.jsonl --output_dir outputs/rm
    trl-ext dapo --reward_funcs outputs/reward-demo              # then optimize a policy against it

The recipe is ``trl_ext/scripts/reward.py`` (``trl_ext.scripts.reward``): this entry point only calls its ``cli``.
"""

from trl_ext.scripts.reward import cli

if __name__ == "__main__":
    cli()
