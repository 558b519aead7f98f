"""The GRPO-family recipe: one readable ``main`` for every preset of the table (``trl_ext.grpo.presets.PRESETS``).

    python recipes/grpo.py                                        # GRPO (DeepSeekMath) on the built-in demo, CPU
    python recipes/grpo.py --preset dr_grpo                       # any preset by name (also `preset:` in a YAML)
    trl-ext grpo --preset gspo_token                              # the same through the console script
    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/grpo.py \
        --config recipes/configs/<model>/<algo>/config_<variant>.yaml
    python recipes/grpo.py --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --dataset_name <dataset> \
        --reward_funcs accuracy format --output_dir outputs/my-run

The recipe is ``trl_ext/scripts/grpo.py`` (``trl_ext.scripts.grpo``): this entry point only calls its ``cli``.
"""

from trl_ext.scripts.grpo import cli

if __name__ == "__main__":
    cli()
