"""Helper of ``benchmarks/gpu_check.sh``: the one-go GPU check (``check``) and DAPO with and without vLLM.

    python benchmarks/gpu_check.py check --out outputs/gpu_check [--dry-run]   # the whole check, one report
    python benchmarks/gpu_check.py estimate                             # its GPU time estimate and assumptions
    python benchmarks/gpu_check.py env [--no-vllm]                      # GPU, versions; exit 2 without GPU (or vLLM)
    python benchmarks/gpu_check.py build --out <dir> [--size 25m|0.5b]  # random-weight Qwen2, saved locally
    python benchmarks/gpu_check.py run --mode transformers|vllm --model <dir> --out <dir> [--steps 8]
    python benchmarks/gpu_check.py tokens --out <dir>                   # build 0.5b + run (generation tokens/s)
    python benchmarks/gpu_check.py memory --out <dir>                   # benchmarks/memory.py: GRPO, DAPO, GSPO
    python benchmarks/gpu_check.py gsm8k [--model <id or dir>] [--data <id or dir>]  # where the reproduction's are
    python benchmarks/gpu_check.py report --out <dir> [--markdown benchmarks/results/gpu_check.md]  # vLLM table

``check`` runs, on one CUDA device, without vLLM and without network, each part in its own process group under its
own time limit (one that fails or hangs costs its limit, not the budget), within an 8-minute budget that its own
estimate (``estimate``, from the H200's measured 4,113 tokens/s) must fit before anything starts: the overhead of
ours against TRL's (``overhead.py``, lock-stepped, final weights compared), the dynamic-sampling cost at p = 0.5
(``dynamic_sampling.py``), peak memory of GRPO, DAPO and GSPO (``memory.py``), generation tokens/s of DAPO on a
random Qwen2 of Qwen2.5-0.5B's shape in bf16 (``tokens``), and the dynamic-sampling scale benchmark at one process
(``ds_scale.py``, where it exists). The trainer benchmarks train on the GPU through ``TRL_EXT_BENCH_DEVICE=cuda``.
It writes one report, ``<out>/gpu_check.md``, which says which parts failed; ``--dry-run`` shrinks every size so
that the same steps run on a CPU in a few minutes.

``run`` trains DAPO (dynamic sampling on) for a few steps and measures, in a subclass timing TRL's ``_generate``: generation
throughput (completion tokens per second of generation, weight sync to vLLM included) and the optimizer step time.
It also checks the wiring: every generation round, the first and each dynamic-sampling refill, goes through
``_generate``; with ``--mode vllm`` every completion is a vLLM engine request (none fell back to transformers).
The reward is informative only for prompts with an even answer, so groups are dropped and refill rounds happen.
Completions are forced to full length (``min_tokens`` / ``min_new_tokens``) so both backends generate the same
number of tokens. A model whose vocabulary is larger than the tokenizer's (the 0.5b build) samples only the
tokenizer's ids (``suppress_tokens``). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def cmd_env(args: argparse.Namespace) -> int:
    import torch

    versions = {p: _version(p) for p in ("torch", "transformers", "trl", "accelerate", "vllm", "deepspeed")}
    print("python", platform.python_version(), "|", " | ".join(f"{k} {v}" for k, v in versions.items()))
    if not torch.cuda.is_available():
        print("ERROR: no CUDA GPU visible (torch.cuda.is_available() is False). Run this on a GPU machine.")
        return 2
    print(f"GPU: {torch.cuda.get_device_name(0)} ({torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB)")
    if versions["vllm"] == "not installed" and not getattr(args, "no_vllm", False):
        print('ERROR: vLLM is not installed. Install it with the repository: pip install -e ".[vllm]" (TRL 1.12 '
              "supports vllm 0.19.0 to 0.27.1).")  # fmt: skip
        return 2
    return 0


#: Random Qwen2 shapes for ``build --size``: ``0.5b`` is Qwen2.5-0.5B's (494M parameters with its 151,936-token
#: vocabulary, tied embeddings), ``0.5b-tiny`` the same build shrunk for a CPU dry run; the demo tokenizer is used, and
#: generation is kept to its ids.
LARGE_SHAPES = {
    "0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, rope_theta=1e6),
    "0.5b-tiny": dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, rope_theta=1e6),
}  # fmt: skip


def build_large(tokenizer, size: str):
    """A random-weight Qwen2 of ``LARGE_SHAPES[size]`` from a config (no download), initialised on the GPU when
    there is one, in bf16."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        **LARGE_SHAPES[size],
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def cmd_build(args: argparse.Namespace) -> int:
    from trl_ext.demo import DemoModelConfig, build_model, build_tokenizer

    tokenizer = build_tokenizer()
    tokenizer.model_max_length = 512
    size = "tiny" if getattr(args, "tiny", False) else getattr(args, "size", None) or "25m"
    config = DemoModelConfig(
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=512,
    )
    if size == "tiny":  # CPU dry run of this script
        config = DemoModelConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                 num_key_value_heads=1, max_position_embeddings=512)  # fmt: skip
    model = build_large(tokenizer, size) if size in LARGE_SHAPES else build_model(tokenizer, config)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(f"saved a random-weight Qwen2 model ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
          f"{size}) and the demo tokenizer to {args.out}")  # fmt: skip
    return 0


