"""User errors (a mistake in a flag, a file, the data's columns, a config value), as opposed to bugs: a recipe prints
the message alone and exits with code 2 (``TRL_EXT_DEBUG=1``: the traceback). Imports no torch (the console script).
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

DEBUG_VARIABLE = "TRL_EXT_DEBUG"
EXIT_CODE = 2  # argparse's code for a usage error


class UserError(ValueError):
    """A message for the user, who can fix what it names; a ``ValueError`` for callers that catch those."""


class MissingFileError(UserError, FileNotFoundError):
    """A path the user gave does not exist (also a ``FileNotFoundError``)."""


def did_you_mean(name: str, choices: Iterable[str], cutoff: float = 0.6) -> str:
    """``" Did you mean 'x'?"`` (the closest of ``choices``), or ``""``: the hint of every "unknown name" message."""
    match = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=cutoff)
    return f" Did you mean {match[0]!r}?" if match else ""


def missing_path_message(path: str, what: str) -> str:
    """``"<what>='data/gsm8k.jsonl': no such file. Did you mean 'data/gsm8k_like.jsonl'?"``: the closest existing name
    in the folder, or the folder's absence. ``what`` is a field (``dataset_name``) or a flag (``--config``)."""
    given = f"{what} {path}" if what.startswith("-") else f"{what}={path!r}"  # a flag, or a field's value
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        return f"{given}: no such file (the folder {folder!r} does not exist either)."
    entries = sorted(os.listdir(folder))
    close = difflib.get_close_matches(os.path.basename(path), entries, n=1, cutoff=0.6)
    if close:
        return f"{given}: no such file. Did you mean {os.path.join(os.path.dirname(path), close[0])!r}?"
    return f"{given}: no such file in {os.path.abspath(folder)}. Give the path of an existing file."


def debug() -> bool:
    """Whether ``TRL_EXT_DEBUG`` asks for tracebacks (any value but empty, ``0``, ``false``, ``no``)."""
    return os.environ.get(DEBUG_VARIABLE, "").strip().lower() not in ("", "0", "false", "no")


@contextmanager
def reported_user_errors(prog: str) -> Iterator[None]:
    """A ``UserError`` from the body prints ``<prog>: error: <message>`` and exits 2 (``TRL_EXT_DEBUG=1``: raised)."""
    try:
        yield
    except UserError as error:
        if debug():
            raise
        print(f"{prog}: error: {error}\n({DEBUG_VARIABLE}=1 shows the traceback)", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_CODE) from None


@contextmanager
def as_user_errors(*types: type[Exception]) -> Iterator[None]:
    """Re-raise an exception of ``types`` (default ``ValueError``) escaping the body as a ``UserError``, for a step
    whose every such failure is the user's to fix (a config's checks, the reward registry refusing a name)."""
    caught = types or (ValueError,)
    try:
        yield
    except UserError:
        raise
    except caught as error:
        raise UserError(str(error)) from error
