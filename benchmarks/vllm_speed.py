"""Does vLLM pay on a CPU? vLLM's CPU build against transformers' ``generate``, side by side in one run.

    python benchmarks/vllm_speed.py [--quick] [--threads 2] [--configs demo,25m-32,25m-256] [--reps 3]
    python benchmarks/vllm_speed.py --parts train [--steps 6]       # DAPO step time, vLLM colocate vs transformers
    python benchmarks/vllm_speed.py --render benchmarks/results/vllm_speed.json

**Generation** (``--parts gen``): the same prompts sampled by both engines (temperature 1, every completion forced
to its full length: ``min_tokens`` / ``min_new_tokens``, so both produce exactly the same number of tokens), one
generation batch per measurement (P prompts x 8 completions, TRL's shape: one ``generate`` call for all), reported
as completion tokens per second. The configurations run from small to large to find where vLLM starts to pay:

- ``demo``: the demo model (``trl_ext.demo``, 0.6M parameters, 18-token vocabulary), 16 prompts x 8 x 6 tokens (the
  demo's generation batch);
- ``25m-32`` / ``25m-256``: the random-weight Qwen2 of ``benchmarks/gpu_check.py build`` (25.2M parameters, 8 layers,
  hidden 512), 8 prompts x 8 x 32 tokens, and 4 prompts x 8 x 256 tokens (32 sequences: a small batch for vLLM,
  kept small for the time budget of a 2-core machine; larger batches favour vLLM).

**Training** (``--parts train``): ``DAPOTrainer`` on the demo (demo model, 16 prompts x 8 x 6 tokens, dynamic
sampling on), ``use_vllm=True, vllm_mode="colocate"`` against transformers generation: the optimizer step time.

How the two are compared on a shared machine (``benchmarks/README.md``): each engine lives in its own worker process
(vLLM's CPU backend patches ``torch.set_num_threads`` and binds its threads, so the two cannot share a process
fairly); the workers take turns (``_common.run_lockstep``: one generation batch, or one optimizer step, at a time,
A B A B ...), so each measurement of one engine sits next to one of the other under the same load, and who goes first
alternates between configurations. Both use ``--threads`` threads on the same cores (vLLM:
``VLLM_CPU_OMP_THREADS_BIND``; transformers: ``torch.set_num_threads`` and the same CPU affinity); the default is one
thread, as in the other benchmarks: a 2-thread run on the loaded machine scattered adjacent pairs from 0.3x to 9x,
on wall and on CPU time alike (multi-threaded kernels suffer unevenly from descheduling). Each configuration
starts with an untimed warm-up batch of one prompt (vLLM compiles its graph), and every timed batch draws new prompts
(no prefix-cache reuse). Wall time and process CPU time are both recorded; the ratio is read from adjacent pairs
(median, min, max). Weights are float32 in both engines. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402

NAME = "vllm_speed"
ARMS = ("transformers", "vllm")
#: name -> (model, prompts per batch, completions per prompt, completion tokens)
CONFIGS: dict[str, tuple[str, int, int, int]] = {
    "demo": ("demo", 16, 8, 6),
    "25m-32": ("25m", 8, 8, 32),
    "25m-256": ("25m", 4, 8, 256),
}
KV_CACHE_GIB = 2


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="demo generation only, 2 repetitions (outputs/...)")
    parser.add_argument("--parts", default="gen", help="gen, train or gen,train (default gen)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"generation configurations: {list(CONFIGS)}")
    parser.add_argument("--reps", type=int, default=5, help="timed generation batches per engine and configuration")
    parser.add_argument(
        "--steps", type=int, default=6, help="--parts train: optimizer steps per engine (first skipped)"
    )
    parser.add_argument("--threads", type=int, default=1, help="threads of each engine")
    parser.add_argument("--models-dir", default="outputs/vllm_speed/models", help="where the built models are saved")
    parser.add_argument("--out", default=None, help="report folder (default benchmarks/results; --quick: outputs/...)")
    parser.add_argument("--render", help=f"rebuild the report from a saved {NAME}.json instead of measuring")
    options = parser.parse_args(argv)
    options.parts = _common.names_option(parser, "--parts", options.parts, ("gen", "train"))
    options.configs = _common.names_option(parser, "--configs", options.configs, CONFIGS)
    if options.quick:
        options.configs, options.reps, options.steps = ["demo"], 2, 3
    return options


# -- models -----------------------------------------------------------------------------------------------------------


def build_models(models_dir: str, names: set[str]) -> dict[str, str]:
    """Save the models the configurations need (once; reused when present) and return their folders."""
    from trl_ext.demo import build_model, build_tokenizer

    folders = {}
    for name in sorted(names):
        folder = os.path.join(models_dir, name)
        if not os.path.exists(os.path.join(folder, "config.json")):
            if name == "demo":
                tokenizer = build_tokenizer()
                build_model(tokenizer).save_pretrained(folder)
                tokenizer.save_pretrained(folder)
            else:  # exactly gpu_check's model (its `build` command)
                import gpu_check

                gpu_check.cmd_build(argparse.Namespace(out=folder, tiny=False))
        folders[name] = folder
    return folders


def prompt_sets(count: int, reps: int) -> list[list[str]]:
    """``reps + 1`` disjoint sets of ``count`` demo problems (the first for the warm-up)."""
    from trl_ext.demo import DemoTaskConfig, make_problems

    train, _ = make_problems(DemoTaskConfig(max_operand=99, num_train=count * (reps + 1), num_eval=1))
    prompts = list(train["prompt"])
    return [prompts[i * count : (i + 1) * count] for i in range(reps + 1)]


# -- engines ----------------------------------------------------------------------------------------------------------


def _pin(threads: int) -> None:
    cores = sorted(os.sched_getaffinity(0))[:threads]
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = f"{cores[0]}-{cores[-1]}" if len(cores) > 1 else str(cores[0])
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(KV_CACHE_GIB)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this worker: its time is this worker's
    os.environ["VLLM_NO_USAGE_STATS"] = "1"
    os.sched_setaffinity(0, cores)


class TransformersEngine:
    """``model.generate`` on one left-padded batch of all prompts, ``n`` samples each, forced to full length."""

    def __init__(self, folder: str):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()

    def generate(self, prompts: list[str], n: int, tokens: int) -> int:
        import torch

        batch = self.tokenizer(prompts, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = self.model.generate(
                **batch, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=n,
                max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=self.tokenizer.pad_token_id,
            )  # fmt: skip
        return int(out[:, batch["input_ids"].shape[1] :].numel())


class VLLMEngine:
    """``vllm.LLM`` (in this process), ``n`` samples per prompt, forced to full length (``min_tokens``)."""

    def __init__(self, folder: str, max_len: int):
        from vllm import LLM

        self.llm = LLM(model=folder, dtype="float32", max_model_len=max_len, seed=0, enable_prefix_caching=False)

    def generate(self, prompts: list[str], n: int, tokens: int) -> int:
        from vllm import SamplingParams

        params = SamplingParams(n=n, temperature=1.0, max_tokens=tokens, min_tokens=tokens, ignore_eos=True)
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return sum(len(c.token_ids) for o in outputs for c in o.outputs)


def generation_worker(me: int, baton: Any, arm: str, configs: list[str], folders: dict[str, str], reps: int,
                      threads: int):  # fmt: skip
    """One engine's side of the generation part: per configuration a warm-up batch, then ``reps`` timed batches,
    each in its turn. Yields one record per configuration."""
    _pin(threads)
    _common.setup(threads)
    engines: dict[str, Any] = {}
    for index, name in enumerate(configs):
        model, count, n, tokens = CONFIGS[name]
        if model not in engines:
            max_len = 64 if model == "demo" else 512
            engines[model] = (
                VLLMEngine(folders[model], max_len) if arm == "vllm" else TransformersEngine(folders[model])
            )
        engine = engines[model]
        sets = prompt_sets(count, reps)
        engine.generate(sets[0][:1], n, min(tokens, 16))  # warm-up (vLLM compiles its graph), not timed
        baton.start(me, first=index % 2)
        samples = []
        for rep, prompts in enumerate(sets[1:]):
            baton.wait(me)
            wall, cpu = time.perf_counter(), time.process_time()
            produced = engine.generate(prompts, n, tokens)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            baton.give(me, finished=rep == reps - 1)
            if produced != count * n * tokens:
                raise RuntimeError(f"{arm} produced {produced} tokens, expected {count * n * tokens}")
            samples.append({"wall": wall, "cpu": cpu, "tokens": produced})
        yield {"config": name, "arm": arm, "samples": samples}


# -- training ---------------------------------------------------------------------------------------------------------


def parity_reward(completions: list[str], answer: list[int], **kwargs: Any) -> list[float]:
    """1 for completions starting with an odd digit, only for even answers: odd-answer groups are dropped and
    refilled, as in ``gpu_check.py``."""
    return [float(c[:1] in "13579") if int(a) % 2 == 0 else 0.0 for c, a in zip(completions, answer, strict=True)]


def training_worker(me: int, baton: Any, arm: str, folder: str, steps: int, threads: int, out: str):
    """One engine's side of the training part: DAPO on the demo for ``steps`` optimizer steps, lock-stepped."""
    _pin(threads)
    _common.setup(threads)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ext import DAPOTrainer, get_preset
    from trl_ext.demo import DemoTaskConfig, make_problems

    use_vllm = arm == "vllm"
    tokens = 6
    config = get_preset(
        "dapo", output_dir=os.path.join(out, f"train-{arm}"), per_device_train_batch_size=128, num_generations=8,
        max_completion_length=tokens, num_minibatches=1, dynamic_sampling_max_rounds=4, soft_overlong_punishment=False,
        temperature=1.0, learning_rate=1e-5, max_steps=steps, logging_steps=1, seed=0, use_cpu=True, bf16=False,
        report_to="none", save_strategy="no", disable_tqdm=True, use_vllm=use_vllm, vllm_mode="colocate",
        vllm_max_model_length=64,
    )  # fmt: skip
    train, _ = make_problems(DemoTaskConfig(max_operand=29, num_train=800, num_eval=10))
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    trainer = DAPOTrainer(model, [parity_reward], args=config, train_dataset=train,
                          processing_class=AutoTokenizer.from_pretrained(folder))  # fmt: skip
    _common.silence(trainer)
    clock = _common.lockstep(baton, me)
    trainer.add_callback(clock)
    baton.start(me, first=0)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "dynamic_sampling/rounds" in h]
    yield {
        "arm": arm,
        "wall": clock.step_seconds(),
        "cpu": clock.step_seconds(cpu=True),
        "rounds": [h["dynamic_sampling/rounds"] for h in logs],
        "generation_s": [h["dynamic_sampling/generation_time"] for h in logs],
        "groups": [h["dynamic_sampling/generated_groups"] for h in logs],
    }