def cmd_gsm8k(args: argparse.Namespace) -> int:
    """Where the GSM8K reproduction finds its model and data: print ``MODEL=<path or id>`` and ``DATA=<folder>`` for
    the shell, from ``--model`` / ``--data`` (a snapshot of ``openai/gsm8k``, whose ``main`` configuration the recipe
    names) or the local Hugging Face cache (nothing is downloaded); exit 3 naming
    what is missing. ``--write_demo <folder>``: a GSM8K-layout folder of the demo's arithmetic (the CPU dry run)."""
    if args.write_demo:
        from trl_ext.demo import DemoTaskConfig, make_problems

        train, test = make_problems(DemoTaskConfig(num_train=256, num_eval=32))
        os.makedirs(args.write_demo, exist_ok=True)
        for split, rows in (("train", train), ("test", test)):
            with open(os.path.join(args.write_demo, f"{split}.jsonl"), "w") as f:
                for prompt, answer in zip(rows["prompt"], rows["answer"], strict=True):
                    f.write(json.dumps({"question": prompt, "answer": f"{prompt}{answer}\n#### {answer}"}) + "\n")
        print(f"DATA={args.write_demo}")
        return 0
    from huggingface_hub import snapshot_download

    found = {}
    for key, given, repo_type in (("MODEL", args.model, "model"), ("DATA", args.data, "dataset")):
        if os.path.isdir(given):
            found[key] = given
            continue
        try:
            found[key] = snapshot_download(given, repo_type=repo_type, local_files_only=True)
        except Exception:
            print(f"SKIPPED: {given} ({repo_type}) is neither a local folder nor in the Hugging Face cache, and this "
                  "check downloads nothing. Copy it to the machine and set GPU_CHECK_QWEN / GPU_CHECK_GSM8K.")  # fmt: skip
            return 3
    print("\n".join(f"{key}={value}" for key, value in found.items()))
    return 0


def parity_reward(completions, answer, **kwargs):
    """1 when the completion starts with an odd digit, but only for even answers: odd-answer groups are all 0."""
    return [float(c[:1] in "13579") if int(a) % 2 == 0 else 0.0 for c, a in zip(completions, answer, strict=True)]


