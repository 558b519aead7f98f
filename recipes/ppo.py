"""Runs trl_ext/scripts/ppo.py (`trl_ext.scripts.ppo`): its docstring says what it does and how to call it."""

from trl_ext.scripts.ppo import cli

if __name__ == "__main__":
    cli()
