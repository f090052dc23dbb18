"""Dim maps per :class:`Alignment`: how a row's tensor arguments and outputs map onto logical dims.

Each function receives the row, the FX node (for non-tensor arguments such as ``dim`` or the
einsum equation), the bound tensor inputs, the output shapes and the shapes of every list
element (None where an element is not a tensor), and returns ``(maps, out_maps)``: a dim map per
input label and one per output (None where the output is not a tensor), or None when the call
cannot be read (then :func:`bind` returns None and nothing is checked).

Logical dims are the first output's dims ``0..n-1``, then any dim the op sums over. A marked dim
(:class:`DimKind`) must be Replicate. A logical dim absent from an output means that output is a
sum over it: an alignment marks a dim ``WHOLE`` wherever that would not hold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ._model import (
    Alignment,
    ArgSpec,
    Binding,
    BoundArg,
    DimKind,
    DimMapEntry,
    OpRule,
    PartialCombo,
    _flag_holds,
    _is_tensor_node,
    _shape_of,
    argument_value,
)

logger = logging.getLogger(__name__)

__all__ = ["BINDERS", "Raw", "bind"]

WHOLE = DimKind.WHOLE
INDEXED = DimKind.INDEXED
BROADCAST = DimKind.BROADCAST

DimMap = tuple[DimMapEntry, ...]
Maps = tuple[dict[str, DimMap], list[DimMap | None]]
Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Raw:
    """A tensor input of the node matched to a row argument, before its dim map is known."""

    spec_index: int
    label: str
    arg: ArgSpec
    shape: Shape
    element: int | None  # index in a list argument, None for a plain argument


Binder = Callable[[OpRule, torch.fx.Node, list[Raw], tuple[Shape | None, ...], Mapping[str, list[Shape | None]]],
                  Maps | None]


def _by_name(raws: Sequence[Raw], name: str) -> Raw | None:
    return next((r for r in raws if r.arg.name == name), None)


def _norm(dim: Any, ndim: int) -> int | None:
    if not isinstance(dim, int):
        return None
    if ndim == 0:
        return 0 if dim in (0, -1) else None
    if not -ndim <= dim < ndim:
        return None
    return dim % ndim


def _broadcast_map(shape: Sequence[int], target: Sequence[int], ids: Sequence[DimMapEntry] | None = None) -> DimMap:
    """Right-aligned numpy broadcasting of ``shape`` onto ``target`` (logical ids ``ids``)."""
    ids = list(range(len(target))) if ids is None else list(ids)
    offset = len(target) - len(shape)
    entries: list[DimMapEntry] = []
    for i, size in enumerate(shape):
        j = offset + i
        if j < 0:
            entries.append(BROADCAST)  # more dims than the target: cannot happen in aten
        elif size == 1 and target[j] != 1:
            entries.append(BROADCAST)
        else:
            entries.append(ids[j])
    return tuple(entries)


def _outs(out_shapes: tuple[Shape | None, ...], first: DimMap, rest: Callable[[int, Shape], DimMap] | None = None
          ) -> list[DimMap | None]:
    maps: list[DimMap | None] = []
    for i, shape in enumerate(out_shapes):
        if shape is None:
            maps.append(None)
        elif i == 0:
            maps.append(first)
        elif rest is None:
            maps.append(tuple(WHOLE for _ in shape))
        else:
            maps.append(rest(i, shape))
    return maps


def _whole(entries: DimMap, whole: set[int]) -> DimMap:
    return tuple(WHOLE if isinstance(e, int) and e in whole else e for e in entries)


# ---------------------------------------------------------------------------------------------
# Pointwise


def _bind_broadcast(rule: OpRule, node: torch.fx.Node, raws: list[Raw], out_shapes: tuple[Shape | None, ...],
                    lists: Mapping[str, list[Shape | None]]) -> Maps | None:
    out = out_shapes[0]
    if out is None:
        return None
    whole: set[int] = set()
    if rule.whole_dims_arg:
        value = argument_value(node, rule.whole_dims_arg)
        for d in value if isinstance(value, (list, tuple)) else [value]:
            nd = _norm(d, len(out))
            if nd is None:
                return None
            whole.add(nd)
    maps = {r.label: _whole(_broadcast_map(r.shape, out), whole) for r in raws}
    return maps, _outs(out_shapes, _whole(tuple(range(len(out))), whole))


# ---------------------------------------------------------------------------------------------
# Indexing: index_put, index.Tensor, embedding, index_select, gather


def _advanced_layout(self_shape: Shape, index_shapes: Sequence[Shape | None]) -> tuple[list[int | str], Shape]:
    """Where ``self[indices]``'s dims come from: a self dim, or "idx" for the index result dims.

    Advanced indexing replaces the indexed dims of self by the broadcast shape of the index
    tensors, placed where the indexed dims were if they are adjacent, else in front (numpy rule).
    """
    indexed = [d for d, s in enumerate(index_shapes) if s is not None]
    rest = [d for d in range(len(self_shape)) if d not in indexed]
    if not indexed:
        return list(rest), ()
    idx_shape = tuple(torch.broadcast_shapes(*[s for s in index_shapes if s is not None]))
    idx_part: list[int | str] = ["idx"] * len(idx_shape)
    if indexed == list(range(indexed[0], indexed[-1] + 1)):
        layout = [d for d in rest if d < indexed[0]] + idx_part + [d for d in rest if d > indexed[-1]]
    else:
        layout = idx_part + list(rest)
    return layout, idx_shape


def _bind_index_put(rule: OpRule, node: torch.fx.Node, raws: list[Raw], out_shapes: tuple[Shape | None, ...],
                    lists: Mapping[str, list[Shape | None]]) -> Maps | None:
    """``self[indices] = values``: values broadcast onto ``self[indices]``'s shape."""
    self_arg, values_arg = _by_name(raws, "self"), _by_name(raws, "values")
    if self_arg is None or values_arg is None:
        return None
    index_shapes = lists.get("indices", [])
    indexed = {d for d, s in enumerate(index_shapes) if s is not None}
    self_map: DimMap = tuple(INDEXED if d in indexed else d for d in range(len(self_arg.shape)))
    layout, idx_shape = _advanced_layout(self_arg.shape, index_shapes)
    result_ids: list[DimMapEntry] = [INDEXED if e == "idx" else e for e in layout]  # type: ignore[misc]
    result_shape: list[int] = []
    k = 0
    for e in layout:
        if e == "idx":
            result_shape.append(idx_shape[k])
            k += 1
        else:
            result_shape.append(self_arg.shape[e])  # type: ignore[index]
    values_map = _broadcast_map(values_arg.shape, result_shape, result_ids)
    maps: dict[str, DimMap] = {}
    for r in raws:
        if r is self_arg:
            maps[r.label] = self_map
        elif r is values_arg:
            maps[r.label] = values_map
        else:
            maps[r.label] = tuple(INDEXED for _ in r.shape)
    return maps, _outs(out_shapes, self_map)


