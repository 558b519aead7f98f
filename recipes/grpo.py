"""GRPO (DeepSeekMath, arXiv 2402.03300): per-sequence mean loss with a k3 KL term (beta 0.04).

    python recipes/grpo.py                                        # built-in demo on CPU: warm start + RL
    accelerate launch recipes/grpo.py                             # the same, through accelerate
    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/grpo.py \
        --config recipes/configs/<model>/grpo/config_<variant>.yaml
    python recipes/grpo.py --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --dataset_name <dataset> \
        --reward_funcs accuracy format --output_dir outputs/my-run

With no model and no config, the defaults come from recipes/configs/demo/grpo/config_demo.yaml (CLI flags override them). All
logic lives in trl_ext.recipe.grpo; this file only parses and calls.
"""

from trl_ext import GRPOPaperConfig
from trl_ext.console import quiet_libraries
from trl_ext.recipe.grpo import RLScriptArguments, parse, run


def main(script_args: RLScriptArguments, training_args: GRPOPaperConfig, model_args) -> dict:
    return run(script_args, training_args, model_args, recipe="grpo")


if __name__ == "__main__":
    quiet_libraries()  # library warnings a user cannot act on; TRL_EXT_LIBRARY_WARNINGS=1 shows them
    main(*parse(GRPOPaperConfig, "grpo"))
