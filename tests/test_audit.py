"""Guards the audit itself: clean on a correct baseline plan without the plugin, independent of
the solver's variable values, readable, and its parallel-graph shape check catches a graph whose
local shapes are not what the plan implies."""

from __future__ import annotations

import torch

import autoparallel_constraints as apc
from autoparallel_constraints._lab import run_seed
from autoparallel_constraints.models import SeedConfig

SMALL = SeedConfig(num_heads=6, head_dim=8, batch=4, seq=8)


def _table_ops(autop) -> int:
    """Joint-graph nodes whose op has a row (counted here, not by the audit)."""
    table = apc.default_table()
    return sum(1 for n in autop.gm.graph.nodes if n.op == "call_function" and table.get(n.target) is not None)


def test_baseline_audit_is_clean_and_independent_of_solver_values(make_mesh):
    """No plugin: the seed plan audits clean; wiping the ILP's variable values changes nothing,
    since the audit reads only the plan and the applied graph."""
    seen = {}

    def after(autop):
        seen["table_ops"] = _table_ops(autop)
        first = apc.audit(autop)
        for var in autop.sharding_optimizer.prob.variables():
            var.varValue = None
        seen["pair"] = (first, apc.audit(autop))

    summary, report = run_seed(None, make_mesh((2, 2)), config=SMALL, mixed_precision=False, after_apply=after)
    first, second = seen["pair"]
    assert first.ok and second.ok
    assert str(first) == str(second)
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
