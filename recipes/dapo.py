"""DAPO (arXiv 2503.14476): clip-higher (eps 0.2 / 0.28), token-level loss (Eq. 12), dynamic sampling (section 3.2: groups whose accuracy is all equal are dropped and refilled) and the soft overlong punishment (Eq. 13, added by DAPOTrainer).

    python recipes/dapo.py                                       # built-in demo on CPU: warm start + RL
    trl-ext dapo                                                 # the same through the console script
    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/dapo.py \
        --config recipes/configs/<model>/dapo/config_<variant>.yaml

With no model and no config the settings come from ``recipes/configs/demo/dapo/config_demo.yaml``. The recipe is
``recipes/grpo.py``'s ``main`` (seed, rewards, data, trainer from the preset table, model, train, save, report): in
the GRPO family the algorithm is the config, so this file only names its preset.
"""

from __future__ import annotations

from trl import ModelConfig

from trl_ext import DAPOConfig
from trl_ext.console import quiet_libraries
from trl_ext.recipe.args import RLScriptArguments
from trl_ext.recipe.common import load_recipe
from trl_ext.recipe.grpo import parse


def main(script_args: RLScriptArguments, training_args: DAPOConfig, model_args: ModelConfig) -> dict:
    return load_recipe("grpo").main(script_args, training_args, model_args)


if __name__ == "__main__":
    quiet_libraries()  # library warnings a user cannot act on; TRL_EXT_LIBRARY_WARNINGS=1 shows them
    main(*parse("dapo"))
