"""Guards ``materialize="all"``: every planned redistribution of the graph becomes a named node
that computes exactly the planned transition (Partial stays Partial), which makes autoparallel
a54c252's natural Partial divergence (PR #517 class) exact; proven by numerics and by counting
that no collective of the parallel graph is left implicit."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.apply._materialize import TAG
from autoparallel_constraints.models import SeedBlock, SeedConfig
from autoparallel_constraints.testing import explain, run_numerics

DIVERGING = SeedConfig(num_heads=16, head_dim=64, batch=8, seq=64)
COLLECTIVES = ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "all_to_all_single", "shard_dim_alltoall")


_RUNS: dict = {}


def _divergence_run(materialize: str | None):
    """Solve+apply+run once per mode per session (the runs are deterministic and ~10 s each)."""
    if materialize not in _RUNS:
        _RUNS[materialize] = _fresh_run(materialize)
    return _RUNS[materialize]


def _fresh_run(materialize: str | None):
    placements = [(Shard(0), Shard(1))]
    seen: dict = {}

    def configure(autop):
        if materialize is not None:
            # CBC, autoparallel's own solver: its plan here has the Partial edge that autoparallel
            # alone breaks (highs-lp, the default, picks a plan of equal cost without one), so
            # the two runs differ only in how the plan is applied. sizes=False: the nested-shard
            # rows (5 here, a dim of 14 on (S(2), S(2))) change which of the tied plans CBC returns.
            autop.add_op_constraints(materialize=materialize, solver="cbc", sizes=False)

    def after_apply(autop):
        seen["audit"] = apc.audit(autop)
        seen["gm"] = autop.parallel_gm
        seen["edges"] = autop._apc_apply_record.edges

    report = run_numerics(
        lambda: SeedBlock(DIVERGING),
        lambda: torch.randn(DIVERGING.batch, DIVERGING.seq, DIVERGING.hidden),
        (2, 2),
        input_placements=placements,
        output_placements=placements,
        atol=1e-3,
        rtol=1e-4,
        configure=configure,
        after_apply=after_apply,
    )
    return report, seen


@pytest.mark.parametrize("materialize", [None, "all"])
def test_natural_divergence_exact_only_with_materialize_all(materialize):
    """The seed model at NH=16, HD=64, batch 8, seq 64 on 2x2: proj.weight's gradient is 2x without
    the plugin; exact with materialize="all", and the audit agrees each time."""
    report, seen = _divergence_run(materialize)
    audit = seen["audit"]
    if materialize == "all":
        assert report.ok, explain(report)
        assert audit.ok, explain(audit)
    else:
        assert report.check("grad:proj.weight").ratio == pytest.approx(2.0, abs=1e-4), explain(report)
        assert audit.by_kind("edge_diverges"), explain(audit)


def test_materialize_all_leaves_no_redistribution_implicit():
    """Counting: one named node per planned transition (edges whose planned source and target
    differ), each present in the parallel graph, and every collective carries a plugin tag."""
    _, seen = _divergence_run("all")
    audit, gm, edges = seen["audit"], seen["gm"], seen["edges"]
    planned = [e for e in edges if e.planned_source.placements != e.planned_target.placements]
    reds = list(audit.materialized)
    assert len(reds) >= len(planned) > 0
    names = {n.name for n in gm.graph.nodes}
    assert all(r.parallel_node in names for r in reds)
    collectives = [n for n in gm.graph.nodes if n.op == "call_function" and any(c in str(n.target) for c in COLLECTIVES)]
    assert collectives
    untagged = [n.name for n in collectives if TAG not in (n.meta.get("custom") or {})]
    assert untagged == []
    partial_kept = [r for r in reds if any(p.is_partial() for p in r.target.placements)]
    assert partial_kept, "the diverging edge's Partial target must be materialized as Partial"


NATURAL_CASES = {
    # found by sweeping seed sizes x meshes x io placements with the audit, confirmed numerically
    "16x32_b16s32_mesh2x4": (SeedConfig(num_heads=16, head_dim=32, batch=16, seq=32), (2, 4), 4.0),
    "8x64_b8s32_mesh4x2": (SeedConfig(num_heads=8, head_dim=64, batch=8, seq=32), (4, 2), 2.0),
}


@pytest.mark.full
@pytest.mark.parametrize("case", sorted(NATURAL_CASES))
def test_more_natural_divergences_fixed_by_materialize_all(case):
    """Two more natural PR #517 cases (other sizes and meshes, io (S0,S1)): proj.weight's gradient
    is off by the size of the mesh dim holding the Partial (x4 on 2x4, x2 on 4x2) and flagged;
    exact and clean with materialize="all"."""
    config, mesh_shape, factor = NATURAL_CASES[case]
    placements = [(Shard(0), Shard(1))]
    for materialize in (None, "all"):
        audits: list = []
        report = run_numerics(
            lambda: SeedBlock(config),
            lambda: torch.randn(config.batch, config.seq, config.hidden),
            mesh_shape,
            input_placements=placements,
            output_placements=placements,
            atol=1e-3,
            rtol=1e-4,
            configure=(lambda autop: autop.add_op_constraints(materialize="all")) if materialize else None,
            after_apply=lambda autop: audits.append(apc.audit(autop)),
        )
        if materialize is None:
            assert report.check("grad:proj.weight").ratio == pytest.approx(factor, abs=1e-4), explain(report)
            assert audits[0].by_kind("edge_diverges"), explain(audits[0])
        else:
            assert report.ok, explain(report)
            assert audits[0].ok, explain(audits[0])


@pytest.mark.ondemand
def test_natural_divergence_on_a_3d_mesh_exact_with_the_default_call():
    """The PR #517 class on 2x2x2 (seed 16 x 64, batch 8, seq 64, input and output (S0, S1, R)):
    autoparallel alone plans a Partial edge its apply drops, proj.weight's gradient is 2x and the
    audit flags the edge; the default call is exact and clean (~5 min each on 2 cores)."""
    placements = [(Shard(0), Shard(1), Replicate())]
    for plugin in (False, True):
        audits: list = []
        report = run_numerics(
            lambda: SeedBlock(DIVERGING),
            lambda: torch.randn(DIVERGING.batch, DIVERGING.seq, DIVERGING.hidden),
            (2, 2, 2),
            input_placements=placements,
            output_placements=placements,
            atol=1e-4,
            rtol=1e-4,
            configure=(lambda autop: autop.add_op_constraints()) if plugin else None,
            after_apply=lambda autop: audits.append(apc.audit(autop)),
        )
        if plugin:
            assert report.ok, explain(report)
            assert audits[0].ok, explain(audits[0])
        else:
            assert report.check("grad:proj.weight").ratio == pytest.approx(2.0, abs=1e-4), explain(report)
            assert audits[0].by_kind("edge_diverges"), explain(audits[0])
