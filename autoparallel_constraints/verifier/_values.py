"""The abstract values the verifier gives tensors (a DTensor spec, a fill, a gathered or chunked
tensor, several readings of one view, a merged flatten, unknown) and the small helpers every
concern shares.
"""

from __future__ import annotations

import itertools
import logging
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.fx
from torch.distributed.tensor.placement_types import Placement, Shard

from ..seam.dtensor import StridedShard
from ..seam.tracing import OpOverload, schema_of, tree_flatten
from ._mesh import _layout_dims

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


logger = logging.getLogger(__name__)

__all__ = ["aten", "c10d"]

aten = torch.ops.aten
c10d = torch.ops._c10d_functional


# ---------------------------------------------------------------------------------------------
# Abstract values


@dataclass(frozen=True, slots=True)
class _Fill:
    """A tensor of one repeated value (a factory op): valid under any placement; ``value`` None
    when unknown (then not valid as Partial)."""

    local_shape: tuple[int, ...]
    value: float | None
    dtype: torch.dtype = torch.float32


@dataclass(frozen=True, slots=True)
class _Unknown:
    reason: str


@dataclass(frozen=True, slots=True)
class _Stacked:
    """all_gather of a tensor not sharded on dim 0: the group's shards stacked on dim 0."""

    spec: Any  # DTensorSpec of the gathered input
    dims: tuple[int, ...]  # mesh dims gathered
    piece: int | None = None  # set for one chunk of the stack


@dataclass(frozen=True, slots=True)
class _Gathered:
    """A dim-0 all_gather's result: replicated on ``dims`` (``spec``), and remembered as gathered, so
    that chunking it back into the ranks' shards and concatenating them along another dim (which
    permutes the data) is seen."""

    spec: Any
    dims: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _Chunks:
    """``split``/``chunk`` of a tensor that is not a rank slice: the pieces along ``dim``."""

    spec: Any
    dim: int
    count: int
    piece: int | None = None


@dataclass(frozen=True, slots=True)
class _Restacked:
    """``cat`` along dim 0 of all chunks of ``spec`` along ``dim``: ready for reduce_scatter / all_to_all."""

    spec: Any
    dim: int
    count: int


@dataclass(frozen=True, slots=True)
class _Readings:
    """Several global readings of one local tensor, none ruled out yet: a view whose sharded dim
    ends up local size 1 (``[4, 16, 64](S(2)) -> [4, 16, 1, 16]`` is a head dim sharded down to
    one head per rank, ``[4, 16, 4, 16](S(2))``, or the feature dim still sharded,
    ``[4, 16, 1, 64](S(3))``). The same bytes on every rank; later ops keep the readings they
    accept, and only when none is accepted is there a violation."""

    values: tuple[Any, ...]


# combinations of readings tried per node: 16 left out the one the plan meant on torchtitan's
# Llama3 (2 layers, static shapes, 2x2: every local shape of batch 8 x seq 64 reads several ways);
# a node whose search was cut cannot prove a mismatch (``_Verifier.partial``)
_MAX_READINGS = 64
_MAX_ORDERED = 4096  # up to this many combinations are ordered before the first _MAX_READINGS are tried


def _reading_combos(choices: Sequence[Sequence[Any]]) -> tuple[list[tuple[Any, ...]], int]:
    """The combinations of the inputs' readings a node tries, and how many there are in all.

    Inputs read the same way are tried first: the same placements on every ambiguous input (a
    batch sharded on every input of a cat, say) before mixed ones, each group plainest first
    (the readings' own order). Without this a node with inputs of 2, 4 and 4 readings tried the
    first 16 of 32 in product order and never the one that was meant, the last of each (a Mamba2
    backward's cat on 2x2, local batch 1). Only the first :data:`_MAX_READINGS` are tried; the
    caller says "unknown", not "violation", when none of those is accepted and some were left out.
    """
    total = math.prod(len(c) for c in choices)
    if total > _MAX_ORDERED:
        return list(itertools.islice(itertools.product(*choices), _MAX_READINGS)), total
    kinds = [[tuple(getattr(v, "placements", (type(v).__name__,))) for v in c] for c in choices]

    def key(indices: tuple[int, ...]) -> tuple[int, int]:
        return len({kinds[i][k] for i, k in enumerate(indices)}), sum(indices)

    # sorted() is stable: ties keep product order
    ordered = sorted(itertools.product(*(range(len(c)) for c in choices)), key=key)
    return [tuple(choices[i][k] for i, k in enumerate(indices)) for indices in ordered[:_MAX_READINGS]], total


