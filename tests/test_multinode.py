"""Two nodes on one host: ``torchrun --nnodes 2 --node_rank 0|1`` with a localhost rendezvous (one gloo process per
node, the two launchers started separately, as a cluster starts them), DAPO with dynamic sampling filtering groups.
Both nodes are SIGKILLed after a checkpoint, the job is started again on both nodes, and it resumes exactly: its
later per-step metrics and final weights equal those of the uninterrupted two-node run (``tests/resume_script.py``).
The output folder is shared by the two nodes, as a cluster's shared filesystem is (docs/SCALING.md)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import psutil  # accelerate's dependency
import pytest
from test_resume import ENV, SCRIPT, _assert_same_continuation

TIMEOUT = 600


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_nodes(out, *flags: str) -> list[subprocess.Popen]:
    """The job on two nodes: one launcher per node rank, each in its own session (killed as a node dies)."""
    port = _free_port()
    nodes = []
    for node_rank in (0, 1):
        log = open(f"{out}.node{node_rank}.log", "w")  # noqa: SIM115 - closed with the process
        command = [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", "2", "--nproc_per_node", "1", "--node_rank", str(node_rank),
            "--master_addr", "127.0.0.1", "--master_port", str(port),
            SCRIPT, "dapo", str(out), *flags,
        ]  # fmt: skip
        nodes.append(subprocess.Popen(command, env=ENV, stdout=log, stderr=log, start_new_session=True))
    return nodes


def _logs(out) -> str:
    return "\n".join(open(f"{out}.node{r}.log").read()[-3000:] for r in (0, 1))


def _finish(nodes: list[subprocess.Popen], out) -> dict:
    import json

    for node in nodes:
        assert node.wait(timeout=TIMEOUT) == 0, _logs(out)
    return json.loads((out / "result.json").read_text())


@pytest.mark.slow
@pytest.mark.once  # the two-process resume (test_resume.py) runs on both TRL ends
def test_two_nodes_train_are_killed_and_resume_exactly(tmp_path):
    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    full = _two_nodes(full_dir)
    killed = _two_nodes(killed_dir, "--step-sleep", "0.5")
    deadline = time.time() + TIMEOUT
    while not (killed_dir / "checkpoint-6").exists():
        assert all(node.poll() is None for node in killed), "ended before checkpoint-6:\n" + _logs(killed_dir)
        assert time.time() < deadline, "checkpoint-6 never appeared"
        time.sleep(0.05)
    for node in killed:  # both nodes die at once: the launcher and its workers (torchrun starts them in sessions)
        tree = psutil.Process(node.pid)
        for process in [*tree.children(recursive=True), tree]:
            process.send_signal(signal.SIGKILL)
        node.wait(timeout=30)
    assert not (killed_dir / "result.json").exists()  # it did not finish

    resumed = _finish(_two_nodes(killed_dir, "--resume"), killed_dir)
    full_result = _finish(full, full_dir)
    assert full_result["num_processes"] == 2 and resumed["num_processes"] == 2
    step = int(resumed["resumed_from"].rsplit("-", 1)[1])
    assert step >= 6 and resumed["resumed_from"] == str(killed_dir / f"checkpoint-{step}")
    rounds = [log.get("dynamic_sampling/rounds", 1) for log in full_result["log_history"]]
    assert any(r > 1 for r in rounds)  # dynamic sampling refilled
    _assert_same_continuation(full_result, resumed, full_dir, killed_dir, resumed_step=step)
