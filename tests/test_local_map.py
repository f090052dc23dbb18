"""Guards ``local_map`` regions: autoparallel's ``examples/example_local_map.py`` (three regions,
selective activation checkpointing) on a 2x2 CPU mesh, read by the placements its user declared.

Before: the size couplings took a ``getitem`` of a region's tuple output for a size expression
(autoparallel alone: 11 ``size_mismatch`` flags on exact numbers; the default call: infeasible),
and the verifier read the region's body, which runs on local shards, by DTensor's rules (every
output unproven). Now: the default call is exact, audit clean, every output proven and no node
unknown; a redistribution into a region left out, or one after its output, is still caught.

Rests on: autoparallel a54c252 tracing a local_map as a node with its ``local_map_kwargs``, and its
apply running the body inline in the parallel graph. The node's target differs by torch version:
2.13 traces the HOP inside a ``call_local_map`` wrapper, 2.14 and 2.15 trace ``local_map_hop``
itself, which autoparallel's strategy for a region asserts against (its build stops); on those the
tests pass through the package's seam shim ``local_map_hop``, which lets it read the HOP.
"""

from __future__ import annotations

import pytest
import torch

import autoparallel_constraints as apc
from autoparallel_constraints.core._tags import REGION
from autoparallel_constraints.harness._cpu import cpu_mesh
from autoparallel_constraints.harness._numerics import run_numerics
from autoparallel_constraints.models import local_map_block
from autoparallel_constraints.verifier._contract import contract, regions
from autoparallel_constraints.verifier._walk import verify_graph
from autoparallel_constraints.testing import explain

funcol = torch.ops._c10d_functional


def _run(call: str):
    held: dict = {}

    def configure(autop) -> None:
        if call == "default":
            autop.add_op_constraints()
        else:
            apc.use_solver(autop, "highs-lp")

    def after(autop) -> None:
        held["autop"] = autop
        held["audit"] = apc.audit(autop)
        held["verify"] = apc.verify(autop)

    with torch.fx.traceback.preserve_node_meta():
        report = run_numerics(local_map_block(cpu_mesh((2, 2))), lambda: torch.rand(8, 16, 32), (2, 2),
                              configure=configure, after_apply=after)
    return report, held


@pytest.fixture(scope="module")
def default_call():
    return _run("default")


def _region(node: torch.fx.Node) -> str | None:
    return (node.meta.get("custom") or {}).get(REGION)


def test_default_call_is_exact_and_proven(default_call) -> None:
    """The default call on the local_map example: numbers exact, audit clean (no size couplings
    on the regions' tuple outputs), every output proven, no unknown node inside a region."""
    report, held = default_call
    assert report.ok, explain(report)
    assert held["audit"].ok, explain(held["audit"])
    verify = held["verify"]
    assert verify.ok and verify.n_unknown == 0, explain(verify)
    assert any(op.startswith("local_map ") for op in verify.proven), "no op was read as a region's"


def _verify(autop):
    inputs, outputs = contract(autop)
    return verify_graph(autop.parallel_gm, autop.mesh, inputs, outputs, regions=regions(autop))


def test_a_missing_redistribution_into_a_region_is_caught(default_call) -> None:
    """A region fed its input before the all_gather its declaration (Replicate) needs: the
    verifier names the region and what it declares."""
    _, held = default_call
    autop = held["autop"]
    gm = autop.parallel_gm
    for node in gm.graph.nodes:
        if _region(node) is None:
            continue
        for i, a in enumerate(node.args):
            if (isinstance(a, torch.fx.Node) and _region(a) is None and a.target is funcol.wait_tensor.default
                    and a.args[0].target is funcol.all_gather_into_tensor.default):
                node.update_arg(i, a.args[0].args[0])
                try:
                    report = _verify(autop)
                finally:
                    node.update_arg(i, a)
                kinds = {v.kind for v in report.violations}
                assert "region_input" in kinds or not report.ok, explain(report)
                assert any("local_map region" in v.reason for v in report.violations), explain(report)
                assert _verify(autop).ok
                return
    pytest.fail("no region input comes from an all_gather in this plan: the test covers nothing")


def test_a_wrong_declaration_is_caught(default_call) -> None:
    """The same graph against a region declared Replicate where the plan feeds it shards."""
    _, held = default_call
    autop = held["autop"]
    declared = regions(autop)
    from torch.distributed.tensor.placement_types import Replicate

    rr = (Replicate(), Replicate())
    sharded = [name for name, (ins, *_) in declared.items() if any(p is not None and tuple(p) != rr for p in ins)]
    assert sharded, "no region takes a sharded input in this plan"
    ins, *rest = declared[sharded[0]]
    lying = {**declared, sharded[0]: (tuple(rr for _ in ins), *rest)}
    inputs, outputs = contract(autop)
    report = verify_graph(autop.parallel_gm, autop.mesh, inputs, outputs, regions=lying)
    assert any(v.kind == "region_input" and sharded[0] in v.reason for v in report.violations), explain(report)


@pytest.mark.full
def test_autoparallel_alone_is_clean_where_its_numbers_are_exact() -> None:
    """autoparallel alone on the example: exact, and the audit (no longer 11 size_mismatch) and
    the verifier agree."""
    report, held = _run("alone")
    assert report.ok, explain(report)
    assert held["audit"].ok, explain(held["audit"])
    assert held["verify"].ok and held["verify"].n_unknown == 0, explain(held["verify"])


def test_plugin_redistributions_keep_the_checkpoint_tags(default_call) -> None:
    """Under selective activation checkpointing the plugin's redistribution nodes carry the
    recompute policy and checkpoint id of the op they feed, so the partitioner recomputes or
    saves them with their region instead of treating them as ordinary saved activations."""
    from autoparallel_constraints.core._tags import TAG

    _, held = default_call
    autop = held["autop"]
    joint = {n.name: n for n in autop.gm.graph.nodes}
    checked = 0
    for node in autop.parallel_gm.graph.nodes:
        custom = node.meta.get("custom") or {}
        if TAG not in custom or "apc_node" not in custom:
            continue
        consumer = joint.get(custom["apc_node"])
        if consumer is None or "recompute" not in consumer.meta:
            continue
        assert str(node.meta.get("recompute")) == str(consumer.meta["recompute"]), node.name
        assert node.meta.get("ac_graph_id") == consumer.meta.get("ac_graph_id"), node.name
        checked += 1
    assert checked, "no plugin redistribution feeds a checkpointed op in this plan: the test covers nothing"
