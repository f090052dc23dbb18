"""Every rank's piece of a global tensor under a placement combination, and the global result
reassembled from per-rank results: the ground truth's model of DTensor's layouts.

Replicate and Shard inputs are cut from the global tensor (``torch.chunk`` semantics, mesh dims
in order, as DTensor does); a Partial input gets random per-rank pieces that reduce to the global
tensor (integer-valued float64, so sums and averages are exact; for max/min one rank holds the
value and the others less/more; products of ±1/±2 factors), so a wrong combination cannot pass by
symmetry. The output is reassembled on every rank (Replicate: the rank's own piece; Shard:
gathered; Partial: reduced).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence

import torch
from torch.distributed.tensor.placement_types import Partial, Placement, Shard

logger = logging.getLogger(__name__)

__all__ = ["FLOATS", "chunk_bounds", "make_locals", "reconstruct"]

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
