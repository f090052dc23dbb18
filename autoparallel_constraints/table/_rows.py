"""The built-in rows of the compatibility table, grouped by meaning and sorted within a group.

Each group is plain data: the op overloads it covers, the arguments they share, and their Partial
rule, stated as :class:`PartialCombo` entries (which arguments may be Partial together, with which
reduce ops, and what the output then is) with the reason each is exact. Registration happens in
the loops at the bottom (:func:`builtin_rules`).

Reading a Partial rule: ``PartialCombo(("self", "other"), SUM_AVG)`` — both Partial(sum), or both
Partial(avg), make the output Partial with the same op; ``Take.ANY`` — any non-empty subset of
them, the rest Replicate; ``Take.ONE`` — exactly one. ``IDEMPOTENT`` ops (avg, max, min) leave a
value replicated on every rank unchanged, so a replicated operand can pass through them.

Every combination here is checked against ground truth on 1-D and 2-D meshes by
``autoparallel_constraints.lab._groundtruth``. Non-accumulating writes through an index tensor
(index_put without accumulate, index_copy, scatter with src) take no Partial operand: with
duplicate indices the element written is unspecified (and on GPU may differ between ranks), so a
rank-wise reduction of such writes is not the write of the reduction.
"""

from __future__ import annotations

import torch

from ._model import (
    ALL_REDUCES,
    IDEMPOTENT,
    SUM_AVG,
    Alignment,
    ArgSpec,
    Flag,
    OpRule,
    PartialCombo,
    Reduce,
    Role,
    Take,
)

aten = torch.ops.aten

__all__ = ["builtin_rules"]

MAX_MIN = (Reduce.MAX, Reduce.MIN)


def _combos(*combos: PartialCombo) -> tuple[PartialCombo, ...]:
    return combos


# --- index_put family: self[indices] = values (or += with accumulate) --------------------------
INDEX_PUT_OPS = (
    aten._unsafe_index_put.default,
    aten.index_put.default,
    aten.index_put_.default,
)
INDEX_PUT_ARGS = (
    ArgSpec("self", 0),
    ArgSpec("indices", 1, role=Role.INDEX, partial=False),
    ArgSpec("values", 2),
)
ACCUMULATE = Flag("accumulate", position=3, required=True, default=False)
INDEX_PUT_PARTIALS = _combos(
    PartialCombo(("self", "values"), SUM_AVG, only_if=ACCUMULATE,
                 why="with accumulate the op is self + scatter_add(values), linear in both together"),
    PartialCombo(("self", "values"), (Reduce.AVG,), Take.ANY, only_if=ACCUMULATE,
                 why="affine in each: the mean of shifted values is the shifted mean"),
    PartialCombo(("self",), MAX_MIN, only_if=ACCUMULATE,
                 why="adding the same scattered values on every rank commutes with max/min"),
)

