"""The two LoRA sync routes in float32 engines, for ``test_vllm_engine.py``: a merged checkpoint (what merge-sync
gives the engine) and the base checkpoint serving the adapter folder (what adapter sync gives it). At equal float32
precision the comparison shows what the route itself adds, free of bfloat16 rounding: TRL's engine runs in bfloat16,
where vLLM's LoRA kernel adds the low-rank term to an already-rounded base output (docs/VLLM.md).

Run as ``python vllm_routes_fp32.py MERGED BASE ADAPTER RANK PROMPTS_JSON OUT_JSON``; writes, per route, each
prompt's greedy tokens and the engine's log-prob of each. Its own process: the test's process holds colocated
engines and their torch.distributed state.
"""

from __future__ import annotations

import gc
import json
import os
import sys

MAX_TOKENS = 6


def greedy(llm, prompts: list[list[int]], lora_request=None) -> list[dict[str, list]]:  # type: ignore[no-untyped-def]
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=0)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False,
                           lora_request=lora_request)  # fmt: skip
    found = []
    for output in outputs:
        tokens = list(output.outputs[0].token_ids)
        logprobs = [lp[t].logprob for lp, t in zip(output.outputs[0].logprobs, tokens, strict=True)]
        found.append({"tokens": tokens, "logprobs": logprobs})
    return found


def main(merged: str, base: str, adapter: str, rank: int, prompts_json: str, out_json: str) -> None:
    from vllm import LLM
    from vllm.lora.request import LoRARequest

    with open(prompts_json) as f:
        prompts = json.load(f)
    common = dict(dtype="float32", max_model_len=64, seed=0, enforce_eager=True)  # eager: a LoRA engine is, on CPU
    llm = LLM(model=merged, **common)
    routes = {"merge": greedy(llm, prompts)}
    del llm
    gc.collect()
    llm = LLM(model=base, enable_lora=True, max_lora_rank=rank, max_loras=1, **common)
    routes["adapter"] = greedy(llm, prompts, LoRARequest("trained", 1, adapter))
    with open(out_json, "w") as f:
        json.dump(routes, f)


if __name__ == "__main__":
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    main(*sys.argv[1:4], int(sys.argv[4]), *sys.argv[5:7])
