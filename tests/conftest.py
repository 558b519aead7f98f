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


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Under ``-q`` pytest counts skips without their reasons (``-rs`` shows them): print each distinct reason once,
    so that a hint such as PPO's "run its tests in the PPO venv of README 'Set up'" is seen where it applies."""
    if "s" in config.option.reportchars or "a" in config.option.reportchars or "A" in config.option.reportchars:
        return  # pytest's own short summary lists them
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")
            reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in reasons.items():
        terminalreporter.write_line(f"skipped ({count}): {reason}")
