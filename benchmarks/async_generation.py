"""Generation that overlaps training (issue 24), measured on CPU: synchronous against ``async_generation=True``.

The generation engine runs in its own process, a stand-in for ``trl vllm-serve`` that generates with transformers
(``serve``: the policy, sampled with the trainer's temperature, returning the processed log-probs of the sampled
tokens as vLLM does), one CPU thread; the trainer runs in this process, one CPU thread; each is pinned to its own core
(``pin_to_core``), as a server on other GPUs keeps its own. TRL's own server-mode code (``VLLMGeneration``: gathers,
weight streaming, slicing) talks to it through ``PipeClient``, which replaces only TRL's HTTP ``VLLMClient``. So on
two cores generation and training truly overlap, as with a vLLM server on other GPUs.

For each task (the demo; ``hard``: operands 0..49, as in ``benchmarks/sample_efficiency.py --task hard``) and with
and without dynamic sampling, side by side in one run, from the demo's SFT warm start (each rollout of 16 x 8
completions is one optimizer step in ``--micro-steps`` micro-batches: refill rounds are scored between them):

- step time, synchronous and overlapped (median of the steps after the first two);
- the synchronous step split into generation (time spent waiting for the engine) and training (the rest), and the
  physical limit of overlap, max(generation, training), and its ratio max / (generation + training); the trainer's
  CPU per step and the engine's load under overlap, as cross-checks;
- held-out greedy accuracy after the same number of steps (the cost of staleness), over ``--seeds`` seeds; the noise
  is the standard deviation of the synchronous runs across seeds.

    python benchmarks/async_generation.py --quick     # 2 seeds x 8 steps, under 2 minutes on an idle machine
    python benchmarks/async_generation.py             # 3 seeds x 60 steps (~13 min): benchmarks/results/
    python benchmarks/async_generation.py --render benchmarks/results/async_generation.json   # the report again

Writes ``async_generation.md``, the raw ``async_generation.json`` (git-ignored) and ``async_generation.figures.json``
(the README's headline)."""

from __future__ import annotations

import argparse
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
TASKS = common.TASKS  # --tasks (as in sample_efficiency.py --task)


# -- the engine process (stand-in for `trl vllm-serve`) ---------------------------------------------------------------


def pin_to_core(core: int) -> bool:
    """Run this process on CPU ``core`` only (where the machine has it): the engine and the trainer then each keep
    a core, as a server on other GPUs keeps its own, synchronous or not (unpinned, the scheduler lets the two
    processes share a core as they alternate, and each evicts the other's caches)."""
    if not hasattr(os, "sched_setaffinity") or core not in os.sched_getaffinity(0):
        return False
    os.sched_setaffinity(0, {core})
    return True


