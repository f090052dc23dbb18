"""Guards the plugin's numbers under LocalTensorMode on a 2x2 mesh against the single-device model:
the injected #348 case (shapes mismatch) and the swapped case (self (S0,S1), values (S1,S0): local
shapes match, numbers don't) are wrong and flagged without the plugin and exact with strict and
explicit, including explicit's inserted redistribute node; and the Partial divergence at the pin
(PR #517 class) is 2x wrong and flagged by the audit."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.models import SeedBlock, SeedConfig
from autoparallel_constraints.testing import (
    explain,
    find_nodes,
    offer_strategy,
    pin_strategy,
    run_numerics,
    strategy_index,
)

INDEX_PUT = torch.ops.aten.index_put.default
R = Replicate()
RR = (R, R)
# batch == seq, so the swapped case's local shapes agree and only the numbers can tell
SMALL = SeedConfig(num_heads=6, head_dim=8, batch=8, seq=8)
CASES = {
    "injected": ((R, Shard(0)), (R, Shard(1))),  # #348's pair: self/out RS(0), values RS(1)
    "swapped": ((Shard(0), Shard(1)), (Shard(1), Shard(0))),
}


def _run(case: str, formulation: str | None, *, pin_illegal: bool = False):
    self_p, values_p = CASES[case]
    audits: list[apc.AuditReport] = []

    def configure(autop):
        (node,) = find_nodes(autop, INDEX_PUT)
        opt = autop.sharding_optimizer
        opt.add_node_constraint(node.args[0], self_p, constraint_name="pin_self")
        opt.add_node_constraint(node.args[2], values_p, constraint_name="pin_values")
        if pin_illegal:
            index = strategy_index(autop, node, [self_p, RR, values_p], self_p)
            pin_strategy(autop, node, index, name="pin_illegal")
        if formulation is not None:
            autop.add_op_constraints(formulation=formulation)

    with offer_strategy(INDEX_PUT, input_placements=[self_p, RR, values_p], output_placements=self_p):
        report = run_numerics(
            lambda: SeedBlock(SMALL),
            lambda: torch.randn(SMALL.batch, SMALL.seq, SMALL.hidden),
            (2, 2),
            configure=configure,
            parameter_memory_constraint=False,
            after_apply=lambda autop: audits.append(apc.audit(autop)),
        )
    return report, audits[0] if audits else None


@pytest.mark.parametrize("case", sorted(CASES))
def test_forced_cases_are_wrong_and_flagged_without_plugin(case):
    """No plugin: injected fails with a shape mismatch, swapped gives a wrong proj.weight gradient
    with matching local shapes; the audit flags index_put as not co-sharded in both."""
    report, audit = _run(case, None)
    assert not report.ok, explain(report)
    if case == "injected":
        assert report.error and "shape mismatch" in report.error, explain(report)
    else:
        assert report.error is None and not report.check("grad:proj.weight").ok, explain(report)
        (violation,) = audit.by_kind("not_cosharded")
        shapes = {a.label: a.actual_local_shape for a in violation.args}
        assert shapes["self"][:2] == shapes["values"][:2]  # local shapes agree, numbers don't
    assert audit is not None, explain(audit, report)
    assert [v.node for v in audit.by_kind("not_cosharded")] == ["index_put"], explain(audit)


@pytest.mark.parametrize("formulation", ["strict", "explicit"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_forced_cases_are_exact_with_plugin(case, formulation):
    """strict and explicit: forward and every gradient match single device; audit clean."""
    report, audit = _run(case, formulation)
    assert report.ok, explain(report)
    assert audit.ok, explain(audit)


@pytest.mark.parametrize("case", sorted(CASES))
def test_explicit_redistribute_node_is_exact(case):
    """index_put pinned to the illegal strategy: explicit's inserted node (DTensor redistribute,
    all_to_all in the swapped case) makes it exact, and the audit lists the node."""
    report, audit = _run(case, "explicit", pin_illegal=True)
    assert report.ok, explain(report)
    assert audit.ok, explain(audit)
    (red,) = audit.redistributes
    self_p, values_p = CASES[case]
    assert red.arg == "values" and red.source.placements == values_p
    assert red.parallel_node == "apc_explicit_redistribute_000"


def test_partial_divergence_at_the_pin_is_flagged():
    """No injection: NH=16, HD=64, batch 8, seq 64, fp32, 2x2, input/output (S0,S1), memory
    constraint: proj.weight's gradient is 2x the reference (PR #517: a planned Partial turned
    Replicate) and the audit flags the diverging edge."""
    config = SeedConfig(num_heads=16, head_dim=64, batch=8, seq=64)
    placements = [(Shard(0), Shard(1))]
    audits: list[apc.AuditReport] = []
    report = run_numerics(
        lambda: SeedBlock(config),
        lambda: torch.randn(config.batch, config.seq, config.hidden),
        (2, 2),
        input_placements=placements,
        output_placements=placements,
        atol=1e-3,
        rtol=1e-4,
        after_apply=lambda autop: audits.append(apc.audit(autop)),
    )
    assert report.error is None, explain(report)
    grad = report.check("grad:proj.weight")
    assert not grad.ok and grad.ratio == pytest.approx(2.0, abs=1e-4), explain(report)
    assert report.check("output[0]").ok
    (audit,) = audits
    diverging = audit.by_kind("edge_diverges")
    assert diverging, explain(audit)
    assert any("P(sum)" in r and "graph delivers" in r for v in diverging for r in v.reasons)
