"""Collectives and rank slices: each a placement transition on the mesh dims of its process group.

``all_reduce`` needs ``Partial(op)`` and gives ``Replicate``; ``reduce_scatter_tensor`` gives
``Shard(0)`` (or ``Shard(d)`` after DTensor's chunk+cat); ``all_gather_into_tensor`` needs
``Shard(0)`` (or is followed by chunk+cat along ``d``); all-to-all moves a shard between tensor
dims. A ``slice`` whose bounds are ``c * coordinate`` of a mesh dim, or a constant chunk equal to
the tracing rank's coordinate, is ``Replicate -> Shard(d)``. Anything else is a violation.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

from ..core._placements import fmt_placements, fmt_spec
from ..seam.dtensor import StridedShard
from ..seam.tracing import schema_of
from ._mesh import _group_dims_by_ranks
from ._orders import _shard_order, _with_shard0
from ._values import (
    _as_expr,
    _Chunks,
    _concrete,
    _drop_clamps,
    _Fill,
    _Gathered,
    _Group,
    _linear_terms,
    _op_name,
    _prod,
    _Restacked,
    _sharded_dim,
    _Stacked,
    _Summed,
    _Unknowable,
    _Unknown,
    _Violation,
    aten,
)

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# Process groups, splits and reassembly


def _require(spec: Any, dims: Sequence[int], holds: Any, want: str, what: str) -> None:
    """A collective's precondition on each mesh dim of its group, e.g. Partial(sum) for all_reduce."""
    for d in dims:
        p = spec.placements[d]
        if not holds(p):
            raise _Violation(
                "illegal_collective",
                f"{what} on mesh dim {d} of a tensor that is {fmt_placements([p])} there",
                inferred=fmt_spec(spec), expected=f"{want} on mesh dim {d}",
            )


def _split_consumers(node: torch.fx.Node) -> tuple[list[torch.fx.Node], torch.fx.Node | None] | None:
    """The getitems of a split and the one op they all feed (None when not one); None when
    anything but a getitem uses the split."""
    getitems = [u for u in node.users if u.op == "call_function" and u.target is operator.getitem]
    if len(getitems) != len(node.users):
        return None
    users = {u for g in getitems for u in g.users}
    return getitems, (next(iter(users)) if len(users) == 1 else None)


def _cat_dim(cat: torch.fx.Node | None) -> int | None:
    if cat is None or cat.target is not aten.cat.default:
        return None
    return cat.args[1] if len(cat.args) > 1 else 0


def _redistribution_split(node: torch.fx.Node) -> bool:
    """A split DTensor's redistribute emits: exactly one piece used (this rank's chunk), or every
    piece used once by one ``cat`` along dim 0 (restacking for a reduce_scatter / all-to-all)."""
    found = _split_consumers(node)
    if found is None:
        return False
    return _one_piece_used(node) or _cat_dim(found[1]) == 0


def _one_piece_used(node: torch.fx.Node) -> bool:
    """Only one piece of the split ``node`` is used (this rank's chunk, taken by index)."""
    found = _split_consumers(node)
    return found is not None and len({g.args[1] for g in found[0]}) == 1


def _reassembly_split(node: torch.fx.Node) -> bool:
    """Every piece of ``node`` used once, in order, by one ``cat`` along a dim other than 0."""
    found = _split_consumers(node)
    if found is None or not found[0]:
        return False
    getitems, cat = found
    if _cat_dim(cat) in (None, 0) or any(len(g.users) != 1 for g in getitems):
        return False
    order = [p.args[1] if isinstance(p, torch.fx.Node) and p in getitems else None for p in cat.args[0]]
    return order == list(range(len(getitems)))


