"""Benchmarks apart from tests: nothing under tests/ imports a benchmark module or puts benchmarks/ on the path (the
benchmarks' own tests live in benchmarks/tests/, which CI runs separately)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARK_MODULES = {path.stem for path in (ROOT / "benchmarks").glob("*.py")}


def test_no_test_imports_from_benchmarks():
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path == Path(__file__).resolve():
            continue  # this file names what it looks for
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top == "benchmarks" or (top in BENCHMARK_MODULES and top not in {"helpers", "conftest"}):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
        for lineno, line in enumerate(source.splitlines(), 1):
            if re.search(r"sys\.path\.(insert|append)\(.*benchmarks", line):
                found.append(f"{path.relative_to(ROOT)}:{lineno} puts benchmarks/ on sys.path")
        if "spec_from_file_location" in source and re.search(r"[\"'/]benchmarks[\"'/]", source):
            found.append(f"{path.relative_to(ROOT)} loads a module from benchmarks/ by its file")
    assert not found, found
