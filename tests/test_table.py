"""Guards the compatibility table v1: dim maps (broadcast, index_put), the co-sharding check on
the #348 pair, the swapped pair and every Partial rule, repair targets, and the registry's
validation, duplicate handling and close-name lookups."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.table import DimKind, bind, check, repair_targets
from autoparallel_constraints.table._model import ArgSpec, OpRule, Role

aten = torch.ops.aten
R = Replicate()
P = Partial()


def S(d: int) -> Shard:
    return Shard(d)


def _graph_node(target, shapes, extra_args=(), index_slot=None):
    """A one-op FX graph; ``index_slot`` = (position, [shape or None ...]) builds an index list."""
    g = torch.fx.Graph()
    nodes = []
    for i, shape in enumerate(shapes):
        n = g.placeholder(f"x{i}")
        n.meta["val"] = torch.empty(shape, device="meta")
        nodes.append(n)
    args = list(nodes)
    if index_slot is not None:
        pos, entries = index_slot
        lst = []
        for k, shape in enumerate(entries):
            if shape is None:
                lst.append(None)
            else:
                n = g.placeholder(f"idx{k}")
                n.meta["val"] = torch.empty(shape, dtype=torch.long, device="meta")
                lst.append(n)
        args.insert(pos, lst)
    args.extend(extra_args)
    node = g.call_function(target, tuple(args))
    with torch.device("meta"):
        node.meta["val"] = target(*[a.meta["val"] if isinstance(a, torch.fx.Node) else
                                    ([e.meta["val"] if e is not None else None for e in a] if isinstance(a, list) else a)
                                    for a in args])
    return node


def _spec(mesh, placements, shape):
    return DTensorSpec(mesh, tuple(placements), tensor_meta=TensorMeta(torch.Size(shape), (1,) * len(shape), torch.float32))


@pytest.fixture
def mesh24(make_mesh):
    return make_mesh((2, 4))


def _row(op):
    return apc.default_table().get(op)


def _seed_index_put():
    # self [16,128,73,64], indices [None, None, idx[1]], values [16,128,1,64], accumulate=True
    return _graph_node(
        aten.index_put.default,
        [(16, 128, 73, 64), (16, 128, 1, 64)],
        extra_args=(True,),
        index_slot=(1, [None, None, (1,)]),
    )


def test_index_put_dim_maps_mark_indexed_dims():
    """The seed's index_put: self's head dim and values' picked-head dim are INDEXED, others map."""
    node = _seed_index_put()
    b = bind(_row(aten.index_put.default), node)
    maps = {a.label: a.dim_map for a in b.args}
    assert maps["self"] == (0, 1, DimKind.INDEXED, 3)
    assert maps["values"] == (0, 1, DimKind.INDEXED, 3)
    assert maps["indices[2]"] == (DimKind.INDEXED,)
    assert b.partial_allowed  # accumulate=True


def test_index_put_non_adjacent_indices_go_first():
    """numpy rule: non-adjacent index tensors put the index dims in front of values' dims."""
    node = _graph_node(
        aten.index_put.default, [(4, 5, 6), (3, 5)], extra_args=(False,), index_slot=(1, [(3,), None, (3,)])
    )
    b = bind(_row(aten.index_put.default), node)
    maps = {a.label: a.dim_map for a in b.args}
    assert maps["self"] == (DimKind.INDEXED, 1, DimKind.INDEXED)
    assert maps["values"] == (DimKind.INDEXED, 1)
    assert not b.partial_allowed  # accumulate=False


def test_broadcast_dim_maps():
    """add([B,S,H], [H]) and add([B,1,H], [B,S,H]): right alignment, size-1 dims marked BROADCAST."""
    b = bind(_row(aten.add.Tensor), _graph_node(aten.add.Tensor, [(2, 3, 4), (4,)]))
    assert [a.dim_map for a in b.args] == [(0, 1, 2), (2,)]
    b = bind(_row(aten.add.Tensor), _graph_node(aten.add.Tensor, [(2, 1, 4), (2, 3, 4)]))
    assert b.args[0].dim_map == (0, DimKind.BROADCAST, 2)


