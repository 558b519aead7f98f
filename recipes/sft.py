"""Runs trl_ext/scripts/sft.py (`trl_ext.scripts.sft`): its docstring says what it does and how to call it."""

from trl_ext.scripts.sft import cli

if __name__ == "__main__":
    cli()