def _bind_gather(rule: OpRule, node: torch.fx.Node, raws: list[Raw], out_shapes: tuple[Shape | None, ...],
                 lists: Mapping[str, list[Shape | None]]) -> Maps | None:
    """``self[indices]``: self's indexed dims INDEXED; each index tensor broadcast onto the index
    result dims of the output, which it may shard together with the output."""
    self_arg = _by_name(raws, "self")
    out = out_shapes[0]
    if self_arg is None or out is None:
        return None
    index_list = argument_value(node, "indices")
    if any(isinstance(x, torch.fx.Node) and x.meta["val"].dtype in (torch.bool, torch.uint8) for x in index_list or ()):
        return None  # boolean masks: data-dependent output shape
    index_shapes = lists.get("indices", [])
    layout, idx_shape = _advanced_layout(self_arg.shape, index_shapes)
    if len(layout) != len(out):
        return None
    indexed = {d for d, s in enumerate(index_shapes) if s is not None}
    self_map = tuple(INDEXED if d in indexed else layout.index(d) for d in range(len(self_arg.shape)))
    start = layout.index("idx") if "idx" in layout else 0
    idx_ids = list(range(start, start + len(idx_shape)))
    maps: dict[str, DimMap] = {}
    for r in raws:
        if r is self_arg:
            maps[r.label] = self_map
        else:
            maps[r.label] = _broadcast_map(r.shape, idx_shape, idx_ids)
    return maps, _outs(out_shapes, tuple(range(len(out))))


