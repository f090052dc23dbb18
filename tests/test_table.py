"""Guards the compatibility table: dim maps (broadcast, index_put, gather, einsum, multi-output),
the co-sharding check on the #348 pair, the swapped pair, summed dims and every kind of Partial
rule, repair targets, and the registry's validation, duplicate handling, decorator and close-name
lookups."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.table import (
    SUM_AVG,
    Alignment,
    DimKind,
    Flag,
    Linearity,
    PartialCombo,
    Reduce,
    bind,
    check,
    repair_targets,
)
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
    assert len(table.select("pointwise")) == 42


def test_strided_shard_counts_as_shard(mesh24):
    """_StridedShard (not a Shard subclass in torch 2.13) is a shard: mixing it with R is flagged,
    and it prints as SS(dim,split)."""
    from torch.distributed.tensor.placement_types import _StridedShard

    from autoparallel_constraints.core._placements import fmt_placement

    binding = bind(_row(aten.add.Tensor), _graph_node(aten.add.Tensor, [(8, 8), (8, 8)]))
    ss = _StridedShard(0, split_factor=2)
    specs = [_spec(mesh24, (ss, S(0)), (8, 8)), _spec(mesh24, (R, S(0)), (8, 8))]
    assert check(binding, specs, _spec(mesh24, (ss, S(0)), (8, 8)))
    assert fmt_placement(ss) == "SS(0,2)"


# --- the data model of issue 3: summed dims, idempotent outputs, gather indices, explicit Partial
# combinations, multi-output rows, validation and registration ---------------------------------


def _einsum_node(equation, shapes):
    g = torch.fx.Graph()
    nodes = []
    for i, shape in enumerate(shapes):
        n = g.placeholder(f"x{i}")
        n.meta["val"] = torch.empty(shape, device="meta")
        nodes.append(n)
    node = g.call_function(aten.einsum.default, (equation, nodes))
    node.meta["val"] = torch.einsum(equation, *[n.meta["val"] for n in nodes])
    return node


def test_weight_gradient_contraction_is_partial_sum(mesh24):
    """einsum abn,abk->kn (a weight gradient) with both operands batch-sharded gives P(sum); the
    output may not be R or P(avg) then, and an output sharded on a dim no input shards is wrong."""
    b = bind(_row(aten.einsum.default), _einsum_node("abn,abk->kn", [(4, 8, 6), (4, 8, 5)]))
    assert [a.dim_map for a in b.args] == [(2, 3, 1), (2, 3, 0)]
    specs = [_spec(mesh24, (S(0), R), (4, 8, 6)), _spec(mesh24, (S(0), R), (4, 8, 5))]
    assert check(b, specs, _spec(mesh24, (P, R), (5, 6))) == []
    assert "must be P(sum)" in str(check(b, specs, _spec(mesh24, (R, R), (5, 6)))[0])
    assert check(b, specs, _spec(mesh24, (Partial("avg"), R), (5, 6)))
    rr = [_spec(mesh24, (R, R), (4, 8, 6)), _spec(mesh24, (R, R), (4, 8, 5))]
    assert "no input does" in str(check(b, rr, _spec(mesh24, (R, S(0)), (5, 6)))[0])
    # repair: an output P(sum) with one operand batch-sharded moves the other onto the batch dim
    targets = repair_targets(b, [specs[0], rr[1]], _spec(mesh24, (P, R), (5, 6)))
    assert set(targets) == {1} and targets[1].placements == (S(0), R)


def test_replicated_inputs_may_give_an_idempotent_partial_output(mesh24):
    """R inputs: the output may be R or P(avg|max|min) (equal values reduce to themselves), never
    P(sum) or P(product)."""
    b = bind(_row(aten.add.Tensor), _graph_node(aten.add.Tensor, [(4, 8), (4, 8)]))
    specs = [_spec(mesh24, (R, R), (4, 8))] * 2
    for op, ok in (("max", True), ("avg", True), ("min", True), ("sum", False), ("product", False)):
        assert (check(b, specs, _spec(mesh24, (R, Partial(op)), (4, 8))) == []) is ok, op


@pytest.mark.parametrize(
    ("op", "a", "b", "out", "ok"),
    [
        (aten.add.Tensor, Partial("avg"), R, Partial("avg"), True),  # affine: the mean of shifts
        (aten.add.Tensor, R, Partial("max"), Partial("max"), True),  # alpha=1
        (aten.sub.Tensor, R, Partial("max"), Partial("min"), True),  # a - max b_i = min(a - b_i)
        (aten.sub.Tensor, R, Partial("max"), Partial("max"), False),
        (aten.mul.Tensor, Partial("product"), Partial("product"), Partial("product"), True),
        (aten.mul.Tensor, Partial("max"), R, Partial("max"), False),  # not monotone for negative b
        (aten.maximum.default, Partial("max"), Partial("max"), Partial("max"), True),
        (aten.maximum.default, Partial("min"), R, Partial("min"), True),  # max distributes over min
        (aten.maximum.default, Partial("min"), Partial("min"), Partial("min"), False),
    ],
)
def test_explicit_partial_combinations(mesh24, op, a, b, out, ok):
    """Each pointwise row's stated Partial combinations (all proven by the ground truth)."""
    binding = bind(_row(op), _graph_node(op, [(4, 8), (4, 8)]))
    specs = [_spec(mesh24, (R, a), (4, 8)), _spec(mesh24, (R, b), (4, 8))]
    assert (check(binding, specs, _spec(mesh24, (R, out), (4, 8))) == []) is ok


