"""The notebooks run top to bottom on CPU in a fresh Jupyter kernel, as a user runs them (working directory
``notebooks/``), and are stored without outputs.

``notebooks/quickstart.ipynb`` trains for ``QUICKSTART_STEPS`` steps per algorithm (200 by default, a few minutes);
the test runs 16, which is enough to exercise every cell.
"""

from __future__ import annotations

import ast
import os

import pytest

#: Run once in CI, on the newest TRL (.ci/run): the notebooks run top to bottom; the trainers they call are tested on
#: both TRL ends.
pytestmark = pytest.mark.once

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "notebooks")
NOTEBOOKS = ["quickstart.ipynb", "rewards.ipynb"]


def execute(name: str):
    notebook = nbformat.read(os.path.join(NOTEBOOK_DIR, name), as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": NOTEBOOK_DIR}}
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if any cell fails
    return notebook


def outputs(notebook, kind: str) -> list:
    """Every output of ``kind`` ("stream" texts, or the data dicts of displays and results), in cell order."""
    found = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if kind == "stream" and output.output_type == "stream" and output.name == "stdout":
                found.append(output.text)
            elif kind == "data" and output.output_type in ("display_data", "execute_result"):
                found.append(output.data)
    return found


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_stored_without_outputs(name):
    notebook = nbformat.read(os.path.join(NOTEBOOK_DIR, name), as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "clear outputs before committing"


@pytest.mark.slow
def test_quickstart_runs_top_to_bottom(tmp_path, monkeypatch):
    monkeypatch.setenv("QUICKSTART_STEPS", "16")
    monkeypatch.setenv("QUICKSTART_OUTPUT_DIR", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    notebook = execute("quickstart.ipynb")

    text = "".join(outputs(notebook, "stream"))
    assert "held-out greedy accuracy" in text and "trl-ext pre-flight probe" in text
    assert "GRPOTrainer: 16 steps" in text and "DAPOTrainer: 16 steps" in text
    assert any("image/png" in data for data in outputs(notebook, "data"))  # the 4-panel figure
    summary = ast.literal_eval(text.strip().splitlines()[-1])  # the last cell prints a dict
    assert summary["steps"] == 16
    assert all(0.0 <= summary[key] <= 1.0 for key in ("warm_start", "grpo", "dapo"))
    assert summary["dapo_rounds_per_step"] >= 1.0
    assert (tmp_path / "dapo").is_dir() and (tmp_path / "grpo").is_dir()  # outputs went where we asked


@pytest.mark.slow
def test_rewards_notebook_runs_top_to_bottom(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    notebook = execute("rewards.ipynb")
    text = "".join(outputs(notebook, "stream"))
    assert "sandbox plan" in text and "5 programs in" in text
    assert "Did you mean 'accuracy'?" in text and "Did you mean 'extraction'?" in text
    tables = [data["text/plain"] for data in outputs(notebook, "data") if "text/html" in data]
    assert len(tables) >= 7  # one scored table per section
