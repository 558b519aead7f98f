"""Rewards benchmark: completions scored per second, math and code, side by side; one command.

    python benchmarks/rewards_bench.py            # full: 512 math completions, 128 code programs (8 x 16), 1 s each
    python benchmarks/rewards_bench.py --quick    # under 2 minutes: 128 math, 32 code

Math: ``rewards.math.MathAccuracy`` in the trainer's main thread (math-verify's signal timeouts, in-process), in the
``process`` backend with one helper and with ``--workers`` helpers (the path used off the main thread), and TRL's
``accuracy_reward`` on the same batch for reference. Helpers are started before timing (a one-off cost, reported).

Code: ``rewards.code.CodeReward`` on a GRPO-shaped batch, 8 prompts x 16 completions: per prompt 10 correct, 2 wrong,
2 partially right, 1 syntax error and 1 infinite loop (cut at the time limit), with ``--workers`` sandbox workers
and with one. The table goes to ``benchmarks/results/rewards.md`` with machine, versions, date and command.

Code, input/output cases (where code RL spends its reward time): programs that each run ``--io-cases`` stdin cases
(an APPS-layout problem: sum the numbers of a line; per 16 programs 12 right, 2 wrong, 2 right on half the cases),
scored by ``CodeReward`` (every case a sandboxed process on its own stdin) with ``--workers`` workers and one, and by
the naive anchor in the same run: ``subprocess.run([python, "-c", code], input=...)`` per case, no sandbox, as
open-r1's evaluation script does, sequential and with ``--workers`` threads. Programs/s, cases/s and our rate over
the anchor's at the same number of workers, side by side.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from trl_ext.rewards.checkers import apps_stdout  # noqa: E402
from trl_ext.rewards.code import CodeReward  # noqa: E402
from trl_ext.rewards.math import MathAccuracy  # noqa: E402
from trl_ext.rewards.sandbox import probe_isolation  # noqa: E402

MATH_ITEMS = [
    ("42", "Let me add: 40 + 2.\n#### 42"),
    ("\\frac{1}{2}", "So the probability is $\\boxed{0.5}$."),
    ("50\\%", "The answer is 50%."),
    ("-3", "Therefore x = \\boxed{-3}"),
    ("2\\sqrt{3}", "<think>12 = 4 * 3</think>\\boxed{\\sqrt{12}}"),
    ("1000", "The total is 1,000 dollars."),
    ("x^2+2x+1", "Expanding gives \\boxed{(x+1)^2}"),
    ("7", "I am not sure, maybe 8."),
    ("\\frac{3}{4}", "The answer is 3/4."),
    ("5", "nothing to see here"),
    ("\\pi", "\\boxed{3.14}"),
    ("12", "Step 1: 3 * 4 = 12.\nThe answer is 12"),
]

PROBLEMS = {
    "add": (
        "def add(a, b):\n    return a + b\n",
        "def add(a, b):\n    return a - b\n",
        "def add(a, b):\n    return a + b if a >= 0 else 0\n",
        ["assert add(1, 2) == 3", "assert add(0, 0) == 0", "assert add(-2, 1) == -1", "assert add(10, 5) == 15"],
    ),
    "is_prime": (
        "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n",
        "def is_prime(n):\n    return n % 2 == 1\n",
        "def is_prime(n):\n    return n in (2, 3, 5, 7)\n",
        ["assert is_prime(2)", "assert not is_prime(9)", "assert is_prime(13)", "assert not is_prime(1)"],
    ),
    "fib": (
        "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
        "def fib(n):\n    return n\n",
        "def fib(n):\n    return [0, 1, 1, 2, 3][n] if n < 5 else -1\n",
        ["assert fib(0) == 0", "assert fib(1) == 1", "assert fib(10) == 55", "assert fib(20) == 6765"],
    ),
    "reverse": (
        "def reverse(s):\n    return s[::-1]\n",
        "def reverse(s):\n    return s\n",
        "def reverse(s):\n    return s[::-1] if len(s) < 4 else s\n",
        ["assert reverse('abc') == 'cba'", "assert reverse('') == ''", "assert reverse('hello') == 'olleh'"],
    ),
    "largest": (
        "def largest(xs):\n    return max(xs)\n",
        "def largest(xs):\n    return xs[0]\n",
        "def largest(xs):\n    return sorted(xs)[-1] if xs[0] >= 0 else 0\n",
        ["assert largest([1, 5, 2]) == 5", "assert largest([-3, -1]) == -1", "assert largest([7]) == 7"],
    ),
    "factorial": (
        "import math\ndef factorial(n):\n    return math.factorial(n)\n",
        "def factorial(n):\n    return n * (n - 1)\n",
        "def factorial(n):\n    return 1 if n < 2 else n * (n - 1)\n",
        ["assert factorial(0) == 1", "assert factorial(3) == 6", "assert factorial(5) == 120"],
    ),
    "vowels": (
        "def vowels(s):\n    return sum(c in 'aeiou' for c in s.lower())\n",
        "def vowels(s):\n    return len(s)\n",
        "def vowels(s):\n    return sum(c in 'aeiou' for c in s)\n",
        ["assert vowels('hello') == 2", "assert vowels('AEIOU') == 5", "assert vowels('xyz') == 0"],
    ),
    "gcd": (
        "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a\n",
        "def gcd(a, b):\n    return min(a, b)\n",
        "def gcd(a, b):\n    return a if a == b else 1\n",
        ["assert gcd(12, 18) == 6", "assert gcd(7, 7) == 7", "assert gcd(5, 3) == 1", "assert gcd(100, 75) == 25"],
    ),
}


def fence(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}```"


def code_batch(n: int) -> tuple[list[str], list[list[str]]]:
    """``n`` completions in groups of 16 per prompt: 10 right, 2 wrong, 2 partial, 1 syntax error, 1 endless loop."""
    completions, tests = [], []
    names = list(PROBLEMS)
    for index in range(n):
        name = names[(index // 16) % len(names)]
        right, wrong, partial, problem_tests = PROBLEMS[name]
        kind = index % 16
        if kind < 10:
            code = right
        elif kind < 12:
            code = wrong
        elif kind < 14:
            code = partial
        elif kind == 14:
            code = right.replace("):", ")", 1)  # syntax error
        else:
            code = "while True:\n    pass\n" + right
        completions.append(fence(code))
        tests.append(problem_tests)
    return completions, tests


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - start, out


def bench_math(n: int, workers: int) -> list[dict]:
    solutions = [MATH_ITEMS[i % len(MATH_ITEMS)][0] for i in range(n)]
    completions = [MATH_ITEMS[i % len(MATH_ITEMS)][1] for i in range(n)]
    rows = []
    signal_reward = MathAccuracy()
    signal_reward(completions=completions[:4], solution=solutions[:4])  # import math-verify and sympy first
    seconds, out = timed(signal_reward, completions=completions, solution=solutions)
    rows.append({"setting": "signal backend (main thread, in-process)", "n": n, "s": seconds, "mean": mean(out)})
    for count in sorted({1, workers}):
        reward = MathAccuracy(timeout_backend="process", num_workers=count)
        startup, _ = timed(reward, completions=completions[: 2 * count], solution=solutions[: 2 * count])
        seconds, out = timed(reward, completions=completions, solution=solutions)
        reward.close()
        label = f"process backend, {count} helper{'s' if count > 1 else ''} (start-up {startup:.1f} s excluded)"
        rows.append({"setting": label, "n": n, "s": seconds, "mean": mean(out)})
    from trl.rewards import accuracy_reward

    conversational = [[{"role": "assistant", "content": c}] for c in completions]
    seconds, out = timed(accuracy_reward, conversational, solutions)
    rows.append({"setting": "trl.rewards.accuracy_reward (reference)", "n": n, "s": seconds, "mean": mean(out)})
    return rows


def bench_code(n: int, workers: int, timeout: float, serial: bool) -> list[dict]:
    completions, tests = code_batch(n)
    rows = []
    for count in [workers] + ([1] if serial and workers != 1 else []):
        reward = CodeReward(timeout=timeout, num_workers=count)
        seconds, out = timed(reward, completions=completions, tests=tests)
        statuses = [r.status for r in reward.last_results if r is not None]
        label = f"{count} worker{'s' if count > 1 else ''}, {timeout:g} s limit"
        rows.append(
            {
                "setting": label,
                "n": n,
                "s": seconds,
                "mean": mean(out),
                "timeouts": statuses.count("timeout"),
            }
        )
    return rows


IO_RIGHT = "import sys\nfor line in sys.stdin:\n    print(sum(map(int, line.split())))\n"
IO_WRONG = "import sys\nfor line in sys.stdin:\n    print(sum(map(int, line.split())) + 1)\n"
IO_HALF = "import sys\nfor line in sys.stdin:\n    xs = list(map(int, line.split()))\n    print(sum(xs) if xs[0] % 2 else 0)\n"


def io_batch(n: int, cases: int) -> tuple[list[str], list[dict]]:
    """``n`` programs (per 16: 12 right, 2 wrong, 2 right on the odd-first cases) and their APPS ``input_output``."""
    inputs = [f"{i} {2 * i + 1} {i % 7}\n" for i in range(cases)]
    tests = {"inputs": inputs, "outputs": [f"{sum(map(int, x.split()))}\n" for x in inputs]}
    codes = [IO_RIGHT if k % 16 < 12 else IO_WRONG if k % 16 < 14 else IO_HALF for k in range(n)]
    return codes, [tests] * n


def naive_program(code: str, tests: dict, timeout: float) -> float:
    """The anchor: one ``subprocess.run`` per case, no sandbox (open-r1's evaluation script), APPS's rule."""
    passed = 0
    for case_input, expected in zip(tests["inputs"], tests["outputs"], strict=True):
        try:
            run = subprocess.run([sys.executable, "-c", code], input=case_input, capture_output=True, text=True,
                                 timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired:
            continue
        passed += run.returncode == 0 and apps_stdout(run.stdout, expected)
    return passed / len(tests["inputs"])


def bench_io(n: int, cases: int, workers: int, timeout: float) -> list[dict]:
    codes, tests = io_batch(n, cases)
    rows = []
    for count in sorted({workers, 1}, reverse=True):
        reward = CodeReward(timeout=timeout, num_workers=count)
        seconds, out = timed(reward, completions=[fence(c) for c in codes], tests=tests)
        rows.append({"path": "CodeReward (sandbox, a process per case)", "workers": count, "s": seconds, "out": out})
        with ThreadPoolExecutor(count) as pool:
            seconds, out = timed(lambda: list(pool.map(naive_program, codes, tests, [timeout] * n)))
        rows.append(
            {"path": "anchor: subprocess.run per case, no sandbox", "workers": count, "s": seconds, "out": out}
        )
    for row in rows:
        row.update(n=n, cases=n * cases, mean=mean(row["out"]))
        anchor = next(r for r in rows if r["workers"] == row["workers"] and r["path"].startswith("anchor"))
        row["ratio"] = anchor["s"] / row["s"]
    return rows


def io_table(rows: list[dict]) -> str:
    lines = [
        "| path | workers | programs | cases | seconds | programs/s | cases/s | mean reward | x anchor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['path']} | {row['workers']} | {row['n']} | {row['cases']} | {row['s']:.2f} | "
            f"{row['n'] / row['s']:.1f} | {row['cases'] / row['s']:.1f} | {row['mean']:.3f} | {row['ratio']:.2f} |"
        )
    return "\n".join(lines)


def mean(values) -> float:
    scored = [v for v in values if v is not None]
    return sum(scored) / len(scored) if scored else float("nan")


def versions() -> str:
    names = ["trl", "math-verify", "sympy", "latex2sympy2_extended", "torch", "transformers"]
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return f"Python {platform.python_version()}, " + ", ".join(found)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{platform.system()} {platform.release()}, {cpu}, {cores} usable cores"


def table(math_rows: list[dict], code_rows: list[dict]) -> str:
    lines = [
        "| reward | setting | completions | seconds | completions/s | mean reward |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for kind, rows in (("math", math_rows), ("code", code_rows)):
        for row in rows:
            setting = row["setting"] + (f"; {row['timeouts']} timed out" if "timeouts" in row else "")
            lines.append(
                f"| {kind} | {setting} | {row['n']} | {row['s']:.2f} | {row['n'] / row['s']:.1f} | {row['mean']:.3f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller batches, under 2 minutes")
    parser.add_argument("--math-n", type=int, default=None, help="math completions (default 512, quick 128)")
    parser.add_argument("--code-n", type=int, default=None, help="code completions (default 128, quick 32)")
    parser.add_argument("--workers", type=int, default=None, help="helpers/sandbox workers (default: usable cores)")
    parser.add_argument("--timeout", type=float, default=1.0, help="code time limit per program, seconds")
    parser.add_argument("--no-serial", action="store_true", help="skip the one-worker code run")
    parser.add_argument("--io-n", type=int, default=None, help="input/output programs (default 64, quick 16)")
    parser.add_argument("--io-cases", type=int, default=None, help="cases per program (default 20, quick 10)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="markdown file (default: benchmarks/results/rewards.md; --quick: "
        "outputs/benchmarks-quick/rewards.md, so that a smoke run never overwrites the committed results)",
    )
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = ROOT / ("outputs/benchmarks-quick" if args.quick else "benchmarks/results") / "rewards.md"
    math_n = args.math_n or (128 if args.quick else 512)
    code_n = args.code_n or (32 if args.quick else 128)
    workers = args.workers or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)

    isolation = probe_isolation()
    start = time.perf_counter()
    math_rows = bench_math(math_n, workers)
    code_rows = bench_code(code_n, workers, args.timeout, serial=not args.no_serial)
    io_n, io_cases = args.io_n or (16 if args.quick else 64), args.io_cases or (10 if args.quick else 20)
    io_rows = bench_io(io_n, io_cases, workers, args.timeout)
    total = time.perf_counter() - start

    command = "python " + " ".join(shlex.quote(a) for a in ["benchmarks/rewards_bench.py", *(argv or sys.argv[1:])])
    report = "\n".join(
        [
            "# Rewards benchmark",
            "",
            f"- command: `{command}`",
            f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
            f"- machine: {machine()}",
            f"- versions: {versions()}",
            f"- sandbox: plan `{isolation.plan.name}` (see `rewards.sandbox_report()`)",
            f"- total wall time: {total:.1f} s",
            "",
            table(math_rows, code_rows),
            "",
            'Math: the batch cycles through 12 completions (boxed, `####`, "the answer is", last number, wrong and '
            "unanswerable ones), so math-verify's and our parse caches are warm, as they are for the repeated references "
            "of a GRPO group; all-distinct answers parse more slowly. Code: 8 prompts x 16 completions per prompt (10 right, 2 wrong, 2 partial, "
            "1 syntax error, 1 endless loop that runs into the time limit); every program is a separate sandboxed "
            "process.",
            "",
            f"## Input/output cases: {io_n} programs x {io_cases} stdin cases",
            "",
            io_table(io_rows),
            "",
            "Per 16 programs 12 right, 2 wrong, 2 right on half the cases (mean reward (12 + 2 x 0.5) / 16 = "
            "0.8125 with an even number of cases). Our path: one sandbox launch per program (namespaces, limits), "
            "then a forked process per case "
            "on its own stdin, outputs judged on the host. The anchor starts a fresh interpreter per case with no "
            "isolation and no limits but the timeout; `x anchor` is the anchor's time over ours at the same number "
            "of workers, measured in this run.",
            "",
        ]
    )
    print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
