"""The built-in rows of the compatibility table, grouped by meaning and sorted within a group.

Each group is plain data: the op overloads it covers and the row shape they share. Registration
happens in the loop at the bottom (:func:`builtin_rules`).
"""

from __future__ import annotations

import torch

from ._model import Alignment, ArgSpec, Flag, Linearity, OpRule, Role

aten = torch.ops.aten

__all__ = ["builtin_rules"]

# --- index_put family: self[indices] = values (or += with accumulate) --------------------------
# Partial only with accumulate=True: then the op is self + scatter(values), linear in (self, values).
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

# --- binary pointwise with broadcasting -------------------------------------------------------
# Sum-linear in both operands together: Partial only if both are (same reduce op).
ADDITIVE_OPS = (
    aten.add.Tensor,
    aten.add_.Tensor,
    aten.sub.Tensor,
    aten.sub_.Tensor,
)
# Linear in each operand separately: Partial on one operand at a time.
MULTIPLICATIVE_OPS = (
    aten.mul.Tensor,
    aten.mul_.Tensor,
)
# Linear in the numerator only.
DIVISION_OPS = (
    aten.div.Tensor,
    aten.div_.Tensor,
)
BINARY_ARGS = (ArgSpec("self", 0), ArgSpec("other", 1))
DIVISION_ARGS = (ArgSpec("self", 0), ArgSpec("other", 1, partial=False))

# --- ternary select: where(condition, self, other) is linear in (self, other) together ---------
WHERE_OPS = (aten.where.self,)
WHERE_ARGS = (ArgSpec("condition", 0, partial=False), ArgSpec("self", 1), ArgSpec("other", 2))


def builtin_rules() -> list[OpRule]:
    """Every built-in row, in table order."""
    rows: list[OpRule] = []
    for op in INDEX_PUT_OPS:
        rows.append(
            OpRule(
                op,
                "index_put",
                INDEX_PUT_ARGS,
                alignment=Alignment.INDEX_PUT,
                linearity=Linearity.LINEAR,
                partial_only_if=ACCUMULATE,
                note="values broadcast onto self[indices]; indexed dims and index tensors Replicate",
            )
        )
    for op in ADDITIVE_OPS:
        rows.append(OpRule(op, "pointwise", BINARY_ARGS, linearity=Linearity.LINEAR))
    for op in MULTIPLICATIVE_OPS:
        rows.append(OpRule(op, "pointwise", BINARY_ARGS, linearity=Linearity.MULTILINEAR))
    for op in DIVISION_OPS:
        rows.append(OpRule(op, "pointwise", DIVISION_ARGS, linearity=Linearity.MULTILINEAR))
    for op in WHERE_OPS:
        rows.append(OpRule(op, "pointwise", WHERE_ARGS, linearity=Linearity.LINEAR))
    return rows
