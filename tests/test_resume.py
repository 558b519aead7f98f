"""Pre-emption: a run killed with SIGKILL and resumed from its last checkpoint reproduces the uninterrupted run's later
per-step metrics and final weights exactly (CPU, fixed seed), for DAPO with dynamic sampling filtering groups, GSPO
killed inside a rollout's minibatches, and group-mined DPO; a checkpoint being written when the kill lands is never
picked up.

The slow end-to-end tests run ``tests/resume_script.py`` as subprocesses: the uninterrupted run and the run to be
killed side by side, then the resume. The fast tests run the same trainers in-process, with the run "killed" right
after a checkpoint (a callback ends it) or by an exception half-way through a save.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "resume_script.py")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONHASHSEED": "0"}
UNTIMED = ("time", "runtime", "per_second")  # wall-clock figures differ between any two runs


def _launch(algo: str, out, *flags: str, processes: int = 1) -> subprocess.Popen:
    log = open(f"{out}.log", "w")  # noqa: SIM115 - closed with the process
    launcher = [sys.executable]
    if processes > 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        launcher += ["-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--master_port", str(port)]
    return subprocess.Popen([*launcher, SCRIPT, algo, str(out), *flags], env=ENV, stdout=log, stderr=log)


def _finish(process: subprocess.Popen, out, timeout: float = 240) -> dict:
    assert process.wait(timeout=timeout) == 0, open(f"{out}.log").read()[-4000:]
    with open(os.path.join(out, "result.json")) as f:
        return json.load(f)


def _kill_when(process: subprocess.Popen, path, out, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert process.poll() is None, f"run ended before {path} appeared:\n" + open(f"{out}.log").read()[-4000:]
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL


def _step_logs(result: dict, after: int, ignore: tuple[str, ...] = ()) -> dict[int, dict]:
    """Per-step logs after step ``after``, without wall-clock figures, the end-of-training summary and keys starting
    with one of ``ignore``."""
    logs = {}
    for entry in result["log_history"]:
        if entry["step"] > after and "train_runtime" not in entry:
            logs[entry["step"]] = {
                k: v for k, v in entry.items() if not any(u in k for u in UNTIMED) and not k.startswith(ignore or "\0")
            }
    return logs


def _assert_same_continuation(
    full: dict, resumed: dict, out_full, out_resumed, resumed_step: int, ignore: tuple[str, ...] = ()
) -> None:
    expected, got = _step_logs(full, resumed_step, ignore), _step_logs(resumed, resumed_step, ignore)
    assert sorted(got) == sorted(expected) and got, (sorted(got), sorted(expected))
    for step in expected:
        assert got[step].keys() == expected[step].keys(), step
        for key, value in expected[step].items():
            same = value == got[step][key] or (
                isinstance(value, float) and math.isnan(value) and math.isnan(got[step][key])
            )
            assert same, f"step {step}, {key}: uninterrupted {value!r}, resumed {got[step][key]!r}"
    weights_full = torch.load(os.path.join(out_full, "final_weights.pt"))
    weights_resumed = torch.load(os.path.join(out_resumed, "final_weights.pt"))
    assert weights_full.keys() == weights_resumed.keys()
    for name, tensor in weights_full.items():
        assert torch.equal(tensor, weights_resumed[name]), name


# -- fast, in-process ----------------------------------------------------------------------------------------------


def _in_process(algo: str, out, *callbacks) -> dict:
    from resume_script import build

    trainer = build(algo, str(out), list(callbacks))
    return trainer


def _save_final(trainer, out) -> dict:
    torch.save(trainer.model.state_dict(), os.path.join(out, "final_weights.pt"))
    return {"log_history": trainer.state.log_history}


@pytest.mark.parametrize("algo", ["dapo", "gspo"])
def test_resume_after_a_checkpoint_matches_the_uninterrupted_run(tmp_path, algo):
    """DAPO resumes at an epoch boundary with a refill stream in use; GSPO resumes half-way through a rollout's four
    minibatches (checkpoint-6 of 10; a rollout every 4 steps)."""
    from resume_script import StopAt

    full = _in_process(algo, tmp_path / "full")
    full.train()
    full_result = _save_final(full, tmp_path / "full")

    _in_process(algo, tmp_path / "cut", StopAt(6)).train()
    assert (tmp_path / "cut" / "checkpoint-6").exists() and not (tmp_path / "cut" / "checkpoint-9").exists()
    if algo == "gspo":
        assert (tmp_path / "cut" / "checkpoint-6" / "grpo_buffer_rank0.pt").exists()
    resumed = _in_process(algo, tmp_path / "cut")
    resumed.train(resume_from_checkpoint=True)
    resumed_result = _save_final(resumed, tmp_path / "cut")
    _assert_same_continuation(full_result, resumed_result, tmp_path / "full", tmp_path / "cut", resumed_step=6)


def test_a_save_interrupted_half_way_is_never_picked_up(tmp_path, caplog):
    from transformers.trainer_utils import get_last_checkpoint

    from trl_ext.reliability.checkpoints import last_complete_checkpoint

    out = tmp_path / "run"
    trainer = _in_process("dapo", out)
    original = trainer._save_rng_state

    def crash_at_step_6(output_dir):
        if trainer.state.global_step == 6:  # after the weights and optimizer, before the RNG and trainer state
            raise KeyboardInterrupt("killed while saving")
        original(output_dir)

    trainer._save_rng_state = crash_at_step_6
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert sorted(os.listdir(out / ".incomplete" / "checkpoint-6")) and not (out / "checkpoint-6").exists()
    assert get_last_checkpoint(str(out)) == last_complete_checkpoint(str(out)) == str(out / "checkpoint-3")

    # A plain Trainer killed while saving leaves a numbered folder without trainer_state.json: skipped too.
    legacy = out / "checkpoint-9"
    legacy.mkdir()
    (legacy / "model.safetensors").write_bytes(b"")
    resumed = _in_process("dapo", out)
    with caplog.at_level(logging.WARNING, logger="trl_ext.reliability.checkpoints"):
        resumed.train(resume_from_checkpoint=True)
    assert "Skipping incomplete checkpoint(s)" in caplog.text and "checkpoint-9" in caplog.text
    assert resumed.state.global_step == 10
    assert not (out / ".incomplete").exists()
    assert (out / "checkpoint-9" / "trl_ext_checkpoint.json").exists()  # the stale folder was replaced


# -- slow, subprocesses, SIGKILL -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_dapo_killed_while_writing_a_checkpoint_resumes_exactly(tmp_path):
    """SIGKILL half-way through writing checkpoint-9: the partial folder is never used; the run resumes from
    checkpoint-6 (the end of the first epoch: 12 prompts, 2 per step) and then matches the uninterrupted run step for
    step, with the refill prompt stream and the second epoch's prompt order restored."""
    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    full = _launch("dapo", full_dir)
    killed = _launch("dapo", killed_dir, "--stall-save-at", "9")
    _kill_when(killed, killed_dir / "stalled-9", killed_dir)

    from transformers.trainer_utils import get_last_checkpoint

    assert not (killed_dir / "checkpoint-9").exists()
    partial = killed_dir / ".incomplete" / "checkpoint-9"
    assert (partial / "model.safetensors").exists() and not (partial / "trl_ext_checkpoint.json").exists()
    assert get_last_checkpoint(str(killed_dir)) == str(killed_dir / "checkpoint-6")
    stream = json.loads((killed_dir / "checkpoint-6" / "dynamic_sampling_state.json").read_text())["stream"]
    assert stream["position"] > 0 or stream["epoch"] > 0  # refill rounds drew from the extra prompt stream

    resumed = _finish(_launch("dapo", killed_dir, "--resume"), killed_dir)
    full_result = _finish(full, full_dir)
    assert resumed["resumed_from"] == str(killed_dir / "checkpoint-6")
    assert not (killed_dir / ".incomplete").exists()  # the staging garbage is cleaned up
    after = _step_logs(full_result, 6)
    assert any(log["dynamic_sampling/rounds"] > 1 for log in after.values())  # refills happen after the resume
    assert all(log["epoch"] > 1 for log in after.values())  # in the second epoch
    _assert_same_continuation(full_result, resumed, full_dir, killed_dir, resumed_step=6)


