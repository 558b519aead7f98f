"""DPO with ``trl_ext.DPOTrainer`` (TRL's ``DPOTrainer`` plus length-bias diagnostics): offline on a preference
file, or on pairs mined from groups of the current policy (iterative DPO / RPO, arXiv 2404.19733).

    python recipes/dpo.py                                              # group-mined DPO on the demo task, on CPU
    python recipes/dpo.py --config recipes/configs/demo/dpo/config_offline.yaml     # offline, on the mined pairs
    python recipes/dpo.py --model_name_or_path outputs/sft --dataset_name prefs.jsonl --output_dir outputs/my-dpo

The data decide the mode: a dataset with ``chosen`` and ``rejected`` columns is trained on as it is (exactly TRL's
DPO); a prompt-only dataset (``prompt`` plus the columns the rewards read) is turned into pairs by sampling
``num_generations`` completions per prompt, scoring them with ``reward_funcs``, dropping all-equal groups and pairing
best with worst at similar length, for ``mining_rounds`` rounds (each round's pairs are saved as
``<output_dir>/pairs-round-<k>.jsonl``, reusable offline). With neither ``--config`` nor ``--model_name_or_path``
the settings come from ``recipes/configs/demo/dpo/config_demo.yaml``: the demo's SFT warm start, the arithmetic
problems and reward, held-out greedy accuracy printed before and after, outputs in ``outputs/dpo``. The body is
``trl_ext.recipe.common.run_dpo``; this file only parses and calls.
"""

from trl import ModelConfig

from trl_ext.console import quiet_libraries
from trl_ext.dpo.trainer import DPOConfig
from trl_ext.recipe.common import DPOScriptArguments, parse_recipe_args, run_dpo


def main(script_args: DPOScriptArguments, training_args: DPOConfig, model_args: ModelConfig) -> dict:
    return run_dpo(script_args, training_args, model_args)


if __name__ == "__main__":
    quiet_libraries()  # library warnings a user cannot act on; TRL_EXT_LIBRARY_WARNINGS=1 shows them
    main(*parse_recipe_args((DPOScriptArguments, DPOConfig, ModelConfig), "dpo"))
