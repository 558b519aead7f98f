"""Helpers shared by the trainer benchmarks (``overhead.py``, ``sample_efficiency.py``, ``dynamic_sampling.py``).

- ``setup(threads)``: fixed torch / OpenMP threads, quiet logging, no network (call before building anything).
- ``on_cuda()``: whether the benchmarks train on the GPU (``TRL_EXT_BENCH_DEVICE=cuda``, set by
  ``benchmarks/gpu_check.sh``; the environment reaches every worker process); by default they train on the CPU.
- ``demo_settings()``: the demo's tuned RL settings, read from ``recipes/configs/demo/dapo/config_demo.yaml`` so that the
  benchmarks follow the recipe instead of a copy of it.
- ``load_policy()``: the demo's SFT warm start (``trl_ext.demo.warm_start``, cached), model and tokenizer.
- ``run_lockstep()``: run N training jobs in N worker processes that take turns one optimizer step at a time
  (A B C A B C ...), each timing its own steps (``lockstep()`` callback): every arm sees the same machine load, which
  is what makes ratios meaningful on a shared machine.
- ``provenance()`` / ``header()`` / ``write_markdown()``: the date, command, machine, versions and load block every
  result file starts with; ``save_raw()`` / ``load_raw()``: a run's raw data as JSON beside its report (git-ignored),
  from which ``--render`` rebuilds the report and plot without training again.
- ``bench_main()``: the ``main()`` of a trainer benchmark (parse, measure or ``--render``, provenance, raw JSON,
  report); ``names_option()``: a comma-separated ``--configs`` / ``--algorithms`` style option, checked.
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"  # the committed results: written only by full runs (or --out)
QUICK_RESULTS = ROOT / "outputs" / "benchmarks-quick"  # where --quick runs write unless --out says otherwise


def results_dir(out: str | None, quick: bool) -> Path:
    """``--out`` if given; else ``outputs/benchmarks-quick`` for ``--quick`` (a smoke run must never overwrite the
    committed results) and ``benchmarks/results`` for a full run."""
    if out:
        return Path(out)
    return QUICK_RESULTS if quick else RESULTS


DEMO_YAML = ROOT / "recipes" / "configs" / "demo" / "dapo" / "config_demo.yaml"
#: ``--task(s)`` of the trainer benchmarks: the demo's problems (operands 0..29), or a harder variant with operands
#: 0..49 from the same warm start (trained on the demo's problems): many more groups are all wrong, so at least half
#: of them are uninformative.
TASKS = {"demo": {}, "hard": {"max_operand": 49}, "mixed": {"num_train": 200, "hard_train": 200}}


def task_problems(task: str):
    """(train, held-out) of a ``TASKS`` entry. ``hard_train``: that many problems with an operand of 30..49 (the demo
    model's warm starts almost never solve them) joined to the demo's training set, so that about half the groups
    are uninformative while the held-out set stays the demo's (learnable)."""
    from datasets import concatenate_datasets

    from trl_ext.demo import DemoTaskConfig, make_problems

    settings = dict(TASKS[task])
    hard = settings.pop("hard_train", 0)
    train, held_out = make_problems(DemoTaskConfig(**settings))
    if hard:
        pool, _ = make_problems(DemoTaskConfig(max_operand=49, num_train=2000, num_eval=0, seed=1))
        beyond = pool.filter(lambda row: max(int(x) for x in row["prompt"][:-1].split("+")) > 29)
        train = concatenate_datasets([train, beyond.select(range(hard))]).shuffle(seed=0)
    return train, held_out


if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
#: ``cuda``: the benchmarks train on the GPU (fp32, deterministic kernels, so that two arms doing the same work still
#: end on identical weights); unset or anything else: on the CPU, as every committed result was measured.
DEVICE_ENV = "TRL_EXT_BENCH_DEVICE"


def on_cuda() -> bool:
    return os.environ.get(DEVICE_ENV) == "cuda"


# The keys of the demo YAML that define the RL setting (the rest: output, hardware, step count).
_DEMO_KEYS = (
    "num_generations",
    "per_device_train_batch_size",
    "max_completion_length",
    "temperature",
    "learning_rate",
    "lr_scheduler_type",
)
_DAPO_KEYS = ("overlong_buffer_len", "dynamic_sampling_max_generation_batches", "dynamic_sampling_reward_range")


def setup(threads: int) -> None:
    """Pin the thread count (stable timings on a shared machine), silence progress output, forbid downloads."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if on_cuda():
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS starts: deterministic GEMMs
    import warnings

    import datasets
    import torch
    import transformers

    torch.set_num_threads(threads)
    if on_cuda():  # the same work gives the same weights: deterministic kernels, attention by plain matmuls
        torch.use_deterministic_algorithms(True, warn_only=True)
        for backend in ("flash", "mem_efficient", "cudnn"):  # their backward passes accumulate in any order
            getattr(torch.backends.cuda, f"enable_{backend}_sdp")(False)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    warnings.filterwarnings("ignore")


def demo_settings(prompts_per_step: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(rl, dapo)``: the demo's RL settings (16 prompts x 8 completions, lr 5e-4 constant, 6 tokens) and its
    DAPO-only fields, from ``recipes/configs/demo/dapo/config_demo.yaml``. ``prompts_per_step`` shrinks the batch (tests)."""
    import yaml

    with open(DEMO_YAML) as f:
        demo = yaml.safe_load(f)
    rl = {key: demo[key] for key in _DEMO_KEYS}
    rl["learning_rate"] = float(rl["learning_rate"])
    # The demo splits each rollout of 16 x 8 completions into num_minibatches optimizer steps; the benchmarks keep
    # measuring one optimizer step per rollout of 16 x 8 (their committed results were measured so), DAPO included.
    rl["per_device_train_batch_size"] *= demo.get("num_minibatches", 1)
    if prompts_per_step is not None:
        rl["per_device_train_batch_size"] = prompts_per_step * rl["num_generations"]
    return rl, {**{key: demo[key] for key in _DAPO_KEYS}, "num_minibatches": 1}


def run_args(output_dir: str, seed: int = 0, **overrides: Any) -> dict[str, Any]:
    """Trainer fields every benchmark run shares: CPU (GPU with ``on_cuda()``), fp32, no checkpoints, a log dict
    every step."""
    return dict(
        output_dir=output_dir,
        seed=seed,
        save_strategy="no",
        report_to="none",
        logging_steps=1,
        use_cpu=not on_cuda(),
        bf16=False,
        disable_tqdm=True,
        **overrides,
    )


def load_policy(warm_start_steps: int | None = None, cache_dir: str | None = None, seed: int | None = None):
    """``(model, tokenizer, path)`` of the demo's SFT warm start of SFT seed ``seed`` (default the demo's), built once
    and cached by ``warm_start`` under the hash of everything that changes its weights (``warm_start_key``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = warm_start_path(warm_start_steps, cache_dir, seed)
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path), path


def warm_start_path(warm_start_steps: int | None = None, cache_dir: str | None = None, seed: int | None = None) -> str:
    """The folder of that warm start (trained first if it is not cached)."""
    from trl_ext.demo import WarmStartConfig, warm_start

    sft = WarmStartConfig()
    if warm_start_steps is not None:
        sft.max_steps = warm_start_steps
    if seed is not None:
        sft.seed = seed
    return warm_start(output_dir=cache_dir or str(ROOT / "outputs" / "demo-warm-start"), sft=sft)


def silence(trainer) -> None:
    """Drop the callback that prints every log dict (with ``disable_tqdm`` the Trainer prints them)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


class Baton:
    """N worker processes take turns, one optimizer step each, in a ring over the workers still training."""

    def __init__(self, ctx, parties: int, timeout: float = 3600.0):
        self.parties = parties
        self.cond = ctx.Condition()
        self.turn = ctx.Value("i", 0, lock=False)  # guarded by cond
        self.done = ctx.Array("i", parties, lock=False)
        self.barrier = ctx.Barrier(parties, timeout=timeout)
        self.timeout = timeout

    def start(self, me: int, first: int = 0) -> None:
        """Every worker calls this before its next job; worker ``first`` takes the first step."""
        self.barrier.wait()
        if me == 0:
            self.turn.value = first
            for i in range(self.parties):
                self.done[i] = 0
        self.barrier.wait()

    def wait(self, me: int) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: self.turn.value in (me, -1), self.timeout):
                raise TimeoutError(f"benchmark worker {me} waited {self.timeout:.0f}s for its turn")
            if self.turn.value == -1:
                raise RuntimeError("another benchmark worker failed")

    def give(self, me: int, finished: bool = False) -> None:
        """Pass the turn to the next worker that has not finished its job (back to ``me`` if there is none)."""
        with self.cond:
            self.done[me] = int(finished)
            for step in range(1, self.parties + 1):
                other = (me + step) % self.parties
                if not self.done[other]:
                    self.turn.value = other
                    break
            self.cond.notify_all()

    def abort(self) -> None:
        with self.cond:
            for i in range(self.parties):
                self.done[i] = 1
            self.turn.value = -1
            self.cond.notify_all()
        self.barrier.abort()


