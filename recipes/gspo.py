"""GSPO (arXiv 2507.18071): the sequence-level importance ratio (Eq. 7) clipped at 3e-4 / 4e-4, sequence-mean loss, 4 minibatches per rollout; `--gspo_token true` (or `--preset gspo_token`) runs GSPO-token (Eq. 13).

    python recipes/gspo.py                                       # built-in demo on CPU: warm start + RL
    trl-ext gspo                                                 # the same through the console script
    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/gspo.py \
        --config recipes/configs/<model>/gspo/config_<variant>.yaml

With no model and no config the settings come from ``recipes/configs/demo/gspo/config_demo.yaml``. The recipe is
``recipes/grpo.py``'s ``main`` (seed, rewards, data, trainer from the preset table, model, train, save, report): in
the GRPO family the algorithm is the config, so this file only names its preset.
"""

from __future__ import annotations

from trl import ModelConfig

from trl_ext import GSPOConfig
from trl_ext.console import quiet_libraries
from trl_ext.recipe.args import RLScriptArguments
from trl_ext.recipe.common import load_recipe
from trl_ext.recipe.grpo import parse


def main(script_args: RLScriptArguments, training_args: GSPOConfig, model_args: ModelConfig) -> dict:
    return load_recipe("grpo").main(script_args, training_args, model_args)


if __name__ == "__main__":
    quiet_libraries()  # library warnings a user cannot act on; TRL_EXT_LIBRARY_WARNINGS=1 shows them
    main(*parse("gspo"))
