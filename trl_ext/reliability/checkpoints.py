"""Checkpoints that are complete or absent, and resumes that refuse another run's checkpoints (docs/PREEMPTION.md).

transformers' ``get_last_checkpoint`` returns the highest ``checkpoint-N`` whatever it holds, so a kill while saving
leaves a half-written checkpoint that ``resume_from_checkpoint=True`` picks up. The functions here stage each save,
rotation and same-step replacement in ``output_dir/.incomplete/`` and rename a checkpoint into place only once it is
complete (marker ``trl_ext_checkpoint.json``); ``resolve_resume`` picks the newest complete checkpoint. The class that
uses them is ``trl_ext.reliability.reliable.Reliable``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
from typing import Any

import torch
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, sort_checkpoints

logger = logging.getLogger(__name__)

STAGING_DIR = ".incomplete"
MARKER_FILE = "trl_ext_checkpoint.json"
RUN_FILE = "trl_ext_run.json"
COUNTERS_FILE = "trl_ext_counters.json"
REPLACED_PREFIX = "replaced-"  # the older copy of a checkpoint being replaced, in the staging area
DELETING_PREFIX = "deleting-"  # a checkpoint being deleted by the rotation, in the staging area
LOW_SPACE_BYTES = 1 << 20  # under this much free space, an error without errno while writing is a full disk
_TORCH_WRITE_FAILURE = re.compile(r"unexpected pos \d+ vs \d+|PytorchStreamWriter failed writing")
_CHECKPOINT_RE = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")


def is_complete_checkpoint(path: str) -> bool:
    """trl-ext's marker, or (a plain Trainer's checkpoint) ``trainer_state.json``, which the Trainer writes last."""
    return os.path.isfile(os.path.join(path, MARKER_FILE)) or os.path.isfile(os.path.join(path, TRAINER_STATE_NAME))


def list_checkpoints(output_dir: str) -> list[tuple[int, str, bool]]:
    """``(step, path, complete)`` of every ``checkpoint-N`` folder of ``output_dir``, by step."""
    paths = [p for p in sort_checkpoints(output_dir) if _CHECKPOINT_RE.match(os.path.basename(p))]
    return [(int(p.rsplit("-", 1)[1]), p, is_complete_checkpoint(p)) for p in paths]


def last_complete_checkpoint(output_dir: str) -> str | None:
    """The newest complete checkpoint of ``output_dir`` (the one ``resume_from_checkpoint=True`` resumes from)."""
    complete = [path for _, path, ok in list_checkpoints(output_dir) if ok]
    return complete[-1] if complete else None


def fsync_tree(folder: str) -> None:
    """Flush every file of ``folder`` to disk: a pre-empted VM loses its page cache, a killed process does not."""
    for root, _, files in os.walk(folder):
        for name in files:
            _fsync_path(os.path.join(root, name))
    _fsync_path(folder)


def _fsync_path(path: str) -> None:
    """fsync one file or directory, best effort (a failure is skipped): atomicity comes from the rename."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_if_empty(folder: str) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(folder)


def write_json_atomic(path: str, payload: Any) -> None:
    """Write JSON to ``path`` through a temporary file and ``os.replace``: readers see the old file or the new one."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def recover_interrupted_publish(output_dir: str) -> list[str]:
    """When a kill interrupted ``publish`` and ``checkpoint-N`` is missing, put back the staged
    new copy if complete, else ``replaced-checkpoint-N``. Main process only; returns the folders restored."""
    staging_parent = os.path.join(output_dir, STAGING_DIR)
    if not os.path.isdir(staging_parent):
        return []
    restored = []
    for name in sorted(os.listdir(staging_parent)):
        base = name.removeprefix(REPLACED_PREFIX)
        if not _CHECKPOINT_RE.match(base) or os.path.exists(os.path.join(output_dir, base)):
            continue
        new, old = os.path.join(staging_parent, base), os.path.join(staging_parent, REPLACED_PREFIX + base)
        source = new if os.path.isfile(os.path.join(new, MARKER_FILE)) else old
        if is_complete_checkpoint(source):
            os.rename(source, os.path.join(output_dir, base))
            restored.append(os.path.join(output_dir, base))
            logger.warning(f"Restored {base} from {source} (a run was stopped while it replaced that checkpoint).")
    return restored


class CheckpointSaveError(RuntimeError):
    """Writing a checkpoint failed; the message names the cause, the free space and the intact last checkpoint."""


def _chain(error: BaseException | None):
    """``error`` and the exceptions it was raised from (``__cause__`` / ``__context__``), each once."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _errno_of(error: BaseException | None) -> int | None:
    """The errno of ``error`` or of an exception it was raised from (an ``OSError`` deep in torch or safetensors)."""
    for cause in _chain(error):
        if isinstance(cause, OSError) and cause.errno:
            return cause.errno
        match = re.search(r"\bcode: (\d+)", str(cause))  # safetensors: IoError(Os { code: 28, kind: StorageFull })
        if match:
            return int(match.group(1))
    return None


