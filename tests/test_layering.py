"""Guards the package's layering: no import circle among its modules, counting deferred imports
inside functions too (they hide a circle from Python, not from a reader), and every command-line
tool reachable as ``python -m autoparallel_constraints <command>``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "autoparallel_constraints"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, node.module] if node.module else parts)
    # "from . import x" names submodule x; "from .m import y" names module m
    return [f"{base}.{a.name}" for a in node.names] + [base] if node.module is None else [base]


def import_graph() -> dict[str, set[str]]:
    """module -> package modules it imports anywhere (top level, in functions, under TYPE_CHECKING
    excluded: annotations only, never executed)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text())
        type_only: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                type_only |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
        deps: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.ImportFrom):
                targets = _resolve(name, path.name == "__init__.py", node)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in files:  # "pkg.mod.attr" -> "pkg.mod"
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    deps.add(target)
        graph[name] = deps
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
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
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    """The plugin's state, the apply step, the audit, the report and the explanation depend one
    way: no strongly connected component of the import graph has two modules."""
    graph = import_graph()
    assert "autoparallel_constraints._state" in graph["autoparallel_constraints._apply"]
    assert find_cycles(graph) == []


def test_the_cycle_finder_sees_a_deferred_circle():
    """The finder itself: a circle closed by an import inside a function is reported."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c"]]


COMMANDS = ["demo", "compare", "coverage", "crosscheck", "groundtruth", "distributed-seed", "mutate", "zoo"]


def test_the_module_lists_every_command():
    """``python -m autoparallel_constraints --help`` (a real process) names every command."""
    out = subprocess.run(
        [sys.executable, "-m", "autoparallel_constraints", "--help"],
        capture_output=True, text=True, timeout=120, cwd=PACKAGE.parent,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert all(command in out.stdout for command in COMMANDS), out.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_line_tool_is_a_subcommand(command, capsys):
    """``python -m autoparallel_constraints <command> --help`` answers for every tool."""
    from autoparallel_constraints.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"autoparallel_constraints {command}" in capsys.readouterr().out