def serve(conn, model_path: str, threads: int) -> None:
    """The engine: requests over ``conn`` until ``None``. ``generate`` samples ``n`` completions per prompt with the
    given parameters and returns the log-probs of the sampled tokens after temperature / top-k / top-p (vLLM's
    ``processed_logprobs``); ``update_named_params`` loads the streamed weights."""
    import torch

    pin_to_core(1)
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
            generator_seed += 1
            torch.manual_seed(generator_seed)
            conn.send(_generate(model, tokenizer, **payload))
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
    cache)."""

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
    """Wall time of each optimizer step, the engine seconds the trainer waited for within it (``generated()``: the
    client's running total) and the CPU seconds of the trainer's main thread."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def __init__(self):
            self.points: list[tuple[float, float, float]] = []  # (wall, engine seconds waited, main-thread CPU)

        def on_step_begin(self, args, state, control, **kwargs):
            if not self.points:
                self.points.append((time.perf_counter(), generated(), time.thread_time()))

        def on_step_end(self, args, state, control, **kwargs):
            self.points.append((time.perf_counter(), generated(), time.thread_time()))

        def per_step(self) -> tuple[list[float], list[float], list[float]]:
            """Per step: wall seconds, engine seconds waited for, CPU seconds of the trainer's main thread (its own
            work, whatever it waited for)."""
            pairs = list(zip(self.points, self.points[1:], strict=False))
            return tuple([b[i] - a[i] for a, b in pairs] for i in range(3))

    return Clock()


def steady(values: list[float]) -> list[float]:
    """The steps after the first two (the first overlapped batch is generated synchronously)."""
    return values[2:] if len(values) > 3 else values


def one_run(
    path: str,
    task: str,
    dynamic: bool,
    overlapped: bool,
    seed: int,
    steps: int,
    workdir: str,
    micro_steps: int = 1,
    prompts_per_step: int | None = None,
) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ext.demo import DemoTaskConfig, greedy_accuracy, make_problems
    from trl_ext.grpo.presets import get_preset, trainer_class_for
    from trl_ext.rewards.arithmetic import arithmetic_reward

    train, held_out = make_problems(DemoTaskConfig(**TASKS[task]))
    rl, dapo = common.demo_settings(prompts_per_step)
    # one optimizer step per rollout of 16 x 8 completions, in `micro_steps` micro-batches (gradient accumulation)
    rl["per_device_train_batch_size"] //= micro_steps
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
        gradient_accumulation_steps=micro_steps,
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
    durations, waits, cpu = clock.per_step()
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
        "generate_seconds_per_step": statistics.median(steady(waits)),
        "generate_seconds_all": waits,
        "trainer_cpu_per_step": statistics.median(steady(cpu)),
        # the rest of each step (synchronous: everything but waiting for the engine), step by step
        "training_seconds_per_step": statistics.median(steady([d - w for d, w in zip(durations, waits, strict=True)])),
        "wait_seconds": [h.get("async/wait_time") for h in logs],
        "staleness_max": max((h.get("async/staleness", 0.0) for h in logs), default=0.0),
        "rounds": [h.get("dynamic_sampling/rounds", 1.0) for h in logs],
        "accuracy": greedy_accuracy(trainer.model, tokenizer, held_out),
    }


# -- the benchmark ----------------------------------------------------------------------------------------------------


def describe_warm_start(path: str) -> str:
    """``path`` and, where it has one, the key hash and TRL release of its ``warm_start.json``."""
    from trl_ext.demo import warm_start_record

    shown = os.path.relpath(path, ROOT) if Path(path).resolve().is_relative_to(ROOT) else path
    try:
        record = warm_start_record(path)
    except FileNotFoundError:
        return f"`{shown}`"
    return f"`{shown}` (key {record['key_hash']}, trained with trl {record['key']['versions']['trl']})"


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 seeds x 8 steps, both tasks (under 2 minutes)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default 60; quick 8)")
    parser.add_argument("--seeds", type=int, default=None, help="RL seeds per setting (default 3; quick 2)")
    parser.add_argument(
        "--micro-steps",
        type=int,
        default=4,
        help="micro-batches per optimizer step (gradient accumulation; the rollout is one optimizer step): refill "
        "rounds are scored between them (default 4)",
    )
    parser.add_argument("--tasks", default="demo,hard", help="comma-separated: demo, hard")
    parser.add_argument("--warm-start", default=None, help="policy folder (default: the demo's cached SFT warm start)")
    common.add_run_options(parser, "async_generation")
    options = parser.parse_args(argv)
    options.steps = options.steps or (8 if options.quick else 60)
    options.seeds = options.seeds or (2 if options.quick else 3)
    options.tasks = common.names_option(parser, "--tasks", options.tasks, TASKS)
    rl, _ = common.demo_settings(options.prompts_per_step)
    if rl["per_device_train_batch_size"] % options.micro_steps:
        parser.error(
            f"--micro-steps {options.micro_steps} does not divide the rollout of "
            f"{rl['per_device_train_batch_size']} completions: choose a divisor"
        )
    return options