# --- pointwise with broadcasting: arithmetic ----------------------------------------------------
ALPHA_ONE = Flag("alpha", position=2, required=1, default=1)
BINARY_ARGS = (ArgSpec("self", 0), ArgSpec("other", 1))
NUMERATOR_ARGS = (ArgSpec("self", 0), ArgSpec("other", 1, partial=False))
# self + alpha * other
ADD_OPS = (
    aten.add.Tensor,
    aten.add_.Tensor,
)
ADD_PARTIALS = _combos(
    PartialCombo(("self", "other"), SUM_AVG, why="Σ(a_i + αb_i) = Σa_i + αΣb_i"),
    PartialCombo(("self", "other"), (Reduce.AVG,), Take.ANY, why="affine: a replicated term passes through avg"),
    PartialCombo(("self",), MAX_MIN, why="adding a replicated term commutes with max/min"),
    PartialCombo(("other",), MAX_MIN, only_if=ALPHA_ONE, why="adding a replicated term commutes with max/min"),
)
# self - alpha * other
SUB_OPS = (
    aten.sub.Tensor,
    aten.sub_.Tensor,
)
SUB_PARTIALS = _combos(
    PartialCombo(("self", "other"), SUM_AVG, why="Σ(a_i − αb_i) = Σa_i − αΣb_i"),
    PartialCombo(("self", "other"), (Reduce.AVG,), Take.ANY, why="affine: a replicated term passes through avg"),
    PartialCombo(("self",), MAX_MIN, why="subtracting a replicated term commutes with max/min"),
    PartialCombo(("other",), MAX_MIN, out=(Reduce.MIN, Reduce.MAX), only_if=ALPHA_ONE,
                 why="a − max b_i = min(a − b_i)"),
)
# self * other: linear in each operand separately
MUL_OPS = (
    aten.mul.Tensor,
    aten.mul_.Tensor,
)
MUL_PARTIALS = _combos(
    PartialCombo(("self", "other"), SUM_AVG, Take.ONE, why="bilinear: linear in each operand, not in both"),
    PartialCombo(("self", "other"), (Reduce.PRODUCT,), why="Π(a_i b_i) = Πa_i · Πb_i"),
)
# self / other: linear in the numerator only
DIV_OPS = (
    aten.div.Tensor,
    aten.div_.Tensor,
)
DIV_PARTIALS = _combos(PartialCombo(("self",), SUM_AVG, why="linear in the numerator"))
TRUE_DIVISION = Flag("rounding_mode", position=2, required=None, default=None)
DIV_MODE_OPS = (aten.div.Tensor_mode,)
DIV_MODE_PARTIALS = _combos(
    PartialCombo(("self",), SUM_AVG, only_if=TRUE_DIVISION, why="linear in the numerator without rounding"),
)
# maximum(a, b) and fmax: max commutes with max, and distributes over min
MAXIMUM_OPS = (
    aten.fmax.default,
    aten.maximum.default,
)
MAXIMUM_PARTIALS = _combos(
    PartialCombo(("self", "other"), (Reduce.MAX,), Take.ANY, why="max(max a_i, max b_i) = max_i max(a_i, b_i)"),
    PartialCombo(("self", "other"), (Reduce.MIN,), Take.ONE, why="max(min a_i, b) = min_i max(a_i, b)"),
)
MINIMUM_OPS = (
    aten.fmin.default,
    aten.minimum.default,
)
MINIMUM_PARTIALS = _combos(
    PartialCombo(("self", "other"), (Reduce.MIN,), Take.ANY, why="min(min a_i, min b_i) = min_i min(a_i, b_i)"),
    PartialCombo(("self", "other"), (Reduce.MAX,), Take.ONE, why="min(max a_i, b) = max_i min(a_i, b)"),
)
# Neither linear nor monotone in a way any reduction survives: no Partial.
NONLINEAR_BINARY_OPS = (
    aten.atan2.default,
    aten.fmod.Tensor,
    aten.pow.Tensor_Tensor,
    aten.remainder.Tensor,
)

# --- pointwise with broadcasting: comparisons and logic (boolean or integer results) -----------
COMPARISON_OPS = (
    aten.eq.Tensor,
    aten.ge.Tensor,
    aten.gt.Tensor,
    aten.le.Tensor,
    aten.lt.Tensor,
    aten.ne.Tensor,
)
LOGICAL_OPS = (
    aten.bitwise_and.Tensor,
    aten.bitwise_or.Tensor,
    aten.bitwise_xor.Tensor,
    aten.logical_and.default,
    aten.logical_or.default,
    aten.logical_xor.default,
)
NO_PARTIAL_BINARY_ARGS = (ArgSpec("self", 0, partial=False), ArgSpec("other", 1, partial=False))

# --- pointwise with broadcasting: selection ------------------------------------------------------
# Each output element is one of the branches' elements: every elementwise reduction commutes with
# picking, when both branches carry it; an idempotent one also when only some do.
SELECTION = _combos(
    PartialCombo(("self", "other"), ALL_REDUCES, why="picking commutes with every elementwise reduction"),
    PartialCombo(("self", "other"), IDEMPOTENT, Take.ANY, why="a replicated branch passes through avg/max/min"),
)
WHERE_OPS = (aten.where.self,)
WHERE_ARGS = (ArgSpec("condition", 0, partial=False), ArgSpec("self", 1), ArgSpec("other", 2))
# masked_fill(self, mask, value): value is a Python scalar
MASKED_FILL_SCALAR_OPS = (
    aten.masked_fill.Scalar,
    aten.masked_fill_.Scalar,
)
MASKED_FILL_SCALAR_ARGS = (ArgSpec("self", 0), ArgSpec("mask", 1, partial=False))
FILL_ZERO = Flag("value", position=2, required=frozenset({0, 0.0}), default=None)
MASKED_FILL_SCALAR_PARTIALS = _combos(
    PartialCombo(("self",), IDEMPOTENT, why="the fill value is the same on every rank"),
    PartialCombo(("self",), (Reduce.SUM,), only_if=FILL_ZERO, why="a zero fill sums to zero"),
)
# masked_fill(self, mask, value): value is a 0-d tensor, a branch like where's
MASKED_FILL_TENSOR_OPS = (
    aten.masked_fill.Tensor,
    aten.masked_fill_.Tensor,
)
MASKED_FILL_TENSOR_ARGS = (ArgSpec("self", 0), ArgSpec("mask", 1, partial=False), ArgSpec("value", 2))
MASKED_FILL_TENSOR_PARTIALS = _combos(
    PartialCombo(("self", "value"), ALL_REDUCES, why="picking commutes with every elementwise reduction"),
    PartialCombo(("self", "value"), IDEMPOTENT, Take.ANY, why="a replicated branch passes through avg/max/min"),
)

