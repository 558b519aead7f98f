"""Whether the Hugging Face Hub can be reached, asked once per run with one short request.

Without a network, ``load_dataset`` and ``from_pretrained`` of a Hub name retry each file with back-off (12 "Retrying
in 8s" lines, 40-56 s) before they fail. The recipes ask here first: one ``HEAD`` of the Hub's endpoint with a
``PROBE_TIMEOUT`` s limit, remembered for the rest of the process and passed through ``REACHABLE_ENV`` to the
processes it starts. A name that is unreachable and not in the local cache then stops within seconds with the same
one-line message (:func:`hub_unreachable`); a cached one still loads, with a hint to set ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import logging
import os
import time
import urllib.error
import urllib.request

from trl_ext.errors import UserError

logger = logging.getLogger(__name__)

#: Seconds the one probe request may take; the answer then comes within about this long.
PROBE_TIMEOUT = 3.0
#: ``1`` / ``0``: the probe's answer, set by the first process that asks and inherited by the processes it starts
#: (a user may set it too, e.g. ``0`` on a machine known to be offline).
REACHABLE_ENV = "TRL_EXT_HUB_REACHABLE"

_answer: tuple[bool, str] | None = None  # (reachable, why not), once per process


def hub_endpoint() -> str:
    """The Hub address the libraries use (``HF_ENDPOINT``, else https://huggingface.co)."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def offline_mode() -> bool:
    """Whether the user switched the Hub libraries offline (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``): they then
    fail at once by themselves, and nothing is probed."""
    values = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return any((value or "").strip().upper() in ("1", "ON", "YES", "TRUE") for value in values)


def probe(timeout: float = PROBE_TIMEOUT) -> tuple[bool, str]:
    """``(reachable, why not)`` from one ``HEAD`` of the endpoint: any HTTP answer, even an error status, is reachable;
    no answer (no DNS, refused, no route, timeout) is not."""
    url = hub_endpoint()
    started = time.monotonic()
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()  # noqa: S310
    except urllib.error.HTTPError:
        return True, ""
    except (OSError, ValueError) as error:  # URLError, socket timeout, a malformed HF_ENDPOINT
        reason = getattr(error, "reason", error)
        return False, f"HEAD {url} failed after {time.monotonic() - started:.1f} s: {reason}"
    return True, ""


def reachable() -> tuple[bool, str]:
    """``(reachable, why not)``, probed at most once per process (``REACHABLE_ENV`` carries it to child processes)."""
    global _answer
    if _answer is None:
        inherited = os.environ.get(REACHABLE_ENV, "").strip()
        if inherited in ("0", "1"):
            _answer = (inherited == "1", f"{REACHABLE_ENV}={inherited}")
        else:
            _answer = probe()
            os.environ[REACHABLE_ENV] = "1" if _answer[0] else "0"
    return _answer


def forget() -> None:
    """Drop this process's answer (and the inherited one): the next ``reachable()`` probes again."""
    global _answer
    _answer = None
    os.environ.pop(REACHABLE_ENV, None)


def is_cached(name: str, repo_type: str) -> bool:
    """Whether the local cache holds anything of Hub ``repo_type`` (``model`` / ``dataset``) ``name``: the Hub cache's
    ``<type>s--owner--name`` folder, or for a dataset the ``datasets`` library's prepared ``owner___name`` folder."""
    from huggingface_hub import constants  # the Hub client's cache location, as the loaders resolve it

    folders = [os.path.join(constants.HF_HUB_CACHE, "--".join([f"{repo_type}s", *name.split("/")]))]
    if repo_type == "dataset":
        from datasets import config

        folders.append(os.path.join(str(config.HF_DATASETS_CACHE), name.replace("/", "___")))
    return any(os.path.isdir(folder) for folder in folders)


def hub_unreachable(what: str, error: BaseException | str, local: str) -> str:
    """The message for a Hub name that could not be fetched and is not cached (``what``: the field and its value;
    ``local``: what to give instead)."""
    cause = " ".join(str(error).split())  # transformers' message spans two lines
    return (
        f"{what}: the Hugging Face Hub could not be reached and no cached copy is here ({cause}). Give a local copy "
        f"({local}), or fill the cache once where the Hub is reachable (the same HF_HOME) and set HF_HUB_OFFLINE=1 "
        "to use it without waiting on the network."
    )


def check_hub_name(what: str, name: str, repo_type: str, local: str) -> None:
    """Before loading Hub ``name``: stop at once, with :func:`hub_unreachable`'s message, when the Hub cannot be
    reached and nothing of ``name`` is cached; warn when it is cached (the libraries retry before using the cache)."""
    if offline_mode() or name.startswith(("/", ".", "~")) or name.count("/") > 1:
        return  # the libraries answer at once themselves (offline), or it is no Hub id but a path
    ok, why = reachable()
    if ok:
        return
    if not is_cached(name, repo_type):
        raise UserError(hub_unreachable(what, why, local))
    logger.warning(
        f"{what}: the Hugging Face Hub could not be reached ({why}); loading the cached copy after the Hub client's "
        "retries. Set HF_HUB_OFFLINE=1 to use the cache without waiting on the network."
    )
