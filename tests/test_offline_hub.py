"""Offline, a Hub dataset or model that is not cached stops with one line naming the field, the name and the fix
(a local copy, or the cache with HF_HUB_OFFLINE=1), instead of a raw ConnectionError / OSError traceback. The names
are made up, so that no cached copy can exist; ``HF_HUB_OFFLINE=1`` fails at once, as a machine without network does
after the Hub client's retries (about 30 s)."""

from __future__ import annotations

import subprocess
import sys

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
