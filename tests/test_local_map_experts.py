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

from autoparallel_constraints.core._tags import REGION
from autoparallel_constraints.harness._cpu import cpu_mesh
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