def cmd_run(args: argparse.Namespace) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from trl_ext import DAPOTrainer, get_preset
    from trl_ext.demo import DemoTaskConfig, make_problems

    use_vllm = args.mode == "vllm"
    on_gpu = args.device == "cuda"
    length = args.max_completion_length
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    vocab = AutoConfig.from_pretrained(args.model).vocab_size
    generation_kwargs = {"min_tokens": length} if use_vllm else {"min_new_tokens": length}
    if vocab > len(tokenizer):  # the 0.5b build: sample only ids the tokenizer can decode
        generation_kwargs["suppress_tokens"] = list(range(len(tokenizer), vocab))
    config = get_preset(
        "dapo",
        output_dir=os.path.join(args.out, f"run-{args.mode}"),
        per_device_train_batch_size=args.batch_size,
        num_generations=8,
        max_completion_length=length,
        generation_kwargs=generation_kwargs,
        vllm_importance_sampling_correction=False,  # min_tokens would bias it (trl-ext then keeps it from vLLM)
        soft_overlong_punishment=False,  # every completion is full length here
        dynamic_sampling_max_generation_batches=4,
        num_minibatches=1,  # one rollout per optimizer step: the check compares generation paths, not updates
        temperature=1.0,
        learning_rate=1e-5,
        max_steps=args.steps,
        logging_steps=1,
        seed=0,
        bf16=on_gpu,
        use_cpu=not on_gpu,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        use_vllm=use_vllm,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        vllm_max_model_length=length + 32,
    )
    train, _ = make_problems(DemoTaskConfig(max_operand=99, num_train=2000, num_eval=200))
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16 if on_gpu else torch.float32)
    rounds: list[tuple[float, int]] = []
    unknown: list[int] = []  # completion ids the tokenizer cannot decode, per round

    class TimedDAPOTrainer(DAPOTrainer):
        """Times and counts every generation round (TRL's ``_generate``, refills included): a subclass, not a patch."""

        def _generate(self, prompts):
            if on_gpu:
                torch.cuda.synchronize()
            started = time.perf_counter()
            result = super()._generate(prompts)
            if on_gpu:
                torch.cuda.synchronize()
            rounds.append((time.perf_counter() - started, sum(len(ids) for ids in result[1])))
            unknown.append(sum(int(i) >= len(tokenizer) for ids in result[1] for i in ids))
            return result

    trainer = TimedDAPOTrainer(
        model, [parity_reward], args=config, train_dataset=train, processing_class=tokenizer
    )  # fmt: skip
    # With vLLM every completion is one engine request: the engine's counter shows no round fell back to transformers
    requests = (lambda: trainer.vllm_generation.llm.request_counter.counter) if use_vllm else (lambda: 0)
    requests_before = requests()

    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started

    logs = [h for h in trainer.state.log_history if "dynamic_sampling/rounds" in h]
    logged_rounds = sum(h["dynamic_sampling/rounds"] for h in logs)
    step_times = [h["step_time"] for h in logs if "step_time" in h]
    steady = step_times[1:] or step_times  # the first step includes warm-up (CUDA graphs, first weight sync)
    gen_seconds, gen_tokens = sum(s for s, _ in rounds), sum(n for _, n in rounds)
    summary = {
        "mode": "vLLM colocate" if use_vllm else "transformers",
        "parameters": sum(p.numel() for p in trainer.model.parameters()),
        "device": torch.cuda.get_device_name(0) if on_gpu else "CPU",
        "dtype": "bf16" if on_gpu else "fp32",
        "prompts_x_completions": f"{args.batch_size // 8} x 8",
        "completion_tokens": length,
        "steps": trainer.state.global_step,
        "generation_rounds": len(rounds),
        "rounds_per_step": logged_rounds / max(len(logs), 1),
        "kept_group_frac": sum(h["dynamic_sampling/kept_group_frac"] for h in logs) / max(len(logs), 1),
        "generated_tokens": gen_tokens,
        "generation_s": gen_seconds,
        "generation_tokens_per_s": gen_tokens / gen_seconds if gen_seconds else float("nan"),
        "step_time_s": sum(steady) / len(steady) if steady else wall / max(trainer.state.global_step, 1),
        "train_wall_s": wall,
        "vllm_engine_requests": requests() - requests_before if use_vllm else None,
        "completion_ids_outside_tokenizer": sum(unknown),
    }
    path = os.path.join(args.out, f"summary_{args.mode}.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))

    # The wiring checks (fail loudly).
    problems = []
    if len(rounds) != round(logged_rounds):
        problems.append(f"_generate was called {len(rounds)} times but dynamic sampling logged {logged_rounds} rounds")
    if sum(unknown):
        problems.append(f"{sum(unknown)} completion ids lie outside the tokenizer's {len(tokenizer)} ids")
    if logged_rounds <= trainer.state.global_step:
        problems.append("no refill round happened: the check did not exercise dynamic sampling's extra rounds")
    completions = sum(round(h["dynamic_sampling/generated_groups"]) for h in logs) * config.num_generations
    if use_vllm and summary["vllm_engine_requests"] != completions:
        problems.append(f"{completions} completions generated but {summary['vllm_engine_requests']} vLLM requests")
    for problem in problems:
        print("CHECK FAILED:", problem)
    if not problems:
        print(f"CHECK OK: {len(rounds)} generation rounds ({len(rounds) - trainer.state.global_step} refills), all "
              f"through TRL's _generate{' and the vLLM engine' if use_vllm else ''}")  # fmt: skip
    return 1 if problems else 0


def cmd_report(args: argparse.Namespace) -> int:
    import torch

    runs = {}
    for mode in ("transformers", "vllm"):
        path = os.path.join(args.out, f"summary_{mode}.json")
        if os.path.exists(path):
            with open(path) as f:
                runs[mode] = json.load(f)
    if not runs:
        print(f"no summaries under {args.out}")
        return 1
    rows = [
        ("generation throughput (tokens/s)", "generation_tokens_per_s", "{:,.0f}"),
        ("mean optimizer step time (s)", "step_time_s", "{:.2f}"),
        ("generation time, all rounds (s)", "generation_s", "{:.1f}"),
        ("generation rounds (refills incl.)", "generation_rounds", "{}"),
        ("rounds per step (dynamic sampling)", "rounds_per_step", "{:.2f}"),
        ("kept-group fraction", "kept_group_frac", "{:.2f}"),
        ("completion tokens generated", "generated_tokens", "{:,}"),
        ("vLLM engine requests", "vllm_engine_requests", "{}"),
    ]
    modes = [m for m in ("transformers", "vllm") if m in runs]
    header = ["", *(runs[m]["mode"] for m in modes)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, key, fmt in rows:
        cells = [fmt.format(runs[m][key]) if runs[m].get(key) is not None else "-" for m in modes]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if len(modes) == 2:
        speedup = runs["vllm"]["generation_tokens_per_s"] / runs["transformers"]["generation_tokens_per_s"]
        lines.append(f"\nvLLM generation speed-up: {speedup:.1f}x; step time ratio (transformers / vLLM): "
                     f"{runs['transformers']['step_time_s'] / runs['vllm']['step_time_s']:.1f}x")  # fmt: skip
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    versions = ", ".join(f"{p} {_version(p)}" for p in ("torch", "transformers", "trl", "vllm"))
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"# GPU check: DAPO with and without vLLM (`benchmarks/gpu_check.sh`)\n\n{device}; {versions}; "
                    f"{time.strftime('%Y-%m-%d')}.\n\n{table}\n")  # fmt: skip
        print(f"written to {args.markdown}")
    return 0


# --------------------------------------------------------------------------------------------------------------------
# The one-go check: parts, their GPU time estimate, their runner and the report
# --------------------------------------------------------------------------------------------------------------------

BUDGET_S = 480  # 8 minutes on one CUDA device, the report included
REPORT_S = 15  # kept back from the budget for writing the report

#: The assumptions of the GPU time estimate (seconds unless named otherwise). Measured on the lent H200
#: (results/gpu_check_transformers.md): 4,113 generation tokens/s for the 25.2M, 8-layer Qwen2 of ``build``, which is
#: 337,920 tokens in 82.2 s over 18 rounds of 128 decode steps, i.e. 35.7 ms per decode step. The rest are assumed,
#: each on the slow side.
ASSUMED = {
    "h200_tokens_per_s_25m": 4113.0,  # measured, 8 layers, bf16
    "decode_step_s": 82.2 / (18 * 128),  # measured on the H200 for 8 layers; taken for the 3-layer demo model too
    "process_start_s": 20.0,  # import torch, transformers, TRL and open a CUDA context, per process
    "check_start_s": 10.0,  # the check's own process: import torch, name the device
    "warm_start_s": 60.0,  # the demo's SFT warm start, 600 steps of the 0.6M model (15 s on 2 CPU cores)
    "trainer_build_s": 2.0,  # one trainer construction of the demo model
    "tiny_train_s": 0.1,  # the demo model's loss, backward and update in one optimizer step
    "build_0_5b_s": 30.0,  # build the 0.5B random model, save it (bf16) and load it back
    "train_0_5b_s": 3.0,  # one 0.5B optimizer step (bf16 forward, backward, AdamW) on 128 x ~70 tokens
    "memory_worker_s": 30.0,  # one memory.py worker: start, one step of its 100M model (the three run at once)
    "ds_scale_s": 60.0,  # ds_scale.py --world-sizes 1 --trainer-worlds 1 --quick (~40 s on 2 CPU cores; its limit bounds it)
}
LAYERS_25M, LAYERS_0_5B = 8, 24
DEMO_TOKENS = 6  # the demo's max_completion_length (recipes/configs/demo/dapo/config_demo.yaml)
#: What the GPU run measures (the dry run shrinks each).
GPU = {
    "overhead": {"pairs": 3, "steps": 4, "comparisons": {"dapo": 1, "gspo": 4}},  # name: steps per generation
    "ds_cost": {"ps": (0.0, 0.5), "steps": 4, "configs": {"dapo": 1, "grpo_kl": 1, "gspo": 4}},
    "memory": {"methods": ("grpo", "dapo", "gspo")},
    "tokens": {"steps": 2, "batch_size": 128, "max_completion_length": 64, "max_generation_batches": 4},
}


def _cycles(steps: int, spg: int) -> int:
    return -(-steps // spg) * spg


def estimate() -> tuple[dict[str, float], list[str]]:
    """Seconds each part of ``check`` should take on one GPU, and how each figure is reached."""
    a, notes = ASSUMED, []
    start, step = a["process_start_s"], DEMO_TOKENS * a["decode_step_s"] + a["tiny_train_s"]
    o = GPU["overhead"]
    turns = sum(2 * ((2 * s + 1) + o["pairs"] * (s + _cycles(o["steps"], s) + 1)) for s in o["comparisons"].values())
    builds = (len(o["comparisons"]) * (1 + o["pairs"])) * a["trainer_build_s"]  # per worker, the 2 in parallel
    parts = {"overhead": 2 * start + a["warm_start_s"] + turns * step + builds}
    notes.append(f"overhead: {turns} lock-stepped optimizer steps x {step:.2f} s ({DEMO_TOKENS} decode steps x "
                 f"{a['decode_step_s'] * 1e3:.1f} ms + {a['tiny_train_s']} s), warm start {a['warm_start_s']:.0f} s, "
                 f"{builds:.0f} s of trainer builds, 2 process starts")  # fmt: skip
    d = GPU["ds_cost"]
    per_worker = sum(s + _cycles(d["steps"], s) + 1 for s in d["configs"].values())
    # a step generates 1/(1-p) rounds' worth at p (the ideal; measured within 10% on CPU)
    generation = sum(1 / (1 - p) for p in d["ps"]) * per_worker * DEMO_TOKENS * a["decode_step_s"]
    ds = (
        2 * start
        + generation
        + per_worker * len(d["ps"]) * a["tiny_train_s"]
        + len(d["configs"]) * a["trainer_build_s"]
    )
    parts["ds_cost"] = ds
    notes.append(f"ds_cost: {per_worker} steps per p at p = {', '.join(f'{p:g}' for p in d['ps'])}, generation "
                 "1/(1-p) rounds per step; warm start cached by the overhead part")  # fmt: skip
    parts["memory"] = start + a["memory_worker_s"]
    notes.append(f"memory: {len(GPU['memory']['methods'])} workers at once, {a['memory_worker_s']:.0f} s each")
    t = GPU["tokens"]
    tokens_per_s = a["h200_tokens_per_s_25m"] * LAYERS_25M / LAYERS_0_5B
    worst = t["steps"] * t["max_generation_batches"] * t["batch_size"] * t["max_completion_length"]
    parts["tokens"] = start + a["build_0_5b_s"] + worst / tokens_per_s + t["steps"] * a["train_0_5b_s"]
    notes.append(f"tokens: {tokens_per_s:,.0f} tokens/s at 0.5B (the H200's {a['h200_tokens_per_s_25m']:,.0f} x "
                 f"{LAYERS_25M}/{LAYERS_0_5B} layers: decode-step time taken as proportional to depth, although part "
                 f"of it is fixed per step), {worst:,} tokens at most ({t['steps']} steps x "
                 f"{t['max_generation_batches']} generation batches x {t['batch_size']} x "
                 f"{t['max_completion_length']} tokens)")  # fmt: skip
    parts["ds_scale"] = a["ds_scale_s"]
    notes.append(f"ds_scale: {a['ds_scale_s']:.0f} s assumed (its own benchmark; bounded by its limit)")
    parts["start"], parts["report"] = a["check_start_s"], REPORT_S
    notes.append(f"start: {a['check_start_s']:.0f} s for the check's own process; report: {REPORT_S} s")
    return {name: math.ceil(seconds) for name, seconds in parts.items()}, notes


@dataclass
class Part:
    name: str
    title: str
    argv: list[str]  # run as ``python <argv>`` from the repository root, in its own process group
    limit_s: int
    estimate_s: int = 0
    needs: str | None = None  # a file that must exist, else the part is skipped (not a failure)


def plan(out: str, dry_run: bool) -> list[Part]:
    """The parts of ``check``, GPU sizes or (``dry_run``) the smallest that run the same code on a CPU."""
    seconds, _ = estimate()
    cache = ["--cache-dir", os.path.join(out, "warm-start")]
    small = ["--prompts-per-step", "2", "--warm-start-steps", "5"] if dry_run else []
    o, d = GPU["overhead"], GPU["ds_cost"]
    overhead = (
        ["--pairs", "1", "--steps", "1"] if dry_run else ["--pairs", str(o["pairs"]), "--steps", str(o["steps"])]
    )
    ds = (
        ["--steps", "1", "--configs", "dapo"]
        if dry_run
        else ["--steps", str(d["steps"]), "--configs", ",".join(d["configs"])]
    )
    tokens = ["--dry-run"] if dry_run else []
    parts = [
        Part("overhead", "Overhead: ours / TRL, lock-stepped, final weights compared",
             ["benchmarks/overhead.py", *overhead, "--comparisons", ",".join(o["comparisons"]), *small, *cache,
              "--out", os.path.join(out, "overhead")], 240),
        Part("ds_cost", "Dynamic-sampling cost at p = 0.5",
             ["benchmarks/dynamic_sampling.py", "--ps", ",".join(f"{p:g}" for p in d["ps"]), "--reps", "1", *ds,
              *small, *cache, "--out", os.path.join(out, "ds_cost")], 120),
        Part("memory", "Peak memory of one step: GRPO, DAPO, GSPO",
             ["benchmarks/gpu_check.py", "memory", "--out", os.path.join(out, "memory"), *tokens], 90),
        Part("tokens", "Generation tokens/s: DAPO on a random Qwen2 of Qwen2.5-0.5B's shape, bf16",
             ["benchmarks/gpu_check.py", "tokens", "--out", os.path.join(out, "tokens"), *tokens], 180),
        Part("ds_scale", "Dynamic-sampling scale benchmark at one process",
             ["benchmarks/ds_scale.py", "--world-sizes", "1", "--trainer-worlds", "1", "--quick",
              "--out", os.path.join(out, "ds_scale")], 90,
             needs="benchmarks/ds_scale.py"),
    ]  # fmt: skip
    for part in parts:
        part.estimate_s = seconds[part.name]
        part.limit_s = max(part.limit_s, math.ceil(1.25 * part.estimate_s))
        if dry_run:  # a shared 2-core CPU: generous limits, no 8-minute budget
            part.limit_s = 600
    return parts


def cmd_estimate(args: argparse.Namespace) -> int:
    """Print the GPU time estimate and its assumptions; exit 1 when it exceeds the budget."""
    seconds, notes = estimate()
    total = sum(seconds.values())
    for name, value in seconds.items():
        print(f"  {name:<10} {value:>4} s")
    print(f"  {'total':<10} {total:>4} s (budget {BUDGET_S} s)")
    print("assumptions:\n" + "\n".join(f"  - {note}" for note in notes))
    if total > BUDGET_S:
        print(f"ESTIMATE OVER BUDGET: {total} s > {BUDGET_S} s")
        return 1
    print(f"ESTIMATE OK: {total} s <= {BUDGET_S} s")
    return 0


def _run_part(part: Part, limit: float, log_path: str, env: dict) -> tuple[str, float]:
    """Run one part in its own process group under ``limit`` seconds; its status and wall time."""
    started = time.time()
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, *part.argv], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                   env=env, start_new_session=True)  # fmt: skip
        try:
            code = process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):  # the part and every worker it spawned
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    process.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
            return f"TIMED OUT after {limit:.0f} s", time.time() - started
    return ("ok" if code == 0 else f"FAILED (exit {code})"), time.time() - started


