"""Runs trl_ext/scripts/reward.py (`trl_ext.scripts.reward`): its docstring says what it does and how to call it."""

from trl_ext.scripts.reward import cli

if __name__ == "__main__":
    cli()
