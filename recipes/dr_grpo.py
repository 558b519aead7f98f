"""Dr. GRPO (arXiv 2503.20783): GRPO without its two biases, the 1/|o_i| length normalization
(``loss_type="dr_grpo"``: a sum over tokens divided by a constant) and the division of advantages by std(r)
(``scale_rewards="none"``). Both are fields of TRL's ``GRPOConfig``: the preset is ``DrGRPOConfig``, the trainer TRL's
(``GRPOTrainer`` with this package's reliability layer), so this file only names its preset.

    python recipes/dr_grpo.py       # or `trl-ext dr_grpo`: recipes/configs/demo/dr_grpo/config_demo.yaml
    python recipes/dr_grpo.py --model_name_or_path <model> --dataset_name <dataset> --reward_funcs accuracy

The recipe is ``trl_ext/scripts/dr_grpo.py`` (``trl_ext.scripts.dr_grpo``): this entry point only calls its ``cli``.
"""

from trl_ext.scripts.dr_grpo import cli

if __name__ == "__main__":
    cli()
