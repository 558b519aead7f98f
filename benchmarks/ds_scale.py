"""Dynamic sampling at scale: what assembling the trained batch costs and moves between processes, by rows, completion
length and process count.

    python benchmarks/ds_scale.py                  # the sweep: 1, 2, 4, 8 processes; 512-8192 rows; 256 and 4096 tokens
    python benchmarks/ds_scale.py --quick          # a small grid, for a smoke run
    python benchmarks/ds_scale.py --world-sizes 1  # one process (one GPU cannot host two NCCL ranks)
    python benchmarks/ds_scale.py --check --world-sizes 2,4,8 --rows 256 --completion 64 --out /tmp/x   # the tests'
    python benchmarks/ds_scale.py --render benchmarks/results/ds_scale.json   # rebuild the report from raw data

Two parts:

- **assembly**: synthetic rounds with TRL 1.16's generation-output keys (ids and masks int64, old-policy log-probs
  float32; prompts left-padded to 96-128 columns, completions right-padded to about the completion length, widths
  differing per process and round), a fraction ``p`` of groups uninformative, rounds drawn until the batch is full.
  Each process times ``select_groups`` + ``assemble`` (the dynamic-sampling machinery of a step, wall and CPU seconds)
  beside ``torch.cat`` of its own trained rows already padded to the batch's width (the copy any assembly pays), and
  counts the bytes every ``torch.distributed`` collective sends while it runs. ``--check`` also gathers every
  process's batch and compares it, row by row, with the batch one process assembles from the same rounds.
- **trainer**: ``DAPOTrainer`` with dynamic sampling on the demo task under ``torchrun`` (a 1-layer model, 48-token
  completions), every collective of the run counted and attributed to the code that called it: dynamic sampling's
  machinery, TRL's own round (its ``gather_object`` of prompts and completions, reward gathers), or the rest.

Bytes sent by one process: an ``all_to_all_single``'s rows for the other processes; an ``all_gather`` /
``all_gather_object``'s payload (pickled size for objects) once for each other process; an ``all_reduce`` or
``broadcast``'s payload once. Times are per step; under ``torchrun`` on a 2-core machine 4 and 8 processes share two
cores, so the per-process comparison across process counts uses CPU seconds. The GPU-step share assumes a 7B policy
at 3,000 tokens per second per GPU for the whole RL step (generation and training): step seconds = the process's
trained tokens / 3,000.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import socket
import statistics
import subprocess
import sys
import time
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _common  # noqa: E402

TOKENS_PER_SECOND = 3000.0  # assumed whole-step throughput of a 7B policy per GPU (module docstring)
GROUP = 16  # completions per group (DAPO's)
MAX_ROUNDS = 8
COLLECTIVES = (
    "all_to_all_single",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "gather_object",
    "all_reduce",
    "broadcast",
    "broadcast_object_list",
    "reduce_scatter_tensor",
)


class CollectiveMeter:
    """Counts the bytes each ``torch.distributed`` collective sends from this process (module docstring), by caller:
    ``dynamic_sampling`` (trl_ext's machinery), ``trl`` (TRL's own code), or ``other``. Measurement only: it wraps
    the functions of the ``torch.distributed`` namespace while installed, and restores them."""

    def __init__(self) -> None:
        self.sent: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> CollectiveMeter:
        import torch.distributed as dist

        for name in COLLECTIVES:
            if hasattr(dist, name):
                self._saved[name] = getattr(dist, name)
                setattr(dist, name, self._wrap(name, self._saved[name]))
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch.distributed as dist

        for name, function in self._saved.items():
            setattr(dist, name, function)
        self._saved.clear()

    def reset(self) -> None:
        self.sent.clear()
        self.calls.clear()

    @staticmethod
    def caller() -> str:
        for frame in reversed(traceback.extract_stack()[:-3]):
            path = frame.filename.replace(os.sep, "/")
            if "/torch/" in path or "/accelerate/" in path or path.endswith("ds_scale.py"):
                continue
            if "/trl_ext/grpo/dynamic_sampling/" in path:
                return "dynamic_sampling"
            return "trl" if "/trl/" in path else "other"
        return "other"

    def _wrap(self, name: str, function: Any) -> Any:
        import torch.distributed as dist

        def counted(*args: Any, **kwargs: Any) -> Any:
            world = dist.get_world_size()
            self.sent[self.caller()] += self._bytes(name, args, kwargs, world, dist.get_rank())
            self.calls[name] += 1
            return function(*args, **kwargs)

        return counted

    @staticmethod
    def _bytes(name: str, args: tuple, kwargs: dict, world: int, rank: int) -> int:
        def nbytes(t: Any) -> int:
            return t.numel() * t.element_size()

        if name == "all_to_all_single":
            send = args[1] if len(args) > 1 else kwargs["input"]
            splits = args[3] if len(args) > 3 else kwargs.get("input_split_sizes")
            row = nbytes(send) // max(send.size(0), 1)
            return row * (sum(splits) - splits[rank]) if splits else nbytes(send) * (world - 1) // world
        if name in ("all_gather", "all_gather_into_tensor"):
            return nbytes(args[1]) * (world - 1)
        if name in ("all_gather_object", "gather_object"):
            return len(pickle.dumps(args[1])) * (world - 1)
        if name == "broadcast_object_list":
            return len(pickle.dumps(args[0])) * (world - 1)
        if name == "reduce_scatter_tensor":
            return nbytes(args[1])
        return nbytes(args[0])  # all_reduce, broadcast


# -- the assembly part ------------------------------------------------------------------------------------------------


def synthetic_round(seed: int, index: int, rank: int, world: int, rows: int, completion: int, p: float):
    """Round ``index`` as process ``rank`` holds it (``rows`` global rows; module docstring). The keep mask comes from
    ``(seed, index)`` alone, so every process agrees on it; the row contents from ``(seed, index, rank)``; each row's
    first completion token is its unique id."""
    import torch

    from trl_ext.grpo.dynamic_sampling.batch import Round

    keep = torch.rand(rows // GROUP, generator=torch.Generator().manual_seed(seed * 1000 + index)) >= p
    gen = torch.Generator().manual_seed((seed * 1000 + index) * 64 + rank)
    local = rows // world
    prompt_width = 96 + int(torch.randint(0, 33, (), generator=gen))
    completion_width = max(1, completion - int(torch.randint(0, completion // 16 + 1, (), generator=gen)))
    prompt_len = torch.randint(16, prompt_width + 1, (local,), generator=gen)
    completion_len = torch.randint(1, completion_width + 1, (local,), generator=gen)
    columns_p, columns_c = torch.arange(prompt_width), torch.arange(completion_width)
    prompt_mask = (columns_p >= prompt_width - prompt_len.unsqueeze(1)).long()
    completion_mask = (columns_c < completion_len.unsqueeze(1)).long()
    prompt_ids = torch.randint(1, 32000, (local, prompt_width), generator=gen) * prompt_mask
    completion_ids = torch.randint(1, 32000, (local, completion_width), generator=gen) * completion_mask
    completion_ids[:, 0] = 10**9 + index * rows + rank * local + torch.arange(local)
    logps = -torch.rand(local, completion_width, generator=gen) * completion_mask
    output = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.randn(local, generator=gen),
        "num_items_in_batch": completion_mask.sum(),
        "old_per_token_logps": logps,
    }
    metric = keep.repeat_interleave(GROUP).float()
    return Round(output, metric.unsqueeze(1), metric, keep, 0.0)


def draw_rounds(seed: int, rank: int, world: int, rows: int, completion: int, p: float) -> list:
    """Rounds until their informative groups fill one round's worth of groups (or ``MAX_ROUNDS``)."""
    rounds, kept = [], 0
    while kept < rows // GROUP and len(rounds) < MAX_ROUNDS:
        rounds.append(synthetic_round(seed, len(rounds), rank, world, rows, completion, p))
        kept += int(rounds[-1].informative.sum())
    return rounds


