"""Guards the seed end to end at the seed's sizes on a 2x4 mesh: every formulation solves and audits
clean with the baseline's objective; the faithfully forced #348 plan crashes Inductor with the
issue's message and is flagged by the audit without the plugin, and compiles clean with strict and
explicit; pinning the illegal strategy itself is repaired by explicit with a named node (whose cost
is in the objective) and refused by strict with the rule and the pin named."""

from __future__ import annotations

import re

import pytest
import torch
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.harness._inject import (
    chosen_strategy,
    find_nodes,
    lower_with_inductor,
    offer_strategy,
    pin_strategy,
    strategy_index,
)
from autoparallel_constraints.lab import run_seed
from autoparallel_constraints.testing import explain

INDEX_PUT = torch.ops.aten.index_put.default
RS0 = (Replicate(), Shard(0))
RS1 = (Replicate(), Shard(1))
RR = (Replicate(), Replicate())
CRASH = re.escape("Broadcast failed in ExpandView([16, 32, 1, 64], [4, 128, 1, 64])")


@pytest.fixture
def mesh(make_mesh):
    return make_mesh((2, 4), ("dim0", "dim1"))


def offer_pre_fix():
    """What DTensor's index_put rule offered before pytorch#172350: self/out RS(0), values RS(1)."""
    return offer_strategy(INDEX_PUT, input_placements=[RS0, RR, RS1], output_placements=RS0)


def pin_producers(autop):
    """Pin only the producers of index_put's self (the zeros) and values, as in the issue."""
    (node,) = find_nodes(autop, INDEX_PUT)
    opt = autop.sharding_optimizer
    opt.add_node_constraint(node.args[0], RS0, constraint_name="pin_self")
    opt.add_node_constraint(node.args[2], RS1, constraint_name="pin_values")


def pin_illegal(autop):
    """Pin index_put itself to the offered (illegal) strategy."""
    (node,) = find_nodes(autop, INDEX_PUT)
    pin_strategy(autop, node, strategy_index(autop, node, [RS0, RR, RS1], RS0), name="pin_illegal")


@pytest.fixture(scope="module")
def baseline(fake_process_group, cpu_device_name):
    """The seed block solved by autoparallel alone (once per module)."""
    from autoparallel_constraints.testing import cpu_mesh

    return run_seed(None, cpu_mesh((2, 4), ("dim0", "dim1")))


def test_seed_block_baseline_satisfies_the_table(baseline):
    """autoparallel alone at the pin: the seed plan audits clean (no injection, no plugin)."""
    summary, report = baseline
    assert report is not None and report.ok, explain(report)
    assert report.table_nodes >= 3 and not report.redistributes  # index_put and both adds at least


@pytest.mark.parametrize("formulation", ["strict", "explicit"])
def test_seed_block_solves_clean_with_baseline_objective(mesh, baseline, formulation):
    """Seed sizes, 2x4: every formulation solves, audits clean, and since the baseline plan
    already satisfies the table, keeps the baseline's objective (960.786 measured)."""
    summary, report = run_seed(formulation, mesh)
    assert report is not None and report.ok, explain(report)
    assert summary.table_nodes == baseline[1].table_nodes
    assert summary.objective == pytest.approx(baseline[0].objective, rel=1e-9)


def test_forced_348_without_plugin_crashes_inductor_and_audit_flags_index_put(mesh):
    """Baseline with the pre-fix strategy offered and producers pinned: the solver picks the illegal
    strategy itself, the audit flags index_put (not co-sharded, mesh dim 1), Inductor crashes."""
    crashed = []

    def lower(autop):
        with pytest.raises(Exception, match=CRASH):
            lower_with_inductor(autop)
        crashed.append(True)

    with offer_pre_fix():
        _, report = run_seed(None, mesh, configure=pin_producers, after_apply=lower)
    assert crashed
    flagged = report.by_kind("not_cosharded")
    assert [v.node for v in flagged] == ["index_put"], explain(report)
    text = str(flagged[0])
    assert "self" in text and "values" in text and "(R, S(0))" in text and "(R, S(1))" in text
    assert "[4, 128, 73, 64]" in text and "[16, 32, 1, 64]" in text  # local shapes shown


@pytest.mark.parametrize("formulation", ["strict", "explicit"])
def test_forced_348_with_plugin_compiles_and_audits_clean(mesh, formulation):
    """Same forced setup with the plugin: the illegal strategy is not run as is, audit clean,
    Inductor lowers the parallel graph."""
    chosen = {}

    def lower(autop):
        (node,) = find_nodes(autop, INDEX_PUT)
        chosen["spec"] = chosen_strategy(autop, node)
        lower_with_inductor(autop)

    with offer_pre_fix():
        _, report = run_seed(formulation, mesh, configure=pin_producers, after_apply=lower)
    assert report.ok, explain(report)
    inputs = chosen["spec"].input_specs
    runs_illegal_as_is = inputs[0].placements == RS0 and inputs[2].placements == RS1
    if formulation == "strict":
        assert not runs_illegal_as_is and not report.redistributes
    else:  # explicit may keep the illegal strategy only with its values redistributed in front of it
        assert not runs_illegal_as_is or [(r.arg, r.target.placements) for r in report.redistributes] == [("values", RS0)]


def test_pinned_illegal_strategy_is_repaired_by_explicit_with_a_named_priced_node(mesh):
    """explicit + index_put pinned to the illegal strategy: one named redistribute node
    values RS(1) -> RS(0) in the parallel graph, audit clean, Inductor lowers, and the objective is
    the forced baseline's plus exactly that node's cost (so the cost is really in the objective)."""
    with offer_pre_fix():
        base, base_report = run_seed(None, mesh, configure=pin_illegal)
    assert base_report.by_kind("not_cosharded")
    seen = {}

    def lower(autop):
        names = {n.name for n in autop.parallel_gm.graph.nodes}
        seen["names"] = names
        lower_with_inductor(autop)

    with offer_pre_fix():
        summary, report = run_seed("explicit", mesh, configure=pin_illegal, after_apply=lower)
    assert report.ok, explain(report)
    (red,) = report.redistributes
    assert red.node == "index_put" and red.arg == "values"
    assert red.source.placements == RS1 and red.target.placements == RS0
    assert red.constraint == "explicit.redistribute_000"
    assert red.parallel_node == "apc_explicit_redistribute_000" and red.parallel_node in seen["names"]
    assert red.cost > 0
    assert summary.objective == pytest.approx(base.objective + red.cost, rel=1e-6)


def test_pinned_illegal_strategy_is_refused_by_strict_naming_rule_and_pin(mesh):
    """strict + the illegal pin: StrictConflictError naming index_put's rule and the pin."""
    with offer_pre_fix(), pytest.raises(apc.StrictConflictError) as info:
        run_seed("strict", mesh, configure=pin_illegal)
    text = str(info.value)
    assert "pin_illegal_000" in text and "index_put" in text
    assert "aten.index_put.default [index_put]" in text and "different logical dims" in text