@pytest.mark.slow
def test_gspo_killed_inside_a_rollout_resumes_exactly(tmp_path):
    """GSPO trains 4 minibatches per rollout of 8 prompts (one rollout per epoch of 12 prompts). checkpoint-6 falls
    half-way through the second rollout: the resumed run must train steps 7-8 on the checkpoint's buffered
    generations (not regenerate) and draw the third epoch's prompts in the original order for step 9."""
    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    full = _launch("gspo", full_dir)
    killed = _launch("gspo", killed_dir, "--step-sleep", "0.5")
    _kill_when(killed, killed_dir / "checkpoint-6", killed_dir)
    assert not (killed_dir / "checkpoint-9").exists()
    assert (killed_dir / "checkpoint-6" / "grpo_buffer_rank0.pt").exists()

    resumed = _finish(_launch("gspo", killed_dir, "--resume"), killed_dir)
    full_result = _finish(full, full_dir)
    assert resumed["resumed_from"] == str(killed_dir / "checkpoint-6")
    _assert_same_continuation(full_result, resumed, full_dir, killed_dir, resumed_step=6)


@pytest.mark.slow
def test_group_mined_dpo_killed_between_checkpoints_resumes_exactly(tmp_path):
    """Group-mined DPO (pairs mined from the seeded initial policy, so a restart mines the same pairs) through
    ``Reliable`` + ``trl_ext.dpo.DPOTrainer``, the composition proposed for ``trl_ext.dpo``; it also
    restores TRL's ``num_tokens`` counter, which plain TRL restarts from 0 on resume."""
    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    full = _launch("dpo", full_dir)
    killed = _launch("dpo", killed_dir, "--step-sleep", "0.5")
    _kill_when(killed, killed_dir / "checkpoint-2", killed_dir)
    resumed = _finish(_launch("dpo", killed_dir, "--resume"), killed_dir)
    full_result = _finish(full, full_dir)
    step = int(os.path.basename(resumed["resumed_from"]).split("-")[1])
    assert step in (2, 4)
    # DPOTrainer.from_groups logs the mining statistics (mining/*) at the first log of each process: the resumed
    # process logs them again at its first step. They describe the (identical) pairs, not the training.
    _assert_same_continuation(full_result, resumed, full_dir, killed_dir, resumed_step=step, ignore=("mining/",))


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["dapo", "dapo_offpolicy"])
def test_two_processes_checkpoint_and_resume_exactly(tmp_path, algo):
    """``torchrun --nproc_per_node 2`` (gloo): every process writes its RNG state into the staging folder, the main
    process publishes the checkpoint after a barrier, and a resume from it (a copy of checkpoint-6 in a fresh
    output_dir, i.e. exactly what a run killed after that checkpoint leaves) reproduces the rest of the run.
    ``dapo_offpolicy``: two minibatches per rollout (old-policy log-probs of the trained rows) and GRESO's skip history,
    restored on both processes."""
    full_dir, resumed_dir = tmp_path / "full", tmp_path / "resumed"
    full_result = _finish(_launch(algo, full_dir, processes=2), full_dir)
    assert full_result["num_processes"] == 2
    checkpoint = full_dir / "checkpoint-6"
    assert {"rng_state_0.pth", "rng_state_1.pth", "trl_ext_checkpoint.json"} <= set(os.listdir(checkpoint))
    if algo == "dapo_offpolicy":
        state = json.loads((checkpoint / "dynamic_sampling_state.json").read_text())
        assert state["skip"]["streaks"]
    resumed_dir.mkdir()
    shutil.copytree(checkpoint, resumed_dir / "checkpoint-6")
    resumed = _finish(_launch(algo, resumed_dir, "--resume", processes=2), resumed_dir)
    assert resumed["resumed_from"] == str(resumed_dir / "checkpoint-6")
    _assert_same_continuation(full_result, resumed, full_dir, resumed_dir, resumed_step=6)
