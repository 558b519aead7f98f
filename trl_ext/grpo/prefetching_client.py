"""TRL's vLLM server client with requests submitted ahead of TRL's call: the one piece of overlapped generation that
runs in the background (``trl_ext.grpo.async_rollout``); its thread runs no collective, no model, no torch RNG."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


def engine_sampling_params(generation: Any, num_generations: int) -> dict[str, Any]:
    """The keyword arguments TRL's ``VLLMGeneration.generate`` passes to ``VLLMClient.generate`` in server mode for a
    training round (``PrefetchingClient.generate`` checks them against TRL's actual call)."""
    min_p = generation.min_p
    return {
        "n": num_generations,
        "repetition_penalty": generation.repetition_penalty,
        "temperature": generation.temperature,
        "top_p": generation.top_p,
        "top_k": generation.top_k,
        "min_p": 0.0 if min_p is None else min_p,
        "max_tokens": generation.max_completion_length,
        "logprobs": generation.logprobs,
        "structured_outputs_regex": generation.structured_outputs_regex,
        "generation_kwargs": generation.generation_kwargs,
    }


class PrefetchingClient:
    """TRL's ``VLLMClient`` (main process only) with requests submitted ahead of TRL's call.

    ``generate`` (what TRL calls) returns the oldest prefetched answer when TRL asks for exactly those prompts and
    parameters, and otherwise calls the client itself (evaluation). Weight updates and cache resets reach the server
    only inside ``sync``, so a rollout generated ahead keeps the weights it started from and TRL's own per-step update
    is absorbed. Every other attribute is the client's."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trl-ext-rollout")
        self._pending: deque[tuple[list, dict, Future]] = deque()
        self._syncing = False
        self.direct_calls = 0
        self.absorbed_updates = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def submit(self, prompts: list[list[int]], params: dict[str, Any]) -> None:
        future = self._executor.submit(self._client.generate, prompts=prompts, **params)
        self._pending.append((list(prompts), dict(params), future))

    def pending_requests(self) -> list[tuple[list, dict, Future]]:
        """The submitted requests not yet taken by TRL: (prompts, sampling parameters, future), oldest first."""
        return list(self._pending)

    def preload(self, prompts: list[list[int]], params: dict[str, Any], result: dict[str, Any]) -> None:
        """Put back a request answered before a checkpoint, as if just prefetched (exact resume)."""
        future: Future = Future()
        future.set_result(result)
        self._pending.append((list(prompts), dict(params), future))

    def ready(self) -> bool:
        """Whether the oldest submitted request has been answered (or failed)."""
        return bool(self._pending) and self._pending[0][2].done()

    @property
    def in_flight(self) -> int:
        return sum(1 for _, _, future in self._pending if not future.done())

    def wait_first(self) -> None:
        """Wait until the oldest submitted request has been answered (or failed)."""
        if self._pending:
            self._pending[0][2].exception()

    def drop_pending(self) -> int:
        """Wait for the submitted requests TRL did not ask for, discard them, and return how many there were."""
        self.wait_idle()
        dropped = len(self._pending)
        self._pending.clear()
        return dropped

    def wait_idle(self) -> None:
        for _, _, future in list(self._pending):
            future.exception()  # waits; the error, if any, is raised by generate()

    def generate(self, prompts: Any = None, features: Any = None, **params: Any) -> dict[str, Any]:
        if self._pending and features is None and self._pending[0][0] == list(prompts):
            _, submitted, future = self._pending.popleft()
            if submitted != params:
                differ = sorted(k for k in set(submitted) | set(params) if submitted.get(k) != params.get(k))
                raise RuntimeError(
                    f"async_generation: TRL asked the vLLM server for the prefetched prompts with other sampling "
                    f"parameters ({differ}: submitted {[submitted.get(k) for k in differ]}, TRL "
                    f"{[params.get(k) for k in differ]}). TRL's VLLMGeneration.generate changed shape; trl-ext is "
                    "tested with trl 1.12 to 1.16: pin one of those, or set async_generation=False."
                )
            return future.result()
        self.wait_idle()
        self.direct_calls += 1
        return self._client.generate(prompts=prompts, features=features, **params)

    def sync(self, push: Callable[[], None]) -> None:
        """Run ``push`` (TRL's ``VLLMGeneration.sync_weights``) with its weight updates and cache reset passed on to
        the server; nothing may be in flight."""
        if self.in_flight:
            raise RuntimeError(
                f"async_generation: weight update while {self.in_flight} generation request(s) are in flight; weights "
                "are synced only between rollouts. This is a trl-ext bug: please report it."
            )
        self._syncing = True
        try:
            push()
        finally:
            self._syncing = False

    def update_named_params(self, metadata: Any, params: Iterable, *args: Any, **kwargs: Any) -> Any:
        if self._syncing:
            return self._client.update_named_params(metadata, params, *args, **kwargs)
        for _ in params:  # absorbed, but the parameter walk (ZeRO-3 gathers: collectives) still runs
            pass
        self.absorbed_updates += 1
        return None

    def update_named_param(self, *args: Any, **kwargs: Any) -> Any:
        if self._syncing:
            return self._client.update_named_param(*args, **kwargs)
        self.absorbed_updates += 1
        return None

    def reset_prefix_cache(self) -> Any:
        if self._syncing:
            return self._client.reset_prefix_cache()
        return None

    def close(self) -> None:
        self.wait_idle()
        self._executor.shutdown(wait=True)
