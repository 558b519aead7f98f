"""Count import cycles among trl_ext modules and intra-project imports made inside functions (issue 13's check).

    python tools/import_graph.py            # from the repository root

An import edge A -> B is any ``import``/``from`` in A that loads B (inside functions too: such an import still ties
the two modules together at run time; ``if TYPE_CHECKING:`` blocks excluded, they never run). Importing ``a.b.c``
also runs the ``__init__`` of ``a`` and ``a.b``, so it adds edges to those packages. A cycle is a strongly connected
component of more than one module. Intra-project = ``trl_ext`` or ``rewards``.
"""

from __future__ import annotations

import ast
import os
import sys

PROJECT = ("trl_ext", "rewards")


def module_name(path: str) -> str:
    name = path[:-3].replace(os.sep, ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def resolve(node: ast.ImportFrom | ast.Import, current: str, modules: set[str]) -> list[str]:
    targets = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = current.split(".")[: -node.level]
            base = ".".join([*parts, base] if base else parts)
        names = [f"{base}.{a.name}" for a in node.names] + [base]
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        while name:  # the module and every package above it (their __init__ runs first)
            if name != current and not current.startswith(name + "."):
                targets.append(name)
            name = name.rpartition(".")[0]
    return targets


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skipped


def main() -> int:
    files = [
        os.path.join(root, f)
        for top in PROJECT
        for root, _, fs in os.walk(top)
        for f in fs
        if f.endswith(".py") and "__pycache__" not in root
    ]
    modules = {module_name(f) for f in files}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    inside: list[tuple[str, int, str]] = []
    for path in files:
        current = module_name(path)
        tree = ast.parse(open(path).read())
        functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        in_function = {id(n) for f in functions for n in ast.walk(f)}
        type_checking = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in type_checking:
                targets = resolve(node, current, modules)
                edges[current].update(targets)
                if id(node) in in_function and targets:
                    inside.append((path, node.lineno, ", ".join(sorted(set(targets)))))
    # Tarjan's strongly connected components
    index, low, stack, on_stack, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                sccs.append(sorted(component))

    sys.setrecursionlimit(10000)
    for m in sorted(modules):
        if m not in index:
            visit(m)
    trl_ext_cycles = [c for c in sccs if any(m.startswith("trl_ext") for m in c)]
    print(f"import cycles among project modules: {len(sccs)} ({len(trl_ext_cycles)} involving trl_ext)")
    for c in sccs:
        print("  cycle:", " <-> ".join(c))
    print(f"intra-project imports inside functions: {len(inside)}")
    for path, line, target in inside:
        print(f"  {path}:{line} -> {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
