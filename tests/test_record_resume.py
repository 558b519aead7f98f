"""The run's record after a resume (issue 23, first part): ``metrics.jsonl`` continues where the checkpoint left off,
each step logged once; the rows logged past the checkpoint are kept aside, not deleted."""

from __future__ import annotations

import json
import os
import shutil
from importlib import import_module

import pytest

from trl_ext.recipe.grpo import checkpoint_step, continue_record, parse


def _rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_rows_past_the_checkpoint_move_aside(tmp_path, caplog):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({"step": s, "loss": s / 10}) + "\n" for s in range(1, 19)))
    checkpoint = tmp_path / "checkpoint-15"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 15}))
    assert checkpoint_step(str(checkpoint)) == 15
    with caplog.at_level("WARNING"):
        aside = continue_record(str(metrics), str(checkpoint))
    assert [r["step"] for r in _rows(metrics)] == list(range(1, 16))
    assert [r["step"] for r in _rows(aside)] == [16, 17, 18] and aside.endswith("after-checkpoint-15")
    assert "steps 16-18" in caplog.text and aside in caplog.text
    assert continue_record(str(metrics), str(checkpoint)) is None  # nothing past it any more


@pytest.mark.slow
def test_resumed_run_logs_each_step_once(tmp_path):
    """A run killed after logging step 4 but before checkpoint-4 was written (the folder is removed, as a kill
    mid-save leaves no complete checkpoint), resumed with 'latest' from checkpoint-2: steps 1-4 once each."""
    out = tmp_path / "run"
    argv = [
        *("--max_steps", "4", "--logging_steps", "1", "--held_out_eval_steps", "0", "--save_strategy", "steps"),
        *("--save_steps", "2", "--output_dir", str(out), "--num_minibatches", "1"),
    ]
    grpo = import_module("trl_ext.scripts.grpo")
    grpo.main(*parse("dapo", argv=argv))
    assert [r["step"] for r in _rows(out / "metrics.jsonl") if "loss" in r] == [1, 2, 3, 4]
    shutil.rmtree(out / "checkpoint-4")
    grpo.main(*parse("dapo", argv=[*argv, "--resume_from_checkpoint", "latest"]))
    steps = [r["step"] for r in _rows(out / "metrics.jsonl") if "loss" in r]
    assert steps == [1, 2, 3, 4]
    assert [r["step"] for r in _rows(str(out / "metrics.jsonl") + ".after-checkpoint-2") if "loss" in r] == [3, 4]
    assert os.path.exists(out / "checkpoint-4")