# -- measure and report -----------------------------------------------------------------------------------------------


def _progress(me: int, index: int, result: dict[str, Any]) -> None:
    print(f"{result['arm']}: {result.get('config', 'training')} measured", flush=True)


def measure(options: argparse.Namespace) -> dict[str, Any]:
    data: dict[str, Any] = {"vllm": vllm_version()}
    out = str(_common.results_dir(options.out, options.quick))
    needed = {CONFIGS[name][0] for name in options.configs} if "gen" in options.parts else set()
    if "train" in options.parts:
        needed.add("demo")
    folders = build_models(options.models_dir, needed)
    if "gen" in options.parts:
        args = [(arm, options.configs, folders, options.reps, options.threads) for arm in ARMS]
        results = _common.run_lockstep(generation_worker, args, on_result=_progress, timeout=3600)
        data["generation"] = [record for worker in results for record in worker]
    if "train" in options.parts:
        args = [(arm, folders["demo"], options.steps, options.threads, out) for arm in ARMS]
        results = _common.run_lockstep(training_worker, args, on_result=_progress, timeout=3600)
        data["training"] = [record for worker in results for record in worker]
    return data


def _ratio_stats(ratios: list[float]) -> dict[str, float]:
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def generation_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per configuration: tokens/s of each engine (median, min over batches) and the vLLM / transformers ratio of
    adjacent pairs, on wall and on CPU time."""
    by = {(r["config"], r["arm"]): r["samples"] for r in data.get("generation", [])}
    rows = []
    for name in CONFIGS:
        if (name, "vllm") not in by:
            continue
        hf, vl = by[(name, "transformers")], by[(name, "vllm")]
        rate = {arm: [s["tokens"] / s["wall"] for s in samples] for arm, samples in (("hf", hf), ("vllm", vl))}
        wall = [h["wall"] / v["wall"] for h, v in zip(hf, vl, strict=True)]
        cpu = [h["cpu"] / v["cpu"] for h, v in zip(hf, vl, strict=True)]
        rows.append({"config": name, "tokens": hf[0]["tokens"], "hf": rate["hf"], "vllm": rate["vllm"],
                     "wall": _ratio_stats(wall), "cpu": _ratio_stats(cpu)})  # fmt: skip
    return rows


def training_row(data: dict[str, Any]) -> dict[str, Any] | None:
    records = {r["arm"]: r for r in data.get("training", [])}
    if set(records) != set(ARMS):
        return None
    hf, vl = records["transformers"], records["vllm"]
    wall = [h / v for h, v in zip(hf["wall"][1:], vl["wall"][1:], strict=True)]  # step 1 holds the warm-up
    cpu = [h / v for h, v in zip(hf["cpu"][1:], vl["cpu"][1:], strict=True)]
    per_group = {arm: [t / g for t, g in zip(r["generation_s"][1:], r["groups"][1:], strict=True)]
                 for arm, r in records.items()}  # fmt: skip
    group_ratio = [h / v for h, v in zip(per_group["transformers"], per_group["vllm"], strict=True)]
    return {"hf": hf["wall"][1:], "vllm": vl["wall"][1:], "wall": _ratio_stats(wall), "cpu": _ratio_stats(cpu),
            "per_group": per_group, "group": _ratio_stats(group_ratio),
            "rounds": {"transformers": hf["rounds"][1:], "vllm": vl["rounds"][1:]},
            "groups": {"transformers": hf["groups"][1:], "vllm": vl["groups"][1:]}}  # fmt: skip


def verdict(row: dict[str, Any]) -> str:
    """From the CPU-time ratio (insensitive to how much of the machine other jobs take): faster only when every pair
    says so by more than 10%."""
    if row["cpu"]["min"] > 1.1:
        return "vLLM faster"
    if row["cpu"]["max"] < 1 / 1.1:
        return "transformers faster"
    return "no clear winner"


def reading(rows: list[dict[str, Any]]) -> list[str]:
    """One sentence per configuration and where vLLM starts to pay (the first configuration, in order of size, from
    which every larger one has vLLM faster)."""
    lines = [f"- `{row['config']}`: {verdict(row)} (CPU-time speed-up {_fmt(row['cpu'])})." for row in rows]
    paying = [row["config"] for row in rows if verdict(row) == "vLLM faster"]
    names = [row["config"] for row in rows]
    start = next((n for i, n in enumerate(names) if all(m in paying for m in names[i:])), None)
    if start is None:
        lines.append("- vLLM was not faster at any size measured here.")
    else:
        lines.append(f"- vLLM pays from `{start}` on, in this run.")
    return lines


def _fmt(stats: dict[str, float]) -> str:
    return f"**{stats['median']:.2f}x** [{stats['min']:.2f}, {stats['max']:.2f}]"


def vllm_version() -> str:
    from importlib import metadata

    for distribution in ("vllm-cpu", "vllm"):
        try:
            return f"{distribution} {metadata.version(distribution)}"
        except metadata.PackageNotFoundError:
            continue
    return "vllm not installed"


def report(data: dict[str, Any], options: argparse.Namespace, prov: dict[str, Any], out: Path) -> None:
    # vLLM's release goes before TRL's: _common.trl_release reads the release after the last "trl "
    prov = {**prov, "versions": prov["versions"].replace(", trl ", f", {data.get('vllm', 'vllm ?')}, trl ")}
    body = []
    rows = generation_rows(data)
    figures: dict[str, Any] = {}
    if rows:
        body += [
            "## Generation: completion tokens per second",
            "",
            "One generation batch per measurement (P prompts x 8 completions, all forced to full length), the two "
            "engines taking turns; tokens/s median (min) over the timed batches; speed-up = transformers time / "
            "vLLM time of adjacent batches, median [min, max], on wall-clock and on process CPU time.",
            "",
        ]
        table_rows = []
        for row in rows:
            model, count, n, tokens = CONFIGS[row["config"]]
            table_rows.append([
                f"`{row['config']}`", {"demo": "0.6M", "25m": "25.2M"}[model], f"{count} x {n} x {tokens}",
                f"{statistics.median(row['hf']):.0f} ({min(row['hf']):.0f})",
                f"{statistics.median(row['vllm']):.0f} ({min(row['vllm']):.0f})",
                _fmt(row["wall"]), _fmt(row["cpu"]), len(row["hf"]),
            ])  # fmt: skip
            figures[f"generation_{row['config']}"] = {"wall": row["wall"], "cpu": row["cpu"]}
        body += _common.table(
            ["config", "params", "prompts x n x tokens", "transformers tok/s", "vLLM tok/s", "speed-up (wall)",
             "speed-up (CPU)", "pairs"],
            table_rows,
        )  # fmt: skip
        body += ["", *reading(rows), ""]
    train = training_row(data)
    if train is not None:
        body += [
            "## Training: DAPO optimizer step, demo model, vLLM colocate vs transformers generation",
            "",
            f"{len(train['hf'])} lock-stepped steps per engine after the first (engine warm-up, first sync); "
            "step time median (min) in seconds; speed-up = transformers step / vLLM step of the same step index.",
            "",
            *_common.table(
                ["engine", "step s", "generation s per generated group", "rounds per step", "groups per step"],
                [
                    [
                        label,
                        f"{statistics.median(train[key]):.2f} ({min(train[key]):.2f})",
                        f"{statistics.median(train['per_group'][arm]):.3f}",
                        str(train["rounds"][arm]),
                        str(train["groups"][arm]),
                    ]
                    for label, key, arm in (("transformers", "hf", "transformers"), ("vLLM colocate", "vllm", "vllm"))
                ],
            ),  # fmt: skip
            "",
            f"Speed-up of the step: wall {_fmt(train['wall'])}, CPU {_fmt(train['cpu'])}. The two runs sample "
            "differently, so dynamic sampling generates a different number of groups per step; generation time per "
            "generated group (`dynamic_sampling/generation_time` over `dynamic_sampling/generated_groups`) is the "
            f"fairer comparison of the engines inside training: speed-up {_fmt(train['group'])} (wall).",
            "",
        ]
        figures["training_demo"] = {"wall": train["wall"], "cpu": train["cpu"], "per_group": train["group"]}
    _common.write_markdown(out / f"{NAME}.md", "vLLM (CPU build) vs transformers generate", _common.header(prov), body)
    if not options.quick:
        _common.write_figures(out / f"{NAME}.figures.json", prov, figures)
    print((out / f"{NAME}.md").read_text())


def main(argv: list[str] | None = None) -> int:
    return _common.bench_main(f"{NAME}.py", argv, parse, measure, report)


if __name__ == "__main__":
    raise SystemExit(main())