def test_a_flag_gates_a_combination(mesh24):
    """add's other-alone P(max) needs alpha=1: with alpha=2 the row rejects it."""
    node = _graph_node(aten.add.Tensor, [(4, 8), (4, 8)])
    node.kwargs = {"alpha": 2}
    b = bind(_row(aten.add.Tensor), node)
    specs = [_spec(mesh24, (R, R), (4, 8)), _spec(mesh24, (R, Partial("max")), (4, 8))]
    assert check(b, specs, _spec(mesh24, (R, Partial("max")), (4, 8)))
    assert check(b, [specs[0], _spec(mesh24, (R, Partial("avg")), (4, 8))], _spec(mesh24, (R, Partial("avg")), (4, 8))) == []


def test_gather_index_shards_with_the_output(mesh24):
    """index.Tensor: an index tensor lays out output dims and may shard with them; self's
    indexed dim may not be sharded."""
    node = _graph_node(aten.index.Tensor, [(4, 6, 3)], index_slot=(1, [None, (2, 5)]))
    b = bind(_row(aten.index.Tensor), node)
    assert {a.label: a.dim_map for a in b.args} == {"self": (0, DimKind.INDEXED, 3), "indices[1]": (1, 2)}
    specs = [_spec(mesh24, (R, R), (4, 6, 3)), _spec(mesh24, (R, S(0)), (2, 5))]
    assert check(b, specs, _spec(mesh24, (R, S(1)), (4, 2, 5, 3))) == []
    bad = [_spec(mesh24, (R, S(1)), (4, 6, 3)), _spec(mesh24, (R, R), (2, 5))]
    assert "indexed dim" in str(check(b, bad, _spec(mesh24, (R, R), (4, 2, 5, 3)))[0])


def test_multi_output_row_sums_the_weight_gradients(mesh24):
    """native_layer_norm_backward: batch-sharded inputs give grad_input sharded and the weight and
    bias gradients P(sum); Replicate weight gradients are flagged."""
    g = torch.fx.Graph()
    vals = [torch.empty(s, device="meta") for s in [(4, 8, 6), (4, 8, 6), (4, 8, 1), (4, 8, 1), (6,), (6,)]]
    ph = []
    for i, v in enumerate(vals):
        n = g.placeholder(f"x{i}")
        n.meta["val"] = v
        ph.append(n)
    node = g.call_function(aten.native_layer_norm_backward.default,
                           (ph[0], ph[1], [6], ph[2], ph[3], ph[4], ph[5], [True, True, True]))
    node.meta["val"] = (vals[0], vals[4], vals[5])
    b = bind(_row(aten.native_layer_norm_backward.default), node)
    ins = [_spec(mesh24, (S(0), R), v.shape) for v in vals[:4]] + [_spec(mesh24, (R, R), (6,))] * 2
    good = (_spec(mesh24, (S(0), R), (4, 8, 6)), _spec(mesh24, (P, R), (6,)), _spec(mesh24, (P, R), (6,)))
    assert check(b, ins, good) == []
    bad = (good[0], _spec(mesh24, (R, R), (6,)), good[2])
    assert "out[1]" in str(check(b, ins, bad)[0])