class _Accelerator:
    """What ``assemble`` reads of accelerate's ``Accelerator``, over plain ``torch.distributed``."""

    def __init__(self, world: int, rank: int) -> None:
        import torch

        self.num_processes, self.process_index, self.device = world, rank, torch.device("cpu")

    def gather(self, tensor):
        import torch
        import torch.distributed as dist

        if self.num_processes == 1:
            return tensor.reshape(-1, *tensor.shape[1:]) if tensor.ndim else tensor.reshape(1)
        tensor = tensor if tensor.ndim else tensor.reshape(1)
        parts = [torch.empty_like(tensor) for _ in range(self.num_processes)]
        dist.all_gather(parts, tensor)
        return torch.cat(parts)


def _batch_bytes(batch: dict) -> int:
    import torch

    return sum(v.numel() * v.element_size() for v in batch.values() if isinstance(v, torch.Tensor) and v.ndim)


def _canonical(batch: dict, prompt_width: int, completion_width: int) -> dict:
    """The batch's rows padded to common widths and ordered by their unique id (``--check``)."""
    import torch
    import torch.nn.functional as F

    order = torch.argsort(batch["completion_ids"][:, 0])
    out = {}
    for key, value in batch.items():
        if not isinstance(value, torch.Tensor) or value.ndim == 0:
            continue
        if key.startswith("prompt"):
            value = F.pad(value, (prompt_width - value.size(1), 0))
        elif value.ndim == 2:
            value = F.pad(value, (0, completion_width - value.size(1)))
        out[key] = value[order]
    return out


