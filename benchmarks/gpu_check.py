"""Helper of ``benchmarks/gpu_check.sh``: DAPO with and without vLLM (colocate) on a random-weight model built here.

    python benchmarks/gpu_check.py env                                  # GPU, versions; exit 2 without GPU or vLLM
    python benchmarks/gpu_check.py build --out outputs/gpu_check/model  # random-weight Qwen2 (~26M), saved locally
    python benchmarks/gpu_check.py run --mode transformers|vllm --model <dir> --out <dir> [--steps 8]
    python benchmarks/gpu_check.py gsm8k [--model <id or dir>] [--data <id or dir>]  # where the reproduction's are
    python benchmarks/gpu_check.py report --out <dir> [--markdown benchmarks/results/gpu_check.md]

``run`` trains DAPO (dynamic sampling on) for a few steps and measures, in a subclass timing TRL's ``_generate``: generation
throughput (completion tokens per second of generation, weight sync to vLLM included) and the optimizer step time.
It also checks the wiring: every generation round, the first and each dynamic-sampling refill, goes through
``_generate``; with ``--mode vllm`` every completion is a vLLM engine request (none fell back to transformers).
The reward is informative only for prompts with an even answer, so groups are dropped and refill rounds happen.
Completions are forced to full length (``min_tokens`` / ``min_new_tokens``) so both backends generate the same
number of tokens. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
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
    if versions["vllm"] == "not installed":
        print('ERROR: vLLM is not installed. Install it with the repository: pip install -e ".[vllm]" (TRL 1.12 '
              "supports vllm 0.19.0 to 0.27.1).")  # fmt: skip
        return 2
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from trl_ext.demo import DemoModelConfig, build_model, build_tokenizer

    tokenizer = build_tokenizer()
    tokenizer.model_max_length = 512
    config = DemoModelConfig(
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=512,
    )
    if args.tiny:  # CPU dry run of this script
        config = DemoModelConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                 num_key_value_heads=1, max_position_embeddings=512)  # fmt: skip
    model = build_model(tokenizer, config)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(f"saved a random-weight Qwen2 model ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters) "
          f"and the demo tokenizer to {args.out}")  # fmt: skip
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
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ext import DAPOTrainer, get_preset
    from trl_ext.demo import DemoTaskConfig, make_problems

    use_vllm = args.mode == "vllm"
    on_gpu = args.device == "cuda"
    length = args.max_completion_length
    config = get_preset(
        "dapo",
        output_dir=os.path.join(args.out, f"run-{args.mode}"),
        per_device_train_batch_size=args.batch_size,
        num_generations=8,
        max_completion_length=length,
        generation_kwargs={"min_tokens": length} if use_vllm else {"min_new_tokens": length},
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
            return result

    trainer = TimedDAPOTrainer(
        model, [parity_reward], args=config, train_dataset=train, processing_class=AutoTokenizer.from_pretrained(args.model)
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
    }
    path = os.path.join(args.out, f"summary_{args.mode}.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))

    # The wiring checks (fail loudly).
    problems = []
    if len(rounds) != round(logged_rounds):
        problems.append(f"_generate was called {len(rounds)} times but dynamic sampling logged {logged_rounds} rounds")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("env")
    build = sub.add_parser("build")
    build.add_argument("--out", required=True)
    build.add_argument("--tiny", action="store_true", help="a 1-layer model, for a CPU dry run")
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
    commands = {"env": cmd_env, "build": cmd_build, "run": cmd_run, "gsm8k": cmd_gsm8k, "report": cmd_report}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