def _bind_embedding(rule: OpRule, node: torch.fx.Node, raws: list[Raw], out_shapes: tuple[Shape | None, ...],
                    lists: Mapping[str, list[Shape | None]]) -> Maps | None:
    """``weight[indices]``: out is ``indices.shape + (D,)``; the vocabulary dim is INDEXED."""
    weight, indices = _by_name(raws, "weight"), _by_name(raws, "indices")
    out = out_shapes[0]
    if weight is None or indices is None or out is None or len(weight.shape) != 2:
        return None
    k = len(indices.shape)
    return {weight.label: (INDEXED, k), indices.label: tuple(range(k))}, _outs(out_shapes, tuple(range(len(out))))


def _bind_embedding_backward(rule: OpRule, node: torch.fx.Node, raws: list[Raw],
                             out_shapes: tuple[Shape | None, ...], lists: Mapping[str, list[Shape | None]]
                             ) -> Maps | None:
    """Rows of grad_output summed into ``[num_weights, D]``: the positions are summed over (an
    output without them is P(sum) when they are sharded), unless ``scale_grad_by_freq`` counts
    them globally."""
    grad, indices = _by_name(raws, "grad_output"), _by_name(raws, "indices")
    out = out_shapes[0]
    if grad is None or indices is None or out is None or len(out) != 2:
        return None
    k = len(indices.shape)
    if grad.shape[:k] != indices.shape or len(grad.shape) != k + 1:
        return None
    by_freq = bool(argument_value(node, "scale_grad_by_freq"))
    positions: DimMap = tuple(WHOLE if by_freq else 2 + i for i in range(k))
    return ({grad.label: positions + (1,), indices.label: positions}, _outs(out_shapes, (INDEXED, 1)))


def _bind_index_select(rule: OpRule, node: torch.fx.Node, raws: list[Raw], out_shapes: tuple[Shape | None, ...],
                       lists: Mapping[str, list[Shape | None]]) -> Maps | None:
    """``self.index_select(dim, index)``: self's dim INDEXED; the 1-D index lays out out's dim."""
    self_arg, index = _by_name(raws, "self"), _by_name(raws, "index")
    out = out_shapes[0]
    if self_arg is None or index is None or out is None:
        return None
    dim = _norm(argument_value(node, "dim"), len(self_arg.shape))
    if dim is None or len(self_arg.shape) == 0:
        return None
    self_map = tuple(INDEXED if d == dim else d for d in range(len(self_arg.shape)))
    index_map: DimMap = (dim,) if len(index.shape) == 1 else ()
    return {self_arg.label: self_map, index.label: index_map}, _outs(out_shapes, tuple(range(len(out))))


def _bind_take_along(rule: OpRule, node: torch.fx.Node, raws: list[Raw], out_shapes: tuple[Shape | None, ...],
                     lists: Mapping[str, list[Shape | None]]) -> Maps | None:
    """``gather(self, dim, index)``: out has index's shape; off ``dim``, self aligns with index
    only where their sizes agree (else index reads a prefix of self: WHOLE)."""
    self_arg, index = _by_name(raws, "self"), _by_name(raws, "index")
    out = out_shapes[0]
    if self_arg is None or index is None or out is None or len(self_arg.shape) != len(index.shape):
        return None
    n = len(index.shape)
    dim = _norm(argument_value(node, "dim"), n)
    if dim is None:
        return None
    whole = {d for d in range(n) if d != dim and self_arg.shape[d] != index.shape[d]}
    ident = _whole(tuple(range(n)), whole)
    self_map = tuple(INDEXED if d == dim else e for d, e in enumerate(ident))
    return {self_arg.label: self_map, index.label: ident}, _outs(out_shapes, ident)


