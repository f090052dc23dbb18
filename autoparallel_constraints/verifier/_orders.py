"""Shard orders and strided layouts: which mesh dim shards a tensor dim first, how an op carries
the order from its inputs to its output, and the DTensor spec standing in for a strided flatten.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from torch.distributed.tensor.placement_types import Placement, Shard

from ..seam.dtensor import StridedShard
from ._values import _contiguous_spec, _contiguous_stride, _is_spec, _Merged, _sharded_dim, _Violation, aten

logger = logging.getLogger(__name__)


def _shard_order(spec: Any, tdim: int) -> list[int]:
    order = getattr(spec, "shard_order", None) or ()
    for entry in order:
        if entry.tensor_dim == tdim:
            return list(entry.mesh_dims)
    return [m for m, p in enumerate(spec.placements) if _sharded_dim(p) == tdim]


def _unmerged(merged: _Merged) -> Any:
    """The spec ``merged`` is a flatten of: ``dim`` back into the layout's dims, each sharded by
    its own mesh dims in order. Each rank holds the row-major product of its blocks, which is this
    spec's local tensor flattened, so it reads the same bytes exactly."""
    from ..seam.dtensor import DTensorSpec, ShardOrderEntry, TensorMeta

    spec, d, layout = merged.spec, merged.dim, merged.layout
    extra = len(layout) - 1
    # tensor dim after the unflatten -> its mesh dims, in order
    mesh_dims_of = {t if t < d else t + extra: tuple(_shard_order(spec, t))
                    for t in {_sharded_dim(p) for p in spec.placements} - {None, d}}
    mesh_dims_of.update({d + j: tuple(mesh_dims) for j, (_, mesh_dims) in enumerate(layout) if mesh_dims})
    placements = list(spec.placements)
    for t, mesh_dims in mesh_dims_of.items():
        for m in mesh_dims:
            placements[m] = Shard(t)
    # DTensorSpec wants either no order (ascending mesh dims everywhere) or every sharded dim listed
    order = None
    if any(list(ms) != sorted(ms) for ms in mesh_dims_of.values()):
        order = tuple(ShardOrderEntry(tensor_dim=t, mesh_dims=ms) for t, ms in sorted(mesh_dims_of.items()))
    shape = list(spec.tensor_meta.shape)
    shape[d:d + 1] = [size for size, _ in layout]
    size = torch.Size(shape)
    meta = TensorMeta(size, _contiguous_stride(size), spec.tensor_meta.dtype)
    return DTensorSpec(spec.mesh, tuple(placements), tensor_meta=meta, shard_order=order)


def _in_default_order(spec: Any) -> Any:
    """``spec`` with each tensor dim's mesh dims in DTensor's default (ascending) order; ``spec``
    itself where it already is."""
    from ..seam.dtensor import DTensorSpec

    if not any(list(e.mesh_dims) != sorted(e.mesh_dims) for e in getattr(spec, "shard_order", None) or ()):
        return spec
    return DTensorSpec(spec.mesh, spec.placements, tensor_meta=spec.tensor_meta)


def _updated_order(spec: Any, changes: dict[int, Placement], append_to: int | None, order: Sequence[int] | None) -> Any:
    from ..seam.dtensor import ShardOrderEntry

    entries: dict[int, list[int]] = {}
    for entry in getattr(spec, "shard_order", None) or ():
        entries[entry.tensor_dim] = [m for m in entry.mesh_dims if m not in changes]
    for m, p in enumerate(spec.placements):
        d = _sharded_dim(p)
        if d is not None and m not in changes and m not in entries.get(d, []):
            entries.setdefault(d, []).append(m)
    if append_to is not None:
        new = list(order) if order is not None else sorted(m for m, p in changes.items() if _sharded_dim(p) == append_to)
        entries.setdefault(append_to, []).extend(m for m in new if m not in entries[append_to])
    return tuple(ShardOrderEntry(tensor_dim=d, mesh_dims=tuple(ms)) for d, ms in sorted(entries.items()) if ms)


# matmuls -> the dim each operand is contracted along
_CONTRACTED_DIMS = {aten.bmm.default: (2, 1), aten.mm.default: (1, 0)}
# the dim of each operand that is a dim of the output, at the same index: rows of the first, columns of the second
_FREE_DIMS = {aten.bmm.default: (1, 2), aten.mm.default: (0, 1)}


