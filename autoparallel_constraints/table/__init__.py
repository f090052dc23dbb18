"""The compatibility table: which tensor inputs of an op must be co-sharded, and how.

* ``_model`` — the data model (rows, argument roles, alignments, Partial combinations) and the
  co-sharding check; ``_binders`` — each alignment's dim maps, and ``bind`` (a row to a node);
* ``_rows`` — the built-in rows, grouped by meaning; ``_registry`` — the table object;
* ``_groundtruth`` — every row checked numerically on 1-D and 2-D meshes
  (``python -m autoparallel_constraints groundtruth [--full]``).
"""

from ._binders import bind
from ._model import (
    ALL_REDUCES,
    IDEMPOTENT,
    SUM_AVG,
    Alignment,
    ArgSpec,
    Binding,
    BoundArg,
    CheckMemo,
    DimKind,
    Flag,
    Linearity,
    Mismatch,
    OpRule,
    PartialCombo,
    Reduce,
    Role,
    Take,
    check,
    repair_targets,
)
from ._registry import OpSelector, Table, default_table, validate_row

__all__ = [
    "ALL_REDUCES",
    "IDEMPOTENT",
    "SUM_AVG",
    "Alignment",
    "ArgSpec",
    "Binding",
    "BoundArg",
    "DimKind",
    "Flag",
    "Linearity",
    "Mismatch",
    "OpRule",
    "OpSelector",
    "PartialCombo",
    "Reduce",
    "Role",
    "Table",
    "Take",
    "bind",
    "CheckMemo",
    "check",
    "default_table",
    "repair_targets",
    "validate_row",
]