# --- pointwise with broadcasting: interpolation and fused multiply-add --------------------------
# lerp(start, end, weight) = start + weight * (end - start): linear in (start, end) for a fixed weight
LERP_SCALAR_OPS = (
    aten.lerp.Scalar,
    aten.lerp_.Scalar,
)
LERP_TENSOR_OPS = (
    aten.lerp.Tensor,
    aten.lerp_.Tensor,
)
LERP_SCALAR_ARGS = (ArgSpec("self", 0), ArgSpec("end", 1))
LERP_TENSOR_ARGS = (ArgSpec("self", 0), ArgSpec("end", 1), ArgSpec("weight", 2, partial=False))
LERP_PARTIALS = _combos(
    PartialCombo(("self", "end"), SUM_AVG, why="linear in start and end together for a fixed weight"),
    PartialCombo(("self", "end"), (Reduce.AVG,), Take.ANY, why="affine in each"),
)
# addcmul(self, t1, t2, value) = self + value * t1 * t2
ADDCMUL_OPS = (
    aten.addcmul.default,
    aten.addcmul_.default,
)
ADDCMUL_ARGS = (ArgSpec("self", 0), ArgSpec("tensor1", 1), ArgSpec("tensor2", 2))
ADDCMUL_PARTIALS = _combos(
    PartialCombo(("self", "tensor1"), SUM_AVG, why="linear in self and one factor together"),
    PartialCombo(("self", "tensor2"), SUM_AVG, why="linear in self and one factor together"),
    PartialCombo(("self", "tensor1"), (Reduce.AVG,), Take.ANY, why="affine in self and in one factor"),
    PartialCombo(("self", "tensor2"), (Reduce.AVG,), Take.ANY, why="affine in self and in one factor"),
    PartialCombo(("self",), MAX_MIN, why="adding a replicated term commutes with max/min"),
)
# addcdiv(self, t1, t2, value) = self + value * t1 / t2
ADDCDIV_OPS = (
    aten.addcdiv.default,
    aten.addcdiv_.default,
)
ADDCDIV_ARGS = (ArgSpec("self", 0), ArgSpec("tensor1", 1), ArgSpec("tensor2", 2, partial=False))
ADDCDIV_PARTIALS = _combos(
    PartialCombo(("self", "tensor1"), SUM_AVG, why="linear in self and the numerator together"),
    PartialCombo(("self", "tensor1"), (Reduce.AVG,), Take.ANY, why="affine in each"),
    PartialCombo(("self",), MAX_MIN, why="adding a replicated term commutes with max/min"),
)

# --- pointwise backward: linear in the incoming gradient ----------------------------------------
GRAD_ARGS = (ArgSpec("grad_output", 0), ArgSpec("self", 1, partial=False))
GRAD_OUTPUT_ARGS = (ArgSpec("grad_output", 0), ArgSpec("output", 1, partial=False))
LINEAR_IN_GRAD = _combos(PartialCombo(("grad_output",), SUM_AVG, why="linear in the incoming gradient"))
POINTWISE_BACKWARD_OPS = (
    aten.gelu_backward.default,
    aten.silu_backward.default,
)
ACTIVATION_BACKWARD_OPS = (
    aten.sigmoid_backward.default,
    aten.tanh_backward.default,
)
# threshold_backward = where(self <= threshold, 0, grad): picks the gradient or a constant 0
THRESHOLD_BACKWARD_OPS = (aten.threshold_backward.default,)
THRESHOLD_BACKWARD_PARTIALS = _combos(
    PartialCombo(("grad_output",), ALL_REDUCES, why="picks the gradient or zero; zero is the same on every rank"),
)
# softmax backward along dim: pointwise but the dim is reduced over
SOFTMAX_BACKWARD_OPS = (
    aten._log_softmax_backward_data.default,
    aten._softmax_backward_data.default,
)

