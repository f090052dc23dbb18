"""Views and reshapes: the global size arguments of a view are the candidates whose shard on the
tracing rank is the local shape in the graph; DTensor's view rule decides which of them stands, and
a flatten of dims sharded by different mesh dims is a merged value no placement names.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.fx
from torch.distributed.tensor.placement_types import Placement, Replicate, Shard

from ..core._placements import fmt_spec
from ..seam.dtensor import StridedShard
from ._orders import _CONTRACTED_DIMS, _FREE_DIMS, _shard_order, _size1_moves, _strided_flatten
from ._values import (
    _STRICT_VIEW,
    _concrete,
    _contiguous_spec,
    _is_spec,
    _Merged,
    _op_name,
    _prod,
    _Readings,
    _sharded_dim,
    _Unknowable,
    _Violation,
    aten,
)

logger = logging.getLogger(__name__)


class _Views:
    """The walk's methods for view ops: size candidates, the view rule, merged flattens."""

    def _view(self, node: torch.fx.Node, args: Any, kwargs: Any) -> Any:
        x = args[0]
        spec = self._dist(x, _op_name(node))
        out_local = _concrete(node.meta["val"].shape)
        in_global = tuple(spec.tensor_meta.shape)
        expand = node.target is aten.expand.default
        first_error: list[_Violation] = []
        # Several global shapes can fit one local view: a shard can land on a local size-1 dim
        # ([1, 64, 192] as [4, 16, 4, 48] sharded on the 4), or on either dim of an unflatten. They
        # describe the same bytes; which one the program meant shows only in later ops, so all are
        # kept (_Readings, plainest first: no strided shard, no size-1 shard, no moved dim).
        found: list[tuple[tuple[int, int, int], Any]] = []
        inputs = [(0, spec)] if expand else [(0, spec), *((1, s) for s in _size1_moves(spec, self._local_shape(spec)))]
        for moved, source in inputs:
            new_args = (source, *args[1:])
            found += [((*score, moved), r) for score, r in self._view_candidates(node, new_args, kwargs, out_local, first_error)]
        # A flatten of dims sharded by different mesh dims (an einsum's bmm operand) is kept as
        # one more reading: where a plain global view fits the same bytes too, only later ops
        # tell them apart.
        merged = [] if expand else self._merged_flattens(spec, out_local)
        if found or merged:
            readings = tuple(dict.fromkeys([r for _, r in sorted(found, key=lambda f: f[0])] + merged))
            return readings[0] if len(readings) == 1 else _Readings(readings)
        # No global view fits: either the graph is wrong, or it reshapes a layout DTensor's view rule
        # cannot name (e.g. flattening two dims sharded on two mesh dims, as an einsum's bmm does).
        # Not proven either way: unknown, and an output depending on it is unproven (never clean).
        why = first_error[0].expected if first_error else "no candidate"
        raise _Unknowable(
            f"no global view of {fmt_spec(spec)} {list(in_global)} has local shape {list(out_local)} "
            f"without a redistribution (DTensor would need {why})"
        )

    def _global_outs(self, sharded: Sequence[int], out_local: Sequence[int]) -> Iterator[tuple[tuple[int, ...], list[int]]]:
        """Each way of putting the shards of the mesh dims ``sharded`` on dims of a view's output of
        local shape ``out_local``: the assignment (output dim per mesh dim) and the global shape."""
        for assignment in itertools.product(range(len(out_local)), repeat=len(sharded)):
            global_out = list(out_local)
            for out_dim, m in zip(assignment, sharded):
                global_out[out_dim] *= self.sizes[m]
            yield assignment, global_out

    def _view_candidates(self, node: torch.fx.Node, args: Any, kwargs: Any, out_local: tuple[int, ...],
                         errors: list[_Violation]) -> list[tuple[tuple[int, int], Any]]:
        """The global views of ``args[0]`` (a spec) with local shape ``out_local``, each with its
        plainness score (strided shards, shards on a local size-1 dim)."""
        spec = args[0]
        in_global = tuple(spec.tensor_meta.shape)
        sharded = [d for d, p in enumerate(spec.placements) if _sharded_dim(p) is not None]
        expand = node.target is aten.expand.default
        found: list[tuple[tuple[int, int], Any]] = []
        for assignment, global_out in self._global_outs(sharded, out_local):
            if expand:
                offset = len(out_local) - len(in_global)
                if any(a != _sharded_dim(spec.placements[m]) + offset for a, m in zip(assignment, sharded)):
                    continue
            if not expand and _prod(global_out) != _prod(in_global):
                continue
            new_args = list(args)
            new_args[1] = list(global_out)
            result = None
            try:
                refusal = None if expand else self._view_rule_refusal(node, spec, global_out)
                if refusal is not None:
                    raise refusal
                result = self._propagate(node, tuple(new_args), kwargs)
            except _Violation as v:
                if not errors:
                    errors.append(v)
            except Exception:  # noqa: BLE001, S112 - an impossible candidate shape
                continue
            if result is None and not expand:
                strided = _strided_flatten(spec, global_out)
                if strided is not None:
                    try:
                        self._check_local_val(node, strided, node.meta["val"])
                        result = strided
                    except _Violation:
                        pass
            if result is None or not _is_spec(result):
                continue
            score = (
                sum(isinstance(p, StridedShard) for p in result.placements),
                sum(out_local[d] == 1 for d in assignment),
            )
            found.append((score, result))
        return found

    def _view_rule_refusal(self, node: torch.fx.Node, spec: Any, global_out: Sequence[int]) -> _Violation | None:
        """The violation propagating the view candidate ``global_out`` would end in, read from
        DTensor's own view rule without the full propagation (a schema-cache miss that also runs
        the op on fake tensors: most of a view's candidates on llama3 8x8 end so): the rule wants
        the input in other placements (a hidden redistribution), or keeps them and gives an output
        whose local shape is not the node's (:meth:`_check_local_val`'s rule). None whenever the
        rule says anything else (it raises, or a strided shard is involved): the candidate is then
        propagated in full."""
        from ..seam.dtensor import DTensorSpec, view_groups
        from ..seam.dtensor import view_propagate as propagate_shape_and_sharding

        strict = _STRICT_VIEW.get(node.target)
        if strict is None or any(isinstance(p, StridedShard) for p in spec.placements):
            return None
        in_global = tuple(spec.tensor_meta.shape)
        try:
            rule = view_groups(in_global, tuple(global_out))
            want, out = propagate_shape_and_sharding(spec.placements, in_global, rule, tuple(self.sizes), strict)
        except Exception:  # noqa: BLE001 - DTensor decides, in full
            return None
        if any(isinstance(p, StridedShard) for p in (*want, *out)):
            return None
        if tuple(want) != tuple(spec.placements):
            # as _propagate words it, for the same redistribute schema
            target = DTensorSpec(spec.mesh, tuple(want), tensor_meta=spec.tensor_meta)
            return _Violation(
                "hidden_redistribution",
                "the op's inputs arrive in placements DTensor would have to redistribute first",
                inferred=fmt_spec(spec), expected=fmt_spec(target),
            )
        try:
            self._check_local_val(node, _contiguous_spec(spec, out, global_out), node.meta["val"])
        except _Violation as v:
            return v
        return None

    def _merged_flattens(self, spec: Any, out_local: Sequence[int]) -> list[_Merged]:
        """The readings of a view as a flatten of dims sharded by different mesh dims into one (see
        :class:`_Merged`). Each global output shape whose shards on this rank have the view's
        local shape is tried; none unless two sharded dims flatten. Not from a reading with dims a
        rank holds one index of moved (as :func:`_size1_moves` does for plain views): such a move
        reads a permuted tensor as this one, which the local graph cannot tell apart."""
        if any(isinstance(p, StridedShard) for p in spec.placements):
            return []
        sharded = [m for m, p in enumerate(spec.placements) if _sharded_dim(p) is not None]
        if len({_sharded_dim(spec.placements[m]) for m in sharded}) < 2:
            return []
        in_size = _prod(spec.tensor_meta.shape)
        out: list[_Merged] = []
        for _, global_out in self._global_outs(sharded, out_local):
            if _prod(global_out) != in_size:
                continue
            merged = self._merged_flatten(spec, global_out, out_local)
            if merged is not None and merged not in out:
                out.append(merged)
        return out

    def _merged_flatten(self, spec: Any, global_out: Sequence[int], out_local: Sequence[int]) -> _Merged | None:
        """``spec`` viewed as ``global_out`` when that view flattens dims sharded by different mesh
        dims into one and maps every other dim whole, and the stand-in's shards have the local
        shape ``out_local``; None otherwise."""
        from ..seam.dtensor import Flatten, InputDim, Singleton, view_groups

        in_global = tuple(spec.tensor_meta.shape)
        rule = view_groups(in_global, tuple(global_out))
        mesh_dims_of = {d: tuple(_shard_order(spec, d)) for d in {_sharded_dim(p) for p in spec.placements} - {None}}
        placements: list[Placement] = [p if _sharded_dim(p) is None else Replicate() for p in spec.placements]
        merged: tuple[int, tuple[tuple[int, tuple[int, ...]], ...]] | None = None
        orders: dict[int, tuple[int, ...]] = {}  # output dim -> its mesh dims in order
        for o, dim_spec in enumerate(rule):
            if isinstance(dim_spec, InputDim):
                for m in mesh_dims_of.get(dim_spec.input_dim, ()):
                    placements[m] = Shard(o)
                if dim_spec.input_dim in mesh_dims_of:
                    orders[o] = mesh_dims_of[dim_spec.input_dim]
            elif isinstance(dim_spec, Flatten) and all(isinstance(d, InputDim) for d in dim_spec.input_dims):
                dims = [d.input_dim for d in dim_spec.input_dims]
                sharded = [d for d in dims if d in mesh_dims_of]
                if len(sharded) < 2 or merged is not None:
                    return None  # one sharded dim is DTensor's own flatten (or _strided_flatten's)
                merged = (o, tuple((in_global[d], mesh_dims_of.get(d, ())) for d in dims))
                for d in sharded:
                    for m in mesh_dims_of[d]:
                        placements[m] = Shard(o)
                orders[o] = tuple(sorted(m for d in sharded for m in mesh_dims_of[d]))  # the layout keeps the order
            elif not isinstance(dim_spec, Singleton):
                return None
        if merged is None:
            return None
        stand_in = _contiguous_spec(spec, placements, global_out)
        if any(list(ms) != sorted(ms) for ms in orders.values()):
            # a dim kept whole keeps the order its mesh dims shard it in (a batch split by mesh dims
            # 3 then 2 is another block per rank than by 2 then 3)
            from ..seam.dtensor import DTensorSpec, ShardOrderEntry

            stand_in = DTensorSpec(spec.mesh, stand_in.placements, tensor_meta=stand_in.tensor_meta,
                                   shard_order=tuple(ShardOrderEntry(tensor_dim=o, mesh_dims=ms) for o, ms in sorted(orders.items())))
        if self._local_shape(stand_in) != tuple(out_local):
            return None
        return _Merged(stand_in, merged[0], merged[1])

    def _matmul_merged(self, node: torch.fx.Node, args: Any, kwargs: Any) -> Any:
        """A matmul with an operand of a merged layout (see :class:`_Merged`): two operands of one
        layout contracted along it, or one operand merged on a free dim (a bmm's rows or
        columns), whose output is merged the same way on the matching dim."""
        contracted = _CONTRACTED_DIMS.get(node.target)
        if contracted is None:
            raise _Unknowable(f"{_op_name(node)} of a flatten of dims sharded by different mesh dims")
        a, b = operands = args[:2]
        if any(isinstance(x, _Merged) and x.dim == d for x, d in zip(operands, contracted)):
            if not (isinstance(a, _Merged) and isinstance(b, _Merged) and (a.dim, b.dim) == contracted):
                raise _Violation(
                    "hidden_redistribution",
                    f"{_op_name(node)} contracts a flatten of dims sharded by different mesh dims against another layout",
                )
            if a.layout != b.layout:
                raise _Violation(
                    "hidden_redistribution",
                    f"{_op_name(node)} contracts two flattens whose blocks differ: {list(a.layout)} and {list(b.layout)}",
                )
            return self._propagate(node, (a.spec, b.spec, *args[2:]), kwargs)
        free = _FREE_DIMS[node.target]
        merged = [(i, x) for i, x in enumerate(operands) if isinstance(x, _Merged)]
        if len(merged) != 1 or merged[0][1].dim != free[merged[0][0]]:
            raise _Unknowable(f"{_op_name(node)} of flattens of dims sharded by different mesh dims on its batch or both free dims")
        i, x = merged[0]
        out = self._propagate(node, tuple(o.spec if o is x else o for o in operands) + tuple(args[2:]), kwargs)
        out_dim = free[i]  # bmm [B, m, k] @ [B, k, n] -> [B, m, n]; mm without B
        if not _is_spec(out) or tuple(_shard_order(out, out_dim)) != tuple(_shard_order(x.spec, x.dim)):
            raise _Unknowable(f"{_op_name(node)} moves the shards of a flatten of dims sharded by different mesh dims")
        return _Merged(out, out_dim, x.layout)
