"""Runs trl_ext/scripts/grpo.py (`trl_ext.scripts.grpo`): its docstring says what it does and how to call it."""

from trl_ext.scripts.grpo import cli

if __name__ == "__main__":
    cli()