def _tail(path: str, lines: int = 25) -> list[str]:
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()[-lines:]
    except OSError:
        return []


def _table_after(path: str, heading: str) -> list[str]:
    """The first markdown table after ``heading`` in a benchmark's report (its own rendering, reused)."""
    with open(path) as f:
        text = f.read()
    lines = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def _section(part: Part, out: str) -> list[str]:
    """The figures of one part that ran, in markdown."""
    folder = os.path.join(out, part.name)
    if part.name == "overhead":
        return [*_table_after(os.path.join(folder, "overhead.md"), "## Step-time ratio"), "",
                "Ratio of step times, ours / TRL, median over lock-stepped pairs [IQR]; `identical final weights` "
                "compares the two arms' weights bit for bit (on CUDA with deterministic kernels). Full report: "
                "`overhead/overhead.md`."]  # fmt: skip
    if part.name == "ds_cost":
        return [*_table_after(os.path.join(folder, "dynamic_sampling.md"), "## Generation rounds and time per kept"),
                "", "A fraction p of the groups is uninformative; the ideal is 1/(1-p) groups generated per kept group "
                "(2.00 at p = 0.5). Full report: `ds_cost/dynamic_sampling.md`."]  # fmt: skip
    if part.name == "memory":
        with open(os.path.join(folder, "memory.json")) as f:
            data = json.load(f)
        rows = ["| method | CUDA peak allocated (MiB) | host peak RSS (MiB) | host training RSS (MiB) | wall (s) |",
                "|---|---:|---:|---:|---:|"]  # fmt: skip
        for r in data["results"]:
            cuda = f"{r['cuda_peak_mib']:,.0f}" if r.get("cuda_peak_mib") is not None else "- (CPU)"
            rows.append(f"| {r['method']} | {cuda} | {r['peak_mib']:,.0f} | {r['train_mib']:,.0f} | "
                        f"{r['seconds']:.1f} |")  # fmt: skip
        return [f"One optimizer step of `benchmarks/memory.py`'s {data['size']} model ({data['params'] / 1e6:.1f}M "
                "parameters, fp32, AdamW, 16 sequences), each method in its own process.", "", *rows]  # fmt: skip
    if part.name == "tokens":
        with open(os.path.join(folder, "summary_transformers.json")) as f:
            r = json.load(f)
        rows = ["| model | device, dtype | prompts x completions, tokens | steps | generation rounds | tokens "
                "generated | generation tokens/s | step time (s) |", "|---|---|---|---:|---:|---:|---:|---:|",
                f"| random Qwen2, {r['parameters'] / 1e6:,.2f}M parameters | {r['device']}, {r['dtype']} | "
                f"{r['prompts_x_completions']}, {r['completion_tokens']} | {r['steps']} | {r['generation_rounds']} | "
                f"{r['generated_tokens']:,} | **{r['generation_tokens_per_s']:,.0f}** | {r['step_time_s']:.2f} |"]  # fmt: skip
        return [*rows, "", "DAPO with dynamic sampling, transformers generation (TRL's `_generate` timed in a "
                "subclass); completions forced to full length. Log: `tokens.log`."]  # fmt: skip
    markdowns = sorted(n for n in os.listdir(folder) if n.endswith(".md")) if os.path.isdir(folder) else []
    lines = []
    for name in markdowns:  # ds_scale: its own report, headings demoted under this section
        with open(os.path.join(folder, name)) as f:
            body = f.read().splitlines()
        lines += [f"`ds_scale/{name}`:", "", *("#" + x if x.startswith("#") else x for x in body[:80]), ""]
    return lines or [f"(no report under `{part.name}/`; its log is `{part.name}.log`)"]


