"""Guards the compatibility table against ground truth: every built-in row's sampled calls are run
on the shards of every placement combination it accepts (and a sample of those it rejects) on
meshes (2,), (2, 2), (2, 4) and (2, 2, 2) under LocalTensorMode, and no combination a row calls co-sharded
may compute a wrong result. Missed opportunities (right but rejected) are recorded per row, not
failed. Also guards the checker itself: its layouts agree with DTensor's, it catches a wrong row
and a coincidence, and every built-in row has a sampler. The full sweep is ``-m ondemand``."""

from __future__ import annotations

import itertools
import random

import pytest
import torch
from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.__main__ import main as cli_main
from autoparallel_constraints.lab import _groundtruth as gt
from autoparallel_constraints.table import ArgSpec, OpRule, PartialCombo, Reduce

aten = torch.ops.aten
ROWS = list(apc.default_table())
# The default tier checks one row per alignment the families use; the full tier every row.
DEFAULT_ROWS = {
    "aten.index_put.default", "aten.add.Tensor", "aten.mul.Tensor", "aten.where.self", "aten.slice_scatter.default",
    "aten.cat.default", "aten.scatter_add.default", "aten.index.Tensor", "aten.mm.default", "aten.einsum.default",
}


@pytest.mark.parametrize(
    "row", [pytest.param(r, marks=() if r.name in DEFAULT_ROWS else pytest.mark.full) for r in ROWS],
    ids=lambda r: r.name,
)
def test_row_is_never_falsely_cosharded(row, record_property):
    """No combination the row accepts computes a wrong result (CI budget, 1-D and 2-D meshes)."""
    report = gt.check_row(row, gt.MESHES, gt.CI_BUDGET)
    record_property("combinations_checked", report.checked)
    record_property("missed_opportunities", report.missed)
    assert not report.unchecked, report.unchecked
    assert report.cases >= 1 and not report.unbound, f"{report.unbound} sampled calls did not bind"
    assert all(report.meshes[m].checked > 0 for m in gt.MESHES), report.meshes
    assert all(report.meshes[m].accepted > 0 for m in gt.MESHES), "the row accepts nothing: nothing was proven"
    assert report.false_cosharded == 0, "\n".join(str(f) for f in report.false_examples)


@pytest.mark.parametrize(
    "row", [pytest.param(r, marks=() if r.name in DEFAULT_ROWS else pytest.mark.full) for r in ROWS],
    ids=lambda r: r.name,
)
def test_row_is_never_falsely_cosharded_on_a_3d_mesh(row, record_property):
    """The same on (2, 2, 2): every triple of accepted columns (or a sample), one per mesh dim, so a
    dim sharded over two or three mesh dims and Partials on any of three dims are run."""
    report = gt.check_row(row, (gt.MESH_3D,), gt.CI_BUDGET)
    record_property("combinations_checked", report.checked)
    assert not report.unchecked and report.cases >= 1 and not report.unbound
    stats = report.meshes[gt.MESH_3D]
    assert stats.checked > 0 and stats.accepted > 0, stats
    assert report.false_cosharded == 0, "\n".join(str(f) for f in report.false_examples)


def test_every_builtin_row_has_a_sampler():
    """The ground truth can reach every row of the default table."""
    assert [r.name for r in ROWS if r.op not in gt.SAMPLERS] == []


@pytest.mark.parametrize("mesh_shape", [(2, 2), (2, 4), (2, 2, 2)])
def test_layouts_agree_with_dtensor(make_mesh, mesh_shape):
    """make_locals/reconstruct match DTensor's from_local/redistribute/full_tensor under
    LocalTensorMode: uneven shards, a dim sharded twice, and every Partial reduce op."""
    mesh = make_mesh(mesh_shape)
    world = mesh.size()
    ranks = frozenset(range(world))
    value = torch.randint(-4, 5, (5, 3)).to(torch.float64)
    options = [Replicate(), Shard(0), Shard(1), *(Partial(op) for op in gt.REDUCE_OPS)]
    checked = 0
    replicated = (Replicate(),) * len(mesh_shape)
    for placements in itertools.product(options, repeat=len(mesh_shape)):
        if len({p.reduce_op for p in placements if isinstance(p, Partial)}) > 1:
            continue  # DTensor allows one reduce op per tensor
        locals_ = gt.make_locals(value, mesh_shape, placements, random.Random(checked))
        with LocalTensorMode(ranks):
            local = LocalTensor({r: locals_[r] for r in ranks})
            dt = DTensor.from_local(local, mesh, placements, run_check=False, shape=value.shape,
                                    stride=value.stride())
            full = dt.full_tensor()
            if not any(isinstance(p, Partial) for p in placements):
                ours = DTensor.from_local(LocalTensor({r: value.clone() for r in ranks}), mesh,
                                          replicated, run_check=False).redistribute(mesh, placements)
                theirs = ours.to_local()._local_tensors
                assert all(torch.equal(theirs[r], locals_[r]) for r in ranks), placements
        per_rank = full._local_tensors if isinstance(full, LocalTensor) else {r: full for r in ranks}
        for r in ranks:
            assert torch.allclose(per_rank[r], value), (placements, r)
            assert torch.allclose(gt.reconstruct(locals_, mesh_shape, placements, r), value), (placements, r)
        checked += 1
    assert checked > 30


