"""Two CPU processes (gloo) with ``torchrun --nproc_per_node 2``: dynamic sampling stays in lock-step across ranks.

``accelerate launch --num_processes 2 --cpu`` silently starts one process on these machines, so the test asserts
that there really were two ranks.
"""

import json
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(tmp_path, mode: str) -> list[dict]:
    """The script on two processes; both ranks' records, checked to be two real ranks in lock-step."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(port),
        os.path.join(HERE, "dist_dapo_script.py"),
        str(tmp_path),
        mode,
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)  # bounded: no hang
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert [r["accelerate_num_processes"] for r in ranks] == [2, 2]
    assert ranks[0]["global_step"] == ranks[1]["global_step"]
    assert ranks[0]["weights_equal_across_ranks"] and ranks[1]["weights_equal_across_ranks"]
    assert ranks[0]["dynamic_sampling_logs"] == ranks[1]["dynamic_sampling_logs"]
    # every round drawn from the refill stream gives both ranks the same whole number of groups (4 completions each)
    assert ranks[0]["refill_rows"] == ranks[1]["refill_rows"] and ranks[0]["refill_rows"]
    assert all(rows % 4 == 0 and rows > 0 for rows in ranks[0]["refill_rows"])
    return ranks


@pytest.mark.slow
def test_dapo_dynamic_sampling_on_two_processes(tmp_path):
    ranks = _run(tmp_path, "on_policy")
    assert ranks[0]["global_step"] == 3
    logs = ranks[0]["dynamic_sampling_logs"]
    assert len(logs) == 3
    assert any(log["dynamic_sampling/kept_group_frac"] < 1.0 for log in logs)  # something really was filtered
    # right-sized refills: whole groups per rank (checked in _run), where a generation batch is 6 rows per rank, a
    # group straddling the two ranks; on-policy, the first round is TRL's own batch (3 groups)
    assert all(log["dynamic_sampling/first_round_groups"] == 3 for log in logs)
    # only the selected rows were gathered: every rank received the same bytes, logged identically
    assert all(log["dynamic_sampling/gathered_bytes"] > 0 for log in logs if log["dynamic_sampling/rounds"] > 1)


@pytest.mark.slow
def test_carry_over_oversampling_and_skipping_on_two_processes(tmp_path):
    """Off-policy DAPO (3 minibatches per rollout, 18 rows per rank: a group straddles the ranks) with carry-over,
    the first round oversampled and GRESO skipping: both ranks draw the same prompts, hold the same carried groups
    and skip history, and end with the same weights."""
    ranks = _run(tmp_path, "carry_skip")
    assert ranks[0]["global_step"] == 9
    logs = ranks[0]["dynamic_sampling_logs"]
    assert len(logs) == 3  # one generation per 3 steps: its figures are logged once
    assert any(log["dynamic_sampling/first_round_groups"] > 9 for log in logs)  # oversampled beyond TRL's 9 groups
    assert any(log["dynamic_sampling/carried_groups_used"] > 0 for log in logs)
    assert all(log["dynamic_sampling/carried_groups_used"] <= 4 for log in logs)  # bounded: 0.5 x 9 groups
    assert ranks[0]["skip_history"] == ranks[1]["skip_history"] and ranks[0]["skip_history"]["streaks"]
