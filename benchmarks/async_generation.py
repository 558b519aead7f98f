"""Generation that overlaps training (issue 24), measured on CPU: synchronous against ``async_generation=True``.

The generation engine runs in its own process, a stand-in for ``trl vllm-serve`` that generates with transformers
(``EngineServer``: the demo policy, sampled with the trainer's temperature, returning the processed log-probs of the
sampled tokens as vLLM does), one CPU thread; the trainer runs in this process, one CPU thread. TRL's own server-mode
code (``VLLMGeneration``: gathers, weight streaming, slicing) talks to it through ``PipeClient``, which replaces only
TRL's HTTP ``VLLMClient``. So on two cores generation and training truly overlap, as with a vLLM server on other GPUs.

For each task (the demo; ``hard``: operands 0..49, as in ``benchmarks/sample_efficiency.py --task hard``) and with
and without dynamic sampling, side by side in one run, from the demo's SFT warm start:

- step time, synchronous and overlapped (median of the steps after the first two);
- the synchronous step split into generation (time spent waiting for the engine) and training (the rest), and the
  physical limit of overlap, max(generation, training), and its ratio max / (generation + training);
- held-out greedy accuracy after the same number of steps (the cost of staleness), over ``--seeds`` seeds; the noise
  is the standard deviation of the synchronous runs across seeds.

    python benchmarks/async_generation.py --quick     # 2 seeds x 8 steps, under 2 minutes on an idle machine
    python benchmarks/async_generation.py             # 3 seeds x 60 steps, writes benchmarks/results/async_generation.md
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as common  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASKS = {"demo": {}, "hard": {"max_operand": 49}}


# -- the engine process (stand-in for `trl vllm-serve`) ---------------------------------------------------------------


def serve(conn, model_path: str, threads: int) -> None:
    """The engine: requests over ``conn`` until ``None``. ``generate`` samples ``n`` completions per prompt with the
    given parameters and returns the log-probs of the sampled tokens after temperature / top-k / top-p (vLLM's
    ``processed_logprobs``); ``update_named_params`` loads the streamed weights."""
    import torch

    torch.set_num_threads(threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_path).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    generator_seed = 0
    while True:
        request = conn.recv()
        if request is None:
            return
        kind, payload = request
        if kind == "generate":
            started = time.perf_counter()
            generator_seed += 1
            torch.manual_seed(generator_seed)
            conn.send(_generate(model, tokenizer, **payload) | {"seconds": time.perf_counter() - started})
        elif kind == "weights":
            state = {name: torch.from_numpy(array) for name, array in payload}
            missing = set(dict(model.named_parameters())) - set(state)
            model.load_state_dict(state, strict=False)
            conn.send({"missing": sorted(missing)})
        else:
            conn.send({})


def _generate(model, tokenizer, prompts, n, max_tokens, temperature, top_p, top_k, **_):
    import torch

    pad = tokenizer.pad_token_id
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k if top_k and top_k > 0 else None,
            max_new_tokens=max_tokens,
            num_return_sequences=n,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=pad,
            eos_token_id=tokenizer.eos_token_id,
        )
    new = out.sequences[:, width:]
    scores = torch.stack(out.scores, dim=1).log_softmax(-1)  # processed (warped) scores: vLLM's processed_logprobs
    picked = scores.gather(-1, new.unsqueeze(-1)).squeeze(-1)
    completions, logprobs = [], []
    for row, lp in zip(new.tolist(), picked.tolist(), strict=True):
        end = row.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in row else len(row)
        completions.append(row[:end])
        logprobs.append([[v] for v in lp[:end]])
    return {"prompt_ids": [list(p) for p in prompts], "completion_ids": completions, "logprobs": logprobs}


class ServerStub:
    """The parts of TRL's ``VLLMClient`` that a stand-in engine has nothing to do for (no NCCL group, no prefix
    cache); also the base of the in-process stand-in of ``tests/test_async_generation.py``."""

    def init_communicator(self, device=None):
        pass

    def close_communicator(self):
        pass

    def get_server_info(self):
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}

    def reset_prefix_cache(self):
        pass


class PipeClient(ServerStub):
    """Stands in for TRL's ``VLLMClient`` (the methods TRL's server mode calls), over a pipe to ``serve``. Records
    the seconds each ``generate`` call waits (generation + transfer)."""

    conn = None  # set by the benchmark before a trainer is built

    def __init__(self, *args, **kwargs):
        self._lock = threading.Lock()
        self.generate_seconds: list[float] = []

    def _call(self, kind, payload=None):
        with self._lock:
            PipeClient.conn.send((kind, payload))
            return PipeClient.conn.recv()

    def update_named_params(self, metadata, iterator):
        reply = self._call("weights", [(name, t.detach().cpu().numpy().copy()) for name, t in iterator])
        if reply["missing"]:
            raise RuntimeError(f"the engine did not receive {reply['missing']}")

    def generate(self, prompts, features=None, **params):
        started = time.perf_counter()
        out = self._call("generate", {"prompts": [list(p) for p in prompts], **params})
        self.generate_seconds.append(time.perf_counter() - started)
        return out


def install_engine() -> None:
    """TRL's server mode on the stand-in (vLLM reported installed: nothing of vLLM runs)."""
    import trl.generation.vllm_generation as vllm_generation

    import trl_ext.reliability.checks

    vllm_generation.is_vllm_available = lambda *a, **k: True
    vllm_generation.VLLMClient = PipeClient
    trl_ext.reliability.checks.vllm_installed = lambda: True