class _Collectives:
    """The walk's methods for collectives, process groups, rank slices, split and cat."""

    # -- collectives ---------------------------------------------------------------------------

    def _group(self, arg: Any) -> tuple[int, ...]:
        if isinstance(arg, _Group):
            return arg.dims
        if isinstance(arg, str) and arg in self.groups:
            return self.groups[arg]
        if isinstance(arg, str):
            dims = _group_dims_by_ranks(arg, self.mesh)
            if dims is not None:
                self.groups[arg] = dims
                return dims
        raise _Violation("illegal_collective", f"process group {arg!r} is not a group of this mesh")

    def _collective(self, node: torch.fx.Node, args: Any) -> Any:
        name = schema_of(node.target).name.split("::")[-1]  # type: ignore[union-attr]
        x = args[0]
        if isinstance(x, _Fill):
            # a constant is the same constant gathered, scattered or moved; reduced, it scales
            val = node.meta.get("val")
            keep = x.value if name != "all_reduce" and name != "reduce_scatter_tensor" or x.value == 0.0 else None
            return _Fill(_concrete(val.shape), keep, val.dtype)
        if name == "all_reduce":
            op, dims = args[1], self._group(args[2])
            spec = self._dist(x, name)
            scale = self._reduce_scale(spec, dims, op, f"all_reduce({op})")
            return self._scaled(node, spec, self._with(spec, {d: Replicate() for d in dims}), dims, scale)
        if name == "all_gather_into_tensor":
            dims = self._group(args[2])
            self._group_size(args[1], dims, name)
            spec = self._dist(x, name)
            if spec is None:
                raise _Violation("illegal_collective", "all_gather of a tensor without placement")
            _require(spec, dims, lambda p: isinstance(p, (Shard, StridedShard)), "S(*)", "all_gather")
            tdims = {spec.placements[d].dim for d in dims}  # type: ignore[union-attr]
            if len(tdims) != 1:
                raise _Violation("illegal_collective", f"all_gather over mesh dims {dims} sharding different tensor dims")
            (tdim,) = tdims
            if any(isinstance(p, StridedShard) and p.dim == tdim for p in spec.placements):
                # a reversed shard order held physically as StridedShard: DTensor's gather+reorder
                # for it is not interpreted (yet)
                raise _Unknowable(f"{name} of a strided shard {fmt_spec(spec)} (reversed shard order)")
            self._check_innermost(spec, dims, tdim, name)
            if tdim == 0 and not any(isinstance(spec.placements[d], StridedShard) for d in dims):
                return _Gathered(self._with(spec, {d: Replicate() for d in dims}), dims)
            return _Stacked(spec, dims)
        if name == "reduce_scatter_tensor":
            op, dims = args[1], self._group(args[3])
            self._group_size(args[2], dims, name)
            if isinstance(x, _Restacked):
                spec, tdim = x.spec, x.dim
                if x.count != _prod(self.sizes[d] for d in dims):
                    raise _Violation("illegal_collective", f"reduce_scatter of {x.count} chunks over a group of {dims}")
            else:
                spec, tdim = self._dist(x, name), 0
            scale = self._reduce_scale(spec, dims, op, f"reduce_scatter({op})")
            return self._scaled(node, spec, self._with(spec, {d: Shard(tdim) for d in dims}, append_to=tdim), dims, scale)
        if name in ("all_to_all_single",):
            return _Unknown("all_to_all_single without the DTensor pattern")
        if name == "shard_dim_alltoall":
            gather_dim, shard_dim, group = args[1], args[2], args[3]
            dims = self._group(group)
            spec = self._dist(x, name)
            _require(spec, dims, lambda p: isinstance(p, Shard) and p.dim == gather_dim, f"S({gather_dim})",
                     f"all_to_all gathering dim {gather_dim}")
            return self._with(spec, {d: Shard(shard_dim) for d in dims}, append_to=shard_dim)
        if name in ("broadcast", "all_gather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced", "all_reduce_coalesced"):
            return _Unknown(f"{name} is not interpreted")
        return _Unknown(f"collective {name} is not interpreted")

    def _reduce_scale(self, spec: Any, dims: tuple[int, ...], op: str, what: str) -> int:
        """What a reduction ``op`` over ``dims`` needs of its input, and the factor its result is off
        by. Each mesh dim must be ``Partial(op)``; a replicated dim is ``Partial`` of any op but
        ``sum`` as it is (the partition of avg, max and min is the identity). A ``sum`` accepts
        ``Partial("avg")`` and replicated dims too, and is then ``scale`` = the product of their sizes
        times the value (DTensor's flattened mixed reduction divides it back)."""
        if spec is None:
            raise _Violation("illegal_collective", f"{what} of a tensor without placement")
        scale = 1
        for d in dims:
            p = spec.placements[d]
            if isinstance(p, Partial) and p.reduce_op == op:
                continue
            if op == "sum" and (isinstance(p, Replicate) or (isinstance(p, Partial) and p.reduce_op == "avg")):
                scale *= self.sizes[d]
                continue
            if op in ("avg", "max", "min") and isinstance(p, Replicate):
                continue
            _require(spec, (d,), lambda q: False, f"P({op})", what)
        return scale

    @staticmethod
    def _scaled(node: torch.fx.Node, source: Any, reduced: Any, dims: tuple[int, ...], scale: int) -> Any:
        return reduced if scale == 1 else _Summed(reduced, dims, scale, node.name, _op_name(node), source)

    def _group_size(self, size: Any, dims: tuple[int, ...], name: str) -> None:
        want = _prod(self.sizes[d] for d in dims)
        if isinstance(size, int) and size != want:
            raise _Violation("illegal_collective", f"{name} with group size {size} on mesh dims {dims} (size {want})")

    def _check_innermost(self, spec: Any, dims: tuple[int, ...], tdim: int, name: str) -> None:
        """Gathering mesh dims of a tensor dim sharded by more mesh dims must start from the innermost."""
        order = _shard_order(spec, tdim)
        if len(order) > len(dims) and tuple(order[-len(dims):]) != tuple(sorted(dims, key=order.index)):
            raise _Violation(
                "illegal_collective",
                f"{name} on mesh dims {dims} while tensor dim {tdim} is sharded in order {order}: not the innermost shards",
                inferred=fmt_spec(spec),
            )

    # -- rank slices, chunks, cat --------------------------------------------------------------

    def _rank_slice(self, node: torch.fx.Node, args: Any) -> Any:
        x = args[0]
        dim = args[1] if len(args) > 1 else 0
        start = _as_expr(args[2] if len(args) > 2 else 0)
        if start is None or not start.free_symbols & set(self.sym_coords):
            return None
        end = _as_expr(args[3] if len(args) > 3 else None)
        start = _drop_clamps(start, self.sym_coords, self.sizes)
        end = _drop_clamps(end, self.sym_coords, self.sizes) if end is not None else None
        if isinstance(x, _Fill):  # this rank's chunk of a constant is the same constant
            val = node.meta["val"]
            return _Fill(_concrete(val.shape), x.value, val.dtype)
        spec = self._dist(x, "rank slice")
        ndim = len(spec.tensor_meta.shape)
        dim = dim % ndim
        terms = _linear_terms(start, self.sym_coords)
        if terms is None or end is None:
            return _Unknown(f"rank slice with bounds {start}..{end}")
        coefs, const = terms
        chunk = min(coefs.values())
        if const != 0 or (end - start) != chunk:
            return _Unknown(f"rank slice with bounds {start}..{end}")
        # outer mesh dims have the larger coefficients: c * prod(inner sizes)
        ordered = sorted(coefs, key=lambda d: -coefs[d])
        expect = chunk
        for d in reversed(ordered):
            if coefs[d] != expect:
                return _Unknown(f"rank slice with bounds {start}..{end}: not a chunk of this mesh")
            expect *= self.sizes[d]
        local_before = self._local_shape(spec)[dim]
        if local_before != expect:
            raise _Violation(
                "local_shape",
                f"rank slice of {chunk} on dim {dim} over mesh dims {ordered} from a local size {local_before} "
                f"(chunks of {expect} expected)", inferred=fmt_spec(spec),
            )
        for d in ordered:
            if not isinstance(spec.placements[d], Replicate):
                raise _Violation(
                    "illegal_collective",
                    f"rank slice on mesh dim {d} of a tensor that is {fmt_placements([spec.placements[d]])} there",
                    inferred=fmt_spec(spec), expected=f"R on mesh dim {d}",
                )
        return self._with(spec, {d: Shard(dim) for d in ordered}, append_to=dim, order=ordered)

    def _stacked_slice(self, args: Any) -> _Stacked | None:
        """One rank's piece of gathered shards taken by a slice along dim 0 (torch 2.15 reassembles
        some gathers with ``slice`` per rank where 2.13 splits): the piece, as :meth:`_split` gives
        it; None for any other slice."""
        x = args[0]
        dim = args[1] if len(args) > 1 else 0
        start = args[2] if len(args) > 2 else None
        end = args[3] if len(args) > 3 else None
        step = args[4] if len(args) > 4 else 1
        if not isinstance(x, _Stacked) or x.piece is not None or dim != 0 or step != 1:
            return None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
            return None
        size = self._local_shape(x.spec)[0]
        count = _prod(self.sizes[d] for d in x.dims)
        if size < 1 or start % size or end - start != size or not 0 <= start // size < count:
            return None
        return _Stacked(x.spec, x.dims, piece=start // size)

    def _split(self, node: torch.fx.Node, args: Any) -> Any:
        x = args[0]
        target = node.target
        val = node.meta.get("val")
        count = len(val) if isinstance(val, (list, tuple)) else None
        if isinstance(x, _Stacked):
            dim = args[2] if len(args) > 2 else 0
            if target is aten.chunk.default:
                dim = args[2] if len(args) > 2 else 0
            if dim != 0 or count != _prod(self.sizes[d] for d in x.dims):
                return _Unknown("split of gathered shards that is not one piece per rank")
            return [_Stacked(x.spec, x.dims, piece=i) for i in range(count)]
        if isinstance(x, _Fill):
            return [_Fill(_concrete(t.shape), x.value, t.dtype) for t in val]
        if isinstance(x, _Gathered):
            x_dims, x = x.dims, x.spec
            if (count == _prod(self.sizes[d] for d in x_dims) and (args[2] if len(args) > 2 else 0) == 0
                    and not _one_piece_used(node)):
                # the chunks of a dim-0 gather are the ranks' shards: only a cat along 0 undoes them
                # (one chunk taken is a rank slice of the replicated result, read below)
                return [_Stacked(_with_shard0(x, x_dims), x_dims, piece=i) for i in range(count)]
        spec = self._dist(x, "split")
        dim = (args[2] if len(args) > 2 else 0) % len(spec.tensor_meta.shape)
        sizes = [tuple(t.shape) for t in val] if isinstance(val, (list, tuple)) else []
        local = self._local_shape(spec)
        even = len({s[dim] for s in sizes}) == 1 and count and local[dim] == count * sizes[0][dim]
        if even and _redistribution_split(node):
            # what DTensor emits: one chunk taken (this rank's), or all chunks restacked along 0
            # for a reduce_scatter / all-to-all. A model's own split is anything else.
            return [_Chunks(spec, dim, count, piece=i) for i in range(count)]
        if dim == 0 and _reassembly_split(node):
            # DTensor's reassembly of gathered shards (chunk along 0, cat along the gathered dim)
            # applied to a tensor that no all_gather stacked: the shards it moves are not there
            raise _Unknowable("a gather's reassembly (split along 0, cat along another dim) of a tensor that was not gathered")
        return self._compute(node, args, {})

    def _cat(self, node: torch.fx.Node, args: Any) -> Any:
        pieces = args[0]
        dim = args[1] if len(args) > 1 else 0
        if not isinstance(pieces, (list, tuple)) or not pieces:
            return None
        if all(isinstance(p, _Stacked) for p in pieces):
            first = pieces[0]
            n = _prod(self.sizes[d] for d in first.dims)
            if [p.piece for p in pieces] != list(range(n)) or any(p.spec != first.spec or p.dims != first.dims for p in pieces):
                raise _Violation("illegal_collective", "cat of gathered shards out of rank order")
            spec = first.spec
            tdim = _sharded_dim(spec.placements[first.dims[0]])
            if dim % len(spec.tensor_meta.shape) != tdim:
                raise _Violation(
                    "illegal_collective",
                    f"gathered shards of tensor dim {tdim} concatenated along dim {dim}",
                    inferred=fmt_spec(spec), expected=f"cat along {tdim}",
                )
            return self._with(spec, {d: Replicate() for d in first.dims})
        if all(isinstance(p, _Chunks) for p in pieces):
            first = pieces[0]
            if [p.piece for p in pieces] != list(range(first.count)) or any(p.spec != first.spec for p in pieces):
                return _Unknown("cat of chunks out of order")
            if dim == first.dim:
                return first.spec  # split then cat back: the same tensor
            if dim == 0:
                return _Restacked(first.spec, first.dim, first.count)
            return _Unknown(f"chunks of dim {first.dim} concatenated along {dim}")
        if any(isinstance(p, (_Stacked, _Chunks)) for p in pieces):
            return _Unknown("cat mixing redistribution pieces with tensors")
        if all(isinstance(p, _Fill) for p in pieces) and len({p.value for p in pieces}) == 1:
            val = node.meta["val"]
            return _Fill(_concrete(val.shape), pieces[0].value, val.dtype)
        return None

    def _stacked_view(self, node: torch.fx.Node, x: Any) -> Any:
        """A view of gathered shards that is their cat along the sharded dim, or None.

        ``all_gather`` stacks the shards on a new leading dim, ``[n, *local]``. When every local dim
        before the sharded dim ``t`` has size 1, viewing that as ``local`` with ``t`` n times longer
        is the same memory as the cat along ``t`` (DTensor emits it for such tensors: RWKV's
        ``[1, 1, 64]`` parameters on ``(S(2), S(2))``, gathered over the flattened mesh). Anything
        else is left to the caller (unknown)."""
        if not isinstance(x, _Stacked) or x.piece is not None:
            return None
        spec = x.spec
        tdim = _sharded_dim(spec.placements[x.dims[0]])
        val = node.meta.get("val")
        if tdim is None or not isinstance(val, torch.Tensor):
            return None
        if tuple(_shard_order(spec, tdim)[-len(x.dims):]) != tuple(sorted(x.dims)):
            return None  # stacked in rank order, which is not the shards' order here
        local = list(self._local_shape(spec))
        if any(size != 1 for size in local[:tdim]):
            return None
        local[tdim] *= _prod(self.sizes[d] for d in x.dims)
        if list(_concrete(val.shape)) != local:
            return None
        return self._with(spec, {d: Replicate() for d in x.dims})

    def _slice_dims(self, piece: _Chunks) -> list[int]:
        """Mesh dims that explain a constant chunk as the tracing rank's shard."""
        return [m for m in range(len(self.sizes))
                if self.sizes[m] == piece.count and self.coordinate[m] == piece.piece
                and isinstance(piece.spec.placements[m], Replicate)]

    def _chunk_as_rank_slice(self, piece: _Chunks) -> Any:
        """A constant chunk index consumed as a tensor: the tracing rank's shard, if exactly one mesh
        dim (its size = the chunk count, its coordinate on this rank = the index) can explain it."""
        spec = piece.spec
        dims = self._slice_dims(piece)
        if len(dims) != 1:
            why = "no mesh dim" if not dims else f"mesh dims {dims} alike on the tracing rank"
            return _Unknown(
                f"chunk {piece.piece} of {piece.count} on dim {piece.dim}: {why} can explain it "
                "(rank coordinates are constants in this graph; build it with symbolic coordinates)"
            )
        return self._with(spec, {dims[0]: Shard(piece.dim)}, append_to=piece.dim)
