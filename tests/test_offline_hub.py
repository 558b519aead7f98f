"""Offline, a Hub dataset or model that is not cached stops with one line naming the field, the name and the fix
(a local copy, or the cache with HF_HUB_OFFLINE=1), instead of a raw ConnectionError / OSError traceback. The names
are made up, so that no cached copy can exist; ``HF_HUB_OFFLINE=1`` fails at once, as a machine without network does
after the Hub client's retries (about 30 s)."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading

import pytest

SCRIPT = """
from trl_ext.data.loading import load_data
from trl_ext.errors import UserError
from trl_ext.recipe.models import load_policy
for load, name in ((load_data, "trl-ext-tests/no-such-dataset"), (load_policy, "trl-ext-tests/no-such-model")):
    try:
        load(name)
    except UserError as error:
        print(error)
"""


@pytest.mark.slow
def test_an_uncached_hub_name_offline_is_one_clear_line(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    dataset, model = result.stdout.strip().splitlines()  # one line each
    for line, field, name in (
        (dataset, "dataset_name", "no-such-dataset"),
        (model, "model_name_or_path", "no-such-model"),
    ):
        assert line.startswith(f"{field}='trl-ext-tests/{name}': the Hugging Face Hub could not be reached"), line
        assert "HF_HUB_OFFLINE=1" in line and "Give a local copy" in line
    assert ".jsonl" in dataset and "save_pretrained folder" in model


TIMED = """
import time
from trl_ext.data.loading import load_data
from trl_ext.errors import UserError
from trl_ext.recipe.models import load_policy
for load, name in ((load_data, "trl-ext-tests/no-such-dataset"), (load_policy, "trl-ext-tests/no-such-model")):
    started = time.monotonic()
    try:
        load(name)
    except UserError as error:
        print(f"{time.monotonic() - started:.2f}", error)
"""


def _closed_port() -> int:
    """A local port nothing listens on: a connection to it is refused, as on a machine without network."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_no_network_answers_within_seconds_without_retries(tmp_path):
    """No network and no ``HF_HUB_OFFLINE``: the Hub client alone retries each file with back-off (12 "Retrying in
    8s" lines, 40-56 s) before failing. One probe of the endpoint, once per process, answers instead: the same line,
    within 5 s of asking (timed in the process, import excluded), and no retry at all."""
    env = {"HF_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}"}
    result = subprocess.run([sys.executable, "-c", TIMED], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Retrying" not in result.stderr and "Retry" not in result.stdout, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2, result.stdout
    for line, field in zip(lines, ("dataset_name", "model_name_or_path"), strict=True):
        seconds, message = line.split(" ", 1)
        assert float(seconds) < 5.0, line
        assert message.startswith(f"{field}='trl-ext-tests/"), message
        assert "the Hugging Face Hub could not be reached" in message and "HF_HUB_OFFLINE=1" in message
    assert float(lines[1].split()[0]) < 0.5  # the second name reuses the first probe's answer


def test_probe_counts_any_http_answer_as_reachable_and_no_answer_as_not(monkeypatch):
    from trl_ext import hub

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802 - http.server's name
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        assert hub.probe(timeout=5) == (True, "")
    finally:
        thread.join(5)
        server.server_close()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    ok, why = hub.probe(timeout=5)
    assert not ok and why.startswith("HEAD http://127.0.0.1:") and "refused" in why.lower()


def test_the_answer_is_asked_once_and_passed_to_child_processes(monkeypatch, tmp_path):
    from trl_ext import hub
    from trl_ext.errors import UserError

    calls = []
    monkeypatch.setattr(hub, "probe", lambda: calls.append(1) or (False, "no route"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    hub.forget()
    try:
        for _ in range(3):
            with pytest.raises(UserError, match="could not be reached and no cached copy is here \\(no route\\)"):
                hub.check_hub_name("model_name_or_path='a/b'", "a/b", "model", "a save_pretrained folder")
        assert calls == [1] and os.environ[hub.REACHABLE_ENV] == "0"  # what a child process inherits
        (tmp_path / "hub" / "models--a--b").mkdir(parents=True)  # cached: the load goes ahead, with the hint
        hub.check_hub_name("model_name_or_path='a/b'", "a/b", "model", "a save_pretrained folder")
    finally:
        hub.forget()
