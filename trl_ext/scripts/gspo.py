"""GSPO (arXiv 2507.18071): a sequence-level importance ratio (Eq. 7) clipped at 3e-4 / 4e-4, the sequence-mean
loss and 4 minibatches per rollout. ``--gspo_token true`` (or ``trl-ext gspo_token``) is GSPO-token (Eq. 13).
It is ``GSPOConfig`` and ``GSPOTrainer``, run by ``trl_ext.scripts.grpo``.

    python recipes/gspo.py          # or `trl-ext gspo`: the demo, recipes/configs/demo/gspo/config_demo.yaml
    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/gspo.py \
        --config recipes/configs/qwen3-30b-a3b/gspo/config_colocate.yaml
"""

from __future__ import annotations

from trl_ext.scripts import grpo

main = grpo.main  # main(script_args, training_args, model_args), as in every recipe


def cli(argv: list[str] | None = None) -> dict:
    """The command line (``argv``, default ``sys.argv[1:]``) run with the gspo preset."""
    return grpo.cli("gspo", argv)


if __name__ == "__main__":
    cli()