def lockstep(baton: Baton, me: int):
    """A ``TrainerCallback`` that takes the baton before training and hands it over at every step boundary.

    ``step_seconds()``: the wall (or CPU) time of each step while this worker held the baton; a step runs from its
    ``on_step_begin`` to the next step's, so it includes the generation, loss, backward, optimizer update and log."""
    from transformers import TrainerCallback

    class Lockstep(TrainerCallback):
        def __init__(self):
            self.starts: list[tuple[float, float]] = []  # (wall, process CPU) at the start of each step
            self.ends: list[tuple[float, float]] = []

        @staticmethod
        def _now() -> tuple[float, float]:
            return time.perf_counter(), time.process_time()

        def on_train_begin(self, args, state, control, **kwargs):
            baton.wait(me)

        def on_step_begin(self, args, state, control, **kwargs):
            if self.starts:
                self.ends.append(self._now())
                baton.give(me)
                baton.wait(me)
            self.starts.append(self._now())

        def on_train_end(self, args, state, control, **kwargs):
            self.ends.append(self._now())
            baton.give(me, finished=True)

        def step_seconds(self, cpu: bool = False) -> list[float]:
            """Per-step wall seconds, or this process's CPU seconds (``cpu=True``: insensitive to how much of the
            machine other jobs take, since only the worker holding the turn computes)."""
            i = int(cpu)
            return [end[i] - start[i] for start, end in zip(self.starts, self.ends, strict=True)]

    return Lockstep()


