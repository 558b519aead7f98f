"""DAPO (arXiv 2503.14476): clip-higher (eps 0.2 / 0.28), token-level loss (Eq. 12), dynamic sampling (section 3.2)
and the soft overlong punishment (Eq. 13): ``DAPOConfig`` and ``DAPOTrainer``, run by ``trl_ext.scripts.grpo``.

    python recipes/dapo.py          # or `trl-ext dapo`: the demo (recipes/configs/demo/dapo/config_demo.yaml)
    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/dapo.py \
        --config recipes/configs/qwen2.5-math-7b/dapo/config_colocate.yaml
"""

from __future__ import annotations

from trl_ext.scripts import grpo

main = grpo.main  # main(script_args, training_args, model_args), as in every recipe


def cli(argv: list[str] | None = None) -> dict:
    """The command line (``argv``, default ``sys.argv[1:]``) run with the dapo preset."""
    return grpo.cli("dapo", argv)


if __name__ == "__main__":
    cli()
