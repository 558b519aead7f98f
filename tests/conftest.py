"""Shared fixtures: tiny models and data built in-process (no network, ever)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def _share_the_cores_between_workers() -> None:
    """Under pytest-xdist (the README's ``-n auto``) each worker gives torch its share of the cores, so that N workers
    do not each start one thread per core (N times oversubscribed). One process: torch's default, untouched."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


_share_the_cores_between_workers()


@pytest.fixture(scope="session")
def tokenizer():
    from trl_ext.demo import build_tokenizer

    return build_tokenizer()


@pytest.fixture
def tiny_model(tokenizer):
    from trl_ext.demo import DemoModelConfig, build_model

    return build_model(
        tokenizer,
        DemoModelConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
        ),
    )


@pytest.fixture(scope="session")
def problems():
    from trl_ext.demo import DemoTaskConfig, make_problems

    return make_problems(DemoTaskConfig(max_operand=9, num_train=60, num_eval=20))
