"""Which ops of a model the table covers, and which DTensor strategies the table rejects.

Two commands (``add_subcommands`` registers them on the package CLI)::

    python -m autoparallel_constraints coverage seed|llama3|falcon|<zoo family>|all [--mesh 2x2] [--json FILE]
    python -m autoparallel_constraints crosscheck [--mesh 2x2] [--rows add,index_put] [--model falcon]

``coverage`` traces the model's joint forward+backward graph the way ``AutoParallel`` does (no
ILP is built) and lists every op with two or more tensor inputs — tensor-valued nodes among its
positional arguments, which is what autoparallel gives input specs to — with the table row that
covers it and how many of its nodes the row binds. Exit status 1 when an op is uncovered.

``crosscheck`` asks autoparallel (``get_placement_options``, i.e. DTensor's op strategies plus
autoparallel's own rules) for every strategy of each covered op on a mesh, and lists those the
table rejects. With sampled calls (the default) each rejected strategy is also run on the
shards (``lab._groundtruth``): *wrong* means the upstream rule offers a strategy that computes
a wrong result — a bug the plugin stops; *right* means the table is stricter than needed there (a
missed opportunity). With ``--model`` the calls are the model's own nodes (shapes from the traced
graph; no numerics, only the table's reasons).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..core._placements import fmt_spec
from ..seam import autop as upstream
from ..seam.tracing import tree_flatten
from ..table import OpRule, Table, bind, check, default_table
from ._cli import parse_mesh

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

logger = logging.getLogger(__name__)

__all__ = [
    "MODELS",
    "CoverageReport",
    "CrossCheckReport",
    "OpCoverage",
    "OpCrossCheck",
    "add_subcommands",
    "coverage",
    "crosscheck",
    "trace_joint_graph",
]


# ---------------------------------------------------------------------------------------------
# Models and tracing


def _seed_model() -> tuple[Callable[[], torch.nn.Module], Callable[[], torch.Tensor]]:
    from ..models import SEED_CONFIG, SeedBlock

    c = SEED_CONFIG
    return (lambda: SeedBlock(c)), (lambda: torch.randn(c.batch, c.seq, c.hidden))


def _llama3() -> tuple[Callable[[], torch.nn.Module], Callable[[], torch.Tensor]]:
    from ..models import llama3_small

    return llama3_small()


def _falcon() -> tuple[Callable[[], torch.nn.Module], Callable[[], torch.Tensor]]:
    from ..models import falcon_tiny

    return falcon_tiny()


def _falcon_style() -> tuple[Callable[[], torch.nn.Module], Callable[[], torch.Tensor]]:
    from ..models import falcon_style

    return falcon_style()


def _zoo(family: str) -> Callable[[], tuple[Callable[[], torch.nn.Module], Callable[[], torch.Tensor]]]:
    from ..models import zoo_model

    return lambda: zoo_model(family)


def _zoo_families() -> list[str]:
    from ..models import ZOO

    return sorted(ZOO)


# name -> (builder, mixed precision as the demo runs it); every transformers zoo family too
MODELS: dict[str, tuple[Callable[[], tuple[Callable[[], torch.nn.Module], Callable[[], Any]]], bool]] = {
    "falcon": (_falcon, False),
    "falcon_style": (_falcon_style, False),
    "llama3": (_llama3, False),
    "seed": (_seed_model, True),
    **{f"{family}": (_zoo(family), False) for family in _zoo_families()},
}


def trace_joint_graph(model_fn: Callable[[], torch.nn.Module], input_fn: Callable[[], Any], mesh: DeviceMesh, *,
                      mp_policy: Any = None) -> torch.fx.GraphModule:
    """The joint graph ``AutoParallel`` builds for the model (``build_model_graph``), without
    its ILP. The model is built on the meta device."""
    from autoparallel.api import AutoParallel

    from ..harness import fresh_strategy_cache

    with torch.device("meta"):
        model = model_fn()
    with fresh_strategy_cache():
        autop = AutoParallel(model, input_fn, mesh, mp_policy)
        with autop.stack:
            autop.stack.enter_context(mesh)
            autop.build_model_graph()
    return autop.gm


def tensor_inputs(node: torch.fx.Node) -> int:
    """Tensor-valued nodes among the positional arguments (autoparallel's input specs)."""
    flat = tree_flatten(node.args)[0]
    return sum(1 for x in flat if isinstance(x, torch.fx.Node) and isinstance(x.meta.get("val"), torch.Tensor))


# ---------------------------------------------------------------------------------------------
# coverage


#: Why an op with two or more tensor inputs has no row (printed beside it when uncovered).
UNCOVERED_WHY: dict[str, str] = {
    "aten.baddbmm.default": (
        "bloom's alibi scores, beta*self + alpha*(batch1 @ batch2): a contraction plus a broadcast "
        "addend, which neither the contraction rows (multilinear einsum specs) nor the pointwise rows "
        "express; DTensor's own rule decides its strategy (bloom's 2x2 dynamic zoo run: clean and exact)"
    ),
    "transformers.grouped_mm_fallback.default": (
        "transformers' custom op for mixtral's expert matmuls on CPU; a user op gets a row through "
        "register_rule, none is shipped (mixtral's 2x2 dynamic zoo run: clean and exact)"
    ),
    "transformers.grouped_mm_fallback_backward.default": (
        "the backward of transformers' grouped_mm_fallback custom op; see its forward"
    ),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class OpCoverage:
    """One op of the graph with two or more tensor inputs."""

    op: str
    nodes: int
    tensor_inputs: int  # the most any of its nodes has
    row: str | None  # the covering row, None when uncovered
    family: str | None
    bound: int  # nodes the row binds (has something to check on)

    @property
    def covered(self) -> bool:
        return self.row is not None


@dataclass(frozen=True, kw_only=True, slots=True)
class CoverageReport:
    model: str
    mesh: tuple[int, ...]
    ops: tuple[OpCoverage, ...]
    seconds: float

    @property
    def uncovered(self) -> tuple[OpCoverage, ...]:
        return tuple(o for o in self.ops if not o.covered)

    @property
    def ok(self) -> bool:
        return not self.uncovered

    def __str__(self) -> str:
        width = max([len("op")] + [len(o.op) for o in self.ops])
        lines = [f"{self.model}: ops with >=2 tensor inputs in the joint graph ({'x'.join(map(str, self.mesh))} "
                 f"mesh, traced in {self.seconds:.1f}s)",
                 f"  {'op':<{width}}  {'nodes':>5}  {'inputs':>6}  {'bound':>5}  row"]
        for o in self.ops:
            row = f"{o.family}: {o.row}" if o.row else "UNCOVERED" + (
                f" ({UNCOVERED_WHY[o.op]})" if o.op in UNCOVERED_WHY else " (no reason recorded)")
            lines.append(f"  {o.op:<{width}}  {o.nodes:>5}  {o.tensor_inputs:>6}  {o.bound:>5}  {row}")
        n_nodes = sum(o.nodes for o in self.ops)
        lines.append(f"  {len(self.ops)} ops ({n_nodes} nodes): {len(self.ops) - len(self.uncovered)} covered, "
                     f"{len(self.uncovered)} uncovered"
                     + (f" ({', '.join(o.op for o in self.uncovered)})" if self.uncovered else ""))
        return "\n".join(lines)


def coverage_of_graph(gm: torch.fx.GraphModule, table: Table | None = None, *, model: str = "graph",
                      mesh: tuple[int, ...] = (), seconds: float = 0.0) -> CoverageReport:
    """The coverage of ``gm``'s ops with two or more tensor inputs by ``table``."""
    table = table if table is not None else default_table()
    by_op: dict[Any, list[torch.fx.Node]] = {}
    for node in gm.graph.nodes:
        if node.op == "call_function" and tensor_inputs(node) >= 2:
            by_op.setdefault(node.target, []).append(node)
    ops = []
    for target, nodes in by_op.items():
        row = table.get(target)
        bound = sum(1 for n in nodes if row is not None and bind(row, n) is not None)
        ops.append(OpCoverage(op=str(target), nodes=len(nodes), tensor_inputs=max(tensor_inputs(n) for n in nodes),
                              row=row.name if row is not None else None,
                              family=row.family if row is not None else None, bound=bound))
    ops.sort(key=lambda o: (o.covered, o.family or "", o.op))
    return CoverageReport(model=model, mesh=mesh, ops=tuple(ops), seconds=seconds)


def coverage(model: str, mesh_shape: Sequence[int] = (2, 2), table: Table | None = None) -> CoverageReport:
    """Trace ``model`` (one of :data:`MODELS`) and report its coverage by the table."""
    from ..harness import cpu_mesh
    from ._runs import seed_mp_policy

    if model not in MODELS:
        raise KeyError(f"unknown model {model!r}; choose from {', '.join(sorted(MODELS))}")
    builder, mixed = MODELS[model]
    model_fn, input_fn = builder()
    t0 = time.perf_counter()
    gm = trace_joint_graph(model_fn, input_fn, cpu_mesh(tuple(mesh_shape)),
                           mp_policy=seed_mp_policy() if mixed else None)
    return coverage_of_graph(gm, table, model=model, mesh=tuple(mesh_shape), seconds=time.perf_counter() - t0)


# ---------------------------------------------------------------------------------------------
# crosscheck


@dataclass(frozen=True, kw_only=True, slots=True)
class Rejected:
    """One upstream strategy the table rejects."""

    call: str
    inputs: tuple[str, ...]
    output: str
    reason: str
    numerics: str  # "wrong: ...", "right", or "-" (not run)


@dataclass(kw_only=True, slots=True)
class OpCrossCheck:
    """The upstream strategies of one op, over the calls checked."""

    op: str
    calls: int = 0
    strategies: int = 0
    rejected: int = 0
    wrong: int = 0  # rejected and computing a wrong result: upstream rule bugs the table stops
    right: int = 0  # rejected but right: the table's missed opportunities
    not_run: int = 0  # rejected, not evaluated (MaskPartial, a kernel that cannot run the shards)
    errors: list[str] = field(default_factory=list)
    examples: list[Rejected] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True, slots=True)
class CrossCheckReport:
    mesh: tuple[int, ...]
    source: str  # "samples" or the model name
    ops: tuple[OpCrossCheck, ...]

    def __str__(self) -> str:
        width = max([len("op")] + [len(o.op) for o in self.ops])
        numerics = self.source == "samples"
        lines = [f"upstream strategies the table rejects, {'x'.join(map(str, self.mesh))} mesh, calls from "
                 f"{self.source}",
                 f"  {'op':<{width}}  {'calls':>5}  {'strategies':>10}  {'rejected':>8}"
                 + (f"  {'wrong':>5}  {'right':>5}  {'not run':>7}" if numerics else "")]
        for o in self.ops:
            line = f"  {o.op:<{width}}  {o.calls:>5}  {o.strategies:>10}  {o.rejected:>8}"
            if numerics:
                line += f"  {o.wrong:>5}  {o.right:>5}  {o.not_run:>7}"
            lines.append(line)
            for e in o.errors:
                lines.append(f"      (no strategies: {e})")
            for ex in o.examples:
                lines.append(f"      [{ex.call}] ({', '.join(ex.inputs)}) -> {ex.output}: {ex.numerics}; table: "
                             f"{ex.reason}")
        total = sum(o.rejected for o in self.ops)
        tail = f"  {sum(o.strategies for o in self.ops)} strategies, {total} rejected"
        if numerics:
            tail += (f": {sum(o.wrong for o in self.ops)} compute a wrong result (upstream bugs stopped), "
                     f"{sum(o.right for o in self.ops)} are right (missed opportunities), "
                     f"{sum(o.not_run for o in self.ops)} not run")
        lines.append(tail)
        return "\n".join(lines)


def upstream_strategies(mesh: DeviceMesh, node: torch.fx.Node) -> list[Any]:
    """autoparallel's strategies for ``node``, every tensor input offered every R/S placement
    (as autoparallel does for graph inputs)."""
    from autoparallel.shardings.placement_options import get_placement_options_for_node

    from ..seam._view_skip import skipping_unviewable_strategies
    from ..seam.tracing import tree_map_only

    def strategy_of(x: torch.fx.Node) -> Any:
        val = x.meta["val"]
        return upstream.create_all_options(mesh, val.shape, tensor=val)

    specs = tree_map_only(torch.fx.Node, strategy_of, node.args)
    user_args = tree_map_only(torch.fx.Node, lambda x: x.meta["val"], node.args)
    user_kwargs = tree_map_only(torch.fx.Node, lambda x: x.meta["val"], node.kwargs)
    with skipping_unviewable_strategies():  # as in a build: a view DTensor refuses is skipped
        return list(get_placement_options_for_node(mesh, node, specs, user_args, user_kwargs).strategies)


def _calls_from_samples(rows: Sequence[OpRule], cases: int) -> Iterable[tuple[OpRule, str, Any]]:
    from . import _groundtruth as gt

    for row in rows:
        sampler = gt.SAMPLERS.get(row.op)
        if sampler is None:
            continue
        for case in sampler(torch.Generator().manual_seed(0))[:cases]:
            run = gt._prepare(row, case, random.Random(0))
            if isinstance(run, str):
                continue
            yield row, case.name, run


def _calls_from_model(rows: Sequence[OpRule], model: str, mesh: DeviceMesh) -> Iterable[tuple[OpRule, str, Any]]:
    from ._runs import seed_mp_policy

    builder, mixed = MODELS[model]
    model_fn, input_fn = builder()
    gm = trace_joint_graph(model_fn, input_fn, mesh, mp_policy=seed_mp_policy() if mixed else None)
    by_op = {r.op: r for r in rows}
    seen: set[str] = set()
    for node in gm.graph.nodes:
        row = by_op.get(node.target)
        if node.op != "call_function" or row is None:
            continue
        key = f"{node.target}{_signature(node)}"
        if key in seen:
            continue
        seen.add(key)
        yield row, node.name + _signature(node), node


def _signature(node: torch.fx.Node) -> str:
    def show(a: Any) -> str:
        if isinstance(a, torch.fx.Node):
            v = a.meta.get("val")
            return f"[{','.join(map(str, v.shape))}]" if isinstance(v, torch.Tensor) else "?"
        if isinstance(a, (list, tuple)):
            return "(" + ",".join(show(x) for x in a) + ")"
        return repr(a)

    return "(" + ", ".join(show(a) for a in node.args) + ")"


def _sample_node(run: Any) -> torch.fx.Node:
    """A one-op graph of a sampled call with meta values, for autoparallel's strategy lookup."""
    graph = torch.fx.Graph()
    counter = iter(range(1_000_000))

    def lift(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            n = graph.placeholder(f"x{next(counter)}")
            n.meta["val"] = a.to("meta")
            return n
        if isinstance(a, list) and any(isinstance(x, torch.Tensor) for x in a):
            return [lift(x) for x in a]
        return a

    node = graph.call_function(run.row.op, tuple(lift(a) for a in run.case.args), dict(run.case.kwargs))
    with torch.device("meta"):
        node.meta["val"] = run.row.op(*[_to_meta(a) for a in run.case.args], **run.case.kwargs)
    return node


def _to_meta(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return a.to("meta")
    if isinstance(a, list):
        return [_to_meta(x) for x in a]
    return a


def crosscheck(
    mesh_shape: Sequence[int] = (2, 2),
    rows: Sequence[OpRule] | None = None,
    *,
    model: str | None = None,
    cases: int = 2,
    examples: int = 3,
) -> CrossCheckReport:
    """For each row's op, the upstream strategies the table rejects (see the module docstring)."""
    from ..harness import cpu_mesh, fresh_strategy_cache
    from . import _groundtruth as gt

    mesh = cpu_mesh(tuple(mesh_shape))
    rows = list(rows) if rows is not None else list(default_table())
    results: dict[str, OpCrossCheck] = {}
    calls = _calls_from_model(rows, model, mesh) if model else _calls_from_samples(rows, cases)
    with fresh_strategy_cache(), gt._one_thread():
        for row, name, item in calls:
            entry = results.setdefault(row.name, OpCrossCheck(op=row.name))
            entry.calls += 1
            node = item if model else _sample_node(item)
            try:
                strategies = upstream_strategies(mesh, node)
            except Exception as exc:  # noqa: BLE001 - an op autoparallel cannot place is reported, not fatal
                first = (str(exc).splitlines() or [""])[0][:100]
                entry.errors.append(f"{name}: {type(exc).__name__}{': ' + first if first else ''}")
                continue
            binding = bind(row, node, is_input=lambda n: isinstance(n.meta.get("val"), torch.Tensor))
            if binding is None:
                entry.errors.append(f"{name}: the row does not bind this call")
                continue
            for s in strategies:
                entry.strategies += 1
                mismatches = check(binding, s.input_specs, s.output_specs)
                if not mismatches:
                    continue
                entry.rejected += 1
                verdict = "-"
                if not model:
                    wrong = _evaluate_strategy(item, mesh_shape, s)
                    if wrong is None:
                        entry.right += 1
                        verdict = "right"
                    elif isinstance(wrong, gt.Skip):
                        entry.not_run += 1
                        verdict = f"not run: {wrong}"
                    else:
                        entry.wrong += 1
                        verdict = f"wrong ({wrong})"
                if len(entry.examples) < examples and (model or verdict.startswith("wrong") or not entry.examples):
                    outs = s.output_specs if isinstance(s.output_specs, (list, tuple)) else (s.output_specs,)
                    entry.examples.append(Rejected(call=name, inputs=tuple(fmt_spec(x) for x in s.input_specs),
                                                   output=", ".join(fmt_spec(o) for o in outs),
                                                   reason=str(mismatches[0]), numerics=verdict))
    ordered = sorted(results.values(), key=lambda o: (-o.wrong, -o.rejected, o.op))
    return CrossCheckReport(mesh=tuple(mesh_shape), source=model or "samples", ops=tuple(ordered))


def _evaluate_strategy(run: Any, mesh_shape: Sequence[int], strategy: Any) -> str | None:
    """Ground truth for one upstream strategy of a sampled call (its input and output placements)."""
    from . import _groundtruth as gt

    inputs = list(strategy.input_specs)
    outs = strategy.output_specs if isinstance(strategy.output_specs, (list, tuple)) else (strategy.output_specs,)
    if any("MaskPartial" in type(p).__name__ for spec in [*inputs, *outs] if spec is not None
           for p in spec.placements):
        # vocab-parallel embedding: the redistribution into MaskPartial masks the indices and the
        # reduction masks the rows; random Partial pieces do not model that
        return gt.Skip("MaskPartial (masking done by the redistribution) is not modelled")
    ndim = len(mesh_shape)
    placements: list[tuple[Any, ...]] = []
    for mem in run.members:
        spec = outs[mem.slot] if mem.is_output else (inputs[mem.slot] if mem.slot < len(inputs) else None)
        if spec is None:
            from torch.distributed.tensor.placement_types import Replicate

            placements.append(tuple(Replicate() for _ in range(ndim)))
        else:
            placements.append(tuple(spec.placements))
    combo = [tuple(p[m] for p in placements) for m in range(ndim)]
    if not gt._valid_layout(combo):
        return gt.Skip("mixed Partial reduce ops in one tensor")
    return gt.evaluate(run, tuple(mesh_shape), combo)


# ---------------------------------------------------------------------------------------------
# Command line


def _coverage_cmd(args: argparse.Namespace) -> int:
    models = sorted(MODELS) if args.model == "all" else [args.model]
    reports = []
    for name in models:
        report = coverage(name, args.mesh)
        reports.append(report)
        print(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in reports], f, indent=2)
    return 0 if all(r.ok for r in reports) else 1


def _crosscheck_cmd(args: argparse.Namespace) -> int:
    rows = default_table().select(args.rows.split(",")) if args.rows else None
    report = crosscheck(args.mesh, rows, model=args.model, cases=args.cases, examples=args.examples)
    print(report)
    return 0


def add_subcommands(subparsers: Any) -> None:
    """Register ``coverage`` and ``crosscheck`` on the package CLI's subparsers."""
    p = subparsers.add_parser("coverage", help="ops with >=2 tensor inputs in a model's joint graph, and their rows",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", choices=[*sorted(MODELS), "all"], help="model to trace (built locally)")
    p.add_argument("--mesh", type=parse_mesh, default=(2, 2), help="mesh shape, e.g. 2x2 (default)")
    p.add_argument("--json", default=None, help="also write the report as JSON to this file")
    p.set_defaults(func=_coverage_cmd)
    p = subparsers.add_parser("crosscheck", help="upstream DTensor/autoparallel strategies the table rejects",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mesh", type=parse_mesh, default=(2, 2), help="mesh shape, e.g. 2x2 (default)")
    p.add_argument("--rows", default=None, help="comma list of table selectors (default: every row)")
    p.add_argument("--model", choices=sorted(MODELS), default=None,
                   help="take the calls from this model's joint graph instead of sampled calls (no numerics)")
    p.add_argument("--cases", type=int, default=2, help="sampled calls per op (default 2)")
    p.add_argument("--examples", type=int, default=3, help="rejected strategies shown per op (default 3)")
    p.set_defaults(func=_crosscheck_cmd)
