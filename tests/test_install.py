"""A non-editable install carries the recipes: ``pip install .`` builds a wheel from the package alone (no
``recipes/`` folder), and ``trl-ext dapo`` then runs from a directory outside the checkout, with its demo YAML and
the documented ``recipes/configs/...`` names found in the installed package.

To stay fast the install reuses this environment's dependencies (``--no-deps --no-build-isolation``) and goes to a
``--target`` folder put first on ``PYTHONPATH``; the source is copied without ``recipes/`` (and without the checkout's
``build/``), so a recipe or YAML that the wheel lacks fails here. The whole test takes about 25 s on 2 busy cores
(install about 3 s, the one-step run the rest, mostly imports); the demo's warm start comes from the user's cache
folder (``trl_ext.demo.cache_dir``), the same from any folder, else the run trains it first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

#: Run once in CI, on the newest TRL (.ci/run): packaging: a wheel installs and runs outside the checkout.
pytestmark = pytest.mark.once

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _install(tmp_path) -> str:
    """``pip install`` of a copy of the package source (pyproject, README, ``trl_ext/``) into a target folder."""
    src, site = tmp_path / "src", tmp_path / "site"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    shutil.copytree(os.path.join(ROOT, "trl_ext"), src / "trl_ext", ignore=shutil.ignore_patterns("__pycache__"))
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-compile", "-q"]
    result = subprocess.run(
        [*command, "--target", str(site), str(src)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return str(site)


@pytest.mark.slow
def test_pip_install_runs_trl_ext_dapo_outside_the_checkout(tmp_path):
    started = time.perf_counter()
    site = _install(tmp_path)
    installed = time.perf_counter() - started
    packaged = os.path.join(site, "trl_ext", "scripts")
    for name in ("dapo", "grpo", "gspo", "dr_grpo", "sft", "dpo", "ppo", "reward", "eval", "pipeline"):
        assert os.path.isfile(os.path.join(packaged, f"{name}.py")), name
    assert os.path.isfile(os.path.join(packaged, "configs", "demo", "dapo", "config_demo.yaml"))
    assert os.path.isfile(os.path.join(packaged, "accelerate_configs", "zero3.yaml"))

    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": site, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

    # The installed copy is the one imported, and a documented config name resolves inside it
    probe = (
        "import importlib.util; from trl_ext.recipe.paths import resolve_config; "
        "print(importlib.util.find_spec('trl_ext').origin); "
        "print(resolve_config('recipes/configs/qwen2.5-math-7b/dapo/config_colocate.yaml'))"
    )
    where = subprocess.run([sys.executable, "-c", probe], cwd=run_dir, env=env, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr[-2000:]
    origin, config = where.stdout.split()
    assert origin.startswith(site) and config.startswith(site) and os.path.isfile(config)

    out = run_dir / "run"
    flags = ["--max_steps", "1", "--logging_steps", "1", "--output_dir", str(out), "--held_out_eval_steps", "0"]
    result = subprocess.run(
        [os.path.join(site, "bin", "trl-ext"), "dapo", *flags, "--held_out_max_problems", "16"],
        cwd=run_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[dapo] DAPOTrainer (DAPOConfig) |" in result.stdout and "lr 0.0005 (demo config)" in result.stdout
    assert (out / "summary.json").exists() and (out / "model.safetensors").exists()
    print(f"install {installed:.1f} s, install + run {time.perf_counter() - started:.1f} s")