def _free_bytes(path: str) -> int | None:
    """Free space (for this user) on the filesystem holding ``path`` or its nearest existing parent."""
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path or ".").free
    except OSError:
        return None


def _size(count: int | None) -> str:
    if count is None:
        return "unknown"
    if count < 1024:
        return f"{count} bytes"
    for unit in ("KiB", "MiB", "GiB"):
        count /= 1024
        if count < 1024 or unit == "GiB":
            return f"{count:.1f} {unit}"


def is_torch_write_failure(error: BaseException | None) -> bool:
    """Whether ``error``'s chain holds torch's zip writer failing: how ``torch.save`` reports a full disk, no errno."""
    return any(isinstance(e, RuntimeError) and _TORCH_WRITE_FAILURE.search(str(e)) for e in _chain(error))


def checkpoint_bytes_needed(run_dir: str, model: Any = None, optimizer: Any = None) -> int | None:
    """About one checkpoint's bytes on disk: the last complete one's, else the model weights plus optimizer state."""
    last = last_complete_checkpoint(run_dir)
    if last is not None:
        return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(last) for name in names)
    if model is None:
        return None
    weights = sum(getattr(p, "ds_numel", p.numel()) * p.element_size() for p in model.parameters())  # ZeRO-3: whole
    state = getattr(optimizer, "state", None) or {}
    tensors = [t for s in state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    return weights + sum(t.numel() * t.element_size() for t in tensors)


def space_errno(folder: str, nbytes: int) -> int | None:
    """The filesystem's answer to allocating ``nbytes`` in ``folder``: ``ENOSPC`` / ``EDQUOT`` / ``EFBIG``, or None."""
    path = os.path.join(folder, ".trl_ext_space_probe")
    if not hasattr(os, "posix_fallocate"):  # macOS: the free space alone decides
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    except OSError:
        return None
    try:
        os.posix_fallocate(fd, 0, max(nbytes, 1))
    except OSError as error:
        return error.errno if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) else None
    finally:
        os.close(fd)
        os.unlink(path)
    return None


def save_failure_cause(
    error: BaseException | None,
    free_before_cleanup: int | None,
    free_after_cleanup: int | None = None,
    bytes_needed: int | None = None,
    probed: int | None = None,
) -> tuple[str, str]:
    """``(cause, fix)`` for a checkpoint write error. Without an errno: a full disk under ``LOW_SPACE_BYTES`` free, or
    when torch's writer failed with under ``bytes_needed`` free after cleanup; else the space probe's errno."""
    code = _errno_of(error)
    low = free_before_cleanup is not None and free_before_cleanup < LOW_SPACE_BYTES
    too_small = free_after_cleanup is not None and bytes_needed is not None and free_after_cleanup < bytes_needed
    if code is None and (low or (too_small and is_torch_write_failure(error))):
        code = errno.ENOSPC
    code = probed if code is None else code
    if code in (errno.ENOSPC, errno.EDQUOT):
        room = f"a checkpoint of this run takes about {_size(bytes_needed)}; " if bytes_needed else ""
        fix = f"free space there ({room}or lower save_total_limit, or set save_only_model)"
        if bytes_needed:
            short = f", {_size(bytes_needed - free_after_cleanup)} more than is free" if too_small else ""
            fix += f": {bytes_needed} bytes are needed{short}"
        return os.strerror(code), fix
    if code == errno.EFBIG:
        return os.strerror(code), "raise the file-size limit (ulimit -f) of the process, or write elsewhere"
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return os.strerror(code), "make output_dir writable (or choose another output_dir)"
    if code is not None:
        return os.strerror(code), "check the disk or filesystem holding output_dir"
    if error is None:
        return "another process failed to write its part (its error says why)", "see that process's error"
    return f"{type(error).__name__}: {error}", "fix the cause"


