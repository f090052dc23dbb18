"""Guards ``local_map`` regions with collectives inside: a DeepSeek-V3-style expert region
(``models.expert_region_block``: token dispatch by ``all_to_all`` with variable splits and the
expert matmuls inside one region, the expert weights ``(R, S(0))`` on a ``(dp, ep)`` 2x2 CPU
mesh), and the verifier's check of a region's ``Replicate`` claims (``region_output``).

Before: the verifier proved every op of a region's body by its declaration alone, so a backward
region that returned each ``dp`` rank's own share of an expert weight's gradient as the
``Replicate`` the declaration claims (the reference model's declaration as written) was called
clean, audit clean, on wrong gradients (norm of the error 0.75-0.80 of the reference's). Now: the
mesh dims each body value may vary along are derived (collectives inside read by their groups),
and an output declared ``Replicate`` on one of them is a ``region_output`` violation; with the
gradients summed inside the region the default call is exact, audit clean, every output proven,
no node unknown, and a wrong redistribution into the region is still caught.

Rests on: autoparallel a54c252 tracing a local_map as a ``call_local_map`` node whose backward
region's out placements are the forward's in placements (``in_grad_placements`` unsupported by
the HOP), its apply running the body inline, and torch 2.13's LocalTensorMode running
``all_to_all_single`` with per-rank splits.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.core._tags import REGION
from autoparallel_constraints.harness._cpu import cpu_mesh
from autoparallel_constraints.harness._numerics import run_numerics
from autoparallel_constraints.models import expert_region_block
from autoparallel_constraints.testing import explain
from autoparallel_constraints.verifier._contract import contract, regions
from autoparallel_constraints.verifier._walk import verify_graph

funcol = torch.ops._c10d_functional


# -- the replication check on a hand-made region (cheap) ------------------------------------------


def _spec(mesh: Any, shape: tuple[int, ...], placements: tuple[Any, ...]) -> Any:
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

    return DTensorSpec(mesh, placements, tensor_meta=TensorMeta(torch.Size(shape), torch.empty(shape).stride(),
                                                                torch.float32))


def _weight_grad_region(mesh: Any, sum_over: tuple[int, ...], declared: tuple[Any, ...]) -> Any:
    """A region computing a weight's gradient ``xᵀ dy`` from tokens sharded on mesh dim 0,
    summed inside over ``sum_over``, its output declared ``declared``; verified."""
    from torch.fx.experimental.proxy_tensor import make_fx

    groups = [mesh.get_group(d).group_name for d in sum_over]

    def body(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
        grad = torch.mm(x.t(), dy)
        for group in groups:
            grad = funcol.wait_tensor(funcol.all_reduce(grad, "sum", group))
        return grad

    gm = make_fx(body, tracing_mode="fake")(torch.empty(4, 8), torch.empty(4, 8))
    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.meta["custom"] = {REGION: "grad_region"}
    tokens = (Shard(0), Replicate())
    return verify_graph(gm, mesh, [_spec(mesh, (8, 8), tokens)] * 2, [("grad", _spec(mesh, (8, 8), declared))],
                        regions={"grad_region": ((tokens, tokens), (declared,), ((8, 8),))})


@pytest.mark.parametrize(("sum_over", "declared", "verdict"), [
    ((), (Replicate(), Replicate()), "region_output"),
    ((0,), (Replicate(), Replicate()), "clean"),
    ((1,), (Replicate(), Replicate()), "region_output"),
    ((), (Partial(), Replicate()), "clean"),
], ids=["unsummed", "summed-over-dp", "summed-over-the-other-dim", "declared-partial"])
def test_a_replicate_claim_on_a_varying_value_is_caught(sum_over, declared, verdict) -> None:
    """A region output declared Replicate on a mesh dim its value varies along (tokens sharded
    there, no all_reduce over it) is ``region_output``; summed over that dim, or declared Partial
    there, it is clean. An all_reduce over another mesh dim does not make it the same on dim 0."""
    mesh = cpu_mesh((2, 2))
    report = _weight_grad_region(mesh, sum_over, declared)
    kinds = sorted({v.kind for v in report.violations})
    assert kinds == ([] if verdict == "clean" else [verdict]), str(report)
    if verdict == "clean":
        assert report.ok and report.n_unknown == 0, str(report)
        assert report.proven.get("local_map grad_region"), report.proven
    else:
        assert "varies along mesh dim 0" in report.violations[0].reason, str(report)


def test_a_region_output_sized_by_rank_coordinates_is_read_on_every_rank() -> None:
    """torch 2.15 traces a backward region's output size from the rank coordinates (the clamped
    chunk bounds ``Min((c + 1) * 8, 16) - Min(c * 8, 16)``, unbacked symbols): the verifier
    evaluates it on every rank, reads it as 8 where every rank gets 8, and leaves it unknown where
    ranks differ (11 rows in chunks of 6) or a symbol is no coordinate. Before, any such size was
    unknown and the expert region's routing-score gradient stayed unproven on 2.15."""
    from types import SimpleNamespace

    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from autoparallel_constraints.verifier._regions import _Regions

    env = ShapeEnv()
    dp, ep, other = (env.create_unbacked_symint() for _ in range(3))
    walker = SimpleNamespace(sizes=(2, 2), traced_coords={dp.node.expr: 0, ep.node.expr: 1})
    walker._same_on_every_rank = lambda size: _Regions._same_on_every_rank(walker, size)

    def rows(coord, chunk: int, n: int):
        return torch.sym_min((coord + 1) * chunk, n) - torch.sym_min(coord * chunk, n)

    assert _Regions._traced_local_shape(walker, (rows(ep, 8, 16), 2)) == (8, 2)
    assert _Regions._traced_local_shape(walker, (rows(ep, 8, 16) + rows(dp, 4, 8), 2)) == (12, 2)
    assert _Regions._traced_local_shape(walker, (rows(ep, 6, 11), 2)) == (-1, 2)
    assert _Regions._traced_local_shape(walker, (rows(other, 8, 16), 2)) == (-1, 2)