@pytest.mark.parametrize(
    ("combo", "what"),
    [
        (PartialCombo(("self",), (Reduce.SUM,)), "add(P(sum), R) adds the replicated operand once per rank"),
        (PartialCombo(("self", "other"), (Reduce.MAX,)), "max a_i + max b_i is not max(a_i + b_i)"),
    ],
)
def test_checker_catches_a_wrong_row(combo, what):
    """A row that allows a wrong Partial combination is reported false co-sharded, with examples."""
    row = OpRule(aten.add.Tensor, "test", (ArgSpec("self", 0), ArgSpec("other", 1)), partials=(combo,))
    report = gt.check_row(row, ((2,), (2, 2)), gt.CI_BUDGET)
    assert report.false_cosharded > 0, what
    assert report.false_examples and "differs from the global result" in report.false_examples[0].detail


@pytest.mark.parametrize("meshes", [((2,),), (gt.MESH_3D,)], ids=["1d", "3d-alone"])
def test_checker_catches_a_wrong_alignment(meshes):
    """A row that lets cat shard its cat dim (BROADCAST alignment instead of CAT) is caught, also
    by the 3-D mesh alone (no 1-D mesh to find it first)."""
    row = OpRule(aten.cat.default, "test", (ArgSpec("tensors", 0),))
    report = gt.check_row(row, meshes, gt.CI_BUDGET)
    assert report.false_cosharded > 0


def test_checker_catches_a_wrong_partial_on_the_3d_mesh_alone():
    """add(P(sum), R) allowed by a row is found wrong on (2, 2, 2) with no other mesh checked."""
    row = OpRule(aten.add.Tensor, "test", (ArgSpec("self", 0), ArgSpec("other", 1)),
                 partials=(PartialCombo(("self",), (Reduce.SUM,)),))
    report = gt.check_row(row, (gt.MESH_3D,), gt.CI_BUDGET)
    assert report.false_cosharded > 0 and report.false_examples
    assert report.false_examples[0].mesh == gt.MESH_3D


def test_checker_reports_missed_opportunities():
    """A row stricter than needed (add with no Partial at all) is exact but misses combinations."""
    row = OpRule(aten.add.Tensor, "test", (ArgSpec("self", 0), ArgSpec("other", 1)), partials=())
    report = gt.check_row(row, ((2,), (2, 2)), gt.CI_BUDGET)
    assert report.false_cosharded == 0 and report.missed > 0
    assert any("P(" in str(f) for f in report.missed_examples)


def test_a_second_value_draw_stops_a_coincidence():
    """dot(S(0), S(0)) -> P(max) is wrong, but when one rank's partial product is 0 it looks right:
    a combination counts as right only if it is right for every value draw of the case."""
    row = apc.default_table().get(aten.dot.default)
    lucky = gt.Case("lucky", (torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.tensor([0.0, 5.0, 3.0, 2.0])))
    other = gt.Case("lucky", (torch.tensor([1.0, 2.0, 3.0, 1.0]), torch.tensor([4.0, 5.0, 3.0, 2.0])))
    run = gt._prepare(row, lucky, random.Random(0))
    combo = [(Shard(0), Shard(0), Partial("max"))]
    assert gt.evaluate(run, (2,), combo) is None  # max(0, 2) == 0 + 2
    run.extra.append(gt._prepare(row, other, random.Random(1)))
    assert "differs" in gt.evaluate(run, (2,), combo)
    assert run.mismatches(_mesh((2,)), combo)  # and the row rejects it: a non-empty mismatch list


def _mesh(shape):
    from autoparallel_constraints.testing import cpu_mesh

    return cpu_mesh(shape)


def test_command_line_reports_totals(capsys):
    """``python -m autoparallel_constraints groundtruth`` checks the chosen rows and prints per-row
    counts and the totals."""
    assert cli_main(["groundtruth", "--rows", "aten.mul.Tensor,where", "--mesh", "2", "--mesh", "2x2"]) == 0
    out = capsys.readouterr().out
    assert "aten.mul.Tensor" in out and "aten.where.self" in out
    assert "false co-sharded: 0" in out


@pytest.mark.ondemand
def test_full_sweep_never_falsely_cosharded():
    """The larger sweep (every sampled call, three value draws, larger budgets) over every row."""
    reports = gt.check_table(meshes=(*gt.MESHES, gt.MESH_3D), budget=gt.FULL_BUDGET)
    print(gt.render(reports))
    assert sum(r.false_cosharded for r in reports) == 0, gt.render([r for r in reports if r.false_cosharded])