def test_issue_348_pair_is_not_cosharded(mesh24):
    """self RS(0) with values RS(1) (what pre-fix DTensor allowed) is flagged on mesh dim 1."""
    node = _seed_index_put()
    b = bind(_row(aten.index_put.default), node)
    specs = [
        _spec(mesh24, (R, S(0)), (16, 128, 73, 64)),
        _spec(mesh24, (R, R), (1,)),
        _spec(mesh24, (R, S(1)), (16, 128, 1, 64)),
    ]
    out = _spec(mesh24, (R, S(0)), (16, 128, 73, 64))
    mismatches = check(b, specs, out)
    assert mismatches and all(m.mesh_dim == 1 for m in mismatches)
    assert "different logical dims" in str(mismatches[0])
    good = list(specs)
    good[2] = _spec(mesh24, (R, S(0)), (16, 128, 1, 64))
    assert check(b, good, out) == []


def test_swapped_pair_with_matching_local_shapes_is_flagged(make_mesh):
    """self (S0,S1) vs values (S1,S0) on 2x2 with square dims: local shapes match, still flagged."""
    mesh = make_mesh((2, 2))
    node = _graph_node(aten.index_put.default, [(8, 8, 6, 4), (8, 8, 1, 4)], extra_args=(True,),
                       index_slot=(1, [None, None, (1,)]))
    b = bind(_row(aten.index_put.default), node)
    specs = [_spec(mesh, (S(0), S(1)), (8, 8, 6, 4)), _spec(mesh, (R, R), (1,)), _spec(mesh, (S(1), S(0)), (8, 8, 1, 4))]
    out = _spec(mesh, (S(0), S(1)), (8, 8, 6, 4))
    assert {m.mesh_dim for m in check(b, specs, out)} == {0, 1}


def test_sharding_an_indexed_or_broadcast_dim_is_flagged(mesh24):
    """Shard on INDEXED (index_put head dim) or BROADCAST (size-1) dims is never co-sharded."""
    b = bind(_row(aten.index_put.default), _seed_index_put())
    specs = [_spec(mesh24, (R, S(2)), (16, 128, 73, 64)), _spec(mesh24, (R, R), (1,)), _spec(mesh24, (R, R), (16, 128, 1, 64))]
    assert "indexed dim" in str(check(b, specs, _spec(mesh24, (R, S(2)), (16, 128, 73, 64)))[0])
    b = bind(_row(aten.add.Tensor), _graph_node(aten.add.Tensor, [(8, 1, 4), (8, 6, 4)]))
    specs = [_spec(mesh24, (R, S(1)), (8, 1, 4)), _spec(mesh24, (R, S(1)), (8, 6, 4))]
    assert "broadcast dim" in str(check(b, specs, _spec(mesh24, (R, S(1)), (8, 6, 4)))[0])


def test_index_tensor_must_be_replicate(mesh24):
    """An index tensor sharded on any mesh dim breaks the index_put row."""
    b = bind(_row(aten.index_put.default), _seed_index_put())
    specs = [_spec(mesh24, (S(0), R), (16, 128, 73, 64)), _spec(mesh24, (S(0), R), (1,)), _spec(mesh24, (S(0), R), (16, 128, 1, 64))]
    assert any("index tensor" in m.reason for m in check(b, specs, _spec(mesh24, (S(0), R), (16, 128, 73, 64))))


@pytest.mark.parametrize(
    ("op", "a", "b", "out", "ok"),
    [
        (aten.add.Tensor, P, P, P, True),
        (aten.add.Tensor, P, R, P, False),  # adds the replicated operand once per rank
        (aten.mul.Tensor, P, R, P, True),
        (aten.mul.Tensor, P, P, P, False),  # product of sums is not the sum of products
        (aten.div.Tensor, P, R, P, True),
        (aten.div.Tensor, R, P, P, False),  # denominator may never be Partial
        (aten.add.Tensor, P, P, R, False),  # Partial inputs must give a Partial output
        (aten.add.Tensor, Partial("max"), Partial("max"), Partial("max"), False),
    ],
)
def test_partial_rules(mesh24, op, a, b, out, ok):
    """Linearity per row: which Partial combinations are co-sharded."""
    binding = bind(_row(op), _graph_node(op, [(4, 8), (4, 8)]))
    specs = [_spec(mesh24, (R, a), (4, 8)), _spec(mesh24, (R, b), (4, 8))]
    assert (check(binding, specs, _spec(mesh24, (R, out), (4, 8))) == []) is ok


def test_index_put_partial_only_with_accumulate(mesh24):
    """index_put: self and values Partial together only when accumulate=True."""
    for accumulate, ok in ((True, True), (False, False)):
        node = _graph_node(aten.index_put.default, [(4, 6, 8), (4, 1, 8)], extra_args=(accumulate,),
                           index_slot=(1, [None, (1,)]))
        b = bind(_row(aten.index_put.default), node)
        specs = [_spec(mesh24, (R, P), (4, 6, 8)), _spec(mesh24, (R, R), (1,)), _spec(mesh24, (R, P), (4, 1, 8))]
        assert (check(b, specs, _spec(mesh24, (R, P), (4, 6, 8))) == []) is ok