# ---------------------------------------------------------------------------------------------
# Contractions


def _einsum_tokens(spec: str, ndim: int, ell_rank: int) -> list[str] | None:
    if "..." in spec:
        head, _, tail = spec.partition("...")
        n_ell = ndim - len(head) - len(tail)
        if n_ell < 0:
            return None
        ell = [f"#{ell_rank - n_ell + i}" for i in range(n_ell)]
        return list(head) + ell + list(tail)
    if len(spec) != ndim:
        return None
    return list(spec)


def _bind_einsum(rule: OpRule, node: torch.fx.Node, raws: list[Raw], out_shapes: tuple[Shape | None, ...],
                 lists: Mapping[str, list[Shape | None]]) -> Maps | None:
    """Labelled dims: a label in the output is that output dim; a label only in the operands is
    summed over (sharding it in every operand that has it makes the output P(sum))."""
    out = out_shapes[0]
    equation = rule.equation or argument_value(node, "equation")
    if out is None or not isinstance(equation, str):
        return None
    operands = sorted(raws, key=lambda r: (r.arg.position, r.element or 0))
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    specs = lhs.split(",")
    if len(specs) != len(operands):
        return None
    ell_rank = max((len(r.shape) - len(s.replace("...", "")) for r, s in zip(operands, specs) if "..." in s), default=0)
    tokens = [_einsum_tokens(s, len(r.shape), ell_rank) for r, s in zip(operands, specs)]
    if any(t is None or len(set(t)) != len(t) for t in tokens):
        return None  # malformed, or a repeated label (a diagonal): not read
    if not arrow:
        counts: dict[str, int] = {}
        for t in tokens:
            for label in t:  # type: ignore[union-attr]
                counts[label] = counts.get(label, 0) + 1
        rhs_tokens = [f"#{i}" for i in range(ell_rank)] + sorted(
            label for label, c in counts.items() if c == 1 and not label.startswith("#"))
    else:
        rhs_tokens = _einsum_tokens(rhs, len(out), ell_rank)  # type: ignore[assignment]
        if rhs_tokens is None or len(set(rhs_tokens)) != len(rhs_tokens):
            return None
    ids: dict[str, int] = {label: i for i, label in enumerate(rhs_tokens)}
    sizes: dict[str, int] = {}
    for r, t in zip(operands, tokens):
        for label, size in zip(t, r.shape):  # type: ignore[arg-type]
            if label not in ids:
                ids[label] = len(ids)
            sizes[label] = max(sizes.get(label, 1), size)
    maps: dict[str, DimMap] = {}
    for r, t in zip(operands, tokens):
        maps[r.label] = tuple(
            BROADCAST if size == 1 and sizes[label] != 1 else ids[label] for label, size in zip(t, r.shape)  # type: ignore[arg-type]
        )
    return maps, _outs(out_shapes, tuple(range(len(out))))


# ---------------------------------------------------------------------------------------------
# cat / stack / scatters


def _bind_cat(rule: OpRule, node: torch.fx.Node, raws: list[Raw], out_shapes: tuple[Shape | None, ...],
              lists: Mapping[str, list[Shape | None]]) -> Maps | None:
    """Every dim aligned except the cat dim, which the op needs whole."""
    out = out_shapes[0]
    if out is None or not out:
        return None
    dim = _norm(argument_value(node, "dim"), len(out))
    if dim is None:
        return None
    ident = _whole(tuple(range(len(out))), {dim})
    maps: dict[str, DimMap] = {}
    for r in raws:
        if len(r.shape) != len(out):  # legacy empty 1-D input, skipped by cat
            maps[r.label] = tuple(WHOLE for _ in r.shape)
        else:
            maps[r.label] = ident
    return maps, _outs(out_shapes, ident)


