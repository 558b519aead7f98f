"""Dr. GRPO (arXiv 2503.20783): GRPO without its two biases, the 1/|o_i| length normalization
(``loss_type="dr_grpo"``: a sum over tokens divided by a constant) and the division of advantages by std(r)
(``scale_rewards="none"``), both fields of TRL's ``GRPOConfig``: the preset ``DrGRPOConfig`` on TRL's trainer.

    python recipes/dr_grpo.py       # or `trl-ext dr_grpo`: recipes/configs/demo/dr_grpo/config_demo.yaml
    python recipes/dr_grpo.py --model_name_or_path <model> --dataset_name <dataset> --reward_funcs accuracy
"""

from __future__ import annotations

from trl_ext.scripts import grpo

main = grpo.main  # main(script_args, training_args, model_args), as in every recipe


def cli(argv: list[str] | None = None) -> dict:
    """The command line (``argv``, default ``sys.argv[1:]``) run with the dr_grpo preset."""
    return grpo.cli("dr_grpo", argv)


if __name__ == "__main__":
    cli()
