"""Guards the package's layering: the folders are the pipeline's stages and a lower stage never
imports a higher one; no import circle among the modules. Every import counts, deferred ones inside
functions and ``TYPE_CHECKING`` ones too (they hide a circle from Python, not from a reader). And
every command-line tool is reachable as ``python -m autoparallel_constraints <command>``."""

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
    """module -> package modules it imports anywhere: top level, inside functions, under
    ``TYPE_CHECKING``."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
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


ROOT = "autoparallel_constraints"
# The pipeline, lowest first: the folder (or top-level module) of each stage. A module may import
# its own stage and the stages below it. The package itself (its public API) and __main__ (the
# command line) sit above everything.
STAGES: list[tuple[str, ...]] = [
    ("errors",),  # exceptions
    ("seam",),  # every touch of autoparallel's, torch's and PuLP's internals
    ("models", "core"),  # example models, placement formatting, versions
    ("table",),  # the compatibility table: rows, binders, registry
    ("formulations",),  # the sites of a graph and the ways of adding the table to the ILP
    ("plan",),  # add_op_constraints: sites -> formulation -> ILP -> solve -> report
    ("verifier",),  # an independent reading of any parallel graph
    ("apply",),  # the apply step (runs the verifier) and the audit
    ("view",),  # the plan in autoparallel's JSON export with the plugin's marks, and its page
    ("workbench",),  # one build, many formulations: add, solve, apply, audit, restore
    ("harness",),  # CPU meshes, fake ranks, numerics under LocalTensorMode
    ("lab",),  # compare, demo, zoo, coverage, ground truth, mutation: the command-line tools
    ("testing",),  # the public test kit: harness, mutation, conformance, pytest fixtures
    ("__main__", "torchtitan"),  # the command line; the module torchtitan's --module loader imports
]


def stage_of(module: str) -> int:
    """The stage index of a package module (the package root is above every stage)."""
    if module == ROOT:
        return len(STAGES)
    head = module.removeprefix(ROOT + ".").split(".")[0]
    for index, names in enumerate(STAGES):
        if head in names:
            return index
    raise AssertionError(f"{module} is in no stage: add its folder to STAGES")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a higher stage, as "importer (stage) -> imported (stage)"."""
    return sorted(
        f"{m} ({STAGES[stage_of(m)][0]}) -> {d} ({STAGES[stage_of(d)][0] if d != ROOT else 'package'})"
        for m, deps in graph.items()
        if m != ROOT
        for d in deps
        if stage_of(d) > stage_of(m)
    )


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
    """No strongly connected component of the import graph (TYPE_CHECKING imports included) has
    two modules: the plan's state and its report, the apply step, the audit and the explanation
    depend one way."""
    graph = import_graph()
    assert "autoparallel_constraints.plan._state" in graph["autoparallel_constraints.apply._materialize"]
    assert find_cycles(graph) == []


def test_every_module_is_in_a_stage_and_no_stage_imports_a_higher_one():
    """The folders are the pipeline: core -> table -> formulations -> plan -> verifier -> apply ->
    harness -> lab -> testing. A module imports its own stage or lower ones only."""
    graph = import_graph()
    assert {stage_of(m) for m in graph} >= set(range(len(STAGES))), "a stage holds no module"
    assert upward_imports(graph) == []


def test_the_stage_check_sees_an_upward_import():
    """The check itself: the table importing the plan, or the core importing the package's public
    API, is reported (TYPE_CHECKING imports count too: see import_graph)."""
    graph = {
        f"{ROOT}.table._model": {f"{ROOT}.plan._state"},
        f"{ROOT}.core._doctor": {ROOT},
        f"{ROOT}.plan._state": {f"{ROOT}.table._model"},
    }
    assert upward_imports(graph) == [
        f"{ROOT}.core._doctor (models) -> {ROOT} (package)",
        f"{ROOT}.table._model (table) -> {ROOT}.plan._state (plan)",
    ]


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