def _bind_stack(rule: OpRule, node: torch.fx.Node, raws: list[Raw], out_shapes: tuple[Shape | None, ...],
                lists: Mapping[str, list[Shape | None]]) -> Maps | None:
    """Input dim d is output dim d (d < dim) or d+1; the new dim is whole."""
    out = out_shapes[0]
    if out is None or not out:
        return None
    dim = _norm(argument_value(node, "dim"), len(out))
    if dim is None:
        return None
    maps = {r.label: tuple(d if d < dim else d + 1 for d in range(len(r.shape))) for r in raws}
    return maps, _outs(out_shapes, _whole(tuple(range(len(out))), {dim}))


def _bind_slice_scatter(rule: OpRule, node: torch.fx.Node, raws: list[Raw], out_shapes: tuple[Shape | None, ...],
                        lists: Mapping[str, list[Shape | None]]) -> Maps | None:
    self_arg, src = _by_name(raws, "self"), _by_name(raws, "src")
    if self_arg is None or src is None or len(src.shape) != len(self_arg.shape) or not self_arg.shape:
        return None
    dim = _norm(argument_value(node, "dim"), len(self_arg.shape))
    if dim is None:
        return None
    ident = _whole(tuple(range(len(self_arg.shape))), {dim})
    return {self_arg.label: ident, src.label: ident}, _outs(out_shapes, ident)


def _bind_select_scatter(rule: OpRule, node: torch.fx.Node, raws: list[Raw], out_shapes: tuple[Shape | None, ...],
                         lists: Mapping[str, list[Shape | None]]) -> Maps | None:
    self_arg, src = _by_name(raws, "self"), _by_name(raws, "src")
    if self_arg is None or src is None or len(src.shape) + 1 != len(self_arg.shape):
        return None
    dim = _norm(argument_value(node, "dim"), len(self_arg.shape))
    if dim is None:
        return None
    ident = _whole(tuple(range(len(self_arg.shape))), {dim})
    src_map = tuple(d for d in range(len(self_arg.shape)) if d != dim)
    return {self_arg.label: ident, src.label: src_map}, _outs(out_shapes, ident)


def _bind_scatter(rule: OpRule, node: torch.fx.Node, raws: list[Raw], out_shapes: tuple[Shape | None, ...],
                  lists: Mapping[str, list[Shape | None]]) -> Maps | None:
    """``scatter(self, dim, index, src)``: off ``dim``, self/index/src align only where all three
    sizes agree (index may cover a prefix of self, src may be larger than index: WHOLE)."""
    self_arg, index, src = _by_name(raws, "self"), _by_name(raws, "index"), _by_name(raws, "src")
    if self_arg is None or index is None:
        return None
    n = len(self_arg.shape)
    if len(index.shape) != n or (src is not None and len(src.shape) != n):
        return None
    if n == 0:
        return {r.label: () for r in raws}, _outs(out_shapes, ())
    dim = _norm(argument_value(node, "dim"), n)
    if dim is None:
        return None
    whole = {dim} | {
        d for d in range(n)
        if d != dim and (index.shape[d] != self_arg.shape[d] or (src is not None and src.shape[d] != index.shape[d]))
    }
    ident = _whole(tuple(range(n)), whole)
    along = tuple(INDEXED if d == dim else e for d, e in enumerate(ident))
    maps = {self_arg.label: ident, index.label: along}
    if src is not None:
        maps[src.label] = along
    return maps, _outs(out_shapes, ident)