# --- copy: out = src broadcast into self's shape -------------------------------------------------
COPY_OPS = (
    aten.copy.default,
    aten.copy_.default,
)
COPY_ARGS = (ArgSpec("self", 0), ArgSpec("src", 1))
COPY_PARTIALS = _combos(
    PartialCombo(("src",), ALL_REDUCES, why="the output is src"),
    PartialCombo(("self", "src"), ALL_REDUCES, why="the output is src; self's values are overwritten"),
    PartialCombo(("self",), ALL_REDUCES, out=(None,) * len(ALL_REDUCES),
                 why="self's values are overwritten by a replicated src: the output is Replicate"),
)

# --- cat and stack: every input aligned except along the cat/stack dim ---------------------------
CAT_OPS = (aten.cat.default,)
STACK_OPS = (aten.stack.default,)
LIST_ARGS = (ArgSpec("tensors", 0),)
CONCAT_PARTIALS = _combos(
    PartialCombo(("tensors",), ALL_REDUCES, why="each output element is one input element"),
    PartialCombo(("tensors",), IDEMPOTENT, Take.ANY, why="a replicated piece passes through avg/max/min"),
)

# --- scatter family: self with a region (or indexed positions) replaced or accumulated ----------
# slice/select scatters replace a fixed region: selection, no duplicates possible
SLICE_SCATTER_OPS = (aten.slice_scatter.default,)
SELECT_SCATTER_OPS = (aten.select_scatter.default,)
REGION_SCATTER_ARGS = (ArgSpec("self", 0), ArgSpec("src", 1))
REGION_SCATTER_PARTIALS = _combos(
    PartialCombo(("self", "src"), ALL_REDUCES, why="each output element is one of self's or src's"),
    PartialCombo(("self", "src"), IDEMPOTENT, Take.ANY, why="a replicated piece passes through avg/max/min"),
)
# accumulate through an index: self + scatter_add(source)
INDEX_ADD_OPS = (
    aten.index_add.default,
    aten.index_add_.default,
)
INDEX_SCATTER_ARGS = (
    ArgSpec("self", 0),
    ArgSpec("index", 2, role=Role.INDEX, partial=False),
    ArgSpec("source", 3),
)
SCATTER_ADD_OPS = (
    aten.scatter_add.default,
    aten.scatter_add_.default,
)
SCATTER_ARGS = (
    ArgSpec("self", 0),
    ArgSpec("index", 2, role=Role.INDEX, partial=False),
    ArgSpec("src", 3),
)


def _accumulating(src: str, only_if: Flag | None = None) -> tuple[PartialCombo, ...]:
    """The Partial rule of ``self + scatter_add(src)`` (index_add, scatter_add, scatter_reduce
    with sum/mean). ``src`` alone may not be P(max|min): duplicate indices add two of its elements."""
    return (
        PartialCombo(("self", src), SUM_AVG, only_if=only_if, why=f"linear in self and {src} together"),
        PartialCombo(("self", src), (Reduce.AVG,), Take.ANY, only_if=only_if, why="affine in each"),
        PartialCombo(("self",), MAX_MIN, only_if=only_if,
                     why="adding the same scattered values on every rank commutes with max/min"),
    )