def measure(options) -> dict:
    """Every task x dynamic sampling off/on x seed, synchronous then overlapped, against one engine process."""
    install_engine()
    path = options.warm_start or common.warm_start_path(options.warm_start_steps, options.cache_dir)
    context = mp.get_context("spawn")
    parent, child = context.Pipe()
    engine = context.Process(target=serve, args=(child, path, options.threads), daemon=True)
    engine.start()
    pinned = pin_to_core(0)
    PipeClient.conn = parent
    runs = []
    try:
        with tempfile.TemporaryDirectory() as workdir:
            for task in options.tasks:
                for dynamic in (False, True):
                    for seed in range(options.seeds):
                        for overlapped in (False, True):
                            run = one_run(
                                path,
                                task,
                                dynamic,
                                overlapped,
                                seed,
                                options.steps,
                                workdir,
                                options.micro_steps,
                                options.prompts_per_step,
                            )
                            runs.append(run)
                            print(
                                f"[async_generation] {task} ds={dynamic} overlapped={overlapped} seed={seed}: step "
                                f"{run['step_seconds']:.3f}s acc {run['accuracy']:.3f}",
                                flush=True,
                            )
    finally:
        parent.send(None)
        engine.join(timeout=30)
    return {"runs": runs, "warm_start": describe_warm_start(path), "pinned": pinned}


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
            training = statistics.median(r["training_seconds_per_step"] for r in sync)
            limit = max(generation, training)
            step_over = statistics.median(r["step_seconds"] for r in over)
            acc_sync = [r["accuracy"] for r in sync]
            acc_over = [r["accuracy"] for r in over]
            engine_over = statistics.median(r["generate_seconds_per_step"] for r in over)
            cpu_over = statistics.median(r["trainer_cpu_per_step"] for r in over)
            own_limit = max(engine_over, cpu_over)  # the limit of what the overlapped run itself did
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
                    "noise": statistics.stdev(acc_sync) if len(acc_sync) > 1 else float("nan"),
                    "staleness_max": max(r["staleness_max"] for r in over),
                    "engine_overlapped": engine_over,
                    "cpu_sync": statistics.median(r["trainer_cpu_per_step"] for r in sync),
                    "cpu_overlapped": cpu_over,
                    "own_limit": own_limit,
                    "over_own_limit": step_over / own_limit if own_limit else float("nan"),
                    "wait_overlapped": statistics.median(
                        statistics.median(steady([w for w in r["wait_seconds"] if w is not None])) for r in over
                    ),
                    "rounds_sync": statistics.mean(x for r in sync for x in r["rounds"]),
                    "rounds_overlapped": statistics.mean(x for r in over for x in r["rounds"]),
                    "steps": sync[0]["steps"],
                    "seeds": len(sync),
                }
            )
    return rows


def verdicts(rows: list[dict]) -> list[dict]:
    """Issue 24's bar per row: overlapped step within 15% of the limit; held-out accuracy of the overlapped runs
    within 2 standard deviations (across seeds) of the synchronous runs'."""
    out = []
    for r in rows:
        gap = r["accuracy_overlapped"] - r["accuracy_sync"]
        out.append(
            {
                "task": r["task"],
                "dynamic_sampling": r["dynamic_sampling"],
                "over_limit": r["over_limit"],
                "step_within": r["over_limit"] <= 1.15,
                "accuracy_gap": gap,
                "noise": r["noise"],
                "accuracy_within": r["noise"] == r["noise"] and abs(gap) <= 2 * r["noise"],
            }
        )
    return out


