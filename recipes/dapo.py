"""Runs trl_ext/scripts/dapo.py (`trl_ext.scripts.dapo`): its docstring says what it does and how to call it."""

from trl_ext.scripts.dapo import cli

if __name__ == "__main__":
    cli()