@dataclass(frozen=True, slots=True)
class _Merged:
    """A view's output whose dim ``dim`` flattens input dims sharded by different mesh dims (an
    einsum's bmm operand: ``[48, 8(S), 8(S)] -> [48, 64]``). Each rank holds the product of its
    blocks, which no DTensor placement names. ``layout`` is the flattened dims, outer first, as
    (global size, mesh dims sharding it in order); ``spec`` stands in for it with ``dim`` plainly
    sharded by the same mesh dims: the same count per rank, a different index set. Contracting two
    operands of the same ``layout`` along ``dim`` sums the same products on every rank as the
    stand-in does (a permutation of the contracted index, applied to both), so there, and only
    there, the stand-in is exact. A matmul whose other operand leaves ``dim`` a free dim (a bmm's
    rows or columns) maps each row to its own output row, so the output is merged the same way;
    a view that unflattens ``dim`` reads ``_orders._unmerged``, the value before the flatten."""

    spec: Any
    dim: int
    layout: tuple[tuple[int, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class _Summed:
    """A sum-reduction over ``dims`` of a tensor some of whose ``dims`` are not ``Partial("sum")``
    but ``Partial("avg")`` or replicated (a replicated tensor *is* a valid ``Partial("avg")``: its
    partition is the identity): every rank holds ``scale`` times the reduced value ``spec``. DTensor
    reduces such mixes on a flattened mesh this way (``_redistribute``: the sum, then
    ``/ avg_scale``), so only a division by exactly ``scale`` gives ``spec``; any other use is
    ``scale`` times the value, a violation."""

    spec: Any  # the reduced value: replicated (all_reduce) or sharded (reduce_scatter) on dims
    dims: tuple[int, ...]
    scale: int
    node: str  # the collective
    op: str  # its op name, e.g. reduce_scatter_tensor
    source: Any  # the spec it reduced


@dataclass(frozen=True, slots=True)
class _Mesh:
    dims: tuple[tuple[int, ...], ...]  # per dim of this (sub/flattened) mesh: the root mesh dims it spans


@dataclass(frozen=True, slots=True)
class _Group:
    dims: tuple[int, ...]


_SCALAR = object()  # a Python/Sym scalar or other non-tensor value

_PASS_THROUGH = {
    c10d.wait_tensor.default,
    aten.clone.default,
    aten.contiguous.default,
    aten.alias.default,
    aten.detach.default,
    aten.lift_fresh_copy.default,
}
_FACTORY = {
    aten.full.default: 1,
    aten.zeros.default: 0.0,
    aten.ones.default: 1.0,
    aten.empty.memory_format: None,
    aten.empty_strided.default: None,
}
_NEW_FACTORY = {
    aten.new_zeros.default: 0.0,
    aten.new_ones.default: 1.0,
    aten.new_empty.default: None,
    aten.new_full.default: 2,
    aten.new_empty_strided.default: None,
}
_SPLITS = {aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default}
_DIVS = {aten.div.Tensor, aten.div.Scalar}
_CASTS = {torch.ops.prims.convert_element_type.default, aten._to_copy.default}
# DTensor's view rules, by op: strict (refuse a redistribution) or not (reshape may redistribute)
_STRICT_VIEW = {aten.view.default: True, aten._unsafe_view.default: True, aten.reshape.default: False}
_VIEW_SHAPE_ARG = {
    aten.view.default,
    aten.reshape.default,
    aten._unsafe_view.default,
    aten.expand.default,
}


class _Unknowable(Exception):
    """Raised where a value cannot be placed (the node becomes ``unknown`` with this reason)."""


class _Violation(Exception):
    def __init__(self, kind: str, reason: str, *, inferred: str = "-", expected: str = "-") -> None:
        super().__init__(reason)
        self.kind, self.reason, self.inferred, self.expected = kind, reason, inferred, expected


@dataclass(frozen=True, slots=True, eq=False)
class _Const:
    """A constant tensor of the graph (``get_attr``): replicated on every rank."""

    tensor: torch.Tensor

    def spec_with_meta(self) -> torch.Tensor:
        return self.tensor

    def mesh_dims(self, mesh: DeviceMesh) -> tuple[int, ...] | None:
        return _layout_dims(self.tensor, mesh)


def _prod(xs: Any) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def _unique(xs: Any) -> list[Any]:
    out: list[Any] = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


def _contiguous_stride(shape: Sequence[int]) -> tuple[int, ...]:
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(stride))


def _is_spec(x: Any) -> bool:
    return type(x).__name__ == "DTensorSpec"


def _even_local_shape(shape: Sequence[Any], placements: Sequence[Placement], sizes: Sequence[int]) -> tuple[int, ...] | None:
    """The local shape of a tensor of global ``shape`` when every sharded dim splits evenly: each
    dim divided by the sizes of the mesh dims sharding it. Even means divisible by those sizes
    times every strided shard's split factor, so each step of the split is even whatever its
    order, and every rank holds the same shape. None when some dim does not split so."""
    divisor = [1] * len(shape)
    factor = [1] * len(shape)
    for m, p in enumerate(placements):
        d = _sharded_dim(p)
        if d is None:
            continue
        divisor[d] *= sizes[m]
        factor[d] *= getattr(p, "split_factor", 1)
    out = []
    for d, size in enumerate(shape):
        if not isinstance(size, int) or size % (divisor[d] * factor[d]):
            return None
        out.append(size // divisor[d])
    return tuple(out)


def _sharded_dim(p: Placement) -> int | None:
    if isinstance(p, (Shard, StridedShard)):
        return p.dim
    return None


def _is_tensor(node: torch.fx.Node) -> bool:
    return isinstance(node.meta.get("val"), torch.Tensor)


def _returns_tensors(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in val)


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, OpOverload):
        return schema_of(target).name.split("::")[-1]
    return getattr(target, "__name__", str(target))


def _is_view_like(node: torch.fx.Node) -> bool:
    return node.target in _VIEW_SHAPE_ARG or node.target in (
        aten.permute.default, aten.unsqueeze.default, aten.squeeze.dim, aten.t.default, aten.transpose.int,
        aten.slice.Tensor, aten.select.int,
    )


def _is_unary(node: torch.fx.Node) -> bool:
    flat = [a for a in tree_flatten((node.args, node.kwargs))[0] if isinstance(a, torch.fx.Node)]
    return len(flat) == 1


def _concrete(shape: Any) -> tuple[int, ...]:
    out = []
    for s in shape:
        try:
            out.append(int(s))
        except Exception:  # noqa: BLE001 - unbacked: unknown here
            out.append(-1)
    return tuple(out)


_PY_OPS = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg, operator.truediv}


