"""Two CPU processes (gloo) with ``torchrun --nproc_per_node 2``: dynamic sampling stays in lock-step across ranks.

``accelerate launch --num_processes 2 --cpu`` silently starts one process on these machines, so the test asserts
that there really were two ranks.
"""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.slow
def test_dapo_dynamic_sampling_on_two_processes(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        "29533",
        os.path.join(HERE, "dist_dapo_script.py"),
        str(tmp_path),
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)  # bounded: no hang
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert [r["accelerate_num_processes"] for r in ranks] == [2, 2]
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == 3
    assert ranks[0]["weights_equal_across_ranks"] and ranks[1]["weights_equal_across_ranks"]
    assert ranks[0]["dynamic_sampling_logs"] == ranks[1]["dynamic_sampling_logs"]
    logs = ranks[0]["dynamic_sampling_logs"]
    assert len(logs) == 3
    assert any(log["dynamic_sampling/kept_group_frac"] < 1.0 for log in logs)  # something really was filtered
    # right-sized refills: every rank generates the same whole number of groups (4 completions each); a whole
    # generation batch would be 6 rows per rank, a group straddling the two ranks
    assert ranks[0]["refill_rows"] == ranks[1]["refill_rows"] and ranks[0]["refill_rows"]
    assert all(rows % 4 == 0 and rows > 0 for rows in ranks[0]["refill_rows"])
    # only the selected rows were gathered: every rank received the same bytes, logged identically
    assert all(log["dynamic_sampling/gathered_bytes"] > 0 for log in logs if log["dynamic_sampling/rounds"] > 1)
