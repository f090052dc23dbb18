"""Guards the nested-uneven-shard family (``_nested``): no plan splits a tensor dim over two or
more mesh dims by a product that does not divide it, because DTensor cannot execute that.

The case: ``nn.Linear(6, 10)`` on 2×2 with autoparallel's parameter memory constraint. autoparallel
a54c252 stores the bias ``(S(0), S(0))`` (rows 3, 2, 3, 2) and its apply gathers it as if chunked
flat (3, 3, 3, 1): with a batch of 8 the parallel graph raises "shape '[3]' is invalid for input
of size 2" (with a batch of 6 it runs and the output and bias gradient are wrong, see
tests/test_numerics_harness.py); the verifier passes the plan (it reasons on placements, not on
chunk sizes). With the default call the bias
is never nested uneven and the numbers are exact; with ``sizes=False`` (no family) the same call is
wrong again, so it is the family that fixes it. The memory budget autoparallel derives from the
bias's best ratio (3/10, nested) is recomputed over the executable strategies, else the ILP would
be infeasible.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

import autoparallel_constraints as apc
from autoparallel_constraints.plan._nested import nested_uneven
from autoparallel_constraints.testing import cpu_mesh, explain, pin_strategy, run_numerics

S0, R = Shard(0), Replicate()


def _spec(mesh_shape: tuple[int, ...], placements: tuple, shape: tuple[int, ...]) -> DTensorSpec:
    meta = TensorMeta(torch.Size(shape), torch.empty(shape, device="meta").stride(), torch.float32)
    return DTensorSpec(cpu_mesh(mesh_shape), placements, meta)


@pytest.mark.parametrize(
    ("mesh_shape", "placements", "shape", "uneven"),
    [
        ((2, 2), (S0, S0), (10,), (0, 10, (0, 1), 4)),
        ((2, 2), (S0, S0), (8,), None),  # the product divides it
        ((2, 2), (S0, Shard(1)), (10, 6), None),  # one mesh dim per tensor dim: DTensor pads
        ((2, 2), (Shard(1), Shard(1)), (4, 6, 16), (1, 6, (0, 1), 4)),  # the view that fails in DTensor
        ((2, 2, 2), (Shard(2), R, Shard(2)), (8, 8, 6, 16), (2, 6, (0, 2), 4)),  # fused heads + 2 on 3-D
        ((2, 2, 2), (S0, S0, S0), (12,), (0, 12, (0, 1, 2), 8)),
        ((2, 2, 2), (S0, S0, S0), (16,), None),
        ((2, 1, 2), (S0, S0, R), (5,), None),  # a mesh dim of size 1 splits nothing
        ((2, 1, 2), (S0, R, S0), (6,), (0, 6, (0, 2), 4)),
    ],
)
def test_nested_uneven_reads_the_split(mesh_shape, placements, shape, uneven) -> None:
    """A dim is nested uneven exactly when two or more mesh dims split it and their product does
    not divide its size; the finding names the dim, size, mesh dims and ways."""
    found = nested_uneven(_spec(mesh_shape, placements, shape), mesh_shape)
    got = None if found is None else (found.dim, found.size, found.mesh_dims, found.ways)
    assert got == uneven


def _linear():
    return lambda: nn.Linear(6, 10), lambda: torch.randn(8, 6)


def test_bias_split_unevenly_wrong_alone_exact_with_the_default_call() -> None:
    """autoparallel alone: bias (S(0), S(0)) over 10 rows, wrong output and bias gradient, and the
    audit names it ``nested_uneven``; the default call: no nested uneven placement, exact, clean,
    with the family's rows named and the memory constraint still feasible; ``sizes=False``: wrong."""
    audits = {}

    def audit_into(key):
        return lambda autop: audits.__setitem__(key, apc.audit(autop))

    alone = run_numerics(*_linear(), (2, 2), after_apply=audit_into("alone"))
    assert alone.physical["param:bias"] == (S0, S0), alone.placement_summary
    assert not alone.ok, explain(alone)  # at a54c252: "shape '[3]' is invalid for input of size 2"
    assert [v.node for v in audits["alone"].by_kind("nested_uneven")], explain(audits["alone"])

    added = {}

    def default_call(autop):
        added["rows"] = autop.add_op_constraints()

    fixed = run_numerics(*_linear(), (2, 2), configure=default_call, after_apply=audit_into("default"))
    assert fixed.error is None, explain(fixed.error)
    assert fixed.ok, explain(fixed)
    assert fixed.physical["param:bias"] != (S0, S0)
    assert audits["default"].ok, explain(audits["default"])
    assert added["rows"].constraints.get("nested.even", 0) > 0, added["rows"]

    without = run_numerics(*_linear(), (2, 2), configure=lambda autop: autop.add_op_constraints(sizes=False, verify="off"))
    assert without.physical["param:bias"] == (S0, S0) and not without.ok, explain(without)