def _scalar_value(node: torch.fx.Node, args: Any) -> Any:
    """A non-tensor node's value where it is known: its traced int, or Python arithmetic on known
    ints (a graph edited after tracing may carry no ``val``); ``_SCALAR`` otherwise."""
    import sympy

    if node.target in _PY_OPS and all(
        isinstance(a, (int, float, sympy.Expr)) and not isinstance(a, bool) for a in args
    ):
        return node.target(*args)  # ints, or expressions of rank coordinates (see _rank_slice)
    clamp = {torch.sym_min: (min, sympy.Min), torch.sym_max: (max, sympy.Max)}.get(node.target)
    if clamp is not None and len(args) == 2 and all(
        isinstance(a, (int, sympy.Expr)) and not isinstance(a, bool) for a in args
    ):
        # torch >= 2.15 clamps a rank's chunk bounds: sym_min(chunk * coord, size) (see _drop_clamps)
        return clamp[0](args) if all(isinstance(a, int) for a in args) else clamp[1](*args)
    if node.target is torch.sym_ite and len(args) == 3:
        # a rank's chunk end: sym_ite(coord == last, size - ceil, ceil); on an even split both
        # branches are the same value, so the condition on the rank does not matter
        _, a, b = args
        if all(isinstance(v, (int, sympy.Expr)) and not isinstance(v, bool) for v in (a, b)) and sympy.simplify(
            sympy.sympify(a) - sympy.sympify(b)
        ) == 0:
            return a
    val = node.meta.get("val")
    if isinstance(val, (bool, int, float)):
        return val
    if isinstance(val, torch.SymInt):
        hint = val.node.hint
        if hint is not None and not val.node.expr.free_symbols:
            return int(hint)
    return _SCALAR


