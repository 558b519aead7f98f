"""GSPO (arXiv 2507.18071): a sequence-level importance ratio (Eq. 7) clipped at 3e-4 / 4e-4, the sequence-mean
loss and 4 minibatches per rollout. ``--gspo_token true`` (or ``trl-ext gspo_token``) is GSPO-token (Eq. 13).

    python recipes/gspo.py          # or `trl-ext gspo`: the demo, recipes/configs/demo/gspo/config_demo.yaml
    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/gspo.py \
        --config recipes/configs/qwen3-30b-a3b/gspo/config_colocate.yaml

The recipe is ``trl_ext/scripts/gspo.py`` (``trl_ext.scripts.gspo``): this entry point only calls its ``cli``.
"""

from trl_ext.scripts.gspo import cli

if __name__ == "__main__":
    cli()