def rows_digest(dataset: Any, count: int = 8) -> str | None:
    """A content hash of the first rows (the same on every process, unlike a processed ``Dataset``'s fingerprint)."""
    try:
        rows = [dataset[i] for i in range(min(count, len(dataset)))]
    except Exception:  # noqa: BLE001 - iterable datasets, exotic rows: no digest
        return None
    text = json.dumps(rows, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def identity_difference(checkpoint: str, identity: dict[str, Any] | None) -> list[str]:
    """``["seed: 0 (checkpoint) vs 1 (now)", ...]``: the fields of the run identity stored in ``checkpoint``
    (``trl_ext_run.json``; none in checkpoints of other trainers) that ``identity`` holds with another value."""
    path = os.path.join(checkpoint, RUN_FILE)
    if identity is None or not os.path.isfile(path):
        return []
    with open(path) as f:
        saved = json.load(f)
    return [
        f"{key}: {saved[key]!r} (checkpoint) vs {identity[key]!r} (now)"
        for key in sorted(set(saved) & set(identity))
        if saved[key] != identity[key]
    ]


def check_fresh_output_dir(output_dir: str, identity: dict[str, Any] | None = None) -> None:
    """Raise if a run that does not resume would start in an ``output_dir`` that holds complete checkpoints."""
    existing = [path for _, path, ok in list_checkpoints(output_dir) if ok]
    if not existing:
        return
    names = [os.path.basename(p) for p in existing]
    diff = identity_difference(existing[-1], identity)
    whose = f"another run ({'; '.join(diff)})" if diff else "an earlier run"
    raise ValueError(
        f"output_dir={output_dir!r} already holds checkpoints of {whose}: {names}; training from scratch would mix "
        "two runs. To continue that run, call train(resume_from_checkpoint=True) (recipes: --resume_from_checkpoint "
        "latest); to start a new run, use a new output_dir or delete those checkpoint folders."
    )


def resolve_resume(resume: str | bool | None, output_dir: str) -> str | None:
    """The checkpoint ``train(resume_from_checkpoint=resume)`` resumes from: the newest complete one for True; a
    given folder checked complete; None for no resume."""
    if resume is None or resume is False:
        return None
    if resume is True:
        checkpoints = list_checkpoints(output_dir)
        skipped = [path for _, path, ok in checkpoints if not ok]
        complete = [path for _, path, ok in checkpoints if ok]
        if skipped:
            logger.warning(f"Skipping incomplete checkpoint(s) {skipped} (stopped while being written).")
        if not complete:
            raise ValueError(
                f"resume_from_checkpoint=True, but output_dir={output_dir!r} holds no complete checkpoint "
                f"(found: {[os.path.basename(p) for _, p, _ in checkpoints] or 'none'}). Start the run without "
                "resume_from_checkpoint, or set output_dir to the folder of the run to resume."
            )
        return complete[-1]
    resume = str(resume)
    if not os.path.isdir(resume):
        raise FileNotFoundError(
            f"resume_from_checkpoint={resume!r}: no such directory. Give a checkpoint-N folder, or True for the "
            f"newest complete checkpoint of output_dir={output_dir!r}."
        )
    if not is_complete_checkpoint(resume):
        last = last_complete_checkpoint(os.path.dirname(os.path.abspath(resume)))
        incomplete = f"resume_from_checkpoint={resume!r} is incomplete (no {MARKER_FILE}: its save was cut)"
        raise ValueError(
            f"{incomplete}. Resume from {last!r} (the newest complete one), or pass resume_from_checkpoint=True."
            if last
            else f"{incomplete} and there is no complete checkpoint next to it. Start the run without "
            "resume_from_checkpoint."
        )
    return resume


def publish(staging: str, final: str) -> None:
    """Move the finished checkpoint into place, replacing an older folder of the same step (a run resumed from an
    earlier checkpoint); a kill in between leaves both in the staging area (``recover_interrupted_publish``)."""
    parent = os.path.dirname(final)
    replaced = None
    if os.path.exists(final):
        replaced = os.path.join(os.path.dirname(staging), REPLACED_PREFIX + os.path.basename(final))
        shutil.rmtree(replaced, ignore_errors=True)
        os.rename(final, replaced)  # set the old copy aside first
    os.rename(staging, final)  # the one atomic step: readers see no checkpoint-N or a complete one, never half
    _fsync_path(parent)  # the rename is durable only once the parent directory's entry reaches the disk
    if replaced is not None:
        shutil.rmtree(replaced, ignore_errors=True)
    remove_if_empty(os.path.dirname(staging))


def delete_checkpoint(checkpoint: str, trash_dir: str) -> None:
    """Delete ``checkpoint`` by renaming it into ``trash_dir`` first: it is whole or gone, never half-deleted."""
    trash = os.path.join(trash_dir, DELETING_PREFIX + os.path.basename(checkpoint))
    try:
        os.makedirs(trash_dir, exist_ok=True)
        shutil.rmtree(trash, ignore_errors=True)
        os.rename(checkpoint, trash)
        shutil.rmtree(trash)
    except OSError as error:
        logger.warning(f"save_total_limit: could not delete {checkpoint} ({error}); it stays.")


def save_failure_message(
    error: BaseException | None, staging: str, run_dir: str, step: int, model: Any, optimizer: Any, other: str | None
) -> str:
    """What a failed save of checkpoint-``step`` tells the user: the cause, the free space, the intact checkpoint."""
    free_before = _free_bytes(staging)
    free_after = _free_bytes(run_dir)
    needed = checkpoint_bytes_needed(run_dir, model, optimizer)
    probe = _errno_of(error) is None and is_torch_write_failure(error) and needed
    probed = space_errno(run_dir, needed) if probe else None  # torch's writer lost the errno: ask the disk
    cause, fix = save_failure_cause(error, free_before, free_after, needed, probed)
    last = last_complete_checkpoint(run_dir)
    kept = (
        f"The last complete checkpoint, {last}, is intact: {fix}, then resume from it with "
        "resume_from_checkpoint=True (recipes: --resume_from_checkpoint latest)."
        if last
        else f"No complete checkpoint exists yet: {fix}, then start the run again."
    )
    return (
        f"Could not write checkpoint-{step}{other or ''}: {cause}. {_size(free_after)} free on the filesystem of "
        f"{run_dir}; the unfinished {staging} was removed. {kept}"
    )
