"""Sampled calls of each table op for the ground truth: broadcasting, size-1, 0-d and uneven dims,
duplicate indices where the op accumulates. :func:`register_sampler` adds one for your own op; a
guard skips a combination the op itself refuses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..seam.tracing import OpOverload

logger = logging.getLogger(__name__)

__all__ = ["BINARY_SHAPES", "Case", "GUARDS", "Guard", "INPLACE_SHAPES", "SAMPLERS", "Sampler", "Skip", "aten", "register_sampler"]

# ---------------------------------------------------------------------------------------------
# Samples


@dataclass(frozen=True, slots=True)
class Case:
    """One sampled call: positional args (tensors global), keyword args and a readable name."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


Sampler = Callable[[torch.Generator], list[Case]]
SAMPLERS: dict[OpOverload, Sampler] = {}


class Skip(str):
    """A guard's verdict that a combination cannot be run (not that it is wrong)."""


# A guard sees one rank's local input shapes (in input-spec order) before the op runs and returns
# None (run it), a reason (the shapes are inconsistent: the combination is wrong) or a Skip (the
# kernel cannot run such shards though they are consistent, e.g. empty ones). Guards exist for
# kernels that crash the process instead of raising.
Guard = Callable[[Sequence[tuple[int, ...]]], str | None]
GUARDS: dict[OpOverload, Guard] = {}


def register_sampler(*ops: OpOverload, guard: Guard | None = None) -> Callable[[Sampler], Sampler]:
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