def _bind_index_scatter(rule: OpRule, node: torch.fx.Node, raws: list[Raw], out_shapes: tuple[Shape | None, ...],
                        lists: Mapping[str, list[Shape | None]]) -> Maps | None:
    """``index_add/index_copy(self, dim, index, source)``: source aligned with self off ``dim``."""
    self_arg, index, source = _by_name(raws, "self"), _by_name(raws, "index"), _by_name(raws, "source")
    if self_arg is None or index is None or source is None:
        return None
    n = len(self_arg.shape)
    if n == 0 or len(source.shape) != n:
        return None
    dim = _norm(argument_value(node, "dim"), n)
    if dim is None:
        return None
    ident = _whole(tuple(range(n)), {dim})
    source_map = tuple(INDEXED if d == dim else d for d in range(n))
    return ({self_arg.label: ident, source.label: source_map, index.label: tuple(INDEXED for _ in index.shape)},
            _outs(out_shapes, ident))


# ---------------------------------------------------------------------------------------------
# Normalization and attention


def _leading(shape: Shape, axis: int) -> DimMap:
    return tuple(d if d < axis else (BROADCAST if size == 1 else WHOLE) for d, size in enumerate(shape))


def _bind_layer_norm(rule: OpRule, node: torch.fx.Node, raws: list[Raw], out_shapes: tuple[Shape | None, ...],
                     lists: Mapping[str, list[Shape | None]]) -> Maps | None:
    """Leading dims aligned (also with mean/rstd); the normalized dims and weight/bias whole."""
    x = _by_name(raws, "input")
    normalized = argument_value(node, "normalized_shape")
    if x is None or not isinstance(normalized, (list, tuple)):
        return None
    axis = len(x.shape) - len(normalized)
    if axis < 0:
        return None
    x_map = tuple(d if d < axis else WHOLE for d in range(len(x.shape)))
    maps: dict[str, DimMap] = {}
    for r in raws:
        if r.arg.name in ("input", "grad_out"):
            maps[r.label] = x_map
        elif r.arg.name in ("mean", "rstd"):
            maps[r.label] = _leading(r.shape, axis)
        else:  # weight, bias
            maps[r.label] = tuple(WHOLE for _ in r.shape)
    if rule.alignment is Alignment.LAYER_NORM:
        return maps, _outs(out_shapes, x_map, lambda i, shape: _leading(shape, axis))
    # backward: grad_input like input; grad_weight/grad_bias have only normalized dims, so they are
    # sums over the leading dims
    return maps, _outs(out_shapes, x_map, lambda i, shape: tuple(WHOLE for _ in shape))


def _bind_attention(rule: OpRule, node: torch.fx.Node, raws: list[Raw], out_shapes: tuple[Shape | None, ...],
                    lists: Mapping[str, list[Shape | None]]) -> Maps | None:
    """sdpa on ``[B, H, L, E]``: batch and heads aligned (heads only when key/value have as many);
    the query sequence aligned when not causal (a causal mask needs global positions); the key
    sequence and the head dims whole (softmax and the score contraction are not linear)."""
    q, k, v = _by_name(raws, "query"), _by_name(raws, "key"), _by_name(raws, "value")
    if q is None or k is None or v is None or any(len(t.shape) != 4 for t in (q, k, v)):
        return None
    causal = bool(argument_value(node, "is_causal"))
    batch, heads = q.shape[0], q.shape[1]
    heads_ok = k.shape[1] == heads and v.shape[1] == heads
    h: DimMapEntry = 1 if heads_ok else WHOLE
    seq: DimMapEntry = WHOLE if causal else 2

    def b_of(shape: Shape) -> DimMapEntry:
        return 0 if shape[0] == batch else (BROADCAST if shape[0] == 1 else WHOLE)

    def q_like(shape: Shape) -> DimMap:
        return (b_of(shape), h, seq) + tuple(WHOLE for _ in shape[3:])

    def kv_like(shape: Shape) -> DimMap:
        return (b_of(shape), h) + tuple(WHOLE for _ in shape[2:])

    maps: dict[str, DimMap] = {}
    for r in raws:
        if r.arg.name in ("key", "value"):
            maps[r.label] = kv_like(r.shape)
        elif len(r.shape) < 3:
            return None
        else:  # query, grad_out, out, logsumexp
            maps[r.label] = q_like(r.shape)
    if rule.alignment is Alignment.ATTENTION:
        return maps, _outs(out_shapes, q_like(out_shapes[0] or (0, 0, 0, 0)), lambda i, shape: q_like(shape))
    # backward: grad_query like query; grad_key/grad_value sum over the query sequence
    return maps, _outs(out_shapes, q_like(out_shapes[0] or (0, 0, 0, 0)), lambda i, shape: kv_like(shape))


