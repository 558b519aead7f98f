"""The demo's warm-start cache: one folder per user (``~/.cache/trl-ext``, moved by ``TRL_EXT_CACHE`` or
``XDG_CACHE_HOME``), keyed on what changes the weights (settings, the code that builds and trains it, torch /
transformers / TRL) and on nothing else (not accelerate or datasets, not the thread count); each entry records its
key, machine, releases and final loss, and is published whole."""

from __future__ import annotations

import os
from pathlib import Path

import accelerate
import datasets
import torch
import transformers
import trl

from trl_ext import demo


def test_the_cache_is_the_user_s_folder_whatever_the_current_one(tmp_path, monkeypatch):
    monkeypatch.delenv(demo.CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    expected = tmp_path / "home" / ".cache" / "trl-ext" / "demo-warm-start"
    assert Path(demo.warm_start_dir()).parent == expected
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert Path(demo.warm_start_dir()).parent == tmp_path / "xdg" / "trl-ext" / "demo-warm-start"
    monkeypatch.setenv(demo.CACHE_ENV, str(tmp_path / "mine"))
    assert Path(demo.warm_start_dir()).parent == tmp_path / "mine" / "demo-warm-start"


def test_the_key_changes_with_what_changes_the_weights_and_nothing_else(monkeypatch):
    key = demo.warm_start_key()
    assert key["versions"] == {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
    }
    base = demo.warm_start_dir("cache")
    assert demo.warm_start_dir("cache", sft=demo.WarmStartConfig(seed=1)) != base  # the SFT seed
    assert demo.warm_start_dir("cache", sft=demo.WarmStartConfig(max_steps=5)) != base  # the settings
    assert demo.warm_start_dir("cache", model_config=demo.DemoModelConfig(hidden_size=64)) != base
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads != 1 else 2)
        assert demo.warm_start_dir("cache") == base  # the SFT runs on one thread whatever the process has
    finally:
        torch.set_num_threads(threads)
    monkeypatch.setattr(accelerate, "__version__", "0.0.0")
    monkeypatch.setattr(datasets, "__version__", "0.0.0")
    assert demo.warm_start_dir("cache") == base  # neither changes the weights
    monkeypatch.setattr(trl, "__version__", "0.0.0")  # TRL 1.12 and 1.16 train different weights
    assert demo.warm_start_dir("cache") != base
    assert demo.warm_start_dir("cache").endswith(
        demo.key_hash({**key, "versions": {**key["versions"], "trl": "0.0.0"}})
    )


def test_warm_start_records_its_key_machine_and_loss_and_is_reused(tmp_path):
    path = demo.warm_start(str(tmp_path), sft=demo.WarmStartConfig(max_steps=2, seed=3))
    record = demo.warm_start_record(path)
    assert Path(path).name == record["key_hash"] == demo.key_hash(record["key"])
    assert record["key"]["sft"]["seed"] == 3 and "CPUs" in record["machine"]
    assert record["releases"]["accelerate"] == accelerate.__version__
    assert isinstance(record["final_loss"], float)
    assert sorted(os.listdir(tmp_path)) == [Path(path).name]  # published whole: no partial folder left
    stamp = os.path.getmtime(os.path.join(path, "warm_start.json"))
    assert demo.warm_start(str(tmp_path), sft=demo.WarmStartConfig(max_steps=2, seed=3)) == path
    assert os.path.getmtime(os.path.join(path, "warm_start.json")) == stamp  # cached: not trained again
    other = demo.warm_start(str(tmp_path), sft=demo.WarmStartConfig(max_steps=2, seed=4))
    assert other != path  # another SFT seed: another cache folder, trained anew
