"""Supervised fine-tuning with TRL's ``SFTTrainer``: the cold-start step before RL (DeepSeek-R1, DAPO).

    python recipes/sft.py                                              # the demo warm start, on CPU
    python recipes/sft.py --config recipes/configs/demo/sft/config_demo.yaml --max_steps 100
    python recipes/sft.py --model_name_or_path Qwen/Qwen2.5-0.5B --dataset_name trl-lib/Capybara --output_dir ...

With neither ``--config`` nor ``--model_name_or_path`` the settings come from
``recipes/configs/demo/sft/config_demo.yaml``: the demo's randomly initialised tiny model trained on the arithmetic
problems with exactly the settings of ``trl_ext.demo.warm_start`` (``trl_ext.recipe.common.warm_start_sft_config``; a test
keeps the two equal and checks that both give the same weights), held-out greedy accuracy printed before and after,
the model written to ``outputs/sft``. The body is ``trl_ext.recipe.common.run_sft``; this file only parses and calls.
"""

from trl import ModelConfig, SFTConfig

from trl_ext.console import quiet_libraries
from trl_ext.recipe.common import SFTScriptArguments, parse_recipe_args, run_sft


def main(script_args: SFTScriptArguments, training_args: SFTConfig, model_args: ModelConfig) -> dict:
    return run_sft(script_args, training_args, model_args)


if __name__ == "__main__":
    quiet_libraries()  # library warnings a user cannot act on; TRL_EXT_LIBRARY_WARNINGS=1 shows them
    main(*parse_recipe_args((SFTScriptArguments, SFTConfig, ModelConfig), "sft"))