BINDERS: dict[Alignment, Binder] = {
    Alignment.BROADCAST: _bind_broadcast,
    Alignment.INDEX_PUT: _bind_index_put,
    Alignment.GATHER: _bind_gather,
    Alignment.INDEX_SELECT: _bind_index_select,
    Alignment.TAKE_ALONG: _bind_take_along,
    Alignment.EMBEDDING: _bind_embedding,
    Alignment.EMBEDDING_BACKWARD: _bind_embedding_backward,
    Alignment.EINSUM: _bind_einsum,
    Alignment.CAT: _bind_cat,
    Alignment.STACK: _bind_stack,
    Alignment.SLICE_SCATTER: _bind_slice_scatter,
    Alignment.SELECT_SCATTER: _bind_select_scatter,
    Alignment.SCATTER: _bind_scatter,
    Alignment.INDEX_SCATTER: _bind_index_scatter,
    Alignment.LAYER_NORM: _bind_layer_norm,
    Alignment.LAYER_NORM_BACKWARD: _bind_layer_norm,
    Alignment.ATTENTION: _bind_attention,
    Alignment.ATTENTION_BACKWARD: _bind_attention,
}

# The argument names each alignment reads (checked when a row is registered), and which of them
# must be index tensors.
REQUIRED_ARGS: dict[Alignment, tuple[tuple[str, ...], tuple[str, ...]]] = {
    Alignment.BROADCAST: ((), ()),
    Alignment.INDEX_PUT: (("self", "indices", "values"), ("indices",)),
    Alignment.GATHER: (("self", "indices"), ("indices",)),
    Alignment.INDEX_SELECT: (("self", "index"), ("index",)),
    Alignment.TAKE_ALONG: (("self", "index"), ("index",)),
    Alignment.EMBEDDING: (("weight", "indices"), ("indices",)),
    Alignment.EMBEDDING_BACKWARD: (("grad_output", "indices"), ("indices",)),
    Alignment.EINSUM: ((), ()),
    Alignment.CAT: (("tensors",), ()),
    Alignment.STACK: (("tensors",), ()),
    Alignment.SLICE_SCATTER: (("self", "src"), ()),
    Alignment.SELECT_SCATTER: (("self", "src"), ()),
    Alignment.SCATTER: (("self", "index"), ("index",)),
    Alignment.INDEX_SCATTER: (("self", "index", "source"), ("index",)),
    Alignment.LAYER_NORM: (("input",), ()),
    Alignment.LAYER_NORM_BACKWARD: (("grad_out", "input", "mean", "rstd"), ()),
    Alignment.ATTENTION: (("query", "key", "value"), ()),
    Alignment.ATTENTION_BACKWARD: (("grad_out", "query", "key", "value", "out", "logsumexp"), ()),
}

# Non-tensor schema arguments each alignment reads.
READS: dict[Alignment, tuple[str, ...]] = {
    Alignment.EINSUM: (),  # "equation", unless the row fixes one
    Alignment.CAT: ("dim",),
    Alignment.STACK: ("dim",),
    Alignment.SLICE_SCATTER: ("dim",),
    Alignment.SELECT_SCATTER: ("dim",),
    Alignment.SCATTER: ("dim",),
    Alignment.INDEX_SCATTER: ("dim",),
    Alignment.INDEX_SELECT: ("dim",),
    Alignment.TAKE_ALONG: ("dim",),
    Alignment.EMBEDDING_BACKWARD: ("scale_grad_by_freq",),
    Alignment.LAYER_NORM: ("normalized_shape",),
    Alignment.LAYER_NORM_BACKWARD: ("normalized_shape",),
    Alignment.ATTENTION: ("is_causal",),
    Alignment.ATTENTION_BACKWARD: ("is_causal",),
}