def _worker_entry(target, me, baton, queue, args):
    try:
        for index, result in enumerate(target(me, baton, *args)):
            queue.put((me, index, result))
        queue.put((me, None, None))
    except BaseException:
        import traceback

        queue.put((me, -1, traceback.format_exc()))
        baton.abort()


def run_lockstep(target, worker_args: list[tuple], on_result=None, timeout: float = 3600.0) -> list[list[Any]]:
    """Run ``target(me, baton, *worker_args[me])`` in one spawned process per worker; ``target`` is a generator that
    calls ``baton.start(me, first)`` before each training job, trains with ``lockstep(baton, me)`` among its callbacks
    and yields one result per job. Returns each worker's results in order; ``on_result(me, index, result)`` sees them
    as they arrive. A worker's failure stops all of them and is raised here with its traceback."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # no fork of a process that has torch's thread pools
    baton, queue = Baton(ctx, len(worker_args), timeout), ctx.Queue()
    workers = [
        ctx.Process(target=_worker_entry, args=(target, me, baton, queue, args), daemon=True)
        for me, args in enumerate(worker_args)
    ]
    for process in workers:
        process.start()
    results: list[list[Any]] = [[] for _ in workers]
    finished = 0
    try:
        while finished < len(workers):
            me, index, result = queue.get(timeout=timeout)
            if index is None:
                finished += 1
            elif index < 0:
                raise RuntimeError(f"benchmark worker {me} failed:\n{result}")
            else:
                results[me].append(result)
                if on_result is not None:
                    on_result(me, index, result)
    finally:
        for process in workers:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
    return results


def spread(values: list[float]) -> dict[str, float]:
    """Median, quartiles (inclusive method), min and max."""
    values = sorted(values)
    if len(values) >= 2:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    else:
        q1 = q3 = values[0]
    return {"median": statistics.median(values), "q1": q1, "q3": q3, "min": values[0], "max": values[-1]}


def command_line(script: str, argv: list[str]) -> str:
    return " ".join(["python", f"benchmarks/{script}", *map(shlex.quote, argv)])


def machine() -> str:
    from trl_ext.demo import cpu_name

    cpu = cpu_name()
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        ram = float("nan")
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} CPUs, {ram:.0f} GiB RAM, {gpu} ({platform.platform()})"


def provenance(command: str, wall_s: float, threads: int, load_before: tuple[float, ...]) -> dict[str, Any]:
    """Date, command, machine, versions, threads and load of a run (saved with its raw data, rendered by header)."""
    import torch
    import transformers
    import trl

    return {
        "date": datetime.date.today().isoformat(),
        "command": command,
        "wall_s": wall_s,
        "machine": machine(),
        "versions": f"python {platform.python_version()}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, trl {trl.__version__}",
        "threads": threads,
        "load": [load_before[0], os.getloadavg()[0]],
    }


def header(prov: dict[str, Any]) -> list[str]:
    """The provenance block at the top of every result file."""
    threads = prov["threads"]
    return [
        f"- date: {prov['date']}",
        f"- command: `{prov['command']}` ({prov['wall_s'] / 60:.1f} min)",
        f"- machine: {prov['machine']}",
        f"- versions: {prov['versions']}",
        f"- threads: torch.set_num_threads({threads}), OMP_NUM_THREADS={threads}; 1-minute load average "
        f"{prov['load'][0]:.1f} at the start, {prov['load'][1]:.1f} at the end (shared machine: absolute times are "
        "noise, only the side-by-side ratios are meant to be read)",
    ]


#: Options that say where a report goes and what it is rendered with, not how it was measured: never saved with a run,
#: always taken from the command line (``--also``: other saved runs put side by side with this one).
CLI_ONLY = ("out", "render", "also")


def save_raw(path: Path, options, prov: dict[str, Any], data: Any) -> Path:
    """The run's options, provenance and raw measurements as JSON (``--render`` rebuilds the report from it)."""
    import json

    settings = {k: v for k, v in vars(options).items() if k not in CLI_ONLY}
    Path(path).write_text(json.dumps({"options": settings, "provenance": prov, "data": data}, indent=1))
    return Path(path)