def _orders(spec: Any) -> dict[frozenset[int], tuple[int, ...]]:
    """Mesh dims -> the order they shard one tensor dim in, for dims sharded by several mesh dims."""
    out = {}
    for tdim in {_sharded_dim(p) for p in spec.placements} - {None}:
        order = tuple(_shard_order(spec, tdim))
        if len(order) > 1:
            out[frozenset(order)] = order
    return out


def _carry_shard_order(inputs: Sequence[Any], result: Any) -> Any:
    """``result`` with the shard order its inputs hold.

    DTensor's propagation matches placements and drops the order in which several mesh dims shard
    one tensor dim: a local op keeps its input's block layout, so an output dim sharded by the
    same mesh dims takes the inputs' order. Inputs sharded by the same mesh dims in different
    orders hold blocks that do not correspond: a hidden redistribution.
    """
    from ..seam.dtensor import DTensorSpec, ShardOrderEntry

    held: dict[frozenset[int], tuple[int, ...]] = {}
    for spec in inputs:
        for dims, order in _orders(spec).items():
            if held.setdefault(dims, order) != order:
                raise _Violation(
                    "hidden_redistribution",
                    f"inputs sharded by mesh dims {sorted(dims)} in different orders {list(held[dims])} and {list(order)}",
                )
    if not held:
        return result

    def carry(spec: Any) -> Any:
        if not _is_spec(spec) or any(isinstance(p, StridedShard) for p in spec.placements):
            return spec
        entries = []
        changed = False
        for tdim in sorted({_sharded_dim(p) for p in spec.placements} - {None}):
            order = tuple(_shard_order(spec, tdim))
            want = held.get(frozenset(order), order)
            changed |= want != order
            entries.append(ShardOrderEntry(tensor_dim=tdim, mesh_dims=want))
        if not changed:
            return spec
        return DTensorSpec(spec.mesh, spec.placements, tensor_meta=spec.tensor_meta, shard_order=tuple(entries))

    if isinstance(result, (list, tuple)):
        return type(result)(carry(r) for r in result)
    return carry(result)