@pytest.mark.full
def test_bias_split_unevenly_on_a_3d_mesh() -> None:
    """On 2×2×2 autoparallel alone splits ``nn.Linear(6, 10)`` so that its apply cannot redistribute
    (at a54c252: "GuardOnDataDependentSymNode: Could not guard on data-dependent expression" while
    applying); the default call's plan has no nested uneven shard and its numbers are exact."""
    alone = run_numerics(*_linear(), (2, 2, 2))
    assert not alone.ok, explain(alone)
    fixed = run_numerics(*_linear(), (2, 2, 2), configure=lambda autop: autop.add_op_constraints())
    assert fixed.error is None and fixed.ok, explain(fixed)
    mesh_shape = (2, 2, 2)
    shapes = {"bias": (10,), "weight": (10, 6)}
    params = {n: p for n, p in fixed.physical.items() if n.split(":")[0] in ("param", "grad")}
    assert len(params) == 4, fixed.physical
    for name, placements in params.items():
        shape = shapes[name.split(":")[1]]
        assert nested_uneven(_spec(mesh_shape, placements, shape), mesh_shape) is None, (name, placements)


@pytest.mark.ondemand
@pytest.mark.parametrize("hidden", [6, 12])
def test_mlp_hidden_split_unevenly_on_a_3d_mesh(hidden: int) -> None:
    """``Linear(8, h) -> ReLU -> Linear(h, 8)`` on 2×2×2 (~40 s a run): a hidden of 6 (over two mesh
    dims of 2) or 12 (over three) is stored nested uneven by autoparallel alone, whose graph then
    fails to run (at a54c252: "type mismatch: SymInt vs int" and "shape '[2]' is invalid for input of
    size 1") and whose audit names ``nested_uneven``; the default call is exact and clean."""
    def model():
        return nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 8))

    audits: list = []
    alone = run_numerics(model, lambda: torch.randn(8, 8), (2, 2, 2), atol=1e-4, rtol=1e-4,
                         after_apply=lambda autop: audits.append(apc.audit(autop)))
    assert not alone.ok, explain(alone)
    assert audits and audits[0].by_kind("nested_uneven"), explain(*audits, alone)
    audits.clear()
    fixed = run_numerics(model, lambda: torch.randn(8, 8), (2, 2, 2), atol=1e-4, rtol=1e-4,
                         configure=lambda autop: autop.add_op_constraints(),
                         after_apply=lambda autop: audits.append(apc.audit(autop)))
    assert fixed.ok, explain(fixed)
    assert audits[0].ok, explain(audits[0])


def test_a_pinned_parameter_keeps_the_memory_budget_solvable() -> None:
    """autoparallel leaves a user-pinned parameter out of its memory rows; the budget recomputation
    skips it too (it once read the pinned bias's ratio from a row that does not hold it and raised
    KeyError in every solve). Bias pinned (R, R): the default call solves and is exact."""

    def pin_bias_then_default_call(autop):
        opt = autop.sharding_optimizer
        bias = next(n for n in opt.graph.nodes if n.op == "placeholder" and tuple(n.meta["val"].shape) == (10,))
        replicate = next(i for i, st in enumerate(opt.strats[bias].strategies) if st.output_specs.placements == (R, R))
        pin_strategy(autop, bias, replicate)
        autop.add_op_constraints()

    report = run_numerics(*_linear(), (2, 2), configure=pin_bias_then_default_call)
    assert report.error is None and report.ok, explain(report)
    assert report.physical["param:bias"] == (R, R)


def test_strategies_without_a_doubly_split_dim_are_skipped_with_the_same_rows(monkeypatch) -> None:
    """(N1)'s build looks only at strategies where some spec splits a tensor dim over two or more
    mesh dims (``_may_nest``), and at no strategy of a node whose every spec's shape the whole
    mesh divides (``_splits_evenly``: at depth, every layer's parameters); looking at every
    strategy of every node gives the same rows, notes and forbidden strategies, and on 2x2 the
    filters skip most strategies (the cost of the build at depth)."""
    from autoparallel.api import AutoParallel

    from autoparallel_constraints.formulations import Namer
    from autoparallel_constraints.plan import _nested

    # an 8 -> 8 linear whose every shape 2x2 divides, then the bias of 10 that nests unevenly
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 10))
    with AutoParallel(model, lambda: torch.randn(8, 8), cpu_mesh((2, 2))) as autop:
        opt = autop.sharding_optimizer
        calls = {True: 0, False: 0}
        even = {True: 0, False: 0}
        may_nest, splits_evenly = _nested._may_nest, _nested._splits_evenly

        def counted(strategy, active):
            found = may_nest(strategy, active)
            calls[found] += 1
            return found

        def counted_even(strategies, whole):
            found = splits_evenly(strategies, whole)
            even[found] += 1
            return found

        def rows():
            built = _nested.build_nested_constraints(opt, Namer("nested"), per_cluster=False)
            return ({n: str(c) for n, c in built.additions.constraints.items()}, built.additions.notes,
                    {n.name: sorted(o) for n, o in built.forbidden.items()})

        monkeypatch.setattr(_nested, "_may_nest", counted)
        monkeypatch.setattr(_nested, "_splits_evenly", counted_even)
        filtered = rows()
        monkeypatch.setattr(_nested, "_may_nest", lambda strategy, active: True)
        monkeypatch.setattr(_nested, "_splits_evenly", lambda strategies, whole: False)
        every = rows()
    assert filtered[0], "the bias of 10 over 2x2 must give (N1) rows for the comparison to mean anything"
    assert filtered == every
    assert calls[False] > calls[True] > 0, calls
    assert even[True] > 0 and even[False] > 0, even
