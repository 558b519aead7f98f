"""Helpers shared by the tests (importable as ``helpers``)."""

from __future__ import annotations

import contextlib
import os
import sys

#: Small, fast, CPU-only training settings (any GRPO-family config): 2 groups of 4 per step, 2 steps.
TINY_SETTINGS = dict(
    per_device_train_batch_size=8,
    num_generations=4,
    max_completion_length=4,
    max_steps=2,
    learning_rate=1e-2,
    logging_steps=1,
    report_to="none",
    use_cpu=True,
    bf16=False,
    save_strategy="no",
    disable_tqdm=True,
    seed=0,
)


def tiny_args(config_class_or_preset, tmp_path, **overrides):
    """``TINY_SETTINGS`` for any preset (name or config class)."""
    from trl_ext import get_preset

    settings = dict(output_dir=str(tmp_path / "out"), **TINY_SETTINGS)
    settings.update(overrides)
    name = config_class_or_preset if isinstance(config_class_or_preset, str) else config_class_or_preset.__name__
    if name.lower().startswith("dapo"):
        # DAPOConfig's paper default is 16 minibatches per rollout; the tests keep one rollout per optimizer step
        # (8 completions) unless they ask for more, so that a step stays fast and the hand-computed losses hold.
        settings.setdefault("num_minibatches", 1)
    if isinstance(config_class_or_preset, str):
        return get_preset(config_class_or_preset, **settings)
    return config_class_or_preset(**settings)


@contextlib.contextmanager
def torchrun_script():
    """The body of a test script run under ``torchrun``. On success every rank meets, the process group is destroyed
    and the process leaves without the interpreter's teardown: there, under CI's load, a rank exiting while its peer
    still tears down was seen to abort ("terminate called without an active exception", SIGABRT) after its work was
    done and written. On an exception (a ``SystemExit`` included) the group is destroyed and the exception goes on."""
    import torch.distributed as dist

    try:
        yield
    except BaseException:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        raise
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
