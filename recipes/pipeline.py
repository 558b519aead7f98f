"""The demo pipeline in one command: SFT warm start -> DAPO -> DPO for style, each stage's held-out accuracy printed.

    python recipes/pipeline.py                                   # ~2 min on 2 CPU cores, outputs/pipeline
    python recipes/pipeline.py --dapo_overrides max_steps=100 --dpo_overrides mining_rounds=1
    python recipes/pipeline.py --config my_pipeline.yaml         # any PipelineArguments field; CLI flags override

Each stage runs its recipe's own code path and YAML (``recipes/sft.py``'s warm start, ``recipes/dapo.py`` with
``recipes/configs/demo/dapo/config_demo.yaml``, ``recipes/dpo.py`` with ``recipes/configs/demo/dpo/config_style.yaml``), starting
from the previous stage's saved model; see ``trl_ext/pipeline.py``. The final table and
``outputs/pipeline/summary.json`` hold the accuracies, the DPO rounds' mining statistics and each stage's wall time.
"""

from trl import TrlParser

from trl_ext.console import quiet_libraries
from trl_ext.recipe.common import PipelineArguments, run_pipeline


def main(args: PipelineArguments) -> dict:
    return run_pipeline(args)


if __name__ == "__main__":
    quiet_libraries()  # library warnings a user cannot act on; TRL_EXT_LIBRARY_WARNINGS=1 shows them
    (pipeline_args,) = TrlParser((PipelineArguments,)).parse_args_and_config()
    main(pipeline_args)
