"""Runs trl_ext/scripts/dr_grpo.py (`trl_ext.scripts.dr_grpo`): its docstring says what it does and how to call it."""

from trl_ext.scripts.dr_grpo import cli

if __name__ == "__main__":
    cli()
