"""``benchmarks/gpu_check.py check``'s own machinery, fast: the GPU time estimate fits the 8-minute budget, a part that
fails or hangs costs only its own limit (its whole process group is ended) and the report names it. The end-to-end
CPU dry run of ``benchmarks/gpu_check.sh`` is ``tests/test_configs.py::test_gpu_check_script_dry_run_on_cpu``."""

from __future__ import annotations

import argparse
import os
import time

import gpu_check
import pytest


def test_the_gpu_estimate_fits_the_budget_and_covers_every_part(capsys):
    seconds, notes = gpu_check.estimate()
    assert set(seconds) == {"start", "overhead", "ds_cost", "memory", "tokens", "ds_scale", "report"}
    assert sum(seconds.values()) <= gpu_check.BUDGET_S == 480
    assert all(value > 0 for value in seconds.values()) and len(notes) == len(seconds) - 1  # start + report: one
    # the 0.5B throughput assumption starts from the H200's measured 4,113 tokens/s of the 8-layer model
    assert any("4,113 x 8/24" in note for note in notes)
    assert gpu_check.cmd_estimate(argparse.Namespace()) == 0
    assert "ESTIMATE OK" in capsys.readouterr().out
    for part in gpu_check.plan("/tmp/out", dry_run=False):
        assert part.limit_s >= part.estimate_s  # each part's own limit leaves room over its estimate


def test_the_plan_reuses_the_benchmarks_and_the_dry_run_shrinks_them():
    gpu = {p.name: p for p in gpu_check.plan("/o", dry_run=False)}
    dry = {p.name: p for p in gpu_check.plan("/o", dry_run=True)}
    assert gpu["overhead"].argv[0] == "benchmarks/overhead.py" and "dapo,gspo" in gpu["overhead"].argv
    assert gpu["ds_cost"].argv[0] == "benchmarks/dynamic_sampling.py" and "0,0.5" in gpu["ds_cost"].argv
    assert gpu["ds_scale"].needs == "benchmarks/ds_scale.py" and "--world-sizes" in gpu["ds_scale"].argv
    assert "--dry-run" in dry["tokens"].argv and "--dry-run" not in gpu["tokens"].argv
    assert "--warm-start-steps" in dry["overhead"].argv and "--warm-start-steps" not in gpu["overhead"].argv


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()  # a zombie has ended
    except FileNotFoundError:
        return False


def test_a_hung_part_is_ended_with_every_process_it_started(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(120)"
    )
    part = gpu_check.Part("hang", "hangs", ["-c", code], limit_s=3)
    started = time.time()
    status, took = gpu_check._run_part(part, 3, str(tmp_path / "hang.log"), dict(os.environ))
    assert status == "TIMED OUT after 3 s" and took < 30 and time.time() - started < 30
    deadline = time.time() + 10
    while _alive(int(pid_file.read_text())) and time.time() < deadline:
        time.sleep(0.2)
    assert not _alive(int(pid_file.read_text()))


def test_the_report_names_failed_timed_out_and_skipped_parts(tmp_path, monkeypatch, capsys):
    parts = [
        gpu_check.Part("overhead", "Overhead", ["-c", "print('boom'); raise SystemExit(3)"], 30, 10),
        gpu_check.Part("ds_cost", "DS cost", ["-c", "import time; time.sleep(60)"], 2, 10),
        gpu_check.Part("memory", "Memory", ["-c", "pass"], 30, 10),  # exits 0 but leaves no memory.json
        gpu_check.Part("ds_scale", "Scale", ["-c", "pass"], 30, 10, needs="benchmarks/no_such_file.py"),
    ]
    monkeypatch.setattr(gpu_check, "plan", lambda out, dry_run: parts)
    assert gpu_check.cmd_check(argparse.Namespace(out=str(tmp_path), dry_run=True)) == 1
    report = (tmp_path / "gpu_check.md").read_text()
    assert "| overhead | FAILED (exit 3) |" in report and "boom" in report  # the log's tail is quoted
    assert "| ds_cost | TIMED OUT after 2 s |" in report
    assert "**Ran, but its figures could not be read**" in report
    assert "| ds_scale | skipped: `benchmarks/no_such_file.py` does not exist |" in report
    assert "**Failed: overhead, ds_cost, memory.**" in report
    assert "CHECK FAILED: overhead, ds_cost, memory" in capsys.readouterr().out


@pytest.mark.parametrize("size", ["0.5b", "0.5b-tiny"])
def test_the_large_build_has_the_shape_it_names(size):
    from trl_ext.demo import build_tokenizer

    shape = gpu_check.LARGE_SHAPES[size]
    if size == "0.5b":  # Qwen2.5-0.5B's shape, counted without allocating it: 494M parameters
        h, v, i, layers = (
            shape["hidden_size"],
            shape["vocab_size"],
            shape["intermediate_size"],
            shape["num_hidden_layers"],
        )
        kv = h // shape["num_attention_heads"] * shape["num_key_value_heads"]
        per_layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * i + 2 * h
        assert round((v * h + layers * per_layer + h) / 1e6) == 494
        return
    model = gpu_check.build_large(build_tokenizer(), size)
    assert model.config.vocab_size == 64 > len(build_tokenizer()) and str(model.dtype) == "torch.bfloat16"


def test_the_scale_benchmarks_own_report_goes_under_its_section(tmp_path):
    (tmp_path / "ds_scale").mkdir()
    (tmp_path / "ds_scale" / "ds_scale.md").write_text("# Dynamic sampling at scale\n\n## Assembly\n\n| w | ms |\n")
    part = next(p for p in gpu_check.plan(str(tmp_path), dry_run=True) if p.name == "ds_scale")
    section = gpu_check._section(part, str(tmp_path))
    assert section[0] == "`ds_scale/ds_scale.md`:" and "## Dynamic sampling at scale" in section
    assert "### Assembly" in section and "| w | ms |" in section  # headings demoted under the report's own