def assembly_worker(options: dict) -> dict:
    """One process of one configuration (module docstring): timings, bytes and, with ``check``, the comparison."""
    import torch
    import torch.distributed as dist

    from trl_ext.grpo.dynamic_sampling.batch import assemble, plan_rows, select_groups

    world, rank = (dist.get_world_size(), dist.get_rank()) if dist.is_initialized() else (1, 0)
    rows, completion, p = options["rows"], options["completion"], options["p"]
    accelerator = _Accelerator(world, rank)
    rounds = draw_rounds(options["seed"], rank, world, rows, completion, p)
    seconds, cpu, cat_seconds, sent = [], [], [], defaultdict(list)
    with CollectiveMeter() as meter:
        for _ in range(options["repeats"]):
            if world > 1:
                dist.barrier()
            meter.reset()
            started, started_cpu = time.perf_counter(), time.process_time()
            chosen, fillers = select_groups(rounds, rows // GROUP)
            batch = assemble(rounds, chosen, fillers, accelerator, GROUP, pad_id=0)
            seconds.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
            for caller, n in meter.sent.items():
                sent[caller].append(n)
            meter.reset()
            plan = plan_rows(chosen + fillers, len(fillers), [r.num_rows // world for r in rounds], GROUP, world)
            mine_rounds = plan.round[plan.trained_on(rank)]
            pieces = {
                key: [value[mine_rounds == r] for r in range(len(rounds))]
                for key, value in batch.items()
                if isinstance(value, torch.Tensor) and value.ndim
            }
            started = time.perf_counter()
            # kept until the next cat, as the batch is kept until the next assembly: both write to fresh memory
            concatenated = [torch.cat(parts) for parts in pieces.values()]
            cat_seconds.append(time.perf_counter() - started)
            del pieces
    del concatenated
    result = {
        "world": world,
        "rank": rank,
        "rows": rows,
        "completion": completion,
        "p": p,
        "rounds": len(rounds),
        "rows_trained": int(batch["completion_ids"].size(0)),
        "batch_bytes": _batch_bytes(batch),
        "trained_tokens": int(batch["prompt_ids"].numel() + batch["completion_ids"].numel()),
        "seconds": statistics.median(seconds),
        "cpu_seconds": statistics.median(cpu),
        "cat_seconds": statistics.median(cat_seconds),
        "sent_bytes": {caller: max(values) for caller, values in sent.items()},
        "moved_rows": int((plan.origin != plan.dest).sum()),
    }
    if options.get("check"):
        result["check"] = _check(options, rounds, batch, world, rank)
    return result


def _check(options: dict, rounds: list, batch: dict, world: int, rank: int) -> str:
    """Every process's batch, gathered, against the batch one process assembles from every process's rows."""
    import torch
    import torch.distributed as dist

    from trl_ext.grpo.dynamic_sampling.batch import Round, assemble, select_groups

    parts = [batch]
    if world > 1:
        parts = [None] * world
        dist.all_gather_object(parts, {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)})
    if rank != 0:
        return "checked on process 0"
    import torch.nn.functional as F

    joined_rounds = []
    for index in range(len(rounds)):
        per_rank = [
            synthetic_round(options["seed"], index, r, world, options["rows"], options["completion"], options["p"])
            for r in range(world)
        ]
        widths = {
            k: max(pr.output[k].size(1) for pr in per_rank)
            for k in per_rank[0].output
            if k != "advantages" and per_rank[0].output[k].ndim == 2
        }
        output = {}
        for key, value in per_rank[0].output.items():
            if value.ndim == 0:
                output[key] = sum(pr.output[key] for pr in per_rank)
            elif value.ndim == 1:
                output[key] = torch.cat([pr.output[key] for pr in per_rank])
            else:
                left = key.startswith("prompt")
                output[key] = torch.cat(
                    [
                        F.pad(
                            pr.output[key],
                            (widths[key] - pr.output[key].size(1), 0)
                            if left
                            else (0, widths[key] - pr.output[key].size(1)),
                        )
                        for pr in per_rank
                    ]
                )
        first = per_rank[0]
        joined_rounds.append(Round(output, first.rewards_per_func, first.metric, first.informative, 0.0))
    chosen, fillers = select_groups(joined_rounds, options["rows"] // GROUP)
    reference = assemble(joined_rounds, chosen, fillers, _Accelerator(1, 0), GROUP, pad_id=0)
    shares = [part["completion_ids"].size(0) for part in parts]
    if shares != [reference["completion_ids"].size(0) // world] * world:
        return f"unequal shares: {shares}"
    widths = reference["prompt_ids"].size(1), reference["completion_ids"].size(1)
    padded = [_canonical(part, *widths) for part in parts]
    ours = _canonical({key: torch.cat([part[key] for part in padded]) for key in padded[0]}, *widths)
    theirs = _canonical(reference, *widths)
    different = [key for key in theirs if not torch.equal(ours[key], theirs[key])]
    return "same rows as one process" if not different else f"different: {different}"


# -- the trainer part -------------------------------------------------------------------------------------------------


def trainer_worker(options: dict) -> dict:
    """DAPO with dynamic sampling on the demo task, every collective counted (module docstring)."""
    import torch

    from trl_ext import DAPOTrainer, get_preset
    from trl_ext.demo import DemoModelConfig, DemoTaskConfig, build_model, build_tokenizer, make_problems

    _common.setup(1)
    tokenizer = build_tokenizer()
    model = build_model(
        tokenizer,
        DemoModelConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
        ),
    )
    train, _ = make_problems(DemoTaskConfig(max_operand=19, num_train=200, num_eval=10))

    def even_answer_reward(completions, answer, **kwargs):
        return [float(len(c) % 2) if int(a) % 2 == 0 else 0.0 for c, a in zip(completions, answer, strict=True)]

    args = get_preset(
        "dapo",
        **_common.run_args(options["out_dir"], seed=0),
        per_device_train_batch_size=32,
        num_generations=8,
        max_completion_length=48,
        max_steps=options["steps"],
        soft_overlong_punishment=False,
        dynamic_sampling_max_generation_batches=4,
        temperature=1.5,
        num_minibatches=1,
    )
    trainer = DAPOTrainer(model, [even_answer_reward], args=args, train_dataset=train, processing_class=tokenizer)
    batch_bytes = []
    generate = trainer._generate_and_score_completions

    def recorded(inputs):
        batch = generate(inputs)
        batch_bytes.append(_batch_bytes(batch))
        return batch

    trainer._generate_and_score_completions = recorded  # measurement: what each step trains
    with CollectiveMeter() as meter:
        trainer.train()
    logs = [h for h in trainer.state.log_history if "dynamic_sampling/rounds" in h]
    return {
        "world": trainer.accelerator.num_processes,
        "rank": trainer.accelerator.process_index,
        "steps": len(batch_bytes),
        "rounds": [h["dynamic_sampling/rounds"] for h in logs],
        "batch_bytes": statistics.mean(batch_bytes),
        "sent_bytes": {caller: n / max(len(batch_bytes), 1) for caller, n in meter.sent.items()},
        "torch_threads": torch.get_num_threads(),
    }


# -- running and reporting --------------------------------------------------------------------------------------------


def _worker_main(spec_path: str) -> None:
    """A process started by ``_launch``: run the part named in the spec, write this rank's JSON."""
    import torch
    import torch.distributed as dist

    spec = json.loads(Path(spec_path).read_text())
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and spec["part"] == "assembly":
        from accelerate import PartialState

        PartialState(cpu=True)  # the process group as a trainer has it (accelerate's object gathers need it)
    torch.set_num_threads(1)
    try:
        result = (assembly_worker if spec["part"] == "assembly" else trainer_worker)(spec)
        rank = int(os.environ.get("RANK", "0"))
        Path(spec["out_dir"], f"rank{rank}.json").write_text(json.dumps(result))
    except BaseException:
        if dist.is_initialized():
            dist.destroy_process_group()
        raise
    if dist.is_initialized():  # all ranks meet, then leave without the interpreter's teardown (tests/helpers.py)
        dist.barrier()
        dist.destroy_process_group()
        sys.stdout.flush()
        os._exit(0)


def _launch(spec: dict, world: int, timeout: float) -> list[dict]:
    """Run one configuration on ``world`` processes (``torchrun``; one plain process for 1) and read every rank."""
    out_dir = Path(spec["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    spec_path = out_dir / "spec.json"
    spec_path.write_text(json.dumps(spec))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}
    if world == 1 and spec["part"] == "assembly":
        command = [sys.executable, __file__, "--worker", str(spec_path)]
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world),
                   "--master_port", str(port), __file__, "--worker", str(spec_path)]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(world)]


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world-sizes", type=_int_list, default=None, help="processes (default 1,2,4,8)")
    parser.add_argument("--rows", type=_int_list, default=None, help="rows per round (default 512,2048,4096,8192)")
    parser.add_argument("--completion", type=_int_list, default=None, help="completion tokens (default 256,4096)")
    parser.add_argument("--p", type=float, default=0.5, help="fraction of groups uninformative (default 0.5)")
    parser.add_argument("--repeats", type=int, default=3, help="assemblies timed per configuration (median)")
    parser.add_argument("--trainer-worlds", type=_int_list, default=None, help="trainer part's processes (2,4,8)")
    parser.add_argument("--trainer-steps", type=int, default=4)
    parser.add_argument("--check", action="store_true", help="compare every batch with one process's; exit 1 if not")
    parser.add_argument("--quick", action="store_true", help="a small grid: 1,2 processes, 512 rows, 256 tokens")
    parser.add_argument("--out", default=None, help="where the report goes (default: benchmarks/results)")
    parser.add_argument("--render", default=None, help="rebuild the report from a saved ds_scale.json")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args(argv)
    options.world_sizes = options.world_sizes or ([1, 2] if options.quick else [1, 2, 4, 8])
    options.rows = options.rows or ([512] if options.quick else [512, 2048, 4096, 8192])
    options.completion = options.completion or ([256] if options.quick else [256, 4096])
    if options.trainer_worlds is None:
        options.trainer_worlds = [2] if options.quick else [w for w in options.world_sizes if w > 1]
    for world in options.world_sizes:
        for rows in options.rows:
            if rows % (GROUP * world):
                parser.error(f"--rows {rows} is not a multiple of {GROUP} completions x {world} processes.")
    return options


def measure(options: argparse.Namespace, scratch: Path) -> dict:
    assembly, trainer = [], []
    for completion in options.completion:
        for rows in options.rows:
            for world in options.world_sizes:
                spec = {"part": "assembly", "rows": rows, "completion": completion, "p": options.p,
                        "repeats": options.repeats, "seed": options.seed, "check": options.check,
                        "out_dir": str(scratch / f"a-{world}-{rows}-{completion}")}  # fmt: skip
                ranks = _launch(spec, world, timeout=1800)
                assembly.append(ranks)
                print(_assembly_line(ranks), flush=True)
    for world in options.trainer_worlds:
        spec = {"part": "trainer", "steps": options.trainer_steps, "out_dir": str(scratch / f"t-{world}")}
        ranks = _launch(spec, world, timeout=1800)
        trainer.append(ranks)
        print(_trainer_line(ranks), flush=True)
    return {"assembly": assembly, "trainer": trainer}


def _summary(ranks: list[dict]) -> dict:
    """One configuration over its processes: the slowest process's times, the largest bytes ratio."""
    first = ranks[0]
    ds_sent = [r["sent_bytes"].get("dynamic_sampling", 0) for r in ranks]
    seconds = max(r["seconds"] for r in ranks)
    step_seconds = max(r["trained_tokens"] for r in ranks) / TOKENS_PER_SECOND
    return {
        "world": first["world"],
        "rows": first["rows"],
        "completion": first["completion"],
        "rounds": first["rounds"],
        "seconds": seconds,
        "cpu_seconds": max(r["cpu_seconds"] for r in ranks),
        "cat_seconds": max(r["cat_seconds"] for r in ranks),
        "vs_cat": max(r["seconds"] / r["cat_seconds"] for r in ranks),
        # the bound on wall seconds at one process; with several, on CPU seconds (module docstring: 2 shared cores)
        "within_bound": all(
            (r["seconds"] if first["world"] == 1 else r["cpu_seconds"]) <= 1.3 * r["cat_seconds"] + 0.020
            for r in ranks
        ),
        "bytes_ratio": max(s / r["batch_bytes"] for s, r in zip(ds_sent, ranks, strict=True)),
        "sent_mb": max(ds_sent) / 1e6,
        "batch_mb": max(r["batch_bytes"] for r in ranks) / 1e6,
        "moved_rows": first["moved_rows"],
        "step_share": seconds / step_seconds,
        "check": first.get("check"),
    }


def _assembly_line(ranks: list[dict]) -> str:
    s = _summary(ranks)
    check = f", {s['check']}" if s["check"] else ""
    return (
        f"assembly: {s['world']} processes, {s['rows']} rows x {s['completion']} tokens, {s['rounds']} rounds: "
        f"{s['seconds'] * 1e3:.1f} ms ({s['vs_cat']:.2f}x the cat), sent {s['sent_mb']:.2f} MB for a "
        f"{s['batch_mb']:.2f} MB batch ({s['bytes_ratio']:.3f}x){check}"
    )


def _trainer_summary(ranks: list[dict]) -> dict:
    ds = max(r["sent_bytes"].get("dynamic_sampling", 0) for r in ranks)
    batch = min(r["batch_bytes"] for r in ranks)
    return {
        "world": ranks[0]["world"],
        "steps": ranks[0]["steps"],
        "rounds": statistics.mean(ranks[0]["rounds"]) if ranks[0]["rounds"] else 0.0,
        "batch_mb": batch / 1e6,
        "ds_mb": ds / 1e6,
        "ds_ratio": ds / batch,
        "trl_mb": max(r["sent_bytes"].get("trl", 0) for r in ranks) / 1e6,
        "other_mb": max(r["sent_bytes"].get("other", 0) for r in ranks) / 1e6,
        "all_ratio": max(sum(r["sent_bytes"].values()) / r["batch_bytes"] for r in ranks),
    }


def _trainer_line(ranks: list[dict]) -> str:
    t = _trainer_summary(ranks)
    return (
        f"trainer: {t['world']} processes, {t['rounds']:.2f} rounds a step: dynamic sampling sent {t['ds_mb']:.3f} MB "
        f"a step for a {t['batch_mb']:.3f} MB batch ({t['ds_ratio']:.3f}x); TRL's round {t['trl_mb']:.3f} MB, "
        f"the rest {t['other_mb']:.3f} MB; everything {t['all_ratio']:.3f}x the batch"
    )


def _growth(summaries: list[dict]) -> list[str]:
    """How time grows with rows (microseconds per row at one process: flat or falling is linear or better) and CPU
    time with processes (the same rows per process; beside it, how much the plain cat of the same rows slowed, since
    on 2 cores several processes also share caches and memory bandwidth)."""
    lines = []
    for completion in sorted({s["completion"] for s in summaries}):
        one = sorted((s for s in summaries if s["world"] == 1 and s["completion"] == completion),
                     key=lambda s: s["rows"])  # fmt: skip
        if one:
            per_row = ", ".join(f"{s['rows']}: {s['seconds'] / s['rows'] * 1e6:.1f}" for s in one)
            lines.append(f"- {completion} tokens, one process, wall microseconds per row by rows: {per_row}")
        for s in summaries:
            base = next((b for b in one if b["rows"] == s["rows"] // s["world"]), None)
            if s["completion"] == completion and s["world"] > 1 and base is not None:
                cat = s["cat_seconds"] / base["cat_seconds"]  # the same copy, slowed by processes sharing the cores
                lines.append(
                    f"- {completion} tokens, {base['rows']} rows per process: {s['world']} processes "
                    f"{s['cpu_seconds'] * 1e3:.1f} ms CPU per process against {base['cpu_seconds'] * 1e3:.1f} ms at one "
                    f"process ({s['cpu_seconds'] / base['cpu_seconds']:.2f}x); the plain cat of the same rows "
                    f"{cat:.2f}x ({s['cpu_seconds'] / base['cpu_seconds'] / cat:.2f}x of the cat's own slowdown)"
                )
    return lines


def report(options: argparse.Namespace, prov: dict, data: dict, out: Path) -> Path:
    summaries = [_summary(ranks) for ranks in data["assembly"]]
    rows = [
        [s["world"], s["rows"], s["completion"], s["rounds"], f"{s['seconds'] * 1e3:.1f}",
         f"{s['cpu_seconds'] * 1e3:.1f}", f"{s['cat_seconds'] * 1e3:.1f}", f"{s['vs_cat']:.2f}",
         "yes" if s["within_bound"] else "**no**", f"{s['sent_mb']:.2f}", f"{s['batch_mb']:.2f}",
         f"{s['bytes_ratio']:.3f}", s["moved_rows"], f"{s['step_share'] * 100:.4f}%"]
        for s in summaries
    ]  # fmt: skip
    body = [
        "## The assembly of one step",
        "",
        "Per configuration, the slowest process (median of "
        f"{options.repeats} assemblies); p = {options.p}; bytes: what one process's collectives sent during the "
        "assembly, against the bytes of the batch it trains. The bound (1.3x a `torch.cat` of the process's rows "
        "already padded to the batch's width, plus 20 ms) is read on wall seconds at one process and on CPU seconds "
        "with several: on this machine 2, 4 and 8 processes share 2 cores, so wall time there includes waiting for a "
        "descheduled peer inside each collective. 'of a GPU step': the wall seconds against the process's trained "
        f"tokens at {TOKENS_PER_SECOND:,.0f} tokens/s (a 7B policy, the whole RL step).",
        "",
        *_common.table(
            [
                "processes",
                "rows",
                "tokens",
                "rounds",
                "ms",
                "CPU ms",
                "cat ms",
                "x cat",
                "<= 1.3x cat + 20 ms",
                "sent MB",
                "batch MB",
                "sent / batch",
                "rows moved",
                "of a GPU step",
            ],
            rows,
        ),  # fmt: skip
        "",
        "## How it grows",
        "",
        *_growth(summaries),
    ]
    if data["trainer"]:
        trainer = [_trainer_summary(ranks) for ranks in data["trainer"]]
        body += [
            "",
            "## A DAPO run with dynamic sampling",
            "",
            f"DAPOTrainer on the demo task under torchrun (gloo), 32 rows per process, 48-token completions, "
            f"{options.trainer_steps} steps; bytes sent per process per step, by the code that called the collective.",
            "",
            *_common.table(
                [
                    "processes",
                    "rounds a step",
                    "batch MB",
                    "dynamic sampling MB",
                    "/ batch",
                    "TRL's round MB",
                    "other MB",
                    "all / batch",
                ],
                [
                    [
                        t["world"],
                        f"{t['rounds']:.2f}",
                        f"{t['batch_mb']:.3f}",
                        f"{t['ds_mb']:.3f}",
                        f"{t['ds_ratio']:.3f}",
                        f"{t['trl_mb']:.3f}",
                        f"{t['other_mb']:.3f}",
                        f"{t['all_ratio']:.3f}",
                    ]
                    for t in trainer
                ],
            ),  # fmt: skip
        ]
    if any(s["check"] for s in summaries):
        body += ["", "## Check", "", *[f"- {s['world']} processes, {s['rows']} rows: {s['check']}" for s in summaries]]
    out.mkdir(parents=True, exist_ok=True)
    _plot(summaries, out / "ds_scale.png")
    body += ["", "![time and bytes](ds_scale.png)"]
    return _common.write_markdown(out / "ds_scale.md", "Dynamic sampling at scale", _common.header(prov), body)


def _plot(summaries: list[dict], path: Path) -> None:
    plt = _common.plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for completion in sorted({s["completion"] for s in summaries}):
        for world in sorted({s["world"] for s in summaries}):
            points = sorted((s for s in summaries if s["world"] == world and s["completion"] == completion),
                            key=lambda s: s["rows"])  # fmt: skip
            if not points:
                continue
            label = f"{world} proc, {completion} tok"
            left.plot([s["rows"] for s in points], [s["seconds"] for s in points], marker="o", label=label)
            right.plot([s["rows"] for s in points], [s["bytes_ratio"] for s in points], marker="o", label=label)
    left.set(xscale="log", yscale="log", xlabel="rows per round", ylabel="seconds per step (slowest process)")
    right.set(xscale="log", xlabel="rows per round", ylabel="bytes sent / bytes trained (per process)")
    right.axhline(2.0, color="grey", linestyle="--", linewidth=1)
    left.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    out = Path(options.out) if options.out else _common.results_dir(None, options.quick)
    if options.render:
        options, prov, data = _common.load_raw(options.render, options)
    else:
        import tempfile

        load, started = os.getloadavg(), time.perf_counter()
        with tempfile.TemporaryDirectory() as scratch:
            data = measure(options, Path(scratch))
        prov = _common.provenance(
            _common.command_line("ds_scale.py", sys.argv[1:] if argv is None else argv),
            time.perf_counter() - started, 1, load,
        )  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        _common.save_raw(out / "ds_scale.json", options, prov, data)
    path = report(options, prov, data, out)
    print(f"report: {path}")
    failed = [
        _summary(r)["check"]
        for r in data["assembly"]
        if _summary(r)["check"] not in (None, "same rows as one process")
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker_main(sys.argv[2])
    else:
        sys.exit(main())
