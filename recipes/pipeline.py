"""The demo pipeline in one command: SFT warm start -> DAPO -> DPO for style, each stage's held-out accuracy printed.

    python recipes/pipeline.py                                   # ~2 min on 2 CPU cores, outputs/pipeline
    python recipes/pipeline.py --learned_reward true             # SFT -> reward model -> DAPO against it
    python recipes/pipeline.py --dapo_overrides max_steps=100 --dpo_overrides mining_rounds=1
    python recipes/pipeline.py --config my_pipeline.yaml         # any PipelineArguments field; CLI flags override

The recipe is ``trl_ext/scripts/pipeline.py`` (``trl_ext.scripts.pipeline``): this entry point only calls its ``cli``.
"""

from trl_ext.scripts.pipeline import cli

if __name__ == "__main__":
    cli()
