"""What a new user met in a fresh clone (issue 49): the run summary counts the reward watches' warnings, the tool
recipe's opening line comes before its warm start and says "cached" only when it is, ``pytest -q`` shows why tests were
skipped, the notebooks have an extra of their own and keep the warm start out of the clone. (The README example's gain:
tests/test_readme.py; the Hub answer without network: tests/test_offline_hub.py.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from trl_ext.diagnostics.health import HealthMonitor
from trl_ext.recipe.grpo import format_summary, health_warnings
from trl_ext.reliability.zero_reward import ZeroRewardWatch
from trl_ext.rewards import arithmetic_reward


class Wrapper:
    """A wrapper that keeps the function it calls as ``.func``, as the reward guard does."""

    def __init__(self, func):
        self.func = func


def _summary(warnings):
    return {
        "recipe": "dapo",
        "trainer": "DAPOTrainer",
        "accuracy_before": None,
        "accuracy_after": None,
        "mean_reward_first_log": None,
        "optimizer_steps": 3,
        "wall_time_s": 1.0,
        "generation": {"backend": "transformers", "s_per_step": None},
        "health_warnings": warnings,
        "outputs": {"folder": "run", "files": ["metrics.jsonl"]},
    }


def test_the_summary_counts_a_zero_reward_warning():
    """Before: "health: no warnings" printed under the run's own zero-reward warning."""
    watch = ZeroRewardWatch(arithmetic_reward, "answer", calls=1)
    state = types.SimpleNamespace(is_world_process_zero=True, global_step=0)
    watch(["x"], answer=[3], completions=["x"], trainer_state=state)  # scores 0 on every completion: warns
    assert watch.warned
    trainer = types.SimpleNamespace(
        callback_handler=types.SimpleNamespace(callbacks=[HealthMonitor()]),
        reward_funcs=[Wrapper(watch)],
        unscorable_watch=types.SimpleNamespace(warned=False),
    )
    warnings = health_warnings(trainer)
    assert [(w["kind"], w["count"], w["step"]) for w in warnings] == [("zero_reward", 1, None)]
    printed = format_summary(_summary(warnings))
    assert "health           1 warning: zero_reward x1 (in the first rounds)" in printed
    assert "no warnings" not in printed
    assert f"  zero_reward in the first rounds: {watch.message()}" in printed  # the fix, after the table
    quiet = types.SimpleNamespace(
        **{**vars(trainer), "reward_funcs": [Wrapper(ZeroRewardWatch(arithmetic_reward, None))]}
    )
    assert health_warnings(quiet) == [] and "no warnings" in format_summary(_summary([]))


def test_the_tool_demo_announces_before_its_warm_start_and_says_cached_only_when_it_is(tmp_path, monkeypatch):
    """Before: the tool recipe trained its warm start before its opening line, which then said "cached" (it looked at
    the arithmetic demo's cache)."""
    from trl_ext import demo_tools

    monkeypatch.setenv("TRL_EXT_CACHE", str(tmp_path))
    trained = []
    monkeypatch.setattr(demo_tools, "tool_warm_start", lambda: trained.append(1) or "path")
    script_args = types.SimpleNamespace(tools=["trl_ext.demo_tools.multiply"], dataset_name=None)
    tool_demo = demo_tools.ToolDemo.of(script_args, types.SimpleNamespace(model_name_or_path=None))
    assert trained == []  # building the demo trains nothing: the opening line comes first
    assert (
        tool_demo.describe() == f"demo model + SFT warm start on tool calls (trained first, then cached in {tmp_path})"
    )
    assert tool_demo.model_path == "path" and trained == [1]  # the recipe asks for the model after its opening line
    cached = tmp_path / "demo-tools-warm-start" / os.path.basename(demo_tools.tool_warm_start_dir())
    cached.mkdir(parents=True)
    (cached / "warm_start.json").write_text("{}")
    assert tool_demo.describe() == f"demo model + SFT warm start on tool calls (cached in {tmp_path})"


def test_skip_reasons_show_under_q(tmp_path):
    """Before: ``pytest -q`` printed "2 skipped" and hid PPO's hint (how to run its tests). The suite's conftest prints
    each skip reason once; with ``-rs`` pytest's own summary does and the conftest adds nothing."""
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_ppo_like.py").write_text(
        "import pytest\n"
        "pytest.importorskip('no_such_module_trl_ext', reason='PPO needs trl 1.12: run its tests in the PPO venv')\n"
        "def test_x():\n    pass\n"
    )
    (tmp_path / "test_ok.py").write_text("def test_y():\n    pass\n")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)]
    quiet = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "1 passed, 1 skipped" in quiet.stdout, quiet.stdout
    assert "skipped (1): PPO needs trl 1.12: run its tests in the PPO venv" in quiet.stdout
    verbose = subprocess.run([*command, "-rs"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "PPO needs trl 1.12" in verbose.stdout and "skipped (1):" not in verbose.stdout


ROOT = Path(__file__).resolve().parents[1]


def test_the_notebooks_have_an_extra_that_the_docs_name():
    """Before: nbconvert and ipywidgets were in no extra, and tqdm warned "IProgress not found" in Jupyter."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {key: {re.split(r"[<>=\[ ]", req, maxsplit=1)[0] for req in reqs} for key, reqs in extras.items()}
    assert {"jupyterlab", "ipykernel", "ipywidgets", "nbconvert"} <= names["notebooks"]
    assert names["notebooks"] - {"jupyterlab"} <= names["dev"]  # the tests run the notebooks as a user does
    install = 'pip install torch==2.13.0 -e ".[notebooks]"'
    assert install in (ROOT / "README.md").read_text()
    assert install.replace('"', '\\"') in (ROOT / "notebooks" / "quickstart.ipynb").read_text()


def test_the_notebooks_keep_the_warm_start_in_the_user_cache():
    """Before: the quickstart cached its warm start in ``outputs/demo-warm-start`` of the clone, so the test suite
    (which runs the notebook) wrote there; it now shares the recipes' cache (``~/.cache/trl-ext``)."""
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        code = "".join(
            "".join(cell["source"])
            for cell in json.loads(notebook.read_text())["cells"]
            if cell["cell_type"] == "code"
        )
        assert "demo-warm-start" not in code and "warm_start(output_dir" not in code, notebook.name
