"""Issue 23: preemption, kills and full disks lose no step of work and no line of the record.

The subprocess tests run ``tests/resume_script.py`` (tiny DAPO on the demo task, 10 steps, checkpoints every 3, at
most 2 kept, ``metrics.jsonl`` written as the recipes write it): the process kills itself (SIGKILL) at a chosen moment
or sends itself SIGTERM mid-step, then a second run resumes with ``resume_from_checkpoint=True``. Each resumed run must
log every step exactly once in ``metrics.jsonl`` with the uninterrupted run's values and end with its weights.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import signal
import subprocess
from types import SimpleNamespace

import pytest
from test_resume import _assert_same_continuation, _finish, _in_process, _launch

from trl_ext.reliability import checkpoints
from trl_ext.reliability.checkpoints import (
    MARKER_FILE,
    STAGING_DIR,
    CheckpointSaveError,
    last_complete_checkpoint,
    list_checkpoints,
    recover_interrupted_publish,
    save_failure_cause,
)
from trl_ext.reliability.preemption import PREEMPTED_EXIT_CODE, PREEMPTED_FILE, parse_signals

#: Run once in CI, on the newest TRL (.ci/run): signals, staging and the record: trl_ext's and transformers' code
#: (exact resume on both TRL ends: test_resume.py).
pytestmark = pytest.mark.once

LIMIT = ("--save-total-limit", "2")  # rotation happens in every run (checkpoint-3 deleted at 9)
UNTIMED = ("time", "runtime", "per_second")


def _rows(out) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _untimed(row: dict) -> dict:
    return {k: v for k, v in row.items() if not any(u in k for u in UNTIMED)}


def _assert_record_and_weights(full_dir, resumed_dir, full: dict, resumed: dict) -> None:
    """metrics.jsonl: steps 1-10 once each, equal to the uninterrupted run's; the same log history after the resume
    and the same final weights."""
    got = [r for r in _rows(resumed_dir) if "loss" in r]
    expected = [r for r in _rows(full_dir) if "loss" in r]
    assert [r["step"] for r in got] == list(range(1, 11)), [r["step"] for r in got]
    assert [_untimed(r) for r in got] == [_untimed(r) for r in expected]
    step = int(os.path.basename(resumed["resumed_from"]).split("-")[1])
    _assert_same_continuation(full, resumed, full_dir, resumed_dir, resumed_step=step)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    return out, _finish(_launch("dapo", out, *LIMIT), out)


# -- fast -----------------------------------------------------------------------------------------------------------


def test_signal_names_are_checked():
    assert parse_signals(["SIGTERM", "usr1", "SIGTERM"]) == [signal.SIGTERM, signal.SIGUSR1]
    assert parse_signals("TERM,SIGUSR2") == [signal.SIGTERM, signal.SIGUSR2]
    assert parse_signals([]) == parse_signals(["none"]) == parse_signals(None) == []
    with pytest.raises(ValueError, match="unknown signal 'SIGTREM'.*SIGTERM"):
        parse_signals(["SIGTREM"])
    with pytest.raises(ValueError, match="'SIGKILL' cannot be caught"):
        parse_signals(["SIGKILL"])


def test_the_config_rejects_a_bad_signal_name(tmp_path):
    from trl_ext import get_preset

    settings = dict(output_dir=str(tmp_path), use_cpu=True, report_to="none", per_device_train_batch_size=16)
    assert get_preset("dapo", **settings).preemption_signals == ["SIGTERM", "SIGUSR1"]
    with pytest.raises(ValueError, match="preemption_signals: unknown signal 'SIGNOPE'"):
        get_preset("dapo", **settings, preemption_signals=["SIGNOPE"])


def _checkpoint(folder, step: int, marker: bool = True):
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_text(str(step))
    if marker:
        (folder / MARKER_FILE).write_text(json.dumps({"global_step": step}))
    return folder


def test_recovery_after_a_kill_during_same_step_replacement(tmp_path):
    """Killed between setting the old checkpoint-6 aside and renaming the new one into place: the new (complete)
    copy is restored; without it, the old one; an incomplete staged copy is never published."""
    out, staging = tmp_path / "run", tmp_path / "run" / STAGING_DIR
    _checkpoint(out / "checkpoint-3", 3)
    _checkpoint(staging / "replaced-checkpoint-6", 6).joinpath("model.safetensors").write_text("old")
    _checkpoint(staging / "checkpoint-6", 6).joinpath("model.safetensors").write_text("new")
    _checkpoint(staging / "replaced-checkpoint-9", 9).joinpath("model.safetensors").write_text("old")
    _checkpoint(staging / "checkpoint-9", 9, marker=False)  # killed while staging it: only the old copy is whole
    assert last_complete_checkpoint(str(out)) == str(out / "checkpoint-3")
    assert sorted(recover_interrupted_publish(str(out))) == [str(out / "checkpoint-6"), str(out / "checkpoint-9")]
    assert (out / "checkpoint-6" / "model.safetensors").read_text() == "new"
    assert (out / "checkpoint-9" / "model.safetensors").read_text() == "old"
    assert recover_interrupted_publish(str(out)) == []  # nothing left to restore


@pytest.mark.parametrize("code", [errno.EACCES, errno.EIO])
def test_a_failed_save_names_the_cause_free_space_and_last_checkpoint(tmp_path, code):
    out = tmp_path / "run"
    trainer = _in_process("dapo", out)
    original = trainer._save_rng_state

    def failing(output_dir):
        if trainer.state.global_step == 6:
            raise OSError(code, os.strerror(code), os.path.join(output_dir, "rng_state.pth"))
        original(output_dir)

    trainer._save_rng_state = failing
    with pytest.raises(CheckpointSaveError) as raised:
        trainer.train()
    message = str(raised.value)
    assert os.strerror(code) in message and "Could not write checkpoint-6" in message
    assert "free on the filesystem of" in message
    assert f"The last complete checkpoint, {out / 'checkpoint-3'}, is intact" in message
    assert not (out / STAGING_DIR).exists() and not (out / "checkpoint-6").exists()
    assert isinstance(raised.value.__cause__, OSError)


TORCH_FULL_DISK = "[enforce fail at inline_container.cc:672] . unexpected pos 1012992 vs 1012880"


def test_torch_writer_failure_is_a_full_disk_when_a_checkpoint_no_longer_fits():
    """torch.save reports a full disk without errno; 1.4 MiB left (above the 1 MiB margin) cannot hold a 7.0 MiB
    checkpoint, 20 MiB can (then torch's own message stays), and another RuntimeError is never taken for it."""
    mib = 1 << 20
    torch_error = RuntimeError(TORCH_FULL_DISK)
    cause, fix = save_failure_cause(torch_error, int(1.4 * mib), int(1.4 * mib), 7 * mib)
    assert cause == os.strerror(errno.ENOSPC)
    assert fix.startswith("free space there (a checkpoint of this run takes about 7.0 MiB; or lower save_total_limit")
    assert save_failure_cause(torch_error, 20 * mib, 20 * mib, 7 * mib)[0] == f"RuntimeError: {TORCH_FULL_DISK}"
    other = RuntimeError("CUDA error: an illegal memory access was encountered")
    assert save_failure_cause(other, int(1.4 * mib), int(1.4 * mib), 7 * mib)[0].startswith("RuntimeError: CUDA")
    writer = RuntimeError("[enforce fail at inline_container.cc:445] . PytorchStreamWriter failed writing file data/3")
    wrapped = RuntimeError("saving the optimizer failed")
    wrapped.__cause__ = writer
    assert save_failure_cause(wrapped, int(1.4 * mib), int(1.4 * mib), 7 * mib)[0] == os.strerror(errno.ENOSPC)


@pytest.mark.parametrize("room", ["short", "plenty"])
def test_torch_writer_failure_in_a_trainer_names_the_full_disk(tmp_path, monkeypatch, room):
    """checkpoint-6's torch.save fails as on a full disk; the filesystem then reports half a checkpoint free (the
    1 MiB margin switched off, so only the size rule can tell) or plenty (a writer failure that is not the disk)."""
    out = tmp_path / "run"
    trainer = _in_process("dapo", out)
    original = trainer._save_rng_state
    monkeypatch.setattr(checkpoints, "LOW_SPACE_BYTES", 0)

    def failing(output_dir):
        if trainer.state.global_step != 6:
            return original(output_dir)
        needed = checkpoints.checkpoint_bytes_needed(str(out))
        free = needed // 2 if room == "short" else 100 * needed
        monkeypatch.setattr(checkpoints.shutil, "disk_usage", lambda path: SimpleNamespace(free=free))
        raise RuntimeError(TORCH_FULL_DISK)

    trainer._save_rng_state = failing
    with pytest.raises(CheckpointSaveError) as raised:
        trainer.train()
    message = str(raised.value)
    assert f"The last complete checkpoint, {out / 'checkpoint-3'}, is intact" in message
    if room == "short":
        assert "Could not write checkpoint-6: No space left on device." in message, message
        assert "a checkpoint of this run takes about" in message and TORCH_FULL_DISK not in message
    else:
        assert f"Could not write checkpoint-6: RuntimeError: {TORCH_FULL_DISK}." in message, message


# -- slow: subprocesses --------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["log:7", "save:9", "marker:9", "rotate:9"])
def test_sigkill_then_resume_logs_each_step_once_and_matches(tmp_path, uninterrupted, moment):
    """SIGKILL right after step 7's metrics row (between checkpoints), half-way through writing checkpoint-9, after
    checkpoint-9 is staged complete but before it is renamed into place, and half-way through the rotation's deletion
    of checkpoint-3: the newest complete checkpoint is used, nothing half-written is, and the resumed run's record
    and weights are the uninterrupted run's."""
    full_dir, full = uninterrupted
    out = tmp_path / "run"
    killed = _launch("dapo", out, *LIMIT, "--kill-at", moment)
    assert killed.wait(timeout=240) == -signal.SIGKILL, open(f"{out}.log").read()[-3000:]
    assert all(ok for _, _, ok in list_checkpoints(str(out)))  # every visible checkpoint-N is complete
    expected_from = {"log:7": 6, "save:9": 6, "marker:9": 9, "rotate:9": 9}[moment]
    if moment == "rotate:9":
        assert last_complete_checkpoint(str(out)) == str(out / "checkpoint-9")
        assert not (out / "checkpoint-3").exists()  # half-deleted, but under the staging folder
        assert (out / STAGING_DIR / "deleting-checkpoint-3").exists()
    if moment == "marker:9":
        assert (out / STAGING_DIR / "checkpoint-9" / MARKER_FILE).exists() and not (out / "checkpoint-9").exists()
    resumed = _finish(_launch("dapo", out, *LIMIT, "--resume"), out)
    assert resumed["resumed_from"] == str(out / f"checkpoint-{expected_from}")
    assert not (out / STAGING_DIR).exists()
    _assert_record_and_weights(full_dir, out, full, resumed)
    if moment == "log:7":
        aside = [json.loads(line)["step"] for line in open(out / "metrics.jsonl.after-checkpoint-6")]
        assert aside == [7]


@pytest.mark.slow
def test_sigkill_while_replacing_a_checkpoint_of_the_same_step(tmp_path, uninterrupted):
    """A run resumed from checkpoint-3 while checkpoint-6 exists re-saves checkpoint-6; SIGKILL between setting the old
    copy aside and renaming the new one into place. The next start restores the new copy and resumes from it."""
    full_dir, full = uninterrupted
    out = tmp_path / "run"
    first = _launch("dapo", out, *LIMIT, "--kill-at", "log:7")
    assert first.wait(timeout=240) == -signal.SIGKILL
    assert last_complete_checkpoint(str(out)) == str(out / "checkpoint-6")
    again = _launch("dapo", out, *LIMIT, "--resume-from", str(out / "checkpoint-3"), "--kill-at", "replace:6")
    assert again.wait(timeout=240) == -signal.SIGKILL, open(f"{out}.log").read()[-3000:]
    assert not (out / "checkpoint-6").exists()
    assert (out / STAGING_DIR / "replaced-checkpoint-6").exists() and (out / STAGING_DIR / "checkpoint-6").exists()
    resumed = _finish(_launch("dapo", out, *LIMIT, "--resume"), out)
    assert resumed["resumed_from"] == str(out / "checkpoint-6")
    _assert_record_and_weights(full_dir, out, full, resumed)


@pytest.mark.slow
def test_sigterm_checkpoints_the_current_step_and_exits_75(tmp_path, uninterrupted):
    full_dir, full = uninterrupted
    out = tmp_path / "run"
    stopped = _launch("dapo", out, *LIMIT, "--signal-at", "7")  # SIGTERM while step 8 runs
    assert stopped.wait(timeout=240) == PREEMPTED_EXIT_CODE, open(f"{out}.log").read()[-3000:]
    log = open(f"{out}.log").read()
    assert f"Preempted (SIGTERM) at step 8: {out / 'checkpoint-8'} is written and complete" in log
    assert last_complete_checkpoint(str(out)) == str(out / "checkpoint-8")
    assert json.loads((out / PREEMPTED_FILE).read_text())["step"] == 8
    assert [r["step"] for r in _rows(out) if "loss" in r] == list(range(1, 9))
    resumed = _finish(_launch("dapo", out, *LIMIT, "--resume"), out)
    assert resumed["resumed_from"] == str(out / "checkpoint-8")
    assert not (out / PREEMPTED_FILE).exists()  # the resumed segment removed the previous stop's note
    _assert_record_and_weights(full_dir, out, full, resumed)


@pytest.mark.slow
def test_a_second_sigterm_stops_at_once(tmp_path):
    out = tmp_path / "run"
    stopped = _launch("dapo", out, *LIMIT, "--signal-at", "7", "--signal-twice")
    assert stopped.wait(timeout=240) == -signal.SIGTERM, open(f"{out}.log").read()[-3000:]
    assert "second signal (SIGTERM): stopping now" in open(f"{out}.log").read()
    assert last_complete_checkpoint(str(out)) == str(out / "checkpoint-6")  # no checkpoint-8
    assert not (out / PREEMPTED_FILE).exists()


@pytest.mark.slow
def test_sigterm_on_one_of_two_processes_stops_both_at_the_same_step(tmp_path):
    """torchrun --nproc_per_node 2 (gloo): only rank 1 receives SIGTERM, during step 8. Both ranks agree (all-reduce
    at step end), write checkpoint-8 together (both RNG states) and exit 75; resuming on 2 processes gives the
    uninterrupted 2-process run's logs and weights."""
    full_dir, out = tmp_path / "full", tmp_path / "run"
    full = _finish(_launch("dapo", full_dir, *LIMIT, processes=2), full_dir)
    assert full["num_processes"] == 2
    stopped = _launch("dapo", out, *LIMIT, "--signal-at", "7", "--signal-rank", "1", processes=2)
    assert stopped.wait(timeout=240) != 0  # torchrun itself exits 1 when its workers exit 75
    log = open(f"{out}.log").read()
    for rank in (0, 1):
        assert json.loads((out / f"preempted-rank{rank}.json").read_text())["step"] == 8, log[-3000:]
    assert "a preemption signal on another process" in (out / "preempted-rank0.json").read_text()
    assert last_complete_checkpoint(str(out)) == str(out / "checkpoint-8")
    assert {"rng_state_0.pth", "rng_state_1.pth", MARKER_FILE} <= set(os.listdir(out / "checkpoint-8"))
    resumed = _finish(_launch("dapo", out, *LIMIT, "--resume", processes=2), out)
    assert resumed["resumed_from"] == str(out / "checkpoint-8") and resumed["num_processes"] == 2
    _assert_record_and_weights(full_dir, out, full, resumed)


# -- slow: a full disk ---------------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (root only); skipped with the reason when it cannot be mounted."""
    disk = tmp_path / "disk"
    disk.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {result.stderr.decode().strip()}")
    yield disk
    gc.collect()  # a failed torch.save's frames (held by the caught error) keep a file open on the disk
    subprocess.run(["umount", "-l", str(disk)], check=False)  # lazy: detached even if something still holds it


@pytest.mark.slow
def test_disk_full_save_says_so_and_keeps_the_last_checkpoint(small_disk):
    """The disk fills while checkpoint-6's optimizer.pt is written (torch reports it as 'unexpected pos', no errno):
    the error says 'No space left on device', the free space and the last complete checkpoint; the staging folder is
    gone; after freeing space the run resumes from checkpoint-3 to the end."""
    from transformers import TrainerCallback

    out, filler = small_disk / "run", small_disk / "filler"

    class FillDisk(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step != 3:
                return
            sizes = {f: os.path.getsize(out / "checkpoint-3" / f) for f in ("model.safetensors", "optimizer.pt")}
            room = sizes["model.safetensors"] + sizes["optimizer.pt"] // 2  # the weights fit, the optimizer not
            free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
            filler.write_bytes(b"\0" * max(free - room, 0))

    trainer = _in_process("dapo", out, FillDisk())
    with pytest.raises(CheckpointSaveError) as raised:
        trainer.train()
    message = str(raised.value)
    assert "Could not write checkpoint-6: No space left on device." in message, message
    assert "free on the filesystem of" in message
    assert f"The last complete checkpoint, {out / 'checkpoint-3'}, is intact" in message
    assert not (out / STAGING_DIR).exists()
    assert last_complete_checkpoint(str(out)) == str(out / "checkpoint-3")
    del raised, trainer

    filler.unlink()
    resumed = _in_process("dapo", out)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 10
