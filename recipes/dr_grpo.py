"""Dr. GRPO (arXiv 2503.20783): GRPO without the 1/

    python recipes/dr_grpo.py                                       # built-in demo on CPU: warm start + RL
    trl-ext dr_grpo                                                 # the same through the console script
    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/dr_grpo.py \
        --config recipes/configs/<model>/dr_grpo/config_<variant>.yaml

With no model and no config the settings come from ``recipes/configs/demo/o_i| length normalization (`loss_type="dr_grpo"`) and without dividing advantages by std(r) (`scale_rewards="none"`), the two biases the paper removes.|dr_grpo/config_demo.yaml``. The recipe is
``recipes/grpo.py``'s ``main`` (seed, rewards, data, trainer from the preset table, model, train, save, report): in
the GRPO family the algorithm is the config, so this file only names its preset.
"""

from __future__ import annotations

from trl import ModelConfig

from trl_ext import DrGRPOConfig
from trl_ext.console import quiet_libraries
from trl_ext.recipe.args import RLScriptArguments
from trl_ext.recipe.common import load_recipe
from trl_ext.recipe.grpo import parse


def main(script_args: RLScriptArguments, training_args: DrGRPOConfig, model_args: ModelConfig) -> dict:
    return load_recipe("grpo").main(script_args, training_args, model_args)


if __name__ == "__main__":
    quiet_libraries()  # library warnings a user cannot act on; TRL_EXT_LIBRARY_WARNINGS=1 shows them
    main(*parse("dr_grpo"))
