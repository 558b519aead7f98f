"""DAPO (arXiv 2503.14476): clip-higher (eps 0.2 / 0.28), token-level loss (Eq. 12), dynamic sampling (section
3.2: groups whose accuracy is all equal are dropped and refilled) and the soft overlong punishment (Eq. 13, which
``DAPOTrainer`` adds as one more reward function).

    python recipes/dapo.py          # or `trl-ext dapo`: the demo (recipes/configs/demo/dapo/config_demo.yaml)
    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/dapo.py \
        --config recipes/configs/qwen2.5-math-7b/dapo/config_colocate.yaml

The recipe is ``trl_ext/scripts/dapo.py`` (``trl_ext.scripts.dapo``): this entry point only calls its ``cli``.
"""

from trl_ext.scripts.dapo import cli

if __name__ == "__main__":
    cli()
