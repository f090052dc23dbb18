"""The compatibility table: which tensor inputs of an op must be co-sharded, and how."""

from ._model import (
    Alignment,
    ArgSpec,
    Binding,
    DimKind,
    Flag,
    Linearity,
    Mismatch,
    OpRule,
    Role,
    bind,
    check,
    repair_targets,
)
from ._registry import OpSelector, Table, default_table, validate_row

__all__ = [
    "Alignment",
    "ArgSpec",
    "Binding",
    "DimKind",
    "Flag",
    "Linearity",
    "Mismatch",
    "OpRule",
    "OpSelector",
    "Role",
    "Table",
    "bind",
    "check",
    "default_table",
    "repair_targets",
    "validate_row",
]
