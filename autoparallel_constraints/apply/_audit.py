"""The audit: does the applied graph match the plan, and does every table op get co-sharded inputs?

Independent of the solver: it never reads ILP variable values or the plugin's formulation. It
reads three things recorded when the parallel graph was built (see ``apply._materialize``):

* the plan autoparallel was asked to apply (node -> chosen strategy);
* for every edge, the target the interpreter really redistributed to;
* the parallel graph itself: the local shapes reaching each table op.

and reports

* ``not_cosharded`` — a table op whose inputs, as the graph delivers them, break its row;
* ``edge_diverges`` — an edge whose delivered placement differs from the planned one (e.g. a
  planned Partial turned Replicate, upstream PR #517);
* ``shape_mismatch`` — a table op whose local input shapes in the parallel graph differ from
  the shapes its planned placements imply;
* ``size_mismatch`` — a shape argument autoparallel localizes by rule that the plan breaks: a
  size read from one tensor's local shard used for a tensor sharded differently, or a concrete
  size split unevenly (see ``_sizes``);
* ``nested_uneven`` — a node whose planned output or input splits a dim over two or more mesh
  dims by a product that does not divide it, which DTensor cannot execute (see ``_nested``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core._placements import fmt_spec, local_shape
from ..errors import AuditError
from ..plan._nested import nested_uneven_specs
from ..plan._sizes import size_mismatches
from ..plan._state import PlannedRedistribute, get_state
from ..seam import autop as upstream
from ..seam.tracing import tree_flatten
from ..table import Table, bind, check, default_table
from ..verifier._contract import verify
from ..verifier._report import VerifyReport
from ._materialize import MATERIALIZED_PREFIX, NODE_TAG, OP_TAG, ApplyRecord, EdgeRecord, op_family

logger = logging.getLogger(__name__)

__all__ = ["ArgAudit", "AuditReport", "Violation", "audit"]

KINDS = ("not_cosharded", "edge_diverges", "shape_mismatch", "size_mismatch", "nested_uneven")


@dataclass(frozen=True, kw_only=True, slots=True)
class ArgAudit:
    """One input of a table op: planned and delivered placements and rank-0 local shapes."""

    label: str
    producer: str
    planned: Any  # DTensorSpec
    actual: Any
    planned_local_shape: tuple[int, ...] | None
    actual_local_shape: tuple[int, ...] | None

    def __str__(self) -> str:
        return (
            f"{self.label:<10} <- {self.producer:<22} planned {fmt_spec(self.planned):<18} "
            f"actual {fmt_spec(self.actual):<18} local {_shape(self.planned_local_shape)} / "
            f"{_shape(self.actual_local_shape)}"
        )


def _shape(shape: tuple[int, ...] | None) -> str:
    return "?" if shape is None else "[" + ", ".join("s" if d < 0 else str(d) for d in shape) + "]"


@dataclass(frozen=True, kw_only=True, slots=True)
class Violation:
    """One finding of the audit."""

    kind: str  # one of KINDS
    node: str
    op: str
    rule: str | None
    reasons: tuple[str, ...]
    args: tuple[ArgAudit, ...] = ()

    @property
    def line(self) -> str:
        """One line: the kind, the node, the op and the first reason (the rest is in ``str()``)."""
        more = len(self.reasons) - 1 + len(self.args)
        first = f": {self.reasons[0]}" if self.reasons else ""
        tail = f" [+{more} lines]" if more > 0 else ""
        return f"{self.kind.upper().replace('_', ' ')}: {self.node} ({self.op}){first}{tail}"

    def __str__(self) -> str:
        head = f"{self.kind.upper().replace('_', ' ')}: {self.node} ({self.op})"
        lines = [head] + [f"    {r}" for r in self.reasons] + [f"    {a}" for a in self.args]
        return "\n".join(lines)


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditReport:
    """Result of :func:`audit`. ``ok`` is True when there is no violation."""

    violations: tuple[Violation, ...]
    redistributes: tuple[PlannedRedistribute, ...]  # the formulation's repairs (table ops)
    table_nodes: int
    edges: int
    repaired_nodes: tuple[str, ...] = field(default=())  # plan broke a row, the plugin's nodes fixed it
    size_couplings: int = 0  # shape arguments checked (see _sizes)
    verification: VerifyReport | None = None  # the verifier on the parallel graph
    materialized: tuple[PlannedRedistribute, ...] = field(default=())  # materialize="all": every planned edge

    @property
    def ok(self) -> bool:
        """No plan-check violation and no verifier violation (when the parallel graph was available).

        Outputs the verifier could not place are listed in ``verification.unproven_outputs``:
        nothing was found wrong there, nothing proven either (``verification.ok`` is False).
        """
        return not self.violations and (self.verification is None or not self.verification.violations)

    def by_kind(self, kind: str) -> list[Violation]:
        return [v for v in self.violations if v.kind == kind]

    @property
    def verdict(self) -> str:
        if self.ok:
            return "clean"
        counts = {k: len(self.by_kind(k)) for k in KINDS if self.by_kind(k)}
        parts = [f"{n} {k}" for k, n in counts.items()]
        if self.verification is not None and self.verification.violations:
            parts.append(f"verifier: {self.verification.verdict}")
        return ", ".join(parts)

    def _head(self) -> str:
        return (
            f"audit: {self.verdict} ({self.table_nodes} table ops, {self.edges} edges checked, "
            + (f"{self.size_couplings} size couplings, " if self.size_couplings else "")
            + f"{len(self.redistributes)} plugin redistributes"
            + (f", {len(self.materialized)} edges materialized)" if self.materialized else ")")
        )

    def __str__(self) -> str:
        """The verdict, one line per flag and per plugin redistribute; the evidence is in :attr:`report`."""
        lines = [self._head()] + [f"  {v.line}" for v in self.violations]
        if self.verification is not None:
            lines += [f"  {line}" for line in str(self.verification).splitlines()]
        lines += [f"  redistribute {r.describe()}" for r in self.redistributes]
        if self.violations or (self.verification is not None and not self.verification.ok):
            lines.append("  (evidence: .report; on the plan page: apc.export, then python -m autoparallel_constraints show)")
        return "\n".join(lines)

    @property
    def report(self) -> str:
        """The long form: every flag with its evidence (reasons, each argument's planned and delivered
        placements and local shapes), the verifier's full report and the plugin's redistributes."""
        lines = [self._head()]
        lines += [str(v) for v in self.violations]
        if self.verification is not None:
            lines.append(self.verification.report)
        if self.redistributes:
            lines.append("plugin redistributes:")
            lines += [f"    {r.describe()}" for r in self.redistributes]
        return "\n".join(lines)


def _record_of(autop: Any) -> ApplyRecord:
    record = upstream.get(autop, "apply_record")
    if record is None:
        raise AuditError(
            "audit() needs the applied graph: call autop.apply_placement(placement) first (the "
            "plugin records the applied edges then; import autoparallel_constraints before applying)"
        )
    return record


def _edges_by_consumer(edges: list[EdgeRecord]) -> dict[str, dict[int, EdgeRecord]]:
    out: dict[str, dict[int, EdgeRecord]] = {}
    for e in edges:
        out.setdefault(e.consumer, {})[e.arg_index] = e
    return out


def _parallel_input_shapes(parallel_gm: torch.fx.GraphModule | None) -> dict[str, list[tuple[int, ...] | None]]:
    """For each tagged table op in the parallel graph, the local shapes of its tensor inputs.

    Every parallel-graph node traced while lowering joint node ``n`` carries ``n``'s tag, the
    redistributions in front of it included, so the op itself is the tagged node of the same op
    family (the lowering may turn ``index_put`` into ``index_put_``).
    """
    out: dict[str, list[tuple[int, ...] | None]] = {}
    if parallel_gm is None:
        return out
    for node in parallel_gm.graph.nodes:
        custom = node.meta.get("custom") or {}
        tag = custom.get(NODE_TAG)
        if tag is None or node.op != "call_function" or custom.get(OP_TAG) != op_family(node.target):
            continue
        shapes: list[tuple[int, ...] | None] = []
        for x in tree_flatten(node.args)[0]:
            if isinstance(x, torch.fx.Node) and isinstance(x.meta.get("val"), torch.Tensor):
                shapes.append(_concrete(x.meta["val"].shape))
        out[tag] = shapes
    return out


def _concrete(shape: Any) -> tuple[int, ...] | None:
    dims = []
    for s in shape:
        if isinstance(s, int):
            dims.append(s)
        else:
            try:
                dims.append(int(s))
            except Exception:  # unbacked/symbolic: unknown here
                dims.append(-1)
    return tuple(dims)


def audit(autop: Any, *, table: Table | None = None) -> AuditReport:
    """Check the applied parallel graph of ``autop`` against its plan and the table.

    Valid with or without ``add_op_constraints``; needs ``apply_placement`` (or the common apply
    step) to have run after ``import autoparallel_constraints``.
    """
    record = _record_of(autop)
    state = get_state(autop)
    if table is None:
        table = state.table if state is not None else default_table()
    gm = autop.gm
    placement = record.placement
    effective = record.effective or placement
    edges = _edges_by_consumer(record.edges)
    parallel_shapes = _parallel_input_shapes(record.parallel_gm)
    violations: list[Violation] = []
    repaired: list[str] = []
    n_table = 0

    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        rule = table.get(node.target)
        if rule is None or node not in placement:
            continue
        binding = bind(rule, node, is_input=lambda n: n in placement)
        if binding is None:
            continue
        n_table += 1
        planned = placement[node]
        plan_specs = list(planned.input_specs)
        eff_specs = list(effective.get(node, planned).input_specs)
        node_edges = edges.get(node.name, {})
        actual_specs = [node_edges[i].executed_target if i in node_edges else eff_specs[i] for i in range(len(eff_specs))]
        # What the op really receives: an edge fed by a plugin redistribute carries its target.
        mismatches = check(binding, actual_specs, planned.output_specs)
        plan_mismatches = check(binding, plan_specs, planned.output_specs)
        args = []
        producers = [x for x in tree_flatten(node.args)[0] if isinstance(x, torch.fx.Node) and x in placement]
        for b in binding.args:
            i = b.spec_index
            edge = node_edges.get(i)
            args.append(
                ArgAudit(
                    label=b.label,
                    producer=producers[i].name if i < len(producers) else (edge.producer if edge else "?"),
                    planned=plan_specs[i],
                    actual=actual_specs[i],
                    planned_local_shape=local_shape(plan_specs[i]),
                    actual_local_shape=edge.local_shape if edge else local_shape(actual_specs[i]),
                )
            )
        if mismatches:
            violations.append(
                Violation(
                    kind="not_cosharded",
                    node=node.name,
                    op=rule.name,
                    rule=rule.describe(),
                    reasons=tuple(str(m) for m in mismatches),
                    args=tuple(args),
                )
            )
        elif plan_mismatches:
            repaired.append(node.name)
        shapes = parallel_shapes.get(node.name)
        if shapes is not None and len(shapes) >= len(binding.args):
            bad = []
            for b in binding.args:
                expected = local_shape(actual_specs[b.spec_index])
                got = shapes[b.spec_index] if b.spec_index < len(shapes) else None
                if expected is None or got is None or len(got) != len(expected):
                    continue
                if any(g >= 0 and g != e for g, e in zip(got, expected)):
                    bad.append(f"{b.label}: parallel graph has {_shape(got)}, plan implies {_shape(expected)}")
            if bad:
                violations.append(
                    Violation(kind="shape_mismatch", node=node.name, op=rule.name, rule=rule.describe(), reasons=tuple(bad))
                )

    for e in record.edges:
        if tuple(e.executed_target.placements) != tuple(e.planned_target.placements):
            violations.append(
                Violation(
                    kind="edge_diverges",
                    node=e.consumer,
                    op=str(next((n.target for n in gm.graph.nodes if n.name == e.consumer), "?")),
                    rule=None,
                    reasons=(
                        f"arg {e.arg_index} from {e.producer}: planned {fmt_spec(e.planned_source)} -> "
                        f"{fmt_spec(e.planned_target)}, graph delivers {fmt_spec(e.executed_target)}",
                    ),
                )
            )
    mesh_shape = tuple(autop.mesh.shape)
    couplings = record.size_couplings  # found before the apply specialized any size
    spec_of = lambda n: placement[n].output_specs if n in placement else None  # noqa: E731
    for coupling, why in size_mismatches(couplings, spec_of, mesh_shape):
        violations.append(
            Violation(kind="size_mismatch", node=coupling.consumer.name, op=str(coupling.consumer.target), rule=None, reasons=(why,))
        )
    for node, why in nested_uneven_specs(placement, mesh_shape):
        violations.append(Violation(kind="nested_uneven", node=node.name, op=str(node.target), rule=None, reasons=(why,)))
    verification = record.verification
    if verification is None and record.parallel_gm is not None:
        verification = verify(autop, gm=record.parallel_gm, placement=record.placement, table=table)
    report = AuditReport(
        verification=verification,
        violations=tuple(violations),
        redistributes=tuple(r for r in record.redistributes if not r.constraint.startswith(MATERIALIZED_PREFIX)),
        materialized=tuple(r for r in record.redistributes if r.constraint.startswith(MATERIALIZED_PREFIX)),
        table_nodes=n_table,
        edges=len(record.edges),
        repaired_nodes=tuple(repaired),
        size_couplings=len(couplings),
    )
    logger.info("apc audit: %s", report.verdict)
    return report
