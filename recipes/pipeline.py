"""Runs trl_ext/scripts/pipeline.py (`trl_ext.scripts.pipeline`): its docstring says what it does and how to call it."""

from trl_ext.scripts.pipeline import cli

if __name__ == "__main__":
    cli()
