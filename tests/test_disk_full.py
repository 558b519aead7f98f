"""A checkpoint that torch cannot finish writing because of the filesystem, on real limits (no mock): torch reports it
without an errno ('unexpected pos', 'failed writing file'), and the run's last error still names the cause, the
folder, the bytes a checkpoint needs and the intact previous checkpoint, which then resumes exactly."""

from __future__ import annotations

import errno
import os
import resource

import pytest
from test_preemption import small_disk  # noqa: F401  (fixture: a 2 MiB tmpfs, root only)
from test_resume import _assert_same_continuation, _in_process, _save_final
from transformers import TrainerCallback

from trl_ext.reliability import checkpoints
from trl_ext.reliability.checkpoints import (
    CheckpointSaveError,
    checkpoint_bytes_needed,
    is_torch_write_failure,
    last_complete_checkpoint,
    space_errno,
)


class FillDiskAfter(TrainerCallback):
    """Once checkpoint-3 is written, fills the disk so that the next checkpoint's weights fit and its optimizer.pt
    does not: the disk fills while torch writes optimizer.pt."""

    def __init__(self, out, filler):
        self.out, self.filler = out, filler

    def on_save(self, args, state, control, **kwargs):
        if state.global_step != 3:
            return
        sizes = {f: os.path.getsize(self.out / "checkpoint-3" / f) for f in ("model.safetensors", "optimizer.pt")}
        room = sizes["model.safetensors"] + sizes["optimizer.pt"] // 2
        stat = os.statvfs(self.out)
        self.filler.write_bytes(b"\0" * max(stat.f_bavail * stat.f_frsize - room, 0))


@pytest.mark.slow
def test_full_disk_in_optimizer_pt_is_named_and_the_previous_checkpoint_resumes_exactly(small_disk, tmp_path):  # noqa: F811
    full = _in_process("dapo", tmp_path / "full")
    full.train()
    full_result = _save_final(full, tmp_path / "full")

    out, filler = small_disk / "run", small_disk / "filler"
    with pytest.raises(CheckpointSaveError) as raised:
        _in_process("dapo", out, FillDiskAfter(out, filler)).train()
    message = str(raised.value)
    assert is_torch_write_failure(raised.value.__cause__)  # torch's own report carries no errno
    assert message.startswith("Could not write checkpoint-6: No space left on device."), message
    assert f"free on the filesystem of {out}" in message  # the folder
    needed = os.path.getsize(out / "checkpoint-3" / "model.safetensors")  # at least the weights, in bytes
    assert "a checkpoint of this run takes about" in message and "more than is free" in message
    assert int(message.split(" bytes are needed")[0].rsplit(" ", 1)[1]) > needed
    assert f"The last complete checkpoint, {out / 'checkpoint-3'}, is intact" in message
    assert last_complete_checkpoint(str(out)) == str(out / "checkpoint-3") and not (out / ".incomplete").exists()
    del raised

    filler.unlink()  # space freed: the run resumes from checkpoint-3 and ends as the uninterrupted run did
    resumed = _in_process("dapo", out)
    resumed.train(resume_from_checkpoint=True)
    resumed_result = _save_final(resumed, out)
    _assert_same_continuation(full_result, resumed_result, tmp_path / "full", out, resumed_step=3)


def test_a_file_size_limit_is_named_by_the_filesystem(tmp_path):
    """RLIMIT_FSIZE (``ulimit -f``) between the weights' file and the optimizer's: torch's writer fails on
    optimizer.pt with no errno and plenty of free space; the space probe gets the filesystem's EFBIG. Before the first
    checkpoint a checkpoint's size is the weights plus the optimizer state (AdamW: two tensors per parameter and a
    4-byte step count)."""
    out = tmp_path / "run"
    trainer = _in_process("dapo", out)
    params = list(trainer.model.parameters())
    weights = sum(p.numel() * p.element_size() for p in params)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(weights * 1.5), hard))
    try:
        assert space_errno(str(tmp_path), weights * 2) == errno.EFBIG and space_errno(str(tmp_path), weights) is None
        with pytest.raises(CheckpointSaveError) as raised:
            trainer.train()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert checkpoint_bytes_needed(str(out), trainer.model, trainer.optimizer) == 3 * weights + 4 * len(params)
    message = str(raised.value)
    assert is_torch_write_failure(raised.value.__cause__) and checkpoints._errno_of(raised.value.__cause__) is None
    assert message.startswith("Could not write checkpoint-3: File too large."), message
    assert "raise the file-size limit (ulimit -f)" in message and "No complete checkpoint exists yet" in message