# overwrite through an index: no Partial operand (duplicates, see the module docstring)
INDEX_COPY_OPS = (
    aten.index_copy.default,
    aten.index_copy_.default,
)
SCATTER_SRC_OPS = (
    aten.scatter.src,
    aten.scatter_.src,
)
# scatter a Python scalar: the value is the same on every rank, duplicates write the same value
SCATTER_VALUE_OPS = (
    aten.scatter.value,
    aten.scatter_.value,
)
SCATTER_VALUE_ARGS = (ArgSpec("self", 0), ArgSpec("index", 2, role=Role.INDEX, partial=False))
SCATTER_VALUE_PARTIALS = _combos(
    PartialCombo(("self",), IDEMPOTENT, why="the scattered value is the same on every rank"),
)
# scatter_reduce(self, dim, index, src, reduce, include_self): the rule depends on reduce
SCATTER_REDUCE_OPS = (
    aten.scatter_reduce.two,
    aten.scatter_reduce_.two,
)
REDUCE_ADDITIVE = Flag("reduce", position=4, required=frozenset({"sum", "mean"}), default=None)
REDUCE_AMAX = Flag("reduce", position=4, required="amax", default=None)
REDUCE_AMIN = Flag("reduce", position=4, required="amin", default=None)
SCATTER_REDUCE_PARTIALS = _accumulating("src", REDUCE_ADDITIVE) + _combos(
    PartialCombo(("self", "src"), (Reduce.MAX,), Take.ANY, only_if=REDUCE_AMAX,
                 why="amax of maxima is the max of amaxes"),
    PartialCombo(("self",), (Reduce.MIN,), only_if=REDUCE_AMAX, why="max(min a_i, s) = min_i max(a_i, s)"),
    PartialCombo(("self", "src"), (Reduce.MIN,), Take.ANY, only_if=REDUCE_AMIN,
                 why="amin of minima is the min of amins"),
    PartialCombo(("self",), (Reduce.MAX,), only_if=REDUCE_AMIN, why="min(max a_i, s) = max_i min(a_i, s)"),
)

# --- gather family: reading through an index is a selection --------------------------------------
READ_SELF = _combos(PartialCombo(("self",), ALL_REDUCES, why="reading elements commutes with every reduction"))
INDEX_OPS = (
    aten._unsafe_index.Tensor,
    aten.index.Tensor,
)
INDEX_ARGS = (ArgSpec("self", 0), ArgSpec("indices", 1, role=Role.INDEX, partial=False))
INDEX_SELECT_OPS = (aten.index_select.default,)
TAKE_ALONG_OPS = (aten.gather.default,)
DIM_INDEX_ARGS = (ArgSpec("self", 0), ArgSpec("index", 2, role=Role.INDEX, partial=False))
EMBEDDING_OPS = (aten.embedding.default,)
EMBEDDING_ARGS = (ArgSpec("weight", 0), ArgSpec("indices", 1, role=Role.INDEX, partial=False))
EMBEDDING_PARTIALS = _combos(PartialCombo(("weight",), ALL_REDUCES, why="reading rows commutes with every reduction"))
EMBEDDING_BACKWARD_OPS = (aten.embedding_dense_backward.default,)
EMBEDDING_BACKWARD_ARGS = (ArgSpec("grad_output", 0), ArgSpec("indices", 1, role=Role.INDEX, partial=False))

# --- contractions: labels absent from the output are summed over ---------------------------------
MULTILINEAR_OPERANDS = "operands multilinear: linear in each, not in two at once"
CONTRACTIONS = (
    (aten.bmm.default, "bmk,bkn->bmn", (ArgSpec("self", 0), ArgSpec("mat2", 1))),
    (aten.dot.default, "k,k->", (ArgSpec("self", 0), ArgSpec("tensor", 1))),
    (aten.mm.default, "mk,kn->mn", (ArgSpec("self", 0), ArgSpec("mat2", 1))),
    (aten.mv.default, "mk,k->m", (ArgSpec("self", 0), ArgSpec("vec", 1))),
)
EINSUM_OPS = (aten.einsum.default,)
EINSUM_ARGS = (ArgSpec("tensors", 1),)

