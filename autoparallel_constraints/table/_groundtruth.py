"""Ground truth for the compatibility table: is every combination a row calls co-sharded exact?

For each row, sampled calls of its op (broadcasting, size-1, 0-d and uneven dims; duplicate
indices where the op accumulates) are run on every simulated rank under torch's
``LocalTensorMode`` with each tensor laid out by a placement combination, and the per-rank
results are reassembled by the output placements and compared with the op on the global tensors.

* Replicate and Shard inputs are cut from the global tensor (``torch.chunk`` semantics, mesh dims
  in order, as DTensor does); a Partial input gets random per-rank pieces that reduce to the
  global tensor (integer-valued float64, so sums and averages are exact; for max/min one rank
  holds the value and the others less/more; products of ±1/±2 factors), so a wrong combination
  cannot pass by symmetry. Each case is evaluated on two value draws (three in the full sweep).
* The output is reassembled on every rank (Replicate: the rank's own piece; Shard: gathered;
  Partial: reduced) and must equal the global result there; an op that raises on its shards
  is wrong.
* 1-D mesh ``(2,)``: every placement combination of the inputs and outputs when there are few
  (else every combination the row could accept, plus random ones). 2-D meshes ``(2, 2)`` and
  ``(2, 4)``: every pair of 1-D columns the row accepts, plus pairs of numerically right columns
  and random pairs.

A combination the row calls co-sharded but computes a wrong result is a **false co-sharded**: a
bug in the table. A combination that is right but the row rejects is a **missed opportunity**:
reported per row, not an error (the table is conservative on purpose).

Usage::

    python -m autoparallel_constraints groundtruth            # the CI sample
    python -m autoparallel_constraints groundtruth --full     # the larger sweep
    python -m autoparallel_constraints groundtruth --rows add,index_put --mesh 2x2 -v

Exit status 1 when any false co-sharded is found. Rows of ops without a sampler are listed as
unchecked; :func:`register_sampler` adds one for your own op.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import math
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.distributed.tensor.placement_types import Partial, Placement, Replicate, Shard

from .._placements import fmt_placements
from ._binders import bind
from ._model import Binding, DimKind, OpRule, check
from ._registry import Table, default_table

logger = logging.getLogger(__name__)

__all__ = [
    "CI_BUDGET",
    "FULL_BUDGET",
    "MESHES",
    "Budget",
    "Case",
    "Finding",
    "MeshStats",
    "RowReport",
    "SAMPLERS",
    "check_row",
    "check_table",
    "evaluate",
    "make_locals",
    "reconstruct",
    "register_sampler",
    "render",
]

MESHES: tuple[tuple[int, ...], ...] = ((2,), (2, 2), (2, 4))
# How the op runs on the shards: "auto" — under LocalTensorMode when every rank's shards have the
# same shapes, rank by rank otherwise; "local_tensor" — always LocalTensorMode (rank by rank only
# if it raises); "loop" — always rank by rank.
RUNNER = "auto"
REDUCE_OPS = ("sum", "avg", "max", "min", "product")
FLOATS = (torch.float64, torch.float32, torch.complex128, torch.complex64)


# ---------------------------------------------------------------------------------------------
# Layouts: global tensor <-> per-rank local tensors (agrees with DTensor; see the tests)


def _coords(rank: int, mesh_shape: Sequence[int]) -> tuple[int, ...]:
    out = []
    for n in reversed(mesh_shape):
        out.append(rank % n)
        rank //= n
    return tuple(reversed(out))


def _rank(coords: Sequence[int], mesh_shape: Sequence[int]) -> int:
    r = 0
    for c, n in zip(coords, mesh_shape):
        r = r * n + c
    return r


def chunk_bounds(size: int, n: int, c: int) -> tuple[int, int]:
    """Rank ``c`` of ``n``'s slice of a dim of ``size`` under ``torch.chunk`` (empty past the end)."""
    step = -(-size // n) if size else 0
    start = min(c * step, size)
    return start, min(start + step, size)


def _pieces(value: torch.Tensor, reduce_op: str, n: int, gen: random.Random) -> list[torch.Tensor]:
    """``n`` random tensors that reduce to ``value`` with ``reduce_op``."""
    shape = value.shape

    def ints(lo: int, hi: int) -> torch.Tensor:
        t = torch.tensor([gen.randint(lo, hi) for _ in range(max(1, value.numel()))], dtype=torch.float64)
        return t[: value.numel()].reshape(shape).to(value.dtype)

    if reduce_op in ("sum", "avg"):
        parts = [ints(-3, 3) for _ in range(n - 1)]
        total = value * (n if reduce_op == "avg" else 1)
        return parts + [total - sum(parts, torch.zeros_like(value))]
    if reduce_op == "product":  # factors ±1, ±2: the last one divides exactly
        parts = [ints(1, 2) * (2 * ints(0, 1) - 1) for _ in range(n - 1)]
        prod = torch.ones_like(value)
        for p in parts:
            prod = prod * p
        return parts + [value / prod]
    sign = -1 if reduce_op == "max" else 1
    parts = [value + sign * ints(1, 3) for _ in range(n)]
    if value.numel():
        owner = torch.tensor([gen.randrange(n) for _ in range(value.numel())]).reshape(shape)
        for k in range(n):
            parts[k] = torch.where(owner == k, value, parts[k])
    return parts


def make_locals(value: torch.Tensor, mesh_shape: Sequence[int], placements: Sequence[Placement],
                gen: random.Random) -> list[torch.Tensor]:
    """Every rank's local tensor of ``value`` under ``placements`` (rank = row-major coords).

    Mesh dims are applied in order (a dim sharded twice is split by mesh dim 0 first, DTensor's
    default shard order); a Partial mesh dim splits into random pieces (:func:`_pieces`).
    """
    values: dict[tuple[int, ...], torch.Tensor] = {(): value}
    for m, (n, p) in enumerate(zip(mesh_shape, placements)):
        nxt: dict[tuple[int, ...], torch.Tensor] = {}
        for prefix, v in values.items():
            if isinstance(p, Shard):
                # contiguous, as DTensor's Shard._split_tensor makes them
                kids = [v.narrow(p.dim, *_start_len(v.shape[p.dim], n, c)).contiguous() for c in range(n)]
            elif isinstance(p, Partial):
                kids = _pieces(v, p.reduce_op, n, gen)
            else:
                kids = [v] * n
            for c, kid in enumerate(kids):
                nxt[prefix + (c,)] = kid
        values = nxt
    world = math.prod(mesh_shape)
    return [values[_coords(r, mesh_shape)] for r in range(world)]


def _start_len(size: int, n: int, c: int) -> tuple[int, int]:
    start, stop = chunk_bounds(size, n, c)
    return start, stop - start


def reconstruct(locals_: Sequence[torch.Tensor], mesh_shape: Sequence[int], placements: Sequence[Placement],
                rank: int) -> torch.Tensor | None:
    """The full tensor rank ``rank`` obtains from the locals (DTensor's ``full_tensor`` there):
    its own piece along Replicate mesh dims, the gathered pieces along Shard, the reduced ones
    along Partial. None when the pieces do not fit together."""
    coords = _coords(rank, mesh_shape)

    def rec(m: int, prefix: tuple[int, ...]) -> torch.Tensor | None:
        if m == len(mesh_shape):
            return locals_[_rank(prefix, mesh_shape)]
        p = placements[m]
        if not isinstance(p, (Shard, Partial)):
            return rec(m + 1, prefix + (coords[m],))
        kids = [rec(m + 1, prefix + (c,)) for c in range(mesh_shape[m])]
        if any(k is None for k in kids):
            return None
        try:
            if isinstance(p, Shard):
                return torch.cat(kids, p.dim)  # type: ignore[arg-type]
            if any(k.shape != kids[0].shape for k in kids):  # type: ignore[union-attr]
                return None
            stacked = torch.stack(kids)  # type: ignore[arg-type]
            if p.reduce_op == "sum":
                return stacked.sum(0)
            if p.reduce_op == "avg":
                return stacked.sum(0) / len(kids)
            if p.reduce_op == "max":
                return stacked.amax(0)
            if p.reduce_op == "min":
                return stacked.amin(0)
            if p.reduce_op == "product":
                return stacked.prod(0)
        except (RuntimeError, IndexError):
            return None
        return None

    return rec(0, ())


# ---------------------------------------------------------------------------------------------
# Samples


@dataclass(frozen=True, slots=True)
class Case:
    """One sampled call: positional args (tensors global), keyword args and a readable name."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


Sampler = Callable[[torch.Generator], list[Case]]
SAMPLERS: dict[torch._ops.OpOverload, Sampler] = {}


class Skip(str):
    """A guard's verdict that a combination cannot be run (not that it is wrong)."""


# A guard sees one rank's local input shapes (in input-spec order) before the op runs and returns
# None (run it), a reason (the shapes are inconsistent: the combination is wrong) or a Skip (the
# kernel cannot run such shards though they are consistent, e.g. empty ones). Guards exist for
# kernels that crash the process instead of raising.
Guard = Callable[[Sequence[tuple[int, ...]]], str | None]
GUARDS: dict[torch._ops.OpOverload, Guard] = {}


def register_sampler(*ops: torch._ops.OpOverload, guard: Guard | None = None) -> Callable[[Sampler], Sampler]:
    """Decorator: ``fn(gen) -> [Case, ...]`` samples calls of ``ops`` (most telling first);
    ``guard`` vets local shapes before the op runs (see :data:`GUARDS`). Returns ``fn`` unchanged."""

    def deco(fn: Sampler) -> Sampler:
        for op in ops:
            SAMPLERS[op] = fn
            if guard is not None:
                GUARDS[op] = guard
        return fn

    return deco


def _f(gen: torch.Generator, *shape: int, lo: int = -4, hi: int = 4, nonzero: bool = False) -> torch.Tensor:
    t = torch.randint(lo, hi + 1, shape, generator=gen).to(torch.float64)
    if nonzero:
        t = torch.where(t == 0, torch.ones_like(t), t)
    return t


def _b(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randint(0, 2, shape, generator=gen).bool()


def _i(gen: torch.Generator, hi: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, hi, shape, generator=gen)


def _unique_rows(gen: torch.Generator, hi: int, rows: int, cols: int) -> torch.Tensor:
    """``rows x cols`` indices in ``[0, hi)`` without repeats within a row."""
    return torch.stack([torch.randperm(hi, generator=gen)[:cols] for _ in range(rows)])


BINARY_SHAPES = (
    ("broadcast [3,1,5]+[4,1]", (3, 1, 5), (4, 1)),
    ("same [6,3]", (6, 3), (6, 3)),
    ("0-d other [5,2]+[]", (5, 2), ()),
    ("size-1 [1,4]+[3,1]", (1, 4), (3, 1)),
)
INPLACE_SHAPES = (
    ("broadcast into self [3,4,5]+[4,1]", (3, 4, 5), (4, 1)),
    ("same [6,3]", (6, 3), (6, 3)),
    ("0-d other [5,2]+[]", (5, 2), ()),
    ("size-1 other [3,4]+[1,4]", (3, 4), (1, 4)),
)


def _binary(make_self: Callable[..., torch.Tensor], make_other: Callable[..., torch.Tensor],
            inplace: bool = False) -> Sampler:
    def sample(gen: torch.Generator) -> list[Case]:
        return [Case(name, (make_self(gen, *a), make_other(gen, *b)))
                for name, a, b in (INPLACE_SHAPES if inplace else BINARY_SHAPES)]

    return sample


def _ints(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return _f(gen, *shape)


def _small(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return _f(gen, *shape, lo=-1, hi=1)  # ties for comparisons


def _nonzero(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return _f(gen, *shape, nonzero=True)


def _positive(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return _f(gen, *shape, lo=1, hi=3)


def _exponent(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return _f(gen, *shape, lo=-2, hi=2)


def _bools(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return _b(gen, *shape)


aten = torch.ops.aten
for _op, _mk in (
    (aten.add.Tensor, (_ints, _ints)), (aten.sub.Tensor, (_ints, _ints)), (aten.mul.Tensor, (_ints, _ints)),
    (aten.div.Tensor, (_ints, _nonzero)), (aten.maximum.default, (_small, _small)),
    (aten.minimum.default, (_small, _small)), (aten.fmax.default, (_small, _small)),
    (aten.fmin.default, (_small, _small)), (aten.atan2.default, (_ints, _ints)),
    (aten.fmod.Tensor, (_ints, _nonzero)), (aten.remainder.Tensor, (_ints, _nonzero)),
    (aten.pow.Tensor_Tensor, (_positive, _exponent)),
    (aten.eq.Tensor, (_small, _small)), (aten.ne.Tensor, (_small, _small)), (aten.lt.Tensor, (_small, _small)),
    (aten.le.Tensor, (_small, _small)), (aten.gt.Tensor, (_small, _small)), (aten.ge.Tensor, (_small, _small)),
    (aten.logical_and.default, (_small, _small)), (aten.logical_or.default, (_small, _small)),
    (aten.logical_xor.default, (_small, _small)), (aten.bitwise_and.Tensor, (_bools, _bools)),
    (aten.bitwise_or.Tensor, (_bools, _bools)), (aten.bitwise_xor.Tensor, (_bools, _bools)),
):
    register_sampler(_op)(_binary(*_mk))
for _op, _mk in (
    (aten.add_.Tensor, (_ints, _ints)), (aten.sub_.Tensor, (_ints, _ints)), (aten.mul_.Tensor, (_ints, _ints)),
    (aten.div_.Tensor, (_ints, _nonzero)),
):
    register_sampler(_op)(_binary(*_mk, inplace=True))


@register_sampler(aten.div.Tensor_mode)
def _sample_div_mode(gen: torch.Generator) -> list[Case]:
    return [
        Case("true division, broadcast", (_ints(gen, 3, 1, 5), _nonzero(gen, 4, 1)), {"rounding_mode": None}),
        Case("floor, same shape", (_ints(gen, 6, 3), _nonzero(gen, 6, 3)), {"rounding_mode": "floor"}),
    ]


@register_sampler(aten.where.self)
def _sample_where(gen: torch.Generator) -> list[Case]:
    return [
        Case("3-way broadcast", (_b(gen, 4, 1), _ints(gen, 3, 1, 5), _ints(gen, 3, 4, 5))),
        Case("0-d branches (falcon mask)", (_b(gen, 3, 1, 4, 5), _ints(gen), _ints(gen))),
        Case("same [6,3]", (_b(gen, 6, 3), _ints(gen, 6, 3), _ints(gen, 6, 3))),
    ]


@register_sampler(aten.masked_fill.Scalar, aten.masked_fill_.Scalar)
def _sample_masked_fill_scalar(gen: torch.Generator) -> list[Case]:
    return [
        Case("broadcast mask, fill 2.5", (_ints(gen, 3, 4, 5), _b(gen, 4, 1), 2.5)),
        Case("same shape, fill 0", (_ints(gen, 6, 3), _b(gen, 6, 3), 0.0)),
    ]


@register_sampler(aten.masked_fill.Tensor, aten.masked_fill_.Tensor)
def _sample_masked_fill_tensor(gen: torch.Generator) -> list[Case]:
    return [
        Case("broadcast mask, 0-d value", (_ints(gen, 3, 4, 5), _b(gen, 4, 1), _ints(gen))),
        Case("same shape", (_ints(gen, 6, 3), _b(gen, 6, 3), _ints(gen))),
    ]


@register_sampler(aten.lerp.Scalar, aten.lerp_.Scalar)
def _sample_lerp_scalar(gen: torch.Generator) -> list[Case]:
    return [
        Case("broadcast end, weight 0.25", (_ints(gen, 3, 4, 5), _ints(gen, 4, 1), 0.25)),
        Case("same shape, weight -1.5", (_ints(gen, 6, 3), _ints(gen, 6, 3), -1.5)),
    ]


@register_sampler(aten.lerp.Tensor, aten.lerp_.Tensor)
def _sample_lerp_tensor(gen: torch.Generator) -> list[Case]:
    def weight(*shape: int) -> torch.Tensor:
        return _f(gen, *shape, lo=-2, hi=4) / 4

    return [
        Case("broadcast end and weight", (_ints(gen, 3, 4, 5), _ints(gen, 4, 1), weight(5))),
        Case("same shape", (_ints(gen, 6, 3), _ints(gen, 6, 3), weight(6, 3))),
    ]


@register_sampler(aten.addcmul.default, aten.addcmul_.default)
def _sample_addcmul(gen: torch.Generator) -> list[Case]:
    return [
        Case("broadcast factors, value 0.5", (_ints(gen, 3, 4, 5), _ints(gen, 4, 1), _ints(gen, 5)), {"value": 0.5}),
        Case("same shape", (_ints(gen, 6, 3), _ints(gen, 6, 3), _ints(gen, 6, 3))),
    ]


@register_sampler(aten.addcdiv.default, aten.addcdiv_.default)
def _sample_addcdiv(gen: torch.Generator) -> list[Case]:
    return [
        Case("broadcast, value 0.5", (_ints(gen, 3, 4, 5), _ints(gen, 4, 1), _nonzero(gen, 5)), {"value": 0.5}),
        Case("same shape", (_ints(gen, 6, 3), _ints(gen, 6, 3), _nonzero(gen, 6, 3))),
    ]


@register_sampler(aten.gelu_backward.default, aten.silu_backward.default, aten.sigmoid_backward.default,
                  aten.tanh_backward.default)
def _sample_activation_backward(gen: torch.Generator) -> list[Case]:
    return [
        Case("same [3,4,5]", (_ints(gen, 3, 4, 5), _ints(gen, 3, 4, 5) / 4)),
        Case("broadcast [6,3]+[3]", (_ints(gen, 6, 3), _ints(gen, 3) / 4)),
    ]


@register_sampler(aten.threshold_backward.default)
def _sample_threshold_backward(gen: torch.Generator) -> list[Case]:
    return [
        Case("same [3,4,5], threshold 0.5", (_ints(gen, 3, 4, 5), _ints(gen, 3, 4, 5), 0.5)),
        Case("broadcast [6,3]+[3]", (_ints(gen, 6, 3), _ints(gen, 3), 0.0)),
    ]


def _same_shape_guard(shapes: Sequence[tuple[int, ...]]) -> str | None:
    """softmax backward's CPU kernel checks grad/output sizes only after dividing by one of them:
    an empty grad against a non-empty output dies with SIGFPE instead of raising."""
    if len({tuple(s) for s in shapes[:2]}) > 1:
        return f"grad {shapes[0]} and output {shapes[1]} differ"
    return None


@register_sampler(aten._softmax_backward_data.default, aten._log_softmax_backward_data.default,
                  guard=_same_shape_guard)
def _sample_softmax_backward(gen: torch.Generator) -> list[Case]:
    x = _ints(gen, 3, 4, 5) / 2
    y = _ints(gen, 6, 3) / 2
    return [
        Case("dim -1 of [3,4,5]", (_ints(gen, 3, 4, 5), torch.softmax(x, -1), -1, torch.float64)),
        Case("dim 0 of [6,3]", (_ints(gen, 6, 3), torch.softmax(y, 0), 0, torch.float64)),
    ]


@register_sampler(aten.copy.default, aten.copy_.default)
def _sample_copy(gen: torch.Generator) -> list[Case]:
    return [
        Case("src broadcast into self", (_ints(gen, 3, 4, 5), _ints(gen, 4, 1))),
        Case("same shape", (_ints(gen, 6, 3), _ints(gen, 6, 3))),
    ]


@register_sampler(aten.cat.default)
def _sample_cat(gen: torch.Generator) -> list[Case]:
    return [
        Case("dim 1 of three", ([_ints(gen, 3, 2, 5), _ints(gen, 3, 4, 5), _ints(gen, 3, 1, 5)], 1)),
        Case("dim -1 of two (falcon rotary)", ([_ints(gen, 5, 3), _ints(gen, 5, 3)], -1)),
        Case("dim 0, uneven", ([_ints(gen, 2, 3), _ints(gen, 1, 3)], 0)),
    ]


@register_sampler(aten.stack.default)
def _sample_stack(gen: torch.Generator) -> list[Case]:
    return [
        Case("dim 1 of three [3,5]", ([_ints(gen, 3, 5), _ints(gen, 3, 5), _ints(gen, 3, 5)], 1)),
        Case("dim 0 of two [6,3]", ([_ints(gen, 6, 3), _ints(gen, 6, 3)], 0)),
    ]


@register_sampler(aten.slice_scatter.default)
def _sample_slice_scatter(gen: torch.Generator) -> list[Case]:
    return [
        Case("dim 1 step 2", (_ints(gen, 4, 6, 3), _ints(gen, 4, 2, 3), 1, 1, 5, 2)),
        Case("dim 2 to -2 (seed block)", (_ints(gen, 3, 5, 4), _ints(gen, 3, 5, 2), 2, 0, -2)),
        Case("dim 0", (_ints(gen, 5, 3), _ints(gen, 2, 3), 0, 1, 3)),
    ]


@register_sampler(aten.select_scatter.default)
def _sample_select_scatter(gen: torch.Generator) -> list[Case]:
    return [
        Case("dim 1 index 2", (_ints(gen, 4, 5, 3), _ints(gen, 4, 3), 1, 2)),
        Case("dim 0 index -1", (_ints(gen, 3, 6), _ints(gen, 6), 0, -1)),
    ]


@register_sampler(aten.index_add.default, aten.index_add_.default)
def _sample_index_add(gen: torch.Generator) -> list[Case]:
    return [
        Case("dim 1, duplicate indices", (_ints(gen, 4, 5, 3), 1, torch.tensor([0, 2, 2, 4]), _ints(gen, 4, 4, 3))),
        Case("dim 0, alpha 2", (_ints(gen, 5, 3), 0, torch.tensor([4, 1, 1]), _ints(gen, 3, 3)), {"alpha": 2}),
    ]


@register_sampler(aten.index_copy.default, aten.index_copy_.default)
def _sample_index_copy(gen: torch.Generator) -> list[Case]:
    return [
        Case("dim 1, unique indices", (_ints(gen, 4, 5, 3), 1, torch.tensor([4, 0, 2]), _ints(gen, 4, 3, 3))),
        Case("dim 0", (_ints(gen, 5, 3), 0, torch.tensor([3, 1]), _ints(gen, 2, 3))),
    ]


@register_sampler(aten.scatter.src, aten.scatter_.src)
def _sample_scatter_src(gen: torch.Generator) -> list[Case]:
    return [
        Case("dim 1, index covers self off dim", (_ints(gen, 4, 5), 1, _unique_rows(gen, 5, 4, 3), _ints(gen, 4, 3))),
        Case("dim 1, index shorter than self, src wider", (_ints(gen, 4, 5), 1, _unique_rows(gen, 5, 3, 2),
                                                           _ints(gen, 4, 4))),
    ]


@register_sampler(aten.scatter.value, aten.scatter_.value)
def _sample_scatter_value(gen: torch.Generator) -> list[Case]:
    return [
        Case("dim 1, value 1.5, duplicates", (_ints(gen, 4, 5), 1, _i(gen, 5, 4, 3), 1.5)),
        Case("dim 0", (_ints(gen, 5, 3), 0, _i(gen, 5, 2, 3), -2.0)),
    ]


@register_sampler(aten.scatter_add.default, aten.scatter_add_.default)
def _sample_scatter_add(gen: torch.Generator) -> list[Case]:
    return [
        Case("dim 1, duplicates", (_ints(gen, 4, 5), 1, _i(gen, 5, 4, 3), _ints(gen, 4, 3))),
        Case("dim 0, index shorter", (_ints(gen, 5, 3), 0, _i(gen, 5, 2, 2), _ints(gen, 3, 3))),
    ]


@register_sampler(aten.scatter_reduce.two, aten.scatter_reduce_.two)
def _sample_scatter_reduce(gen: torch.Generator) -> list[Case]:
    def call(reduce: str, include_self: bool) -> Case:
        return Case(f"dim 1, duplicates, {reduce}, include_self={include_self}",
                    (_ints(gen, 4, 5), 1, _i(gen, 5, 4, 3), _ints(gen, 4, 3), reduce),
                    {"include_self": include_self})

    return [call("sum", True), call("amax", True), call("amin", False), call("mean", True),
            call("prod", True), call("mean", False), call("amax", False), call("sum", False)]


@register_sampler(aten.index.Tensor, aten._unsafe_index.Tensor)
def _sample_index(gen: torch.Generator) -> list[Case]:
    return [
        Case("self[:, idx[2,3]]", (_ints(gen, 4, 5, 3), [None, _i(gen, 5, 2, 3)])),
        Case("broadcast index pair (falcon mask)", (_ints(gen, 4, 6), [_i(gen, 4, 4, 1, 1), _i(gen, 6, 1, 5)])),
        Case("non-adjacent self[idx, :, idx]", (_ints(gen, 4, 5, 3), [_i(gen, 4, 3), None, _i(gen, 3, 3)])),
        Case("self[..., [k], :] (seed block)", (_ints(gen, 3, 4, 5, 2), [None, None, torch.tensor([3])])),
    ]


@register_sampler(aten.index_put.default, aten.index_put_.default, aten._unsafe_index_put.default)
def _sample_index_put(gen: torch.Generator) -> list[Case]:
    return [
        Case("seed: self[..., [k], :] += values", (_ints(gen, 3, 4, 5, 2), [None, None, torch.tensor([3])],
                                                   _ints(gen, 3, 4, 1, 2), True)),
        Case("accumulate, duplicates, broadcast values", (_ints(gen, 4, 5, 3), [None, torch.tensor([1, 3, 1])],
                                                          _ints(gen, 3, 1), True)),
        Case("assign, unique, non-adjacent", (_ints(gen, 4, 5, 3), [torch.tensor([0, 2]), None, torch.tensor([1, 1])],
                                              _ints(gen, 2, 5), False)),
    ]


@register_sampler(aten.index_select.default)
def _sample_index_select(gen: torch.Generator) -> list[Case]:
    return [
        Case("dim 1, duplicates", (_ints(gen, 4, 5, 3), 1, torch.tensor([4, 0, 4]))),
        Case("dim 0", (_ints(gen, 5, 3), 0, _i(gen, 5, 6))),
    ]


@register_sampler(aten.gather.default)
def _sample_gather(gen: torch.Generator) -> list[Case]:
    return [
        Case("dim 1, same off-dim size", (_ints(gen, 4, 5), 1, _i(gen, 5, 4, 3))),
        Case("dim 0, index narrower than self", (_ints(gen, 5, 3), 0, _i(gen, 5, 6, 2))),
    ]


@register_sampler(aten.embedding.default)
def _sample_embedding(gen: torch.Generator) -> list[Case]:
    return [
        Case("[7,5] weight, [3,4] ids", (_ints(gen, 7, 5), _i(gen, 7, 3, 4))),
        Case("[6,2] weight, [5] ids", (_ints(gen, 6, 2), _i(gen, 6, 5))),
    ]


@register_sampler(aten.embedding_dense_backward.default)
def _sample_embedding_backward(gen: torch.Generator) -> list[Case]:
    return [
        Case("[3,4,5] grad, 7 rows", (_ints(gen, 3, 4, 5), _i(gen, 7, 3, 4), 7, -1, False)),
        Case("padding_idx 2, scale_grad_by_freq", (_ints(gen, 6, 3), _i(gen, 5, 6), 5, 2, True)),
    ]


@register_sampler(aten.mm.default)
def _sample_mm(gen: torch.Generator) -> list[Case]:
    return [Case("[5,6]@[6,3]", (_ints(gen, 5, 6), _ints(gen, 6, 3))),
            Case("[4,1]@[1,6]", (_ints(gen, 4, 1), _ints(gen, 1, 6)))]


@register_sampler(aten.bmm.default)
def _sample_bmm(gen: torch.Generator) -> list[Case]:
    return [Case("[3,5,6]@[3,6,2]", (_ints(gen, 3, 5, 6), _ints(gen, 3, 6, 2)))]


@register_sampler(aten.dot.default)
def _sample_dot(gen: torch.Generator) -> list[Case]:
    return [Case("[6].[6]", (_ints(gen, 6), _ints(gen, 6))), Case("[5].[5]", (_ints(gen, 5), _ints(gen, 5)))]


@register_sampler(aten.mv.default)
def _sample_mv(gen: torch.Generator) -> list[Case]:
    return [Case("[5,6]@[6]", (_ints(gen, 5, 6), _ints(gen, 6)))]


@register_sampler(aten.einsum.default)
def _sample_einsum(gen: torch.Generator) -> list[Case]:
    return [
        Case("abk,kn->abn (linear)", ("abk,kn->abn", [_ints(gen, 2, 3, 6), _ints(gen, 6, 5)])),
        Case("abn,abk->kn (weight grad)", ("abn,abk->kn", [_ints(gen, 2, 3, 5), _ints(gen, 2, 3, 6)])),
        Case("bij,bjk->bik", ("bij,bjk->bik", [_ints(gen, 3, 5, 4), _ints(gen, 3, 4, 2)])),
        Case("...k,k->... broadcast", ("...k,k->...", [_ints(gen, 3, 1, 4), _ints(gen, 4)])),
    ]


@register_sampler(aten.native_layer_norm.default)
def _sample_layer_norm(gen: torch.Generator) -> list[Case]:
    return [
        Case("[3,4,6] over [6]", (_ints(gen, 3, 4, 6), [6], _ints(gen, 6), _ints(gen, 6), 1e-5)),
        Case("[5,2,3] over [2,3], no bias", (_ints(gen, 5, 2, 3), [2, 3], _ints(gen, 2, 3), None, 1e-5)),
    ]


@register_sampler(aten.native_layer_norm_backward.default)
def _sample_layer_norm_backward(gen: torch.Generator) -> list[Case]:
    def call(name: str, shape: tuple[int, ...], normalized: list[int], mask: list[bool]) -> Case:
        x, w, b = _ints(gen, *shape), _ints(gen, *normalized), _ints(gen, *normalized)
        _, mean, rstd = torch.native_layer_norm(x, normalized, w, b, 1e-5)
        return Case(name, (_ints(gen, *shape), x, normalized, mean, rstd, w, b, mask))

    return [call("[3,4,6] over [6]", (3, 4, 6), [6], [True, True, True]),
            call("[5,2,3] over [2,3], input grad only", (5, 2, 3), [2, 3], [True, False, False])]


def _attention_guard(shapes: Sequence[tuple[int, ...]]) -> str | None:
    """The CPU flash kernel dies (SIGFPE) on inconsistent or empty sequence/head dims."""
    if len(shapes) == 3:
        q, k, v = shapes
        extra: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    else:
        grad, q, k, v, out, lse = shapes[:6]
        extra = [(grad, q[:3] + v[3:]), (out, q[:3] + v[3:]), (lse, q[:3])]
    if any(len(t) != 4 for t in (q, k, v)):
        return "query/key/value are not 4-D"
    if not (q[0] == k[0] == v[0] and q[1] == k[1] == v[1] and q[3] == k[3] and k[2] == v[2]):
        return f"inconsistent attention shapes q{q} k{k} v{v}"
    for got, want in extra:
        if tuple(got) != tuple(want):
            return f"inconsistent attention shapes {got} vs {want}"
    if 0 in q[1:3] or 0 in k[1:3]:
        return Skip("the CPU flash-attention kernel crashes on empty head or sequence shards")
    return None


@register_sampler(aten._scaled_dot_product_flash_attention_for_cpu.default, guard=_attention_guard)
def _sample_attention(gen: torch.Generator) -> list[Case]:
    def qkv(b: int, h: int, lq: int, lk: int, e: int) -> tuple[torch.Tensor, ...]:
        return (_ints(gen, b, h, lq, e) / 4, _ints(gen, b, h, lk, e) / 4, _ints(gen, b, h, lk, e))

    return [Case("causal [2,3,5,4]", (*qkv(2, 3, 5, 5, 4), 0.0, True)),
            Case("not causal, kv longer", (*qkv(3, 2, 5, 6, 4), 0.0, False))]


@register_sampler(aten._scaled_dot_product_flash_attention_for_cpu_backward.default, guard=_attention_guard)
def _sample_attention_backward(gen: torch.Generator) -> list[Case]:
    def call(name: str, b: int, h: int, lq: int, lk: int, e: int, causal: bool) -> Case:
        q, k, v = _ints(gen, b, h, lq, e) / 4, _ints(gen, b, h, lk, e) / 4, _ints(gen, b, h, lk, e)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, causal)
        return Case(name, (_ints(gen, b, h, lq, e), q, k, v, out, lse, 0.0, causal))

    return [call("causal [2,3,5,4]", 2, 3, 5, 5, 4, True), call("not causal, kv longer", 3, 2, 5, 6, 4, False)]


# ---------------------------------------------------------------------------------------------
# Checking one row


@dataclass(frozen=True, slots=True)
class Budget:
    """How much of the placement space each row's check covers.

    ``cases``: sampled calls per row (the sampler's first ones), each with ``draws`` independent
    value draws (a combination is right only if right for all). On the 1-D mesh every input and
    output placement combination is evaluated when there are at most ``exhaustive_1d``; else the
    combinations the row could accept plus ``random_1d`` random ones. ``rejected_1d`` caps the
    rejected 1-D combinations evaluated (for missed opportunities). On each 2-D mesh every pair of
    accepted 1-D columns is evaluated (up to ``accepted_pairs``), plus ``other_pairs`` pairs of
    numerically right or random columns.
    """

    cases: int
    draws: int
    exhaustive_1d: int
    random_1d: int
    rejected_1d: int
    accepted_pairs: int
    other_pairs: int


CI_BUDGET = Budget(cases=2, draws=2, exhaustive_1d=1024, random_1d=150, rejected_1d=160, accepted_pairs=400,
                   other_pairs=40)
FULL_BUDGET = Budget(cases=99, draws=3, exhaustive_1d=20000, random_1d=3000, rejected_1d=20000, accepted_pairs=20000,
                     other_pairs=1500)


@dataclass(frozen=True, slots=True)
class Finding:
    """One evaluated combination worth showing: a false co-sharded or a missed opportunity."""

    case: str
    mesh: tuple[int, ...]
    placements: dict[str, str]  # member label -> placements text
    detail: str  # why it is wrong (false co-sharded) or why the row rejects it (missed)

    def __str__(self) -> str:
        pl = ", ".join(f"{k} {v}" for k, v in self.placements.items())
        return f"[{self.case}] mesh {self.mesh}: {pl} — {self.detail}"


@dataclass(kw_only=True, slots=True)
class MeshStats:
    """Counts on one mesh: evaluated combinations, how many the row accepts, and the verdicts."""

    checked: int = 0
    accepted: int = 0
    false_cosharded: int = 0
    missed: int = 0
    skipped: int = 0  # combinations a guard could not run (not counted as checked)


@dataclass(kw_only=True, slots=True)
class RowReport:
    """The ground-truth verdict on one row."""

    row: str
    family: str
    cases: int = 0
    unbound: int = 0  # sampled cases the row did not bind (nothing to check)
    unchecked: str = ""  # why nothing was checked (no sampler)
    meshes: dict[tuple[int, ...], MeshStats] = field(default_factory=dict)
    false_examples: list[Finding] = field(default_factory=list)
    missed_examples: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def checked(self) -> int:
        return sum(s.checked for s in self.meshes.values())

    @property
    def false_cosharded(self) -> int:
        return sum(s.false_cosharded for s in self.meshes.values())

    @property
    def missed(self) -> int:
        return sum(s.missed for s in self.meshes.values())

    @property
    def ok(self) -> bool:
        return self.false_cosharded == 0


@dataclass
class _Member:
    label: str
    value: torch.Tensor  # global
    is_output: bool
    slot: int  # spec index (inputs) or output index
    domain: list[Placement]


class _CaseRun:
    """One case bound to a row: global values, members, caches of local tensors and specs."""

    def __init__(self, row: OpRule, case: Case, binding: Binding, outputs: tuple[torch.Tensor | None, ...],
                 inputs: list[tuple[str, torch.Tensor]], gen: random.Random) -> None:
        self.row, self.case, self.binding, self.gen = row, case, binding, gen
        labels = {b.spec_index: b.label for b in binding.args}
        self.members: list[_Member] = []
        for i, (label, value) in enumerate(inputs):
            self.members.append(_Member(labels.get(i, label), value, False, i, _domain(value)))
        for j, value in enumerate(outputs):
            if value is not None:
                self.members.append(_Member(binding.out_label(j), value, True, j, _domain(value)))
        self.outputs = outputs
        self.extra: list[_CaseRun] = []  # further value draws of the same call, same shapes
        self._locals: dict[tuple[int, tuple[int, ...], tuple[Placement, ...]], list[torch.Tensor]] = {}
        self._specs: dict[tuple[int, tuple[Placement, ...], int], Any] = {}
        mutated = [i for i, a in enumerate(row.op._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
        self.mutated_positions = set(mutated)

    # -- the row's verdict ------------------------------------------------------------------------
    def mismatches(self, mesh: Any, combo: Sequence[Sequence[Placement]]) -> list[Any]:
        """The row's verdict on ``combo`` (one column per mesh dim): empty = co-sharded."""
        from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

        def spec(k: int) -> Any:
            pl = tuple(col[k] for col in combo)
            key = (k, pl, id(mesh))
            if key not in self._specs:
                v = self.members[k].value
                meta = TensorMeta(v.shape, v.stride() if v.is_contiguous() else torch.empty(v.shape).stride(), v.dtype)
                self._specs[key] = DTensorSpec(mesh, pl, tensor_meta=meta)
            return self._specs[key]

        inputs = [spec(k) for k, mem in enumerate(self.members) if not mem.is_output]
        outs: list[Any] = [None] * len(self.outputs)
        for k, mem in enumerate(self.members):
            if mem.is_output:
                outs[mem.slot] = spec(k)
        out_specs = outs[0] if len(outs) == 1 else tuple(outs)
        return check(self.binding, inputs, out_specs)

    # -- the numbers ------------------------------------------------------------------------------
    def locals_of(self, k: int, mesh_shape: tuple[int, ...], pl: tuple[Placement, ...]) -> list[torch.Tensor]:
        key = (k, tuple(mesh_shape), pl)
        if key not in self._locals:
            self._locals[key] = make_locals(self.members[k].value, mesh_shape, pl, self.gen)
        return self._locals[key]

    def evaluate(self, mesh_shape: tuple[int, ...], combo: Sequence[Sequence[Placement]]) -> str | None:
        """None when the combination computes the global result on every rank, else why not."""
        return evaluate(self, mesh_shape, combo)


def _domain(value: torch.Tensor) -> list[Placement]:
    dom: list[Placement] = [Replicate()] + [Shard(d) for d in range(value.dim())]
    if value.dtype in FLOATS:
        dom += [Partial(op) for op in REDUCE_OPS]
    return dom


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype in FLOATS:
        scale = float(b.abs().max()) if b.numel() else 1.0
        return bool(torch.allclose(a, b, rtol=1e-6, atol=1e-6 * max(1.0, scale), equal_nan=True))
    return bool(torch.equal(a, b))


def evaluate(run: _CaseRun, mesh_shape: tuple[int, ...], combo: Sequence[Sequence[Placement]]) -> str | None:
    """Run the op on every rank's shards under LocalTensorMode and compare with the global result.

    Returns None when every output, reassembled on every rank by its placements, equals the op's
    global result for every value draw of the case; else a short reason (a :class:`Skip` when
    a guard could not run it). Several draws keep a wrong combination from passing by
    coincidence (e.g. one of two partial dot products being zero).
    """
    for one in (run, *run.extra):
        verdict = _evaluate_one(one, mesh_shape, combo)
        if verdict is not None:
            return verdict
    return None


def _evaluate_one(run: _CaseRun, mesh_shape: tuple[int, ...], combo: Sequence[Sequence[Placement]]) -> str | None:
    from torch.distributed._local_tensor import LocalTensor, LocalTensorMode

    world = math.prod(mesh_shape)
    ranks = frozenset(range(world))
    slot_locals: dict[int, list[torch.Tensor]] = {}
    for k, mem in enumerate(run.members):
        if not mem.is_output:
            slot_locals[mem.slot] = run.locals_of(k, mesh_shape, tuple(col[k] for col in combo))
    counter = itertools.count()

    def localize(value: Any, position: int) -> Any:
        if isinstance(value, torch.Tensor):
            per_rank = slot_locals[next(counter)]
            if position in run.mutated_positions:
                return LocalTensor({r: per_rank[r].clone() for r in ranks})
            return LocalTensor({r: per_rank[r] for r in ranks})
        if isinstance(value, (list, tuple)):
            return type(value)(localize(v, position) for v in value)
        return value

    guard = GUARDS.get(run.row.op)
    if guard is not None:
        for r in range(world):
            verdict = guard([tuple(slot_locals[i][r].shape) for i in sorted(slot_locals)])
            if verdict is not None:
                return verdict
    if any(t.numel() == 0 for per_rank in slot_locals.values() for t in per_rank):
        # Some CPU kernels divide by a dim size before checking shapes (log_softmax backward on an
        # empty grad dies with SIGFPE): let the meta kernels reject mismatched shapes first.
        problem = _meta_check(run, slot_locals, world)
        if problem is not None:
            return problem
    even = all(len({tuple(t.shape) for t in per_rank}) == 1 for per_rank in slot_locals.values())
    result = None
    if RUNNER == "local_tensor" or (RUNNER == "auto" and even):
        try:
            with LocalTensorMode(ranks):
                args = [localize(a, i) for i, a in enumerate(run.case.args)]
                result = run.row.op(*args, **run.case.kwargs)
        except Exception:  # noqa: BLE001 - retried rank by rank below, where errors are the op's own
            result = None
    if result is None:
        # Uneven shards: LocalTensorMode carries per-rank sizes as symbolic ints, which is slow
        # (native_layer_norm_backward: ~30 ms a call) and not implemented for some ops (einsum:
        # "NYI"); each rank's shards are then run by hand, which is what LocalTensorMode does.
        try:
            result = _per_rank(run, slot_locals, world)
        except Exception as exc:  # noqa: BLE001 - any failure on the shards is a wrong combination
            return f"raises {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    results = result if isinstance(result, (list, tuple)) else (result,)
    for k, mem in enumerate(run.members):
        if not mem.is_output:
            continue
        local = results[mem.slot]
        if not isinstance(local, LocalTensor):
            per_rank = [local] * world
        else:
            per_rank = [local._local_tensors[r] for r in range(world)]
        pl = tuple(col[k] for col in combo)
        for r in range(world):
            full = reconstruct(per_rank, mesh_shape, pl, r)
            if full is None:
                return f"{mem.label}: the local results do not fit together as {fmt_placements(pl)}"
            if not _close(full, mem.value):
                return f"{mem.label} as {fmt_placements(pl)} differs from the global result on rank {r}"
    return None


def _per_rank(run: _CaseRun, slot_locals: dict[int, list[torch.Tensor]], world: int) -> Any:
    """The op on each rank's plain local tensors, results packed as LocalTensors."""
    from torch.distributed._local_tensor import LocalTensor

    outs = []
    for r in range(world):
        counter = itertools.count()

        def local(value: Any, position: int) -> Any:
            if isinstance(value, torch.Tensor):
                t = slot_locals[next(counter)][r]
                return t.clone() if position in run.mutated_positions else t
            if isinstance(value, (list, tuple)):
                return type(value)(local(v, position) for v in value)
            return value

        out = run.row.op(*[local(a, i) for i, a in enumerate(run.case.args)], **run.case.kwargs)
        outs.append(out if isinstance(out, (list, tuple)) else (out,))
    packed = []
    for j in range(len(outs[0])):
        if isinstance(outs[0][j], torch.Tensor):
            packed.append(LocalTensor({r: outs[r][j] for r in range(world)}))
        else:
            packed.append(outs[0][j])
    return tuple(packed)


def _meta_check(run: _CaseRun, slot_locals: dict[int, list[torch.Tensor]], world: int) -> str | None:
    """Run the op on meta copies of every rank's shards; the first shape error, or None."""
    for r in range(world):
        counter = itertools.count()

        def meta(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                return slot_locals[next(counter)][r].to("meta")
            if isinstance(value, (list, tuple)):
                return type(value)(meta(v) for v in value)
            return value

        try:
            run.row.op(*[meta(a) for a in run.case.args], **run.case.kwargs)
        except NotImplementedError:
            return None  # no meta kernel: nothing learnt
        except Exception as exc:  # noqa: BLE001
            return f"raises {type(exc).__name__} on rank {r}: {str(exc).splitlines()[0][:120]}"
    return None


def _prepare(row: OpRule, case: Case, gen: random.Random) -> _CaseRun | str:
    """Bind ``row`` to a one-node graph of ``case``; the run, or why the case is skipped."""
    try:
        clones = [a.clone() if isinstance(a, torch.Tensor) else
                  ([x.clone() if isinstance(x, torch.Tensor) else x for x in a] if isinstance(a, list) else a)
                  for a in case.args]
        result = row.op(*clones, **case.kwargs)
    except Exception as exc:  # noqa: BLE001
        return f"the sample does not run on one device: {type(exc).__name__}: {exc}"
    outputs = tuple(r if isinstance(r, torch.Tensor) else None
                    for r in (result if isinstance(result, (list, tuple)) else (result,)))
    graph = torch.fx.Graph()
    inputs: list[tuple[str, torch.Tensor]] = []

    def placeholder(value: torch.Tensor, name: str) -> torch.fx.Node:
        node = graph.placeholder(f"x{len(inputs)}")
        node.meta["val"] = value
        inputs.append((name, value))
        return node

    schema_args = row.op._schema.arguments
    args: list[Any] = []
    for i, a in enumerate(case.args):
        name = schema_args[i].name if i < len(schema_args) else f"arg{i}"
        if isinstance(a, torch.Tensor):
            args.append(placeholder(a, name))
        elif isinstance(a, list) and any(isinstance(x, torch.Tensor) for x in a):
            args.append([placeholder(x, f"{name}[{k}]") if isinstance(x, torch.Tensor) else x for k, x in enumerate(a)])
        else:
            args.append(a)
    node = graph.call_function(row.op, tuple(args), dict(case.kwargs))
    node.meta["val"] = result
    binding = bind(row, node)
    if binding is None:
        return "the row does not bind this call"
    return _CaseRun(row, case, binding, outputs, inputs, gen)


def _same_call(a: _CaseRun, b: _CaseRun) -> bool:
    """Two draws of one call: same members with the same shapes, same non-tensor arguments."""
    if [(m.label, tuple(m.value.shape), m.value.dtype) for m in a.members] != [
            (m.label, tuple(m.value.shape), m.value.dtype) for m in b.members]:
        return False

    def plain(args: Iterable[Any]) -> list[Any]:
        return [None if isinstance(x, torch.Tensor) else (plain(x) if isinstance(x, (list, tuple)) else x)
                for x in args]

    return plain(a.case.args) == plain(b.case.args) and a.case.kwargs.keys() == b.case.kwargs.keys()


def _structured_columns(run: _CaseRun) -> Iterator[tuple[Placement, ...]]:
    """Every 1-D column the row could accept: all-Replicate; each logical dim sharded by every
    member that has it (outputs without it Partial(sum)); Partial subsets of the inputs."""
    members = run.members
    yield tuple(Replicate() for _ in members)
    dim_maps: list[tuple[Any, ...]] = []
    bound = {b.spec_index: b.dim_map for b in run.binding.args}
    for mem in members:
        if mem.is_output:
            dim_maps.append(run.binding.out_dim_maps[mem.slot] or ())
        else:
            dim_maps.append(bound.get(mem.slot, tuple(DimKind.WHOLE for _ in range(mem.value.dim()))))
    logicals = sorted({e for m in dim_maps for e in m if isinstance(e, int)})
    for logical in logicals:
        col: list[Placement] = []
        for mem, dm in zip(members, dim_maps):
            real = next((d for d, e in enumerate(dm) if e == logical), None)
            if real is not None:
                col.append(Shard(real))
            else:
                col.append(Partial("sum") if mem.is_output else Replicate())
        yield tuple(col)
    float_inputs = [k for k, mem in enumerate(members) if not mem.is_output and mem.value.dtype in FLOATS]
    outs = [k for k, mem in enumerate(members) if mem.is_output]
    for op in REDUCE_OPS:
        for size in range(1, min(len(float_inputs), 6) + 1):
            for subset in itertools.combinations(float_inputs, size):
                for out_p in [Replicate(), *(Partial(o) for o in REDUCE_OPS)]:
                    col = [Replicate() for _ in members]
                    for k in subset:
                        col[k] = Partial(op)
                    for k in outs:
                        if members[k].value.dtype in FLOATS or isinstance(out_p, Replicate):
                            col[k] = out_p
                    yield tuple(col)


def _columns_1d(run: _CaseRun, budget: Budget, rng: random.Random) -> list[tuple[Placement, ...]]:
    domains = [mem.domain for mem in run.members]
    total = math.prod(len(d) for d in domains)
    if total <= budget.exhaustive_1d:
        return [tuple(c) for c in itertools.product(*domains)]
    seen: dict[tuple[Placement, ...], None] = {}
    for col in _structured_columns(run):
        seen.setdefault(col, None)
    for _ in range(budget.random_1d):
        seen.setdefault(tuple(rng.choice(d) for d in domains), None)
    return list(seen)


def _valid_layout(combo: Sequence[Sequence[Placement]]) -> bool:
    """DTensor allows one Partial reduce op per tensor across mesh dims."""
    for k in range(len(combo[0])):
        ops = {col[k].reduce_op for col in combo if isinstance(col[k], Partial)}
        if len(ops) > 1:
            return False
    return True


def _describe(run: _CaseRun, mesh_shape: tuple[int, ...], combo: Sequence[Sequence[Placement]], detail: str) -> Finding:
    placements = {mem.label: fmt_placements(tuple(col[k] for col in combo)) for k, mem in enumerate(run.members)}
    return Finding(run.case.name, mesh_shape, placements, detail)


def check_row(
    row: OpRule,
    meshes: Sequence[tuple[int, ...]] = MESHES,
    budget: Budget = CI_BUDGET,
    seed: int = 0,
    *,
    max_examples: int = 3,
) -> RowReport:
    """Evaluate ``row`` against ground truth on ``meshes`` within ``budget``."""
    with _one_thread():
        return _check_row(row, meshes, budget, seed, max_examples)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Intra-op threads only cost on tensors this small (on a busy 2-core machine a 2-thread
    native_layer_norm_backward takes ~15 ms instead of ~10 us)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _check_row(row: OpRule, meshes: Sequence[tuple[int, ...]], budget: Budget, seed: int,
               max_examples: int) -> RowReport:
    from ..testing import cpu_mesh

    t0 = time.perf_counter()
    report = RowReport(row=row.name, family=row.family)
    sampler = SAMPLERS.get(row.op)
    if sampler is None:
        report.unchecked = "no sampler for this op (register one with register_sampler)"
        return report
    rng = random.Random(seed)
    draws = [sampler(torch.Generator().manual_seed(seed * 1009 + d)) for d in range(max(1, budget.draws))]
    cases = draws[0][: budget.cases]
    mesh_objs = {shape: cpu_mesh(shape) for shape in meshes}
    line = next((m for s, m in mesh_objs.items() if len(s) == 1), None) or cpu_mesh((2,))
    for shape in meshes:
        report.meshes[shape] = MeshStats()
    for i, case in enumerate(cases):
        run = _prepare(row, case, random.Random(rng.random()))
        if isinstance(run, str):
            report.unbound += 1
            logger.info("%s [%s]: skipped, %s", row.name, case.name, run)
            continue
        for other in draws[1:]:
            extra = _prepare(row, other[i], random.Random(rng.random())) if i < len(other) else "missing"
            if not isinstance(extra, str) and _same_call(run, extra):
                run.extra.append(extra)
        report.cases += 1
        _check_case(run, mesh_objs, line, budget, rng, report, max_examples)
    report.seconds = time.perf_counter() - t0
    return report


def _record(report: RowReport, run: _CaseRun, shape: tuple[int, ...], combo: Sequence[Sequence[Placement]],
            accepted: bool, mismatches: list[Any], wrong: str | None, max_examples: int) -> bool:
    stats = report.meshes[shape]
    if isinstance(wrong, Skip):
        stats.skipped += 1
        return False
    stats.checked += 1
    if accepted:
        stats.accepted += 1
        if wrong is not None:
            stats.false_cosharded += 1
            if len(report.false_examples) < max_examples:
                report.false_examples.append(_describe(run, shape, combo, wrong))
    elif wrong is None:
        stats.missed += 1
        if len(report.missed_examples) < max_examples:
            report.missed_examples.append(_describe(run, shape, combo, str(mismatches[0])))
    return wrong is None


def _check_case(run: _CaseRun, meshes: dict[tuple[int, ...], Any], line: Any, budget: Budget,
                rng: random.Random, report: RowReport, max_examples: int) -> None:
    """1-D columns first (judged by the row on ``line``, a 1-D mesh), then pairs on 2-D meshes."""
    columns = _columns_1d(run, budget, rng)
    accepted_cols: list[tuple[Placement, ...]] = []
    rejected_cols: list[tuple[tuple[Placement, ...], list[Any]]] = []
    for col in columns:
        mism = run.mismatches(line, (col,))
        if mism:
            rejected_cols.append((col, mism))
        else:
            accepted_cols.append(col)
    right_cols: list[tuple[Placement, ...]] = []
    for shape in [s for s in meshes if len(s) == 1]:
        for col in accepted_cols:
            if _record(report, run, shape, (col,), True, [], run.evaluate(shape, (col,)), max_examples):
                right_cols.append(col)
        sample = rejected_cols if len(rejected_cols) <= budget.rejected_1d else rng.sample(rejected_cols,
                                                                                             budget.rejected_1d)
        for col, mism in sample:
            if _record(report, run, shape, (col,), False, mism, run.evaluate(shape, (col,)), max_examples):
                right_cols.append(col)
    if not right_cols:  # no 1-D mesh asked for: numerically right columns are unknown
        right_cols = list(accepted_cols)
    domains = [mem.domain for mem in run.members]
    for shape, mesh in meshes.items():
        if len(shape) == 1:
            continue
        combos: dict[tuple[tuple[Placement, ...], ...], None] = {}
        n_pairs = len(accepted_cols) ** len(shape)
        if n_pairs <= budget.accepted_pairs:
            for p in itertools.product(accepted_cols, repeat=len(shape)):
                combos.setdefault(tuple(p), None)
        else:
            for _ in range(budget.accepted_pairs):
                combos.setdefault(tuple(rng.choice(accepted_cols) for _ in shape), None)
        for i in range(budget.other_pairs):
            if i % 2 == 0:
                combos.setdefault(tuple(rng.choice(right_cols) for _ in shape), None)
            else:
                combos.setdefault(tuple(tuple(rng.choice(d) for d in domains) for _ in shape), None)
        for combo in combos:
            if not _valid_layout(combo):
                continue
            mism = run.mismatches(mesh, combo)
            _record(report, run, shape, combo, not mism, mism, run.evaluate(shape, combo), max_examples)


# ---------------------------------------------------------------------------------------------
# The whole table, and the command line


def check_table(
    table: Table | None = None,
    *,
    rows: Iterable[OpRule] | None = None,
    meshes: Sequence[tuple[int, ...]] = MESHES,
    budget: Budget = CI_BUDGET,
    seed: int = 0,
    progress: Callable[[RowReport], None] | None = None,
) -> list[RowReport]:
    """:func:`check_row` for every row (of ``table``, default the process-wide one)."""
    chosen = list(rows) if rows is not None else list(table if table is not None else default_table())
    reports = []
    for row in chosen:
        rep = check_row(row, meshes, budget, seed)
        reports.append(rep)
        if progress is not None:
            progress(rep)
    return reports


def render(reports: Sequence[RowReport], *, verbose: bool = False) -> str:
    """A plain-text table: per row, combinations checked per mesh, false co-sharded, missed."""
    meshes = sorted({s for r in reports for s in r.meshes}, key=lambda s: (len(s), s))
    mesh_names = ["x".join(map(str, s)) for s in meshes]
    width = max([len("row")] + [len(r.row) for r in reports])
    head = f"{'row':<{width}}  {'family':<18} {'cases':>5} " + " ".join(f"{n:>8}" for n in mesh_names)
    head += f" {'accepted':>8} {'false':>5} {'missed':>6} {'sec':>5}"
    lines = [head, "-" * len(head)]
    for r in reports:
        if r.unchecked:
            lines.append(f"{r.row:<{width}}  {r.family:<18} unchecked: {r.unchecked}")
            continue
        per = " ".join(f"{r.meshes.get(s, MeshStats()).checked:>8}" for s in meshes)
        acc = sum(s.accepted for s in r.meshes.values())
        lines.append(f"{r.row:<{width}}  {r.family:<18} {r.cases:>5} {per} {acc:>8} {r.false_cosharded:>5} "
                     f"{r.missed:>6} {r.seconds:>5.1f}")
        if verbose or r.false_cosharded:
            lines += [f"    FALSE CO-SHARDED {f}" for f in r.false_examples]
        if verbose:
            lines += [f"    missed {f}" for f in r.missed_examples]
    checked = [r for r in reports if not r.unchecked]
    totals = {s: sum(r.meshes.get(s, MeshStats()).checked for r in checked) for s in meshes}
    skipped = sum(st.skipped for r in checked for st in r.meshes.values())
    lines.append("-" * len(head))
    lines.append(
        f"{len(checked)} rows checked ({len(reports) - len(checked)} unchecked); combinations checked: "
        + ", ".join(f"{n}: {totals[s]}" for n, s in zip(mesh_names, meshes))
        + f"; false co-sharded: {sum(r.false_cosharded for r in checked)}; missed opportunities: "
        + f"{sum(r.missed for r in checked)}"
        + (f"; {skipped} not runnable by the CPU kernel (skipped)" if skipped else "")
    )
    return "\n".join(lines)


def _command(args: argparse.Namespace) -> int:
    global RUNNER
    RUNNER = args.runner
    table = default_table()
    rows = table.select(args.rows.split(",")) if args.rows else list(table)
    budget = FULL_BUDGET if args.full else CI_BUDGET
    meshes = tuple(args.mesh) if args.mesh else MESHES

    def progress(rep: RowReport) -> None:
        print(f"  {rep.row}: {rep.checked} checked, {rep.false_cosharded} false, {rep.missed} missed "
              f"({rep.seconds:.1f}s)", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    reports = check_table(rows=rows, meshes=meshes, budget=budget, seed=args.seed, progress=progress)
    print(render(reports, verbose=args.verbose))
    print(f"({time.perf_counter() - t0:.0f}s, budget {'full' if args.full else 'ci'}, seed {args.seed})")
    return 1 if any(r.false_cosharded for r in reports) else 0


def add_subcommand(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``groundtruth`` on the package CLI's subparsers."""
    from .._cli import parse_mesh

    p = subparsers.add_parser("groundtruth", help="check the table's rows against numerics on simulated ranks",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--full", action="store_true", help="the larger sweep (every sampled case, larger budgets)")
    p.add_argument("--rows", default=None, help="comma list of table selectors (names, packets, families)")
    p.add_argument("--mesh", action="append", type=parse_mesh, default=None,
                   help="mesh shape, repeatable (default: 2, 2x2, 2x4)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runner", choices=("auto", "local_tensor", "loop"), default="auto",
                   help="how the op runs on the shards (see RUNNER)")
    p.add_argument("-v", "--verbose", action="store_true", help="show missed-opportunity examples")
    p.set_defaults(func=_command)
    return p
