"""The table registry: rows keyed by op overload, validated on registration, looked up by name."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from ..errors import InvalidRowError, UnknownOpError
from ._model import Alignment, ArgSpec, Linearity, OpRule, Role

logger = logging.getLogger(__name__)

__all__ = ["OpSelector", "Table", "default_table"]

OpSelector = str | torch._ops.OpOverload | torch._ops.OpOverloadPacket


class Table:
    """A set of :class:`OpRule` rows, one per op overload.

    Registering a second row for the same overload raises unless ``override=True``.
    """

    def __init__(self, rows: Iterable[OpRule] = ()) -> None:
        self._rows: dict[torch._ops.OpOverload, OpRule] = {}
        for row in rows:
            self.register(row)

    # -- registration --------------------------------------------------------------------------
    def register(self, row: OpRule, *, override: bool = False) -> OpRule:
        """Validate ``row`` and add it. Returns the row, so it can be used as an expression."""
        validate_row(row)
        if row.op in self._rows and not override:
            raise InvalidRowError(
                f"{row.name} already has a row (family {self._rows[row.op].family!r}); "
                "pass override=True to replace it"
            )
        if row.op in self._rows:
            logger.info("overriding table row %s", row.name)
        self._rows[row.op] = row
        return row

    def unregister(self, op: torch._ops.OpOverload) -> OpRule:
        try:
            return self._rows.pop(op)
        except KeyError:
            raise UnknownOpError(f"{op} has no row to remove") from None

    def copy(self) -> Table:
        return Table(self._rows.values())

    # -- lookup --------------------------------------------------------------------------------
    def __contains__(self, op: object) -> bool:
        return op in self._rows

    def __iter__(self) -> Iterator[OpRule]:
        return iter(self._rows.values())

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, op: Any) -> OpRule | None:
        return self._rows.get(op)

    def names(self) -> list[str]:
        """Every name a selector may use: overloads, packets and families."""
        out: set[str] = set()
        for row in self._rows.values():
            out.update({row.name, row.name.removeprefix("aten."), _packet_name(row.op), row.family})
        return sorted(out)

    def select(self, selectors: Iterable[OpSelector] | OpSelector | None = None) -> list[OpRule]:
        """Rows chosen by names (``"index_put"``, ``"aten.add.Tensor"``, a family such as
        ``"pointwise"``), op packets (``torch.ops.aten.add``) or overloads; None means all.

        A bare name selects every row whose overload, packet or family has that name.
        """
        if selectors is None:
            return list(self._rows.values())
        if isinstance(selectors, (str, torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            selectors = [selectors]
        chosen: dict[torch._ops.OpOverload, OpRule] = {}
        for sel in selectors:
            rows = self._match(sel)
            if not rows:
                raise UnknownOpError(self._unknown_message(sel))
            for row in rows:
                chosen[row.op] = row
        return list(chosen.values())

    def _match(self, sel: OpSelector) -> list[OpRule]:
        if isinstance(sel, torch._ops.OpOverload):
            row = self._rows.get(sel)
            return [row] if row is not None else []
        if isinstance(sel, torch._ops.OpOverloadPacket):
            return [r for r in self._rows.values() if r.op.overloadpacket is sel]
        if isinstance(sel, str):
            name = sel.strip()
            return [
                r
                for r in self._rows.values()
                if name in (r.name, r.name.removeprefix("aten."), _packet_name(r.op), f"aten.{_packet_name(r.op)}", r.family)
            ]
        raise TypeError(sel)

    def _unknown_message(self, sel: OpSelector) -> str:
        text = str(sel)
        close = difflib.get_close_matches(text.removeprefix("aten."), self.names(), n=5, cutoff=0.5)
        hint = f" Close names: {', '.join(close)}." if close else ""
        return (
            f"No compatibility-table row matches {text!r}.{hint} "
            f"Known families: {', '.join(sorted({r.family for r in self._rows.values()}))}. "
            "Register a row for your own op with autoparallel_constraints.register_rule(...)."
        )


def _packet_name(op: torch._ops.OpOverload) -> str:
    return op.overloadpacket.__name__


def validate_row(row: OpRule) -> None:
    """Raise :class:`InvalidRowError` unless the row is consistent with its op's schema."""
    where = f"row {getattr(row, 'op', '?')}"
    if not isinstance(row, OpRule):
        raise InvalidRowError(f"expected an OpRule, got {type(row).__name__}")
    if not isinstance(row.op, torch._ops.OpOverload):
        raise InvalidRowError(f"{where}: op must be an OpOverload such as torch.ops.aten.add.Tensor")
    schema = row.op._schema
    positions = [a.position for a in row.args]
    if len(set(positions)) != len(positions):
        raise InvalidRowError(f"{where}: two arguments share a position {positions}")
    names = [a.name for a in row.args]
    if len(set(names)) != len(names):
        raise InvalidRowError(f"{where}: two arguments share a name {names}")
    for a in row.args:
        if not isinstance(a, ArgSpec):
            raise InvalidRowError(f"{where}: args must be ArgSpec, got {type(a).__name__}")
        if a.position >= len(schema.arguments):
            raise InvalidRowError(f"{where}: argument {a.name!r} at position {a.position}, but {schema} has "
                                  f"{len(schema.arguments)} arguments")
        schema_arg = schema.arguments[a.position]
        type_text = str(schema_arg.type)
        if "Tensor" not in type_text and "Scalar" not in type_text:
            raise InvalidRowError(
                f"{where}: argument {a.name!r} is position {a.position} = {schema_arg.name}: {type_text}, "
                "not a tensor argument of the schema"
            )
        if a.role is Role.INDEX and a.partial:
            raise InvalidRowError(f"{where}: index argument {a.name!r} cannot be Partial-capable")
    aligned = [a for a in row.args if a.role is Role.ALIGNED]
    if not aligned:
        raise InvalidRowError(f"{where}: a row needs at least one ALIGNED argument")
    if row.alignment is Alignment.INDEX_PUT:
        if {"self", "values"} - set(names):
            raise InvalidRowError(f"{where}: INDEX_PUT alignment needs arguments named 'self' and 'values'")
        if not any(a.role is Role.INDEX for a in row.args):
            raise InvalidRowError(f"{where}: INDEX_PUT alignment needs an INDEX argument")
    if row.linearity is Linearity.NONE and row.partial_only_if is not None:
        raise InvalidRowError(f"{where}: partial_only_if makes no sense with Linearity.NONE")
    if row.linearity is not Linearity.NONE and not any(a.partial for a in aligned):
        raise InvalidRowError(f"{where}: Linearity.{row.linearity.name} but no argument is Partial-capable")
    if row.partial_only_if is not None:
        flag = row.partial_only_if
        if flag.position >= len(schema.arguments) or schema.arguments[flag.position].name != flag.name:
            raise InvalidRowError(f"{where}: flag {flag.name!r} is not argument {flag.position} of {schema}")


_DEFAULT: Table | None = None


def default_table() -> Table:
    """The process-wide table holding the built-in rows and the user's registered rows."""
    global _DEFAULT
    if _DEFAULT is None:
        from ._rows import builtin_rules

        _DEFAULT = Table(builtin_rules())
    return _DEFAULT
