"""Runs trl_ext/scripts/dpo.py (`trl_ext.scripts.dpo`): its docstring says what it does and how to call it."""

from trl_ext.scripts.dpo import cli

if __name__ == "__main__":
    cli()