# ---------------------------------------------------------------------------------------------
# Binding a row to a node


def bind(
    rule: OpRule, node: torch.fx.Node, is_input: Callable[[torch.fx.Node], bool] = _is_tensor_node
) -> Binding | None:
    """Bind ``rule`` to ``node`` (its target must be ``rule.op``).

    ``is_input`` says which argument Nodes own a slot in the strategy's ``input_specs``
    (autoparallel: the nodes it has strategies for); by default, tensor-valued nodes.

    Returns None when there is nothing to check: the node has no tensor output, the row's
    alignment cannot read this call (e.g. an einsum equation with a repeated label), or it lacks
    the arguments the alignment needs.
    """
    out_val = node.meta.get("val")
    if isinstance(out_val, torch.Tensor):
        out_shapes: tuple[tuple[int, ...] | None, ...] = (_shape_of(out_val),)
    elif isinstance(out_val, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in out_val):
        out_shapes = tuple(_shape_of(v) for v in out_val)
    else:
        return None
    # input_specs order: tensor-valued Nodes of the flattened positional args (autoparallel's
    # all_input_nodes), so count them in that order.
    flat_positions: list[tuple[int, int | None]] = []  # (arg position, list element or None)
    for pos, a in enumerate(node.args):
        if isinstance(a, (list, tuple)):
            for k, elem in enumerate(a):
                if isinstance(elem, torch.fx.Node) and is_input(elem):
                    flat_positions.append((pos, k))
        elif isinstance(a, torch.fx.Node) and is_input(a):
            flat_positions.append((pos, None))
    spec_index = {fp: i for i, fp in enumerate(flat_positions)}

    raws: list[Raw] = []
    scalar_operand = False
    list_shapes: dict[str, list[tuple[int, ...] | None]] = {}
    for a in rule.args:
        if a.position >= len(node.args):
            continue
        value = node.args[a.position]
        if isinstance(value, (list, tuple)):
            shapes = list_shapes.setdefault(a.name, [])
            for k, elem in enumerate(value):
                shape = _shape_of(elem.meta.get("val")) if isinstance(elem, torch.fx.Node) else None
                shapes.append(shape)
                if shape is None or (a.position, k) not in spec_index:
                    continue
                raws.append(Raw(spec_index[(a.position, k)], f"{a.name}[{k}]", a, shape, k))
        elif _is_tensor_node(value) and (a.position, None) in spec_index:
            shape = tuple(int(s) for s in value.meta["val"].shape)
            raws.append(Raw(spec_index[(a.position, None)], a.name, a, shape, None))
        elif isinstance(value, (int, float, bool, complex)) and a.partial:
            scalar_operand = True

    maps = BINDERS[rule.alignment](rule, node, raws, out_shapes, list_shapes)
    if maps is None:
        return None
    arg_maps, out_maps = maps
    mapped = [BoundArg(r.spec_index, r.label, r.arg, r.shape, tuple(arg_maps[r.label])) for r in raws]

    if rule.partial_only_if is not None and not _flag_holds(rule.partial_only_if, node):
        active: tuple[PartialCombo, ...] = ()
    else:
        active = tuple(c for c in rule.combos if _flag_holds(c.only_if, node))
    first = next((m for m in out_maps if m is not None), ())
    return Binding(
        rule=rule,
        args=tuple(sorted(mapped, key=lambda b: b.spec_index)),
        out_shape=out_shapes[0] or (),
        partial_allowed=bool(active),
        scalar_operand=scalar_operand,
        num_inputs=len(flat_positions),
        out_dim_map=tuple(first),
        out_dim_maps=tuple(None if m is None else tuple(m) for m in out_maps),
        out_shapes=out_shapes,
        active_combos=active,
    )
