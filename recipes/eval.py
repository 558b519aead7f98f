"""Runs trl_ext/scripts/eval.py (`trl_ext.scripts.eval`): its docstring says what it does and how to call it."""

from trl_ext.scripts.eval import cli

if __name__ == "__main__":
    cli()