# -- one run ----------------------------------------------------------------------------------------------------------


def step_clock(generated):
    """Wall time of each optimizer step, and the engine seconds the trainer waited for within it (``generated()``:
    the client's running total)."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def __init__(self):
            self.points: list[tuple[float, float]] = []

        def on_step_begin(self, args, state, control, **kwargs):
            if not self.points:
                self.points.append((time.perf_counter(), generated()))

        def on_step_end(self, args, state, control, **kwargs):
            self.points.append((time.perf_counter(), generated()))

        def durations(self) -> list[float]:
            return [b[0] - a[0] for a, b in zip(self.points, self.points[1:], strict=False)]

        def waits(self) -> list[float]:
            return [b[1] - a[1] for a, b in zip(self.points, self.points[1:], strict=False)]

    return Clock()


def steady(values: list[float]) -> list[float]:
    """The steps after the first two (the first overlapped batch is generated synchronously)."""
    return values[2:] if len(values) > 3 else values


def one_run(path: str, task: str, dynamic: bool, overlapped: bool, seed: int, steps: int, workdir: str) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ext.demo import DemoTaskConfig, greedy_accuracy, make_problems
    from trl_ext.grpo.presets import get_preset, trainer_class_for
    from trl_ext.rewards.arithmetic import arithmetic_reward

    train, held_out = make_problems(DemoTaskConfig(**TASKS[task]))
    rl, dapo = common.demo_settings()
    output_dir = os.path.join(workdir, f"{task}-{dynamic}-{overlapped}-{seed}")
    args = get_preset(
        "dapo",
        **common.run_args(output_dir, seed=seed, max_steps=steps),
        **rl,
        **dapo,
        dynamic_sampling=dynamic,
        use_vllm=True,
        vllm_mode="server",
        async_generation=overlapped,
    )
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    clients = []
    clock = step_clock(lambda: sum(sum(c.generate_seconds) for c in clients))
    trainer = trainer_class_for(args)(
        model=model,
        reward_funcs=[arithmetic_reward],
        args=args,
        train_dataset=train,
        processing_class=tokenizer,
        callbacks=[clock],
    )
    common.silence(trainer)
    client = trainer.vllm_generation.vllm_client
    clients.append(getattr(client, "_client", client))
    trainer.train()
    durations = clock.durations()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    steps_done = len(durations)
    return {
        "task": task,
        "dynamic_sampling": dynamic,
        "overlapped": overlapped,
        "seed": seed,
        "steps": steps_done,
        "step_seconds": statistics.median(steady(durations)),
        "step_seconds_all": durations,
        # synchronous: the seconds per step the trainer waited for the engine (median of the steady steps); under
        # overlap the engine works in the background and this counts only the requests of the step it finished on
        "generate_seconds_per_step": statistics.median(steady(clock.waits())),
        "wait_seconds": [h.get("async/wait_time") for h in logs],
        "staleness_max": max((h.get("async/staleness/max", 0.0) for h in logs), default=0.0),
        "rounds": [h.get("dynamic_sampling/rounds", 1.0) for h in logs],
        "accuracy": greedy_accuracy(trainer.model, tokenizer, held_out),
    }


# -- the benchmark ----------------------------------------------------------------------------------------------------


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 seeds x 8 steps, both tasks (under 2 minutes)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default 60; quick 8)")
    parser.add_argument("--seeds", type=int, default=None, help="RL seeds per setting (default 3; quick 2)")
    parser.add_argument("--tasks", default="demo,hard", help="comma-separated: demo, hard")
    parser.add_argument("--warm-start", default=None, help="policy folder (default: the demo's cached SFT warm start)")
    parser.add_argument("--out", default=None, help="folder for the report (default: results/ or the quick folder)")
    options = parser.parse_args(argv)
    options.steps = options.steps or (8 if options.quick else 60)
    options.seeds = options.seeds or (2 if options.quick else 3)
    options.tasks = [t for t in options.tasks.split(",") if t]
    unknown = [t for t in options.tasks if t not in TASKS]
    if unknown:
        parser.error(f"--tasks: unknown {unknown}; known: {sorted(TASKS)}")
    return options


def summarize(runs: list[dict]) -> list[dict]:
    rows = []
    for task in dict.fromkeys(r["task"] for r in runs):
        for dynamic in (False, True):
            sync = [r for r in runs if r["task"] == task and r["dynamic_sampling"] == dynamic and not r["overlapped"]]
            over = [r for r in runs if r["task"] == task and r["dynamic_sampling"] == dynamic and r["overlapped"]]
            if not sync or not over:
                continue
            step_sync = statistics.median(r["step_seconds"] for r in sync)
            generation = statistics.median(r["generate_seconds_per_step"] for r in sync)
            training = max(step_sync - generation, 0.0)
            limit = max(generation, training)
            step_over = statistics.median(r["step_seconds"] for r in over)
            acc_sync = [r["accuracy"] for r in sync]
            acc_over = [r["accuracy"] for r in over]
            noise = statistics.stdev(acc_sync) if len(acc_sync) > 1 else float("nan")
            rows.append(
                {
                    "task": task,
                    "dynamic_sampling": dynamic,
                    "step_sync": step_sync,
                    "generation": generation,
                    "training": training,
                    "limit": limit,
                    "limit_ratio": limit / step_sync if step_sync else float("nan"),
                    "step_overlapped": step_over,
                    "over_limit": step_over / limit if limit else float("nan"),
                    "speedup": step_sync / step_over if step_over else float("nan"),
                    "accuracy_sync": statistics.mean(acc_sync),
                    "accuracy_overlapped": statistics.mean(acc_over),
                    "noise": noise,
                    "staleness_max": max(r["staleness_max"] for r in over),
                    "rounds_sync": statistics.mean(x for r in sync for x in r["rounds"]),
                    "rounds_overlapped": statistics.mean(x for r in over for x in r["rounds"]),
                    "steps": sync[0]["steps"],
                    "seeds": len(sync),
                }
            )
    return rows


def markdown(rows: list[dict], options, command: str, wall: float, load: tuple) -> list[str]:
    lines = [
        "# Generation that overlaps training (issue 24)",
        "",
        f"Command: `{command}` ({wall:.0f} s wall). Load average before the run: "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min) on {os.cpu_count()} CPUs. "
        "The engine (a transformers stand-in for `trl vllm-serve`) and the trainer each run in their own process on "
        "one thread; TRL's server-mode code runs unchanged between them.",
        "",
        f"{options.seeds} seed(s) x {options.steps} optimizer steps per setting, DAPO preset on the demo's settings "
        "(16 prompts x 8 completions per step) from the demo's SFT warm start. Step times: median of the steps after "
        "the first two. Generation: seconds per step the synchronous trainer waits for the engine; training: the rest "
        "of its step. Limit: max(generation, training), the best overlap can do; limit ratio: limit / synchronous step.",
        "",
        "| task | dynamic sampling | sync step (s) | generation (s) | training (s) | limit (s) | limit ratio | "
        "overlapped step (s) | overlapped / limit | speed-up | held-out acc. sync | held-out acc. overlapped | "
        "noise (sd sync) | max staleness | rounds / step sync, overlapped |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {'on' if r['dynamic_sampling'] else 'off'} | {r['step_sync']:.3f} | "
            f"{r['generation']:.3f} | {r['training']:.3f} | {r['limit']:.3f} | {r['limit_ratio']:.2f} | "
            f"{r['step_overlapped']:.3f} | {r['over_limit']:.2f} | {r['speedup']:.2f}x | {r['accuracy_sync']:.3f} | "
            f"{r['accuracy_overlapped']:.3f} | {r['noise']:.3f} | {r['staleness_max']:.0f} | "
            f"{r['rounds_sync']:.2f}, {r['rounds_overlapped']:.2f} |"
        )
    lines += ["", "Done when (issue 24): overlapped step within 15% of the limit, accuracy within the noise:", ""]
    for r in rows:
        within = r["over_limit"] <= 1.15
        gap = abs(r["accuracy_overlapped"] - r["accuracy_sync"])
        noisy = r["noise"] == r["noise"] and gap <= 2 * r["noise"]
        lines.append(
            f"- {r['task']}, dynamic sampling {'on' if r['dynamic_sampling'] else 'off'}: overlapped / limit "
            f"{r['over_limit']:.2f} ({'within' if within else 'NOT within'} 1.15); accuracy gap {gap:.3f} vs noise "
            f"{r['noise']:.3f} ({'within' if noisy else 'NOT within'} 2 sd)."
        )
    return lines


def main(argv=None) -> int:
    options = parse(argv)
    load = os.getloadavg()
    started = time.perf_counter()
    common.setup(1)
    install_engine()
    path = options.warm_start or common.warm_start_path()
    context = mp.get_context("spawn")
    parent, child = context.Pipe()
    engine = context.Process(target=serve, args=(child, path, 1), daemon=True)
    engine.start()
    PipeClient.conn = parent
    runs = []
    try:
        with tempfile.TemporaryDirectory() as workdir:
            for task in options.tasks:
                for dynamic in (False, True):
                    for seed in range(options.seeds):
                        for overlapped in (False, True):
                            run = one_run(path, task, dynamic, overlapped, seed, options.steps, workdir)
                            runs.append(run)
                            print(
                                f"{task} ds={dynamic} overlapped={overlapped} seed={seed}: step "
                                f"{run['step_seconds']:.3f}s acc {run['accuracy']:.3f}",
                                flush=True,
                            )
    finally:
        parent.send(None)
        engine.join(timeout=30)
    rows = summarize(runs)
    wall = time.perf_counter() - started
    command = "python benchmarks/async_generation.py" + (" --quick" if options.quick else "")
    if argv:
        command = "python benchmarks/async_generation.py " + " ".join(argv)
    out = Path(options.out) if options.out else common.results_dir(None, options.quick)
    out.mkdir(parents=True, exist_ok=True)
    lines = markdown(rows, options, command, wall, load)
    (out / "async_generation.md").write_text("\n".join(lines) + "\n")
    (out / "async_generation.json").write_text(json.dumps({"rows": rows, "runs": runs}, indent=1))
    print("\n".join(lines))
    print(f"wrote {out / 'async_generation.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