def markdown(rows: list[dict], options, prov: dict, data: dict) -> tuple[list[str], list[str]]:
    rl, _, prompts = common.demo_batch(options.prompts_per_step)
    pinned = ", each pinned to its own core (engine: CPU 1, trainer: CPU 0)" if data["pinned"] else ""
    head = [
        *common.header(prov),
        f"- setting: {options.seeds} seed(s) x {options.steps} optimizer steps per run; DAPO preset on the demo's "
        f"settings ({prompts} prompts x {rl['num_generations']} completions per rollout, one optimizer step per "
        f"rollout in {options.micro_steps} micro-batches), from the SFT warm start {data['warm_start']}",
        f"- engine: a transformers stand-in for `trl vllm-serve` in its own process, the trainer in this one, "
        f"{options.threads} thread(s) each{pinned}; TRL's server-mode code runs unchanged between them",
    ]
    body = [
        "Step times: median of the steps after the first two. Generation: seconds per step the synchronous trainer "
        "waits for the engine; training: the rest of its step (both medians of the per-step figures). Limit: "
        "max(generation, training), the best overlap can do; limit ratio: limit / synchronous step. Engine, "
        "overlapped: seconds of engine calls completed per overlapped step (the engine's load); boundary wait: "
        "seconds the overlapped trainer waited for the rollout at the generation boundary (`async/wait_time`). "
        "Trainer CPU: CPU seconds per step of the trainer's main thread (its own work); own limit: max(engine, "
        "trainer CPU) of the overlapped run itself (with dynamic sampling it generates more rounds than the "
        "synchronous run, whose carried surplus `max_staleness=1` turns off, and it skips the synchronous run's "
        "oversampled first round). Noise: the standard deviation of the synchronous runs' held-out greedy accuracy "
        "across seeds.",
        "",
        *common.table(
            [
                "task",
                "dynamic sampling",
                "sync step (s)",
                "generation (s)",
                "training (s)",
                "limit (s)",
                "limit ratio",
                "overlapped step (s)",
                "overlapped / limit",
                "speed-up",
                "engine, overlapped (s)",
                "boundary wait (s)",
                "trainer CPU sync, overlapped (s)",
                "overlapped / own limit",
                "rounds / step sync, overlapped",
                "max staleness",
            ],
            [
                [
                    r["task"],
                    "on" if r["dynamic_sampling"] else "off",
                    f"{r['step_sync']:.3f}",
                    f"{r['generation']:.3f}",
                    f"{r['training']:.3f}",
                    f"{r['limit']:.3f}",
                    f"{r['limit_ratio']:.2f}",
                    f"{r['step_overlapped']:.3f}",
                    f"**{r['over_limit']:.2f}**",
                    f"{r['speedup']:.2f}x",
                    f"{r['engine_overlapped']:.3f}",
                    f"{r['wait_overlapped']:.3f}",
                    f"{r['cpu_sync']:.3f}, {r['cpu_overlapped']:.3f}",
                    f"{r['over_own_limit']:.2f}",
                    f"{r['rounds_sync']:.2f}, {r['rounds_overlapped']:.2f}",
                    f"{r['staleness_max']:.0f}",
                ]
                for r in rows
            ],
            align="ll" + "r" * 14,
        ),
        "",
        f"## Held-out accuracy after {options.steps} steps (the cost of staleness)",
        "",
        *common.table(
            ["task", "dynamic sampling", "synchronous", "overlapped", "overlapped - sync", "noise (sd sync)"],
            [
                [
                    r["task"],
                    "on" if r["dynamic_sampling"] else "off",
                    f"{r['accuracy_sync']:.3f}",
                    f"{r['accuracy_overlapped']:.3f}",
                    f"{r['accuracy_overlapped'] - r['accuracy_sync']:+.3f}",
                    f"{r['noise']:.3f}",
                ]
                for r in rows
            ],
            align="ll" + "r" * 4,
        ),
        "",
        "Per seed (synchronous / overlapped):",
        "",
    ]
    accuracy = {(r["task"], r["dynamic_sampling"], r["overlapped"], r["seed"]): r["accuracy"] for r in data["runs"]}
    for r in rows:
        key = (r["task"], r["dynamic_sampling"])
        seeds = sorted({k[3] for k in accuracy if k[:2] == key})
        pairs = [
            f"seed {seed}: {accuracy[(*key, False, seed)]:.3f} / {accuracy[(*key, True, seed)]:.3f}" for seed in seeds
        ]
        body.append(f"- {r['task']}, dynamic sampling {'on' if r['dynamic_sampling'] else 'off'}: " + "; ".join(pairs))
    body += ["", "## Issue 24's bar: step within 15% of the limit, accuracy within the noise", ""]
    for v in verdicts(rows):
        body.append(
            f"- {v['task']}, dynamic sampling {'on' if v['dynamic_sampling'] else 'off'}: overlapped / limit "
            f"{v['over_limit']:.2f} ({'within' if v['step_within'] else 'NOT within'} 1.15); accuracy "
            f"{v['accuracy_gap']:+.3f} against a noise of {v['noise']:.3f} "
            f"({'within' if v['accuracy_within'] else 'NOT within'} 2 sd)."
        )
    return head, body


def report(data: dict, options, prov: dict, out: Path) -> None:
    rows = summarize(data["runs"])
    head, body = markdown(rows, options, prov, data)
    path = common.write_markdown(
        out / "async_generation.md", "Generation that overlaps training (issue 24)", head, body
    )
    figures = {"steps": options.steps, "seeds": options.seeds, "micro_steps": options.micro_steps, "rows": rows}
    common.write_figures(out / "async_generation.figures.json", prov, {**figures, "verdicts": verdicts(rows)})
    print("\n".join(body))
    print(f"[async_generation] wrote {path} and async_generation.figures.json")


def main(argv: list[str] | None = None) -> int:
    return common.bench_main("async_generation.py", argv, parse, measure, report)


if __name__ == "__main__":
    sys.exit(main())