def cmd_check(args: argparse.Namespace) -> int:
    """Every part in turn, each under its own limit and within the budget; then the one report."""
    import torch

    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    started = time.time()
    parts = plan(out, args.dry_run)
    budget = 2400 if args.dry_run else BUDGET_S
    print(f"== GPU time estimate ({'dry run: the GPU run is what is estimated' if args.dry_run else 'this run'})")
    estimate_ok = cmd_estimate(args) == 0
    if not estimate_ok and not args.dry_run:
        return 1
    on_gpu = torch.cuda.is_available() and not args.dry_run
    if not on_gpu and not args.dry_run:
        print("ERROR: no CUDA GPU visible (torch.cuda.is_available() is False); --dry-run runs the check on a CPU.")
        return 2
    device = f"{torch.cuda.get_device_name(0)}" if on_gpu else "CPU (dry run: every size shrunk)"
    versions = ", ".join(f"{p} {_version(p)}" for p in ("torch", "transformers", "trl", "accelerate"))
    print(f"device: {device}; python {platform.python_version()}, {versions}", flush=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled", "PYTHONWARNINGS": "ignore"}  # fmt: skip
    if on_gpu:
        env["TRL_EXT_BENCH_DEVICE"] = "cuda"  # benchmarks/_common.py, memory.py: train on the GPU
        env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic GEMMs: the arms' weights comparable
    results = []
    for part in parts:
        left = budget - REPORT_S - (time.time() - started)
        log = os.path.join(out, f"{part.name}.log")
        if part.needs and not os.path.exists(os.path.join(ROOT, part.needs)):
            status, took, limit = f"skipped: `{part.needs}` does not exist", 0.0, 0
        elif left < 10:
            status, took, limit = "skipped: the budget was spent", 0.0, 0
        else:
            limit = min(part.limit_s, left)
            print(f"\n== {part.title} (limit {limit:.0f} s, {time.time() - started:.0f} s elapsed)", flush=True)
            status, took = _run_part(part, limit, log, env)
            print(f"{status} in {took:.0f} s (log: {log})", flush=True)
            if status != "ok":
                print("\n".join(_tail(log)))
        results.append((part, status, took, limit))

    sections = {}
    for index, (part, status, took, limit) in enumerate(results):
        if status == "ok":
            try:
                sections[part.name] = _section(part, out)
            except (OSError, KeyError, ValueError, StopIteration, IndexError) as error:
                status = "FAILED: ran, but its figures could not be read"
                sections[part.name] = [f"**Ran, but its figures could not be read**: {error!r}"]
                results[index] = (part, status, took, limit)
        else:
            sections[part.name] = [f"**{status}**" if not status.startswith("skipped") else status]
            if not status.startswith("skipped"):
                sections[part.name] += ["", "```", *_tail(os.path.join(out, f"{part.name}.log")), "```"]
    failed = [part.name for part, status, _, _ in results if status != "ok" and not status.startswith("skipped: `")]
    lines = [
        "# GPU check (`benchmarks/gpu_check.sh`)",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; device: {device}",
        f"- versions: python {platform.python_version()}, {versions}",
        f"- command: `bash benchmarks/gpu_check.sh{' --dry-run' if args.dry_run else ''}`; no vLLM, no network",
        "",
        "## Parts",
        "",
        "| part | status | GPU estimate (s) | limit (s) | took (s) |",
        "|---|---|---:|---:|---:|",
    ]
    for part, status, took, limit in results:
        lines.append(f"| {part.name} | {status} | {part.estimate_s} | {limit:.0f} | {took:.0f} |")
    total = sum(estimate()[0].values())
    lines += ["", f"GPU time estimate {total} s of a {BUDGET_S} s budget ({'within' if estimate_ok else 'OVER'}); "
              f"measured here {time.time() - started:.0f} s. "
              + (f"**Failed: {', '.join(failed)}.**" if failed else "Every part that ran passed.")]  # fmt: skip
    for part, *_ in results:
        lines += ["", f"## {part.title}", "", *sections[part.name]]
    _, notes = estimate()
    lines += ["", "## Time estimate", "", *(f"- {note}" for note in notes)]
    path = os.path.join(out, "gpu_check.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"\n== report: {path} ({time.time() - started:.0f} s)")
    print("CHECK OK: every part passed" if not failed else f"CHECK FAILED: {', '.join(failed)}")
    return 1 if failed else 0


def cmd_tokens(args: argparse.Namespace) -> int:
    """Build the 0.5B-shape random Qwen2 (``--dry-run``: its tiny twin) and run DAPO on it, transformers mode."""
    t = GPU["tokens"]
    model = os.path.join(args.out, "model")
    size, device = ("0.5b-tiny", "cpu") if args.dry_run else ("0.5b", "cuda")
    cmd_build(argparse.Namespace(out=model, size=size))
    steps, batch, length = (2, 16, 8) if args.dry_run else (t["steps"], t["batch_size"], t["max_completion_length"])
    run = argparse.Namespace(mode="transformers", model=model, out=args.out, steps=steps, batch_size=batch,
                             max_completion_length=length, device=device)  # fmt: skip
    return cmd_run(run)


def cmd_memory(args: argparse.Namespace) -> int:
    """``benchmarks/memory.py``'s GRPO, DAPO and GSPO workers at once (each its own process and peak)."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import memory

    size = "quick" if args.dry_run else "full"
    methods = GPU["memory"]["methods"]
    with tempfile.TemporaryDirectory() as checkpoint:
        params = memory.build_checkpoint(size, checkpoint)
        with ThreadPoolExecutor(max_workers=len(methods)) as pool:
            results = list(pool.map(lambda method: memory._spawn(method, checkpoint), methods))
    with open(os.path.join(args.out, "memory.json"), "w") as f:
        json.dump({"size": size, "params": params, "results": results}, f, indent=1)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="the one-go GPU check: every part, one report (gpu_check.md)")
    check.add_argument("--out", required=True)
    check.add_argument("--dry-run", action="store_true", help="every size shrunk: the same parts on a CPU")
    sub.add_parser("estimate", help="the GPU time estimate of check and its assumptions")
    env = sub.add_parser("env")
    env.add_argument("--no-vllm", action="store_true", help="a missing vLLM is not an error")
    build = sub.add_parser("build")
    build.add_argument("--out", required=True)
    build.add_argument("--size", choices=["25m", "0.5b", "0.5b-tiny"], default="25m")
    build.add_argument("--tiny", action="store_true", help="a 1-layer model, for a CPU dry run")
    for name in ("tokens", "memory"):
        part = sub.add_parser(name)
        part.add_argument("--out", required=True)
        part.add_argument("--dry-run", action="store_true", help="the smallest sizes, on the CPU")
    run = sub.add_parser("run")
    run.add_argument("--mode", choices=["transformers", "vllm"], required=True)
    run.add_argument("--model", required=True)
    run.add_argument("--out", required=True)
    run.add_argument("--steps", type=int, default=8)
    run.add_argument("--batch_size", type=int, default=128, help="completions per step (16 prompts x 8)")
    run.add_argument("--max_completion_length", type=int, default=128)
    run.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: dry run, transformers only")
    gsm8k = sub.add_parser("gsm8k")
    gsm8k.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    gsm8k.add_argument("--data", default="openai/gsm8k")
    gsm8k.add_argument("--write_demo", default=None, help="write a GSM8K-layout demo folder here (dry run)")
    report = sub.add_parser("report")
    report.add_argument("--out", required=True)
    report.add_argument("--markdown", default=None)
    args = parser.parse_args(argv)
    os.makedirs(getattr(args, "out", None) or ".", exist_ok=True)
    commands = {"env": cmd_env, "build": cmd_build, "run": cmd_run, "gsm8k": cmd_gsm8k, "report": cmd_report,
                "check": cmd_check, "estimate": cmd_estimate, "tokens": cmd_tokens, "memory": cmd_memory}  # fmt: skip
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
