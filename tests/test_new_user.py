"""What a new user meets first (issue 40): precision and checkpointing defaults that fit the device, the notebook
path (warm start, then a DAPOConfig, in one process) without an AcceleratorState clash or a deprecation warning from
our own arguments, a run that never writes over an earlier one, and the generation backend named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest

from trl_ext import DAPOConfig, DrGRPOConfig, GRPOPaperConfig, GSPOConfig
from trl_ext.console import generation_backend
from trl_ext.errors import UserError
from trl_ext.recipe.grpo import prepare_output_dir

PRESETS = [DAPOConfig, GSPOConfig, GRPOPaperConfig, DrGRPOConfig]


@pytest.mark.parametrize("config", PRESETS)
def test_unset_precision_and_checkpointing_follow_the_device(config, tmp_path, monkeypatch):
    cpu = config(output_dir=str(tmp_path), use_cpu=True)
    assert cpu.bf16 is False and cpu.gradient_checkpointing is False  # TRL's defaults: True and True
    assert getattr(cpu, "activation_checkpointing", False) is False  # transformers' current name, set by us
    given = config(output_dir=str(tmp_path), use_cpu=True, bf16=True, gradient_checkpointing=True)
    assert given.bf16 is True and given.gradient_checkpointing is True  # what the user sets is kept
    for where in ("trl_ext.grpo.configs", "transformers.training_args"):  # a machine with a bf16 GPU
        monkeypatch.setattr(f"{where}.is_torch_bf16_gpu_available", lambda: True)
    gpu = config(output_dir=str(tmp_path))
    assert gpu.bf16 is True and gpu.gradient_checkpointing is True  # TRL's defaults where they pay


NOTEBOOK = """
import warnings
# none from our arguments: the config field (construction) or checkpointing switched on (TRL's enable / disable calls);
# TRL 1.16 itself reads model.is_gradient_checkpointing, deprecated in transformers 5: TRL's, left alone
warnings.filterwarnings("error", message="`gradient_checkpointing", category=FutureWarning)
from transformers import AutoModelForCausalLM
from trl_ext import DAPOConfig, DAPOTrainer, demo
from trl_ext.rewards import arithmetic_reward
path = demo.warm_start(sft=demo.WarmStartConfig(max_steps=2))  # an SFTTrainer runs in fp32 in this process
tokenizer = demo.build_tokenizer()
dataset, _ = demo.make_problems()
args = DAPOConfig(output_dir="run", use_cpu=True, max_steps=1, num_generations=4, per_device_train_batch_size=8,
                  num_minibatches=1, max_completion_length=4, overlong_buffer_len=1, report_to="none")
trainer = DAPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=arithmetic_reward, args=args,
                      train_dataset=dataset, processing_class=tokenizer)
trainer.train()
print("trained", trainer.state.global_step, args.bf16)
"""


@pytest.mark.slow
def test_the_notebook_path_trains_in_one_process_without_checkpointing_warnings(tmp_path):
    """Before: ``AcceleratorState has already been initialized ... pass mixed_precision='bf16'`` (DAPOConfig's bf16
    default after the warm start's fp32 SFTTrainer), and transformers' ``gradient_checkpointing`` FutureWarnings."""
    env = {**os.environ, "TRL_EXT_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    env.pop("TRL_EXT_LIBRARY_WARNINGS", None)
    result = subprocess.run(
        [sys.executable, "-c", NOTEBOOK], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "trained 1 False" in result.stdout
    assert "`gradient_checkpointing" not in result.stderr


def test_a_run_never_writes_over_an_earlier_one(tmp_path):
    out = tmp_path / "run"
    metrics = prepare_output_dir(str(out), resume=None)  # a new folder: fine
    assert metrics == str(out / "metrics.jsonl") and out.is_dir()
    (out / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n")
    (out / "summary.json").write_text("{}")
    with pytest.raises(
        UserError,
        match=r"holds the output of an earlier run \(summary.json, metrics.jsonl\).*"
        r"another --output_dir, or pass --overwrite_output_dir true",
    ):
        prepare_output_dir(str(out), resume=None)
    assert (out / "summary.json").exists() and (out / "metrics.jsonl").exists()  # nothing touched
    prepare_output_dir(str(out), resume=None, overwrite=True)  # asked for: the old record is kept aside
    assert (out / "metrics.jsonl.previous").read_text() == json.dumps({"step": 1}) + "\n"
    prepare_output_dir(str(out), resume=True)  # resuming is not overwriting


def test_the_generation_backend_is_named():
    args = types.SimpleNamespace(use_vllm=False, vllm_mode="colocate")
    assert generation_backend(args) == "transformers"
    args.use_vllm = True
    assert generation_backend(args) == "vLLM colocate"
    args.vllm_mode, args.vllm_server_base_url = "server", None
    args.vllm_server_host, args.vllm_server_port = "0.0.0.0", 8000
    assert generation_backend(args) == "vLLM server (0.0.0.0:8000)"
    args.vllm_server_base_url = "http://gpu-node:8000"
    assert generation_backend(args) == "vLLM server (http://gpu-node:8000)"
