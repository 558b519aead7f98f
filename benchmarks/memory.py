"""Peak memory of one training step of PPO, GRPO, DAPO, GSPO and DPO on the same model, in one run.

    python benchmarks/memory.py              # ~100M-parameter Qwen2-style model, a few minutes on 2 CPU cores
    python benchmarks/memory.py --quick      # tiny model, under 2 minutes (what the test runs)

Each method runs in its own subprocess (so that one method's allocations cannot hide in another's peak) through the
trainers the recipes use: TRL's ``PPOTrainer`` (policy + value model + reference, rule-based reward through
``trl_ext.ppo.RuleRewardModel``, and once more with a trained-reward-model-sized ``AutoModelForSequenceClassification``),
``trl_ext.grpo.trainers.GRPOTrainer`` / ``DAPOTrainer`` / ``GSPOTrainer`` with their presets (GRPO keeps a reference for
its KL term, beta 0.04; DAPO and GSPO have none, beta 0; GRPO once more with a reward model of the policy's size in
place of the rule reward, as ``--reward_funcs <folder>`` runs it), and ``trl_ext.dpo.DPOTrainer`` (policy + reference). Every
method sees the same checkpoint (random weights, saved once), the demo's arithmetic prompts and reward, 16 sequences
per step, fp32 weights and AdamW. The peak is the process's ``ru_maxrss`` (all of it: weights, gradients, optimizer
state, activations, generation), and "training memory" subtracts the RSS measured after the imports and before any
model is loaded, so that the ~0.5 GiB of Python, torch and TRL does not flatten the ratios. The CPU allocator returns
freed memory lazily, so this is an upper bound of what a GPU's allocator would report, for every method alike.
With ``TRL_EXT_BENCH_DEVICE=cuda`` (``benchmarks/gpu_check.sh``) the methods train on the GPU and each worker also
reports ``torch.cuda.max_memory_allocated`` (``cuda_peak_mib``).

The results table (with machine, versions, date and command) is printed and written to
``benchmarks/results/memory.md`` (``--output``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

SIZES = {  # Qwen2-style decoder over the demo's character vocabulary
    "full": dict(
        hidden_size=768, intermediate_size=2048, num_hidden_layers=14, num_attention_heads=12, num_key_value_heads=12
    ),
    "quick": dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    ),
}
METHODS = ["ppo", "ppo_reward_model", "grpo", "grpo_reward_model", "dapo", "gspo", "dpo"]
LABELS = {
    "ppo": "PPO (rule reward)",
    "ppo_reward_model": "PPO (reward model)",
    "grpo": "GRPO (beta 0.04)",
    "grpo_reward_model": "GRPO (beta 0.04, reward model)",
    "dapo": "DAPO",
    "gspo": "GSPO",
    "dpo": "DPO",
}
SEQUENCES_PER_STEP = 16
NUM_GENERATIONS = 8


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _common(output_dir: str) -> dict:
    return dict(
        output_dir=output_dir,
        report_to="none",
        save_strategy="no",
        use_cpu=os.environ.get("TRL_EXT_BENCH_DEVICE") != "cuda",  # benchmarks/_common.py: DEVICE_ENV
        bf16=False,
        disable_tqdm=True,
        logging_steps=1,
        learning_rate=1e-5,
        seed=0,
    )


def build_checkpoint(size: str, path: str) -> int:
    """Save the benchmark model (random weights) and the demo tokenizer; returns the parameter count."""
    from trl_ext.demo import DemoModelConfig, build_model, build_tokenizer

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, DemoModelConfig(**SIZES[size], max_position_embeddings=64))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def _prompts():
    from trl_ext.demo import DemoTaskConfig, make_problems

    train, _ = make_problems(DemoTaskConfig())
    return train.select(range(64))


def _run_ppo(path: str, output_dir: str, with_reward_model: bool) -> None:
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    from trl_ext.demo import build_tokenizer
    from trl_ext.ppo import RuleRewardModel, tokenize_prompts
    from trl_ext.rewards import arithmetic_reward

    tokenizer = build_tokenizer()
    prompts = _prompts()
    policy = AutoModelForCausalLM.from_pretrained(path)
    value = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    if with_reward_model:
        reward = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    else:
        reward = RuleRewardModel([arithmetic_reward], tokenizer, prompts)
    args = PPOConfig(
        **_common(output_dir),
        per_device_train_batch_size=SEQUENCES_PER_STEP,
        total_episodes=SEQUENCES_PER_STEP,
        num_ppo_epochs=1,
        num_mini_batches=1,
        response_length=4,
        stop_token="eos",
        temperature=1.0,
        num_sample_generations=0,
        gradient_checkpointing=False,
    )
    trainer = PPOTrainer(
        args=args,
        processing_class=tokenizer,
        model=policy,
        ref_model=None,
        reward_model=reward,
        value_model=value,
        train_dataset=tokenize_prompts(prompts, tokenizer),
    )
    trainer.train()


def _run_group(method: str, path: str, output_dir: str, with_reward_model: bool = False) -> None:
    from transformers import AutoModelForSequenceClassification

    from trl_ext.demo import build_tokenizer
    from trl_ext.grpo.presets import get_preset, trainer_class_for
    from trl_ext.rewards import arithmetic_reward

    # DAPO: one step = one rollout; dynamic sampling off, because on random weights every group can be all-wrong, and
    # a step with nothing to train skips the optimizer (trl_ext.grpo.dynamic_sampling), so AdamW's state would never
    # be allocated and the row would not measure a training step (the filter itself holds no model)
    extra = {"overlong_buffer_len": 2, "num_minibatches": 1, "dynamic_sampling": False} if method == "dapo" else {}
    args = get_preset(
        method,
        **_common(output_dir),
        max_steps=1,
        per_device_train_batch_size=SEQUENCES_PER_STEP,
        num_generations=NUM_GENERATIONS,
        max_completion_length=4,
        temperature=1.0,
        **extra,
    )
    # a reward model of the policy's size, as `--reward_funcs <folder>` loads one (trl_ext.reward_model)
    reward = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1) if with_reward_model else None
    trainer = trainer_class_for(args)(
        model=path,
        reward_funcs=[reward if with_reward_model else arithmetic_reward],
        args=args,
        train_dataset=_prompts(),
        processing_class=build_tokenizer(),
        reward_processing_classes=[build_tokenizer()] if with_reward_model else None,
    )
    trainer.train()


def _run_dpo(path: str, output_dir: str) -> None:
    from datasets import Dataset

    from trl_ext.demo import build_tokenizer
    from trl_ext.dpo.trainer import DPOConfig, DPOTrainer

    prompts = _prompts()
    pairs = Dataset.from_dict(
        {
            "prompt": prompts["prompt"],
            "chosen": [str(a) for a in prompts["answer"]],
            "rejected": [str(a + 1) for a in prompts["answer"]],
        }
    )
    args = DPOConfig(
        **_common(output_dir), max_steps=1, per_device_train_batch_size=SEQUENCES_PER_STEP // 2, max_length=32
    )
    trainer = DPOTrainer(model=path, args=args, train_dataset=pairs, processing_class=build_tokenizer())
    trainer.train()


def worker(method: str, path: str) -> dict:
    """One method, one training step; returns its memory numbers (run in a fresh process)."""
    import torch  # imports before the baseline, so that they are not counted as training memory
    import transformers  # noqa: F401
    import trl  # noqa: F401

    if method.startswith("ppo"):  # TRL 1.12 only: the other methods run on every TRL release
        from trl.experimental.ppo import PPOTrainer  # noqa: F401

    import trl_ext.dpo  # noqa: F401
    import trl_ext.grpo.trainers  # noqa: F401

    baseline = _rss_mib()
    start = time.time()
    with tempfile.TemporaryDirectory() as output_dir:
        if method in ("ppo", "ppo_reward_model"):
            _run_ppo(path, output_dir, with_reward_model=method == "ppo_reward_model")
        elif method == "dpo":
            _run_dpo(path, output_dir)
        else:
            _run_group(method.removesuffix("_reward_model"), path, output_dir, method.endswith("_reward_model"))
    peak = _peak_mib()
    cuda = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_initialized() else None
    return {
        "method": method,
        "baseline_mib": baseline,
        "peak_mib": peak,
        "train_mib": peak - baseline,
        "cuda_peak_mib": cuda,
        "seconds": time.time() - start,
    }


def markdown(results: list[dict], params: int, size: str, command: str, wall: float) -> str:
    import torch
    import transformers
    import trl

    ppo = next((r for r in results if r["method"] == "ppo"), None)
    lines = [
        f"# Peak memory of one training step ({size} model, {params / 1e6:.1f}M parameters)",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- command: `{command}` ({wall / 60:.1f} min)",
        f"- machine: {_cpu_name()}, {os.cpu_count()} CPUs, {_total_ram_gib():.0f} GiB RAM, no GPU "
        f"({platform.platform()})",
        f"- versions: python {platform.python_version()}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, trl {trl.__version__}",
        f"- setting: fp32 weights, AdamW, {SEQUENCES_PER_STEP} sequences per step (GRPO family: "
        f"{SEQUENCES_PER_STEP // NUM_GENERATIONS} prompts x {NUM_GENERATIONS}; DPO: {SEQUENCES_PER_STEP // 2} pairs), "
        "demo arithmetic prompts, completions of at most 4 tokens",
        "- peak = process ru_maxrss; training memory = peak - RSS after imports (before any model is loaded)",
        "",
        "| method | models held (trained) | peak RSS (MiB) | training memory (MiB) | in weight copies | ratio to PPO "
        "| worker wall (s) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    held = {
        "ppo": "policy, value, ref (policy, value)",
        "ppo_reward_model": "policy, value, ref, reward (policy, value)",
        "grpo": "policy, ref (policy)",
        "grpo_reward_model": "policy, ref, reward (policy)",
        "dapo": "policy (policy)",
        "gspo": "policy (policy)",
        "dpo": "policy, ref (policy)",
    }
    weights_mib = params * 4 / 2**20
    for r in results:
        ratio = f"{r['train_mib'] / ppo['train_mib']:.2f}" if ppo else "n/a"
        lines.append(
            f"| {LABELS[r['method']]} | {held[r['method']]} | {r['peak_mib']:.0f} | {r['train_mib']:.0f} | "
            f"{r['train_mib'] / weights_mib:.1f} | {ratio} | {r['seconds']:.1f} |"
        )
    lines += [
        "",
        f"One copy of the fp32 weights is {weights_mib:.0f} MiB. A trained model costs about 4 copies (weights, "
        "gradients, AdamW's two moments), a frozen one 1: PPO trains two models (policy, value) and keeps a reference "
        "(~9), the critic-free methods train one, plus a reference when they have a KL term (GRPO) or a DPO "
        "reference (~5), or none (DAPO, GSPO: ~4).",
    ]
    by_method = {r["method"]: r["train_mib"] for r in results}
    if {"ppo", "dapo", "grpo"} <= set(by_method):
        lines += [
            "",
            f"Measured: PPO takes {by_method['ppo'] / by_method['dapo']:.2f}x the training memory of DAPO / GSPO and "
            f"{by_method['ppo'] / by_method['grpo']:.2f}x that of GRPO with its KL reference (and of DPO). The "
            "'about twice' rule of thumb holds for methods that keep a reference; without one the gap is wider. "
            "Activations are negligible at these sequence lengths; with long completions they add to every method.",
        ]
    return "\n".join(lines) + "\n"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def _total_ram_gib() -> float:
    import psutil

    return psutil.virtual_memory().total / 2**30


def _spawn(method: str, checkpoint: str) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--worker", method, "--checkpoint", checkpoint]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{method} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT ") :])
    print(
        f"{LABELS[method]:>20}: peak {result['peak_mib']:.0f} MiB, training {result['train_mib']:.0f} MiB "
        f"({result['seconds']:.1f} s)",
        flush=True,
    )
    return result


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny model (the test's setting), under 2 minutes")
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    parser.add_argument(
        "--output",
        default=None,
        help="markdown table ('' = don't write; default: benchmarks/results/memory.md, "
        "--quick: outputs/benchmarks-quick/memory.md, so that a smoke run never overwrites the committed results)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="methods measured at once (each in its own process)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.output is None:
        args.output = "outputs/benchmarks-quick/memory.md" if args.quick else "benchmarks/results/memory.md"

    if args.worker:  # child process: one method
        print("RESULT " + json.dumps(worker(args.worker, args.checkpoint)), flush=True)
        return []

    if any(method.startswith("ppo") for method in args.methods):
        from trl_ext.reliability.checks import require_ppo

        require_ppo()  # PPO is the table's baseline and needs trl 1.12: fail before any worker, naming the install

    start = time.time()
    size = "quick" if args.quick else "full"
    with tempfile.TemporaryDirectory() as checkpoint:
        params = build_checkpoint(size, checkpoint)
        print(f"model: {size}, {params / 1e6:.1f}M parameters", flush=True)
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # each worker is its own process: own peak
            results = list(pool.map(lambda method: _spawn(method, checkpoint), args.methods))
    command = "python benchmarks/memory.py" + (" --quick" if args.quick else "")
    if args.methods != METHODS:
        command += " --methods " + " ".join(args.methods)
    if args.jobs > 1:
        command += f" --jobs {args.jobs}"
    table = markdown(results, params, size, command, time.time() - start)
    print(table)
    if args.output:
        os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
        with open(args.output, "w") as f:
            f.write(table)
    return results


if __name__ == "__main__":
    main()