def test_add_with_python_scalar_forbids_partial(mesh24):
    """add(P, 2.0) would add 2.0 on every rank: a scalar operand forbids Partial in a linear row."""
    node = _graph_node(aten.add.Tensor, [(4, 8)], extra_args=(2.0,))
    b = bind(_row(aten.add.Tensor), node)
    assert b.scalar_operand
    assert check(b, [_spec(mesh24, (R, P), (4, 8))], _spec(mesh24, (R, P), (4, 8)))


def test_repair_target_for_issue_348(mesh24):
    """The explicit repair anchors on the output: values RS(1) must become RS(0)."""
    b = bind(_row(aten.index_put.default), _seed_index_put())
    specs = [_spec(mesh24, (R, S(0)), (16, 128, 73, 64)), _spec(mesh24, (R, R), (1,)), _spec(mesh24, (R, S(1)), (16, 128, 1, 64))]
    targets = repair_targets(b, specs, _spec(mesh24, (R, S(0)), (16, 128, 73, 64)))
    assert set(targets) == {2} and targets[2].placements == (R, S(0))
    # an output sharded on the indexed dim cannot be repaired by moving inputs
    bad_out = _spec(mesh24, (R, S(2)), (16, 128, 73, 64))
    assert repair_targets(b, specs, bad_out) is None


def test_registry_rejects_duplicates_unless_overriding():
    """A second row for one overload raises; override=True replaces it."""
    table = apc.default_table().copy()
    row = table.get(aten.mul.Tensor)
    with pytest.raises(apc.InvalidRowError, match="already has a row"):
        table.register(row)
    assert table.register(row, override=True) is row


@pytest.mark.parametrize(
    ("row", "match"),
    [
        (OpRule(aten.add.Tensor, "x", (ArgSpec("self", 0), ArgSpec("other", 7))), "position 7"),
        (OpRule(aten.add.Tensor, "x", (ArgSpec("self", 0), ArgSpec("self", 1))), "share a name"),
        (OpRule(aten.add.Tensor, "x", (ArgSpec("alpha", 2),)), "not a tensor argument"),
        (OpRule(aten.index_put.default, "x", (ArgSpec("self", 0), ArgSpec("indices", 1, role=Role.INDEX))), "cannot be Partial"),
        (OpRule(aten.add.Tensor, "x", (ArgSpec("self", 0, role=Role.INDEX, partial=False),)), "ALIGNED"),
    ],
)
def test_registry_validates_rows(row, match):
    """Inconsistent rows are refused when registered, with what is wrong."""
    with pytest.raises(apc.InvalidRowError, match=match):
        apc.Table().register(row)


def test_lookup_suggests_close_names():
    """Unknown names raise UnknownOpError listing close names."""
    with pytest.raises(apc.UnknownOpError, match="index_put"):
        apc.default_table().select("index_putt")


def test_selectors_names_packets_families():
    """'index_put' is the family (3 rows); a packet or overload selects its rows."""
    table = apc.default_table()
    assert {r.name for r in table.select("index_put")} == {
        "aten.index_put.default", "aten.index_put_.default", "aten._unsafe_index_put.default"}
    assert [r.name for r in table.select(aten.add)] == ["aten.add.Tensor"]
    assert [r.name for r in table.select([aten.where.self])] == ["aten.where.self"]
    assert len(table.select("pointwise")) == 9


def test_strided_shard_counts_as_shard(mesh24):
    """_StridedShard (not a Shard subclass in torch 2.13) is a shard: mixing it with R is flagged,
    and it prints as SS(dim,split)."""
    from torch.distributed.tensor.placement_types import _StridedShard

    from autoparallel_constraints._placements import fmt_placement

    binding = bind(_row(aten.add.Tensor), _graph_node(aten.add.Tensor, [(8, 8), (8, 8)]))
    ss = _StridedShard(0, split_factor=2)
    specs = [_spec(mesh24, (ss, S(0)), (8, 8)), _spec(mesh24, (R, S(0)), (8, 8))]
    assert check(binding, specs, _spec(mesh24, (ss, S(0)), (8, 8)))
    assert fmt_placement(ss) == "SS(0,2)"
