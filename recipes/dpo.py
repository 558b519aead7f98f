"""DPO with ``trl_ext.DPOTrainer`` (TRL's ``DPOTrainer`` plus length-bias diagnostics): offline on a preference
file, or on pairs mined from groups of the current policy (iterative DPO / RPO, arXiv 2404.19733).

    python recipes/dpo.py                                              # group-mined DPO on the demo task, on CPU
    python recipes/dpo.py --config recipes/configs/demo/dpo/config_offline.yaml     # offline, on the mined pairs
    python recipes/dpo.py --model_name_or_path outputs/sft --dataset_name prefs.jsonl --output_dir outputs/my-dpo

The recipe is ``trl_ext/scripts/dpo.py`` (``trl_ext.scripts.dpo``): this entry point only calls its ``cli``.
"""

from trl_ext.scripts.dpo import cli

if __name__ == "__main__":
    cli()
