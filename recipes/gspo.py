"""GSPO (arXiv 2507.18071): sequence-level importance ratio, clipped per sequence (--gspo_token for GSPO-token).

    python recipes/gspo.py                                        # built-in demo on CPU: warm start + RL
    accelerate launch recipes/gspo.py                             # the same, through accelerate
    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/gspo.py \
        --config recipes/configs/<model>/gspo/config_<variant>.yaml
    python recipes/gspo.py --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --dataset_name <dataset> \
        --reward_funcs accuracy format --output_dir outputs/my-run

With no model and no config, the defaults come from recipes/configs/demo/gspo/config_demo.yaml (CLI flags override them). All
logic lives in trl_ext.recipe.grpo; this file only parses and calls.
"""

from trl_ext import GSPOConfig
from trl_ext.console import quiet_libraries
from trl_ext.recipe.grpo import RLScriptArguments, parse, run


def main(script_args: RLScriptArguments, training_args: GSPOConfig, model_args) -> dict:
    return run(script_args, training_args, model_args, recipe="gspo")


if __name__ == "__main__":
    quiet_libraries()  # library warnings a user cannot act on; TRL_EXT_LIBRARY_WARNINGS=1 shows them
    main(*parse(GSPOConfig, "gspo"))
