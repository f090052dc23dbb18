"""Guards the audit itself: clean on a correct baseline plan without the plugin, independent of
the solver's variable values, readable, and its parallel-graph shape check catches a graph whose
local shapes are not what the plan implies."""

from __future__ import annotations

import torch

import autoparallel_constraints as apc
from autoparallel_constraints.lab import run_seed
from autoparallel_constraints.models import SeedConfig
from autoparallel_constraints.testing import explain

SMALL = SeedConfig(num_heads=6, head_dim=8, batch=4, seq=8)


def _table_ops(autop) -> int:
    """Joint-graph nodes whose op has a row (counted here, not by the audit)."""
    table = apc.default_table()
    return sum(1 for n in autop.gm.graph.nodes if n.op == "call_function" and table.get(n.target) is not None)


def _select_other_strategies(opt) -> set[int]:
    """Overwrite the ILP's variable values with another complete plan: every node with a choice
    selects a strategy other than the solver's (each argument its first input choice). Returns
    the indices of the nodes whose strategy changed."""
    dvs = opt.decision_vars  # (node, arg, strategy, input choice) -> DecisionVar
    chosen = {node: out for (node, _, out, _), dv in dvs.items() if (dv.var.varValue or 0) > 0.5}
    other: dict[int, int] = {}
    for node, _, out, _ in dvs:
        if out != chosen[node]:
            other.setdefault(node, out)
    target = {**chosen, **other}
    selected: dict[tuple[int, int], tuple] = {}
    for node, arg, out, inp in dvs:
        if out == target[node]:
            selected.setdefault((node, arg), (node, arg, out, inp))
    keep = set(selected.values())
    for key, dv in dvs.items():
        dv.var.varValue = 1.0 if key in keep else 0.0
    return set(other)


def test_baseline_audit_is_clean_and_independent_of_solver_values(make_mesh):
    """No plugin: the seed plan audits clean; overwriting the ILP's variable values with another
    plan (every node a different strategy) changes nothing, since the audit reads only the plan
    autoparallel applied and the applied graph."""
    seen = {}

    def after(autop):
        seen["table_ops"] = _table_ops(autop)
        first = apc.audit(autop)
        opt = autop.sharding_optimizer
        changed = _select_other_strategies(opt)
        table = apc.default_table()
        seen["changed_table_ops"] = {opt.nodes[i].name for i in changed if table.get(opt.nodes[i].target) is not None}
        seen["pair"] = (first, apc.audit(autop))

    summary, report = run_seed(None, make_mesh((2, 2)), config=SMALL, mixed_precision=False, after_apply=after)
    first, second = seen["pair"]
    assert len(seen["changed_table_ops"]) == seen["table_ops"]  # the values give every table op another strategy
    assert first.ok, explain(first)
    assert second == first, explain(second)  # an audit reading the values would judge the other plan
    assert first.table_nodes == seen["table_ops"] >= 3 and first.edges > 10
    assert str(first).startswith(f"audit: clean ({first.table_nodes} table ops")


def test_shape_check_flags_a_graph_that_is_not_the_plan(make_mesh):
    """Tamper with the local shape reaching index_put in the parallel graph: shape_mismatch names
    the argument and both shapes."""
    seen = {}

    def after(autop):
        for node in autop.parallel_gm.graph.nodes:
            if (node.meta.get("custom") or {}).get("apc_node") == "index_put" and "index_put" in str(node.target):
                values = node.args[2]
                with autop.fake_mode:
                    values.meta["val"] = torch.empty(3, 8, 1, 8)
                break
        seen["audit"] = apc.audit(autop)

    run_seed(None, make_mesh((2, 2)), config=SMALL, mixed_precision=False, after_apply=after)
    (violation,) = seen["audit"].by_kind("shape_mismatch")
    assert violation.node == "index_put"
    assert "values: parallel graph has [3, 8, 1, 8], plan implies [4, 8, 1, 8]" in violation.reasons[0]


def test_report_prints_one_line_per_flag_and_keeps_the_evidence_in_report():
    """``str(report)``: the verdict, one line per audit flag and per verifier finding; the reasons
    and the per-argument evidence, and why each node is unknown, only in ``.report``."""
    from autoparallel_constraints.apply._audit import AuditReport, Violation
    from autoparallel_constraints.verifier._report import VerifyReport

    flag = Violation(kind="not_cosharded", node="index_put", op="aten.index_put.default", rule=None,
                     reasons=("mesh dim 1: members shard different logical dims", "second reason"))
    diverges = Violation(kind="edge_diverges", node="permute_3", op="aten.permute.default", rule=None,
                         reasons=("arg 0: planned P(sum), graph delivers R",))
    proof = VerifyReport(violations=(), proven={"mm": 3}, unknown={"add": 1}, unknown_reasons={"add_1": "why it is unknown"},
                         nodes=4, outputs_checked=1, unproven_outputs=("grad of w (permute_11): depends on unknown\nmore",))
    report = AuditReport(violations=(flag, diverges), redistributes=(), table_nodes=1, edges=2, verification=proof)
    lines = str(report).splitlines()
    assert sum("NOT COSHARDED: index_put" in line for line in lines) == 1
    assert sum("EDGE DIVERGES: permute_3" in line for line in lines) == 1
    assert "second reason" not in str(report) and "why it is unknown" not in str(report)
    assert sum("UNPROVEN OUTPUT" in line for line in lines) == 1 and "more" not in str(report)
    assert "second reason" in report.report and "add_1: why it is unknown" in report.report
    assert "depends on unknown\nmore" in report.report
