"""The demo's warm-start cache key names everything that changes the weights (code, versions, threads, settings, SFT
seed), and each cached warm start records its key, machine and final loss."""

from __future__ import annotations

from pathlib import Path

import torch

from trl_ext import demo


def test_warm_start_key_names_code_versions_threads_settings_and_seed(monkeypatch):
    import transformers
    import trl

    key = demo.warm_start_key()
    assert key["versions"]["trl"] == trl.__version__ and key["versions"]["torch"] == torch.__version__
    assert key["versions"]["transformers"] == transformers.__version__
    assert key["sft"]["seed"] == 0 and key["torch_threads"] == torch.get_num_threads()
    assert len(key["code"]) == 12
    base = demo.warm_start_dir("cache")
    assert demo.warm_start_dir("cache", sft=demo.WarmStartConfig(seed=1)) != base  # the SFT seed
    assert demo.warm_start_dir("cache", sft=demo.WarmStartConfig(max_steps=5)) != base  # the settings
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads != 1 else 2)
        assert demo.warm_start_dir("cache") != base  # 1 and 2 threads train different warm starts
    finally:
        torch.set_num_threads(threads)
    monkeypatch.setattr(trl, "__version__", "0.0.0")
    assert demo.warm_start_dir("cache") != base  # another TRL release
    assert demo.warm_start_dir("cache").endswith(
        demo.key_hash({**key, "versions": {**key["versions"], "trl": "0.0.0"}})
    )


def test_warm_start_records_its_key_machine_and_loss(tmp_path):
    path = demo.warm_start(str(tmp_path), sft=demo.WarmStartConfig(max_steps=2, seed=3))
    record = demo.warm_start_record(path)
    assert Path(path).name == record["key_hash"] == demo.key_hash(record["key"])
    assert record["key"]["sft"]["seed"] == 3 and "CPUs" in record["machine"]
    assert isinstance(record["final_loss"], float)
    other = demo.warm_start(str(tmp_path), sft=demo.WarmStartConfig(max_steps=2, seed=4))
    assert other != path  # another SFT seed: another cache folder, trained anew