def _global_shim(node: torch.fx.Node, value_of: Any, output_spec: Any) -> torch.fx.Node | None:
    """A copy of ``node`` in a scratch graph whose tensor inputs are placeholders holding their
    inferred *global* shapes (meta tensors), for rules that read shapes."""
    graph = torch.fx.Graph()
    mapping: dict[torch.fx.Node, torch.fx.Node] = {}
    for i, arg in enumerate(node.all_input_nodes):
        value = value_of(arg)
        if not _is_spec(value) or value.tensor_meta is None:
            continue
        ph = graph.placeholder(f"in{i}")
        ph.meta["val"] = torch.empty(value.tensor_meta.shape, dtype=value.tensor_meta.dtype, device="meta")
        mapping[arg] = ph
    if not mapping:
        return None

    def remap(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            if a in mapping:
                return mapping[a]
            return a.meta.get("val") if not isinstance(a.meta.get("val"), torch.Tensor) else None
        return a

    args = torch.fx.node.map_aggregate(node.args, remap)
    kwargs = torch.fx.node.map_aggregate(dict(node.kwargs), remap)
    shim = graph.call_function(node.target, tuple(args), dict(kwargs))
    if _is_spec(output_spec) and output_spec.tensor_meta is not None:
        meta = output_spec.tensor_meta
        shim.meta["val"] = torch.empty(meta.shape, dtype=meta.dtype, device="meta")
    return shim


def _with_shard0(spec: Any, dims: tuple[int, ...]) -> Any:
    """``spec`` (replicated on ``dims`` after a gather) as it was before: Shard(0) on ``dims``."""
    from ..seam.dtensor import DTensorSpec

    placements = list(spec.placements)
    for d in dims:
        placements[d] = Shard(0)
    return DTensorSpec(spec.mesh, tuple(placements), tensor_meta=spec.tensor_meta)


def _as_shard_order(spec: Any) -> Any:
    """``spec`` with a shard order it encodes as ``StridedShard`` (how the plan states a tensor
    dim sharded by several mesh dims in reversed order: ``(_S(0, 8), S(0))`` on 8x8 is dim 0
    split by mesh dim 1 first) stated as plain shards and a shard order: the same blocks on every
    rank, in the form the collectives' checks read. Anything else is returned as it is."""
    from ..seam.dtensor import DTensorSpec, normalize_placements_into_shard_order

    if spec is None or not any(isinstance(p, StridedShard) for p in spec.placements):
        return spec
    try:
        placements, order = normalize_placements_into_shard_order(tuple(spec.placements), spec.mesh)
        return DTensorSpec(spec.mesh, placements, tensor_meta=spec.tensor_meta, shard_order=order,
                           use_strided_shard_as_shard_order=False)
    except Exception:  # noqa: BLE001 - a strided shard no shard order explains (a view's): as it is
        return spec


def _size1_moves(spec: Any, local: Sequence[int]) -> list[Any]:
    """Other global readings of ``spec``'s local bytes for a view: a tensor dim sharded down to
    local size 1 (one sample per rank) moved to another position. A size-1 dim can sit anywhere
    without changing the row-major order of the local elements, and the graph retraced per rank
    puts it where it likes: einsum drops a local size-1 batch dim into a bmm's rows
    (``[16, 64, 4(S), 1] -> [1, 16, 64]`` is ``[4(S), 16, 64] -> [1, 64(S), 64]``). Each move is
    the global permute of the same tensor, so every reading stays true."""
    if any(isinstance(p, StridedShard) for p in spec.placements):
        return []
    shape = spec.tensor_meta.shape
    movable = sorted({d for d in (_sharded_dim(p) for p in spec.placements) if d is not None and local[d] == 1 < shape[d]})
    out = []
    for src in movable:
        for dst in range(len(local)):
            if dst == src:
                continue
            perm = list(range(len(local)))
            perm.insert(dst, perm.pop(src))  # new dim i holds old dim perm[i]
            out.append(_permuted(spec, perm))
    return out


def _permuted(spec: Any, perm: Sequence[int]) -> Any:
    """``spec`` permuted: new dim i holds old dim ``perm[i]``, shards and shard order carried."""
    from ..seam.dtensor import DTensorSpec, ShardOrderEntry, TensorMeta

    shape = list(spec.tensor_meta.shape)
    where = {old: new for new, old in enumerate(perm)}
    new_shape = torch.Size(shape[old] for old in perm)
    placements = tuple(Shard(where[p.dim]) if isinstance(p, Shard) else p for p in spec.placements)
    order = tuple(sorted((ShardOrderEntry(tensor_dim=where[e.tensor_dim], mesh_dims=e.mesh_dims)
                          for e in getattr(spec, "shard_order", None) or ()), key=lambda e: e.tensor_dim))
    meta = TensorMeta(new_shape, _contiguous_stride(new_shape), spec.tensor_meta.dtype)
    try:
        return DTensorSpec(spec.mesh, placements, tensor_meta=meta, shard_order=order or None)
    except Exception:  # noqa: BLE001 - an order DTensorSpec rejects: the default one
        return DTensorSpec(spec.mesh, placements, tensor_meta=meta)


def _strided_flatten(spec: Any, global_out: Sequence[int]) -> Any:
    """The output spec of a view that flattens a sharded dim behind other dims, which DTensor's view
    rule refuses but the data layout allows: ``[8, 64(S), 1024] -> [512, 1024]`` holds, on each rank,
    every 64-row's chunk, i.e. ``StridedShard(0, split_factor=8)``. None when the view is not that."""
    from ..seam.dtensor import Flatten, InputDim, view_groups

    in_shape = tuple(spec.tensor_meta.shape)
    rule = view_groups(in_shape, tuple(global_out))
    where: dict[int, tuple[int, int]] = {}  # input dim -> (output dim, split factor)
    for o, dim_spec in enumerate(rule):
        if isinstance(dim_spec, InputDim):
            where[dim_spec.input_dim] = (o, 1)
        elif isinstance(dim_spec, Flatten) and all(isinstance(d, InputDim) for d in dim_spec.input_dims):
            before = 1
            for d in dim_spec.input_dims:
                where[d.input_dim] = (o, before)
                before *= in_shape[d.input_dim]
    placements: list[Placement] = []
    for p in spec.placements:
        d = _sharded_dim(p)
        if d is None:
            placements.append(p)
            continue
        if d not in where or isinstance(p, StridedShard):
            return None
        o, factor = where[d]
        placements.append(Shard(o) if factor == 1 else StridedShard(o, split_factor=factor))
    outs = [_sharded_dim(p) for p in placements if _sharded_dim(p) is not None]
    if len(outs) != len(set(outs)):
        return None  # two shards on one output dim: leave it to DTensor's rule
    return _contiguous_spec(spec, placements, global_out)