# -- the expert region through autoparallel (full tier) -------------------------------------------


def _run(call: str, **model: Any):
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
        report = run_numerics(expert_region_block(cpu_mesh((2, 2)), **model), lambda: torch.rand(8, 4, 16), (2, 2),
                              configure=configure, after_apply=after)
    return report, held


@pytest.fixture(scope="module")
def default_call():
    return _run("default")


def _region(node: torch.fx.Node) -> str | None:
    return (node.meta.get("custom") or {}).get(REGION)


def _verify(autop):
    inputs, outputs = contract(autop)
    return verify_graph(autop.parallel_gm, autop.mesh, inputs, outputs, regions=regions(autop))


@pytest.mark.full
def test_default_call_is_exact_and_proven(default_call) -> None:
    """The default call on the expert region: numbers exact (every gradient, the token counts),
    audit clean, every output proven, no node unknown; the all_to_alls (dispatch and combine,
    forward and backward) run inside the regions and are read by their declaration."""
    report, held = default_call
    assert report.ok, explain(report)
    assert held["audit"].ok, explain(held["audit"])
    verify = held["verify"]
    assert verify.ok and verify.n_unknown == 0 and not verify.unproven_outputs, explain(verify)
    assert any(op.startswith("local_map ") for op in verify.proven), "no op was read as a region's"
    inside = [n for n in held["autop"].parallel_gm.graph.nodes
              if _region(n) is not None and n.target is funcol.all_to_all_single.default]
    assert len(inside) >= 4, f"{len(inside)} all_to_all_single inside the regions"


@pytest.mark.full
def test_a_wrong_redistribution_into_the_region_is_caught(default_call) -> None:
    """A region fed the tensor a redistribution into it started from (the redistribution left
    out): the verifier names the region and what it declares."""
    _, held = default_call
    autop = held["autop"]
    for node in autop.parallel_gm.graph.nodes:
        if _region(node) is None:
            continue
        for i, a in enumerate(node.args):
            if not (isinstance(a, torch.fx.Node) and _region(a) is None and a.target is torch.ops.aten.slice.Tensor):
                continue
            node.update_arg(i, a.args[0])
            try:
                report = _verify(autop)
            finally:
                node.update_arg(i, a)
            assert any(v.kind == "region_input" and "local_map region" in v.reason for v in report.violations), \
                str(report)
            assert _verify(autop).ok
            return
    pytest.fail("no region input comes from a rank slice in this plan: the test covers nothing")


@pytest.mark.full
def test_a_gradient_left_unsummed_is_caught(default_call) -> None:
    """The backward region with one expert weight's all_reduce over dp left out (what the
    reference's declaration computes): ``region_output`` on that gradient, naming mesh dim 0."""
    _, held = default_call
    autop = held["autop"]
    for node in autop.parallel_gm.graph.nodes:
        if _region(node) is None or node.target is not funcol.all_reduce.default:
            continue
        wait = next(iter(node.users))
        users = list(wait.users)
        for u in users:
            u.replace_input_with(wait, node.args[0])
        try:
            report = _verify(autop)
        finally:
            for u in users:
                u.replace_input_with(node.args[0], wait)
        flagged = [v for v in report.violations if v.kind == "region_output"]
        assert flagged and "varies along mesh dim 0" in flagged[0].reason, str(report)
        assert _verify(autop).ok
        return
    pytest.fail("no all_reduce inside a region in this plan: the test covers nothing")


@pytest.mark.full
def test_autoparallel_alone_is_clean_where_its_numbers_are_exact() -> None:
    """autoparallel alone on the expert region: exact, and the audit and the verifier agree."""
    report, held = _run("alone")
    assert report.ok, explain(report)
    assert held["audit"].ok, explain(held["audit"])
    assert held["verify"].ok and held["verify"].n_unknown == 0, explain(held["verify"])


@pytest.mark.ondemand
def test_the_reference_declaration_gives_wrong_gradients_and_is_flagged() -> None:
    """The reference's declaration as written (no sum over dp inside): autoparallel alone
    computes the output and the router's and shared expert's gradients exactly and the three
    expert weights' gradients wrong, and the audit says so (``region_output`` on each); the
    default call refuses the graph (``VerificationError``) instead of training on it."""
    report, held = _run("alone", reduce_expert_grads=False)
    assert report.error is None, explain(report)
    wrong = {c.name for c in report.checks if not c.ok}
    assert wrong == {"grad:w1", "grad:w2", "grad:w3"}, explain(report)
    flagged = [v for v in held["verify"].violations if v.kind == "region_output"]
    assert len(flagged) == 3 and not held["audit"].ok, explain(held["audit"])
    refused, _ = _run("default", reduce_expert_grads=False)
    assert refused.error and "VerificationError" in refused.error, explain(refused)
    assert "leaves local_map region" in refused.error and "varies along mesh dim 0" in refused.error, explain(refused)