@pytest.mark.parametrize(
    ("row", "match"),
    [
        (OpRule(aten.add.Tensor, "x", (ArgSpec("self", 0), ArgSpec("other", 1)),
                partials=(PartialCombo(("self", "bias"), SUM_AVG),)), "names 'bias'"),
        (OpRule(aten.add.Tensor, "x", (ArgSpec("self", 0), ArgSpec("other", 1, partial=False)),
                partials=(PartialCombo(("other",), SUM_AVG),)), "may never be Partial"),
        (OpRule(aten.add.Tensor, "x", (ArgSpec("self", 0), ArgSpec("other", 1)),
                partials=(PartialCombo(("self",), SUM_AVG, out=(Reduce.SUM,)),)), "one entry per reduce op"),
        (OpRule(aten.add.Tensor, "x", (ArgSpec("self", 0),), linearity=Linearity.LINEAR,
                partials=(PartialCombo(("self",), SUM_AVG),)), "either partials or linearity"),
        (OpRule(aten.index.Tensor, "x", (ArgSpec("self", 0),), alignment=Alignment.GATHER), "reads argument"),
        (OpRule(aten.index.Tensor, "x", (ArgSpec("self", 0), ArgSpec("indices", 1, partial=False)),
                alignment=Alignment.GATHER), "role=Role.INDEX"),
        (OpRule(aten.mm.default, "x", (ArgSpec("self", 0), ArgSpec("mat2", 1)), alignment=Alignment.EINSUM,
                equation="ab,bc,cd->ad"), "operands"),
        (OpRule(aten.add.Tensor, "x", (ArgSpec("self", 0), ArgSpec("other", 1)), whole_dims_arg="alpha"),
         "not an int argument"),
        (OpRule(aten._scaled_dot_product_flash_attention_for_cpu.default, "x",
                (ArgSpec("query", 0), ArgSpec("attn_mask", 5))), "keyword-only"),
        (OpRule(aten.add.Tensor, "x", (ArgSpec("self", 0), ArgSpec("other", 1)),
                partials=(PartialCombo(("self",), SUM_AVG, only_if=Flag("alpha", 1, 1, 1)),)), "not argument 1"),
    ],
)
def test_registry_validates_partial_combinations_and_alignments(row, match):
    """Rows naming unknown or non-capable arguments, malformed combinations, missing alignment
    arguments, bad equations or flags are refused when registered."""
    with pytest.raises(apc.InvalidRowError, match=match):
        apc.Table().register(row)


def test_rule_decorator_registers_a_custom_op():
    """Table.rule registers a row on a torch.library custom op and returns it unchanged; a
    failed lookup by subscript lists close names."""
    table = apc.Table()

    @table.rule(ArgSpec("x", 0), ArgSpec("y", 1), partials=(PartialCombo(("x", "y"), SUM_AVG, why="linear"),))
    @torch.library.custom_op("apc_test::fused_add", mutates_args=())
    def fused_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y

    assert fused_add(torch.ones(2), torch.ones(2)).tolist() == [2.0, 2.0]
    row = table[torch.ops.apc_test.fused_add.default]
    assert row.family == "user" and "all of {x, y} P(sum|avg)" in row.describe()
    with pytest.raises(apc.InvalidRowError, match="already has a row"):
        table.rule(ArgSpec("x", 0))(torch.ops.apc_test.fused_add)
    with pytest.raises(apc.UnknownOpError, match="Close names: fused_add"):
        table["fused_ad"]


def test_builtin_rows_cover_the_issue_families():
    """At least 40 overloads, grouped by meaning, every row with its Partial rule stated."""
    table = apc.default_table()
    assert len(table) >= 40
    families = {r.family for r in table}
    assert {"index_put", "pointwise", "scatter", "cat", "copy", "gather", "contraction"} <= families
    assert all(r.partials is not None for r in table)  # stated, not implied by a shorthand
