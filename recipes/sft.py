"""Supervised fine-tuning with TRL's ``SFTTrainer``: the cold-start step before RL (DeepSeek-R1, DAPO).

    python recipes/sft.py                                              # the demo warm start, on CPU
    python recipes/sft.py --config recipes/configs/demo/sft/config_demo.yaml --max_steps 100
    python recipes/sft.py --model_name_or_path Qwen/Qwen2.5-0.5B --dataset_name trl-lib/Capybara --output_dir ...

The recipe is ``trl_ext/scripts/sft.py`` (``trl_ext.scripts.sft``): this entry point only calls its ``cli``.
"""

from trl_ext.scripts.sft import cli

if __name__ == "__main__":
    cli()