def _as_expr(value: Any) -> Any:
    """An int or a sympy expression of rank coordinates as a sympy expression, else None."""
    import sympy

    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return sympy.Integer(value)
    if isinstance(value, sympy.Expr):
        return value
    return None


def _drop_clamps(expr: Any, coords: dict[Any, int], sizes: Sequence[int]) -> Any:
    """``expr`` with each ``Min``/``Max`` of terms linear in rank coordinates replaced by the
    argument that is the least/greatest on every rank (coordinate of mesh dim ``d`` in
    ``0..sizes[d] - 1``). torch >= 2.15 traces a rank's chunk bounds clamped to the dim size,
    ``sym_min(chunk * coord, size)``, which an even split never reaches; a clamp that some rank
    reaches (an uneven split) stays, and so does anything not linear."""
    import sympy

    def span(e: Any) -> tuple[int, int] | None:
        terms = _linear_terms(e, coords)
        if terms is None:
            return None
        coefs, const = terms
        reach = [c * (sizes[d] - 1) for d, c in coefs.items()]
        return const + sum(min(0, r) for r in reach), const + sum(max(0, r) for r in reach)

    def resolve(e: Any) -> Any:
        if not e.args:
            return e
        args = [resolve(a) for a in e.args]
        if isinstance(e, (sympy.Min, sympy.Max)):
            spans = [span(a) for a in args]
            if all(s is not None for s in spans):
                for i, (a, s) in enumerate(zip(args, spans)):
                    others = [t for j, t in enumerate(spans) if j != i]
                    if isinstance(e, sympy.Min) and all(s[1] <= t[0] for t in others):
                        return a
                    if isinstance(e, sympy.Max) and all(s[0] >= t[1] for t in others):
                        return a
        return e.func(*args)

    return resolve(expr)


def _linear_terms(expr: Any, coords: dict[Any, int]) -> tuple[dict[int, int], int] | None:
    import sympy

    expr = sympy.expand(expr)
    syms = [s for s in expr.free_symbols if s in coords]
    if len(syms) != len(expr.free_symbols):
        return None
    coefs: dict[int, int] = {}
    for s in syms:
        c = expr.coeff(s)
        if not c.is_Integer:
            return None
        coefs[coords[s]] = coefs.get(coords[s], 0) + int(c)
    const = expr.subs({s: 0 for s in syms})
    if not const.is_Integer:
        return None
    return coefs, int(const)


def _contiguous_spec(spec: Any, placements: Sequence[Placement], shape: Sequence[int]) -> Any:
    """A spec on ``spec``'s mesh and dtype with ``placements`` over a contiguous tensor of global
    ``shape``: the stand-in a view's candidate output is checked as."""
    from ..seam.dtensor import DTensorSpec, TensorMeta

    size = torch.Size(shape)
    return DTensorSpec(spec.mesh, tuple(placements),
                       tensor_meta=TensorMeta(size, _contiguous_stride(size), spec.tensor_meta.dtype))


def _as_dtype(spec: Any, dtype: torch.dtype) -> Any:
    """``spec`` holding ``dtype`` (the graph is the authority on dtypes)."""
    from ..seam.dtensor import DTensorSpec, TensorMeta

    meta = spec.tensor_meta
    if meta is None or meta.dtype == dtype:
        return spec
    return DTensorSpec(spec.mesh, spec.placements, tensor_meta=TensorMeta(meta.shape, meta.stride, dtype),
                       shard_order=spec.shard_order)


def _specs_differ(have: Sequence[Any], want: Sequence[Any]) -> bool:
    if len(have) != len(want):
        return True
    return any(not _same_layout(a, b) for a, b in zip(have, want))


def _same_layout(a: Any, b: Any) -> bool:
    """Same placements (and, where a tensor dim is sharded by several mesh dims, same order)."""
    if tuple(a.placements) == tuple(b.placements):
        oa = {e.tensor_dim: tuple(e.mesh_dims) for e in (a.shard_order or ())}
        ob = {e.tensor_dim: tuple(e.mesh_dims) for e in (b.shard_order or ())}
        return oa == ob or not any(len(v) > 1 for v in list(oa.values()) + list(ob.values()))
    return False


def _fetch_attr(gm: torch.fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