# --- normalization and attention ----------------------------------------------------------------
LAYER_NORM_OPS = (aten.native_layer_norm.default,)
LAYER_NORM_ARGS = (
    ArgSpec("input", 0, partial=False),
    ArgSpec("weight", 2, partial=False),
    ArgSpec("bias", 3, partial=False),
)
LAYER_NORM_BACKWARD_OPS = (aten.native_layer_norm_backward.default,)
LAYER_NORM_BACKWARD_ARGS = (
    ArgSpec("grad_out", 0),
    ArgSpec("input", 1, partial=False),
    ArgSpec("mean", 3, partial=False),
    ArgSpec("rstd", 4, partial=False),
    ArgSpec("weight", 5, partial=False),
    ArgSpec("bias", 6, partial=False),
)
GRAD_OUT_LINEAR = _combos(PartialCombo(("grad_out",), SUM_AVG, why="every gradient is linear in grad_out"))
ATTENTION_OPS = (aten._scaled_dot_product_flash_attention_for_cpu.default,)
ATTENTION_ARGS = (
    ArgSpec("query", 0, partial=False),
    ArgSpec("key", 1, partial=False),
    ArgSpec("value", 2, partial=False),
)
ATTENTION_BACKWARD_OPS = (aten._scaled_dot_product_flash_attention_for_cpu_backward.default,)
ATTENTION_BACKWARD_ARGS = (
    ArgSpec("grad_out", 0),
    ArgSpec("query", 1, partial=False),
    ArgSpec("key", 2, partial=False),
    ArgSpec("value", 3, partial=False),
    ArgSpec("out", 4, partial=False),
    ArgSpec("logsumexp", 5, partial=False),
)


