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
    # every round gives both ranks the same rows; a refill round whole groups (4 completions each)
    assert ranks[0]["refill_rows"] == ranks[1]["refill_rows"] and ranks[0]["refill_rows"]
    rounds = [int(log["dynamic_sampling/rounds"]) for log in ranks[0]["dynamic_sampling_logs"]]
    assert len(ranks[0]["refill_rows"]) == sum(rounds)
    return ranks


@pytest.mark.slow
def test_dapo_dynamic_sampling_on_two_processes(tmp_path):
    ranks = _run(tmp_path, "on_policy")
    assert ranks[0]["global_step"] == 3
    logs = ranks[0]["dynamic_sampling_logs"]
    assert len(logs) == 3
    assert any(log["dynamic_sampling/kept_group_frac"] < 1.0 for log in logs)  # something really was filtered
    # a generation batch is 6 rows per rank, a group straddling the two ranks; the first round is TRL's own batch,
    # refills are whole groups per rank
    first_rows, start = [], 0
    for log in logs:
        first_rows.append(ranks[0]["refill_rows"][start])
        refills = ranks[0]["refill_rows"][start + 1 : start + int(log["dynamic_sampling/rounds"])]
        assert all(rows % 4 == 0 for rows in refills)
        start += int(log["dynamic_sampling/rounds"])
    assert first_rows == [6, 6, 6] and any(log["dynamic_sampling/rounds"] > 1 for log in logs)


@pytest.mark.slow
def test_off_policy_and_skipping_on_two_processes(tmp_path):
    """Off-policy DAPO (3 minibatches per rollout, 18 rows per rank: a group straddles the ranks) with the old-policy
    pass deferred to the trained rows and GRESO skipping: both ranks draw the same prompts, hold the same skip
    history, and end with the same weights."""
    ranks = _run(tmp_path, "off_policy_skip")
    assert ranks[0]["global_step"] == 9
    logs = ranks[0]["dynamic_sampling_logs"]
    assert len(logs) == 3  # one generation per 3 steps: its figures are logged once
    assert ranks[0]["skip_history"] == ranks[1]["skip_history"] and ranks[0]["skip_history"]["streaks"]


@pytest.mark.slow
def test_prompt_selector_is_shared_across_two_processes(tmp_path):
    """The posterior selector over two processes (off-policy, a group straddling the ranks): both ranks hold the same
    posteriors and draws, generate the same rounds and end with the same weights."""
    ranks = _run(tmp_path, "off_policy_select")
    assert ranks[0]["global_step"] == 9
    assert ranks[0]["selector"] == ranks[1]["selector"]
    assert ranks[0]["selector"]["posteriors"] and ranks[0]["selector"]["draws"] > 0
