"""Runs trl_ext/scripts/gspo.py (`trl_ext.scripts.gspo`): its docstring says what it does and how to call it."""

from trl_ext.scripts.gspo import cli

if __name__ == "__main__":
    cli()