def load_raw(path: str, options):
    """``(options, provenance, data)`` of a saved run; the saved options replace the parsed ones, except those of ``CLI_ONLY``."""
    import argparse
    import json

    saved = json.loads(Path(path).read_text())
    cli = {k: v for k, v in vars(options).items() if k in CLI_ONLY}
    merged = argparse.Namespace(**{**saved["options"], **cli, "render": path})
    return merged, saved["provenance"], saved["data"]


def trl_release(prov: dict[str, Any]) -> str:
    """The TRL release a run's provenance names (``versions``: "..., trl 1.12.0")."""
    return prov["versions"].rsplit("trl ", 1)[-1]


def write_figures(path: Path, prov: dict[str, Any], figures: dict[str, Any]) -> Path:
    """A report's headline figures as JSON beside it (``<name>.figures.json``, committed with the report): what
    ``benchmarks/reproduce.py`` compares a reduced rerun with and what the README's generated blocks quote."""
    import json

    record = {"trl": trl_release(prov), "versions": prov["versions"], "date": prov["date"]}
    Path(path).write_text(json.dumps({**record, **figures}, indent=1) + "\n")
    return Path(path)


def write_markdown(path: Path, title: str, head: list[str], body: list[str]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([f"# {title}", "", *head, "", *body]).rstrip() + "\n")
    return path


def table(columns: list[str], rows: list[list[Any]], align: str | None = None) -> list[str]:
    """A markdown table; ``align`` is one character per column, ``l`` or ``r`` (default: first left, rest right)."""
    align = align or "l" + "r" * (len(columns) - 1)
    rule = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


def add_run_options(parser, name: str, prompts_help: str = "prompts per step (default: the demo's 16)") -> None:
    """The options every trainer benchmark shares: batch size, threads, warm start, where results go (``--out``,
    ``results_dir``) and ``--render`` (rebuild the report of ``<name>.json`` without training)."""
    parser.add_argument("--prompts-per-step", type=int, help=prompts_help)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warm-start-steps", type=int, help="SFT steps of the warm start (default: the demo's)")
    parser.add_argument("--cache-dir", help="where the warm start is cached (default outputs/demo-warm-start)")
    parser.add_argument(
        "--out",
        default=None,
        help=f"directory for {name}.md, .png and .json (default: benchmarks/results; --quick: "
        "outputs/benchmarks-quick)",
    )
    parser.add_argument("--render", help=f"rebuild the report from a saved {name}.json instead of measuring")


def names_option(parser, flag: str, value: str, known) -> list[str]:
    """The names of a comma-separated option (``--comparisons dapo,gspo``); an unknown name is a parser error that
    lists the known ones."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"{flag}: unknown {unknown}; choose from {sorted(known)}")
    return names


def bench_main(script: str, argv: list[str] | None, parse, measure, report) -> int:
    """The ``main()`` of a trainer benchmark ``benchmarks/<script>``: ``parse(argv)`` the options, then either load a
    saved run (``--render``) or ``setup`` the threads and ``measure(options)`` (provenance: command, wall time, load)
    and save the raw JSON; finally ``report(data, options, prov, out)`` writes the Markdown and plot into ``out``."""
    argv = sys.argv[1:] if argv is None else argv
    options = parse(argv)
    out = results_dir(options.out, options.quick)
    out.mkdir(parents=True, exist_ok=True)
    if options.render:
        options, prov, data = load_raw(options.render, options)
    else:
        setup(options.threads)
        started, load_before = time.time(), os.getloadavg()
        data = measure(options)
        prov = provenance(command_line(script, argv), time.time() - started, options.threads, load_before)
        save_raw(out / f"{Path(script).stem}.json", options, prov, data)
    report(data, options, prov, out)
    return 0


def demo_batch(prompts_per_step: int | None = None) -> tuple[dict[str, Any], dict[str, Any], int]:
    """``demo_settings()`` plus the prompts per step they make (for a report's setting line)."""
    rl, dapo = demo_settings(prompts_per_step)
    return rl, dapo, rl["per_device_train_batch_size"] // rl["num_generations"]


def save_figure(fig, out: Path) -> Path:
    """Lay out, save (100 dpi) and close a benchmark's figure; returns ``out``."""
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt().close(fig)
    return out