def builtin_rules() -> list[OpRule]:
    """Every built-in row, in table order."""
    rows: list[OpRule] = []

    def add(ops, family: str, args, partials=(), **kw) -> None:  # type: ignore[no-untyped-def]
        for op in ops:
            rows.append(OpRule(op, family, args, partials=tuple(partials), **kw))

    add(INDEX_PUT_OPS, "index_put", INDEX_PUT_ARGS, INDEX_PUT_PARTIALS, alignment=Alignment.INDEX_PUT,
        note="values broadcast onto self[indices]; indexed dims and index tensors Replicate")

    add(ADD_OPS, "pointwise", BINARY_ARGS, ADD_PARTIALS)
    add(SUB_OPS, "pointwise", BINARY_ARGS, SUB_PARTIALS)
    add(MUL_OPS, "pointwise", BINARY_ARGS, MUL_PARTIALS)
    add(DIV_OPS, "pointwise", NUMERATOR_ARGS, DIV_PARTIALS)
    add(DIV_MODE_OPS, "pointwise", NUMERATOR_ARGS, DIV_MODE_PARTIALS)
    add(MAXIMUM_OPS, "pointwise", BINARY_ARGS, MAXIMUM_PARTIALS)
    add(MINIMUM_OPS, "pointwise", BINARY_ARGS, MINIMUM_PARTIALS)
    add(NONLINEAR_BINARY_OPS, "pointwise", NO_PARTIAL_BINARY_ARGS)
    add(COMPARISON_OPS, "pointwise", NO_PARTIAL_BINARY_ARGS, note="boolean result: never Partial")
    add(LOGICAL_OPS, "pointwise", NO_PARTIAL_BINARY_ARGS, note="boolean or integer result: never Partial")
    add(WHERE_OPS, "pointwise", WHERE_ARGS, SELECTION)
    add(MASKED_FILL_SCALAR_OPS, "pointwise", MASKED_FILL_SCALAR_ARGS, MASKED_FILL_SCALAR_PARTIALS)
    add(MASKED_FILL_TENSOR_OPS, "pointwise", MASKED_FILL_TENSOR_ARGS, MASKED_FILL_TENSOR_PARTIALS)
    add(LERP_SCALAR_OPS, "pointwise", LERP_SCALAR_ARGS, LERP_PARTIALS)
    add(LERP_TENSOR_OPS, "pointwise", LERP_TENSOR_ARGS, LERP_PARTIALS)
    add(ADDCMUL_OPS, "pointwise", ADDCMUL_ARGS, ADDCMUL_PARTIALS)
    add(ADDCDIV_OPS, "pointwise", ADDCDIV_ARGS, ADDCDIV_PARTIALS)

    add(POINTWISE_BACKWARD_OPS, "pointwise_backward", GRAD_ARGS, LINEAR_IN_GRAD)
    add(ACTIVATION_BACKWARD_OPS, "pointwise_backward", GRAD_OUTPUT_ARGS, LINEAR_IN_GRAD)
    add(THRESHOLD_BACKWARD_OPS, "pointwise_backward", GRAD_ARGS, THRESHOLD_BACKWARD_PARTIALS)
    add(SOFTMAX_BACKWARD_OPS, "pointwise_backward", GRAD_OUTPUT_ARGS, LINEAR_IN_GRAD, whole_dims_arg="dim",
        note="the softmax dim is reduced over: whole")

    add(COPY_OPS, "copy", COPY_ARGS, COPY_PARTIALS, note="src broadcast into self's shape")

    add(CAT_OPS, "cat", LIST_ARGS, CONCAT_PARTIALS, alignment=Alignment.CAT)
    add(STACK_OPS, "cat", LIST_ARGS, CONCAT_PARTIALS, alignment=Alignment.STACK)

    add(SLICE_SCATTER_OPS, "scatter", REGION_SCATTER_ARGS, REGION_SCATTER_PARTIALS, alignment=Alignment.SLICE_SCATTER)
    add(SELECT_SCATTER_OPS, "scatter", REGION_SCATTER_ARGS, REGION_SCATTER_PARTIALS,
        alignment=Alignment.SELECT_SCATTER)
    add(INDEX_ADD_OPS, "scatter", INDEX_SCATTER_ARGS, _accumulating("source"), alignment=Alignment.INDEX_SCATTER)
    add(INDEX_COPY_OPS, "scatter", INDEX_SCATTER_ARGS, alignment=Alignment.INDEX_SCATTER,
        note="duplicate indices make the written element unspecified: no Partial")
    add(SCATTER_SRC_OPS, "scatter", SCATTER_ARGS, alignment=Alignment.SCATTER,
        note="duplicate indices make the written element unspecified: no Partial")
    add(SCATTER_VALUE_OPS, "scatter", SCATTER_VALUE_ARGS, SCATTER_VALUE_PARTIALS, alignment=Alignment.SCATTER)
    add(SCATTER_ADD_OPS, "scatter", SCATTER_ARGS, _accumulating("src"), alignment=Alignment.SCATTER)
    add(SCATTER_REDUCE_OPS, "scatter", SCATTER_ARGS, SCATTER_REDUCE_PARTIALS, alignment=Alignment.SCATTER,
        note="reduce='prod' takes no Partial")

    add(INDEX_OPS, "gather", INDEX_ARGS, READ_SELF, alignment=Alignment.GATHER,
        note="index tensors lay out the indexed result dims and may shard with them")
    add(INDEX_SELECT_OPS, "gather", DIM_INDEX_ARGS, READ_SELF, alignment=Alignment.INDEX_SELECT)
    add(TAKE_ALONG_OPS, "gather", DIM_INDEX_ARGS, READ_SELF, alignment=Alignment.TAKE_ALONG)
    add(EMBEDDING_OPS, "gather", EMBEDDING_ARGS, EMBEDDING_PARTIALS, alignment=Alignment.EMBEDDING,
        note="the vocabulary dim is indexed: a vocab-sharded weight needs masking, which the op does not do")
    add(EMBEDDING_BACKWARD_OPS, "gather", EMBEDDING_BACKWARD_ARGS, LINEAR_IN_GRAD,
        alignment=Alignment.EMBEDDING_BACKWARD, note="positions summed over unless scale_grad_by_freq")

    for op, equation, args in CONTRACTIONS:
        rows.append(OpRule(op, "contraction", args, alignment=Alignment.EINSUM, equation=equation,
                           partials=(PartialCombo(tuple(a.name for a in args), SUM_AVG, Take.ONE,
                                                  why=MULTILINEAR_OPERANDS),)))
    add(EINSUM_OPS, "contraction", EINSUM_ARGS,
        (PartialCombo(("tensors",), SUM_AVG, Take.ONE, why=MULTILINEAR_OPERANDS),), alignment=Alignment.EINSUM)

    add(LAYER_NORM_OPS, "normalization", LAYER_NORM_ARGS, alignment=Alignment.LAYER_NORM)
    add(LAYER_NORM_BACKWARD_OPS, "normalization", LAYER_NORM_BACKWARD_ARGS, GRAD_OUT_LINEAR,
        alignment=Alignment.LAYER_NORM_BACKWARD, note="weight/bias gradients are sums over the leading dims")
    add(ATTENTION_OPS, "attention", ATTENTION_ARGS, alignment=Alignment.ATTENTION)
    add(ATTENTION_BACKWARD_OPS, "attention", ATTENTION_BACKWARD_ARGS, GRAD_OUT_LINEAR,
        alignment=Alignment.ATTENTION_BACKWARD, note="key/value gradients are sums over the query sequence")
    return rows
