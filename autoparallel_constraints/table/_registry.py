"""The table registry: rows keyed by op overload, validated on registration, looked up by name."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from ..errors import InvalidRowError, UnknownOpError
from ..seam.tracing import OpOverload, OpOverloadPacket, custom_op_overload, schema_of
from ._model import Alignment, ArgSpec, Flag, Linearity, OpRule, PartialCombo, Reduce, Role, Take

logger = logging.getLogger(__name__)

__all__ = ["OpSelector", "Table", "default_table"]

OpSelector = str | OpOverload | OpOverloadPacket
_T = TypeVar("_T")


class Table:
    """A set of :class:`OpRule` rows, one per op overload.

    Rows are validated when registered (:func:`validate_row`); registering a second row for the
    same overload raises unless ``override=True``; a lookup that fails lists close names. Add rows
    with :meth:`register` or the :meth:`rule` decorator.
    """

    def __init__(self, rows: Iterable[OpRule] = ()) -> None:
        self._rows: dict[OpOverload, OpRule] = {}
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

    def rule(self, *args: ArgSpec, family: str = "user", override: bool = False, **fields: Any) -> Callable[[_T], _T]:
        """Decorator form of :meth:`register`, for a custom op defined in Python::

            @table.rule(ArgSpec("x", 0), ArgSpec("y", 1),
                        partials=(PartialCombo(("x", "y"), SUM_AVG, why="linear in both"),))
            @torch.library.custom_op("mylib::fused_add", mutates_args=())
            def fused_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor: ...

        The decorated object may be an OpOverload, an OpOverloadPacket (its ``default``
        overload) or a ``torch.library.custom_op``; it is returned unchanged. ``fields`` are the
        other :class:`OpRule` fields (``alignment``, ``partials``, ``note``, ...).
        """

        def deco(target: _T) -> _T:
            self.register(OpRule(_overload_of(target), family, tuple(args), **fields), override=override)
            return target

        return deco

    def unregister(self, op: OpOverload) -> OpRule:
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

    def __getitem__(self, op: OpSelector) -> OpRule:
        """The row of one overload (or of the packet's only row); UnknownOpError lists close names."""
        rows = self._match(op)
        if len(rows) != 1:
            if rows:
                raise UnknownOpError(f"{op!s} names {len(rows)} rows ({', '.join(r.name for r in rows)}); "
                                     "use an overload such as torch.ops.aten.add.Tensor or Table.select")
            raise UnknownOpError(self._unknown_message(op))
        return rows[0]

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
        if isinstance(selectors, (str, OpOverload, OpOverloadPacket)):
            selectors = [selectors]
        chosen: dict[OpOverload, OpRule] = {}
        for sel in selectors:
            rows = self._match(sel)
            if not rows:
                raise UnknownOpError(self._unknown_message(sel))
            for row in rows:
                chosen[row.op] = row
        return list(chosen.values())

    def _match(self, sel: OpSelector) -> list[OpRule]:
        if isinstance(sel, OpOverload):
            row = self._rows.get(sel)
            return [row] if row is not None else []
        if isinstance(sel, OpOverloadPacket):
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


def _packet_name(op: OpOverload) -> str:
    return op.overloadpacket.__name__


def _overload_of(target: Any) -> OpOverload:
    if isinstance(target, OpOverload):
        return target
    if isinstance(target, OpOverloadPacket):
        return target.default
    overload = custom_op_overload(target)
    if isinstance(overload, OpOverload):
        return overload
    raise InvalidRowError(
        f"cannot register a row on {target!r}: decorate an OpOverload, an OpOverloadPacket or a "
        "torch.library.custom_op"
    )


def _check_flag(where: str, flag: Flag, schema: Any, what: str) -> None:
    if not isinstance(flag, Flag):
        raise InvalidRowError(f"{where}: {what} must be a Flag, got {type(flag).__name__}")
    if flag.position >= len(schema.arguments) or schema.arguments[flag.position].name != flag.name:
        raise InvalidRowError(f"{where}: {what} {flag.name!r} is not argument {flag.position} of {schema}")


def validate_row(row: OpRule) -> None:
    """Raise :class:`InvalidRowError` unless the row is consistent with its op's schema.

    Checked: argument positions, names and tensor types against the schema; roles (index tensors
    are never Partial); the arguments and non-tensor parameters the alignment reads; every
    Partial combination (named arguments exist, are Partial-capable, reduce ops and output map
    well formed, flags are schema arguments); the einsum equation; ``whole_dims_arg``.
    """
    from ._binders import READS, REQUIRED_ARGS

    where = f"row {getattr(row, 'op', '?')}"
    if not isinstance(row, OpRule):
        raise InvalidRowError(f"expected an OpRule, got {type(row).__name__}")
    if not isinstance(row.op, OpOverload):
        raise InvalidRowError(f"{where}: op must be an OpOverload such as torch.ops.aten.add.Tensor")
    if not isinstance(row.alignment, Alignment):
        raise InvalidRowError(f"{where}: alignment must be an Alignment, got {row.alignment!r}")
    schema = schema_of(row.op)
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
        if schema_arg.kwarg_only:
            raise InvalidRowError(
                f"{where}: argument {a.name!r} is keyword-only in {schema}; autoparallel gives input specs only "
                "to positional tensor arguments"
            )
        if a.role is Role.INDEX and a.partial:
            raise InvalidRowError(f"{where}: index argument {a.name!r} cannot be Partial-capable")
    aligned = [a for a in row.args if a.role is Role.ALIGNED]
    if not aligned:
        raise InvalidRowError(f"{where}: a row needs at least one ALIGNED argument")
    required, index_args = REQUIRED_ARGS[row.alignment]
    missing = [n for n in required if n not in names]
    if missing:
        raise InvalidRowError(
            f"{where}: {row.alignment.name} alignment reads argument(s) {', '.join(map(repr, missing))}; "
            f"the row has {', '.join(map(repr, names))}"
        )
    for n in index_args:
        spec = next(a for a in row.args if a.name == n)
        if spec.role is not Role.INDEX:
            raise InvalidRowError(f"{where}: {row.alignment.name} alignment needs {n!r} with role=Role.INDEX")
    schema_names = {a.name for a in schema.arguments}
    for param in READS.get(row.alignment, ()):
        if param not in schema_names:
            raise InvalidRowError(f"{where}: {row.alignment.name} alignment reads argument {param!r}, which "
                                  f"{schema} lacks")
    if row.alignment is Alignment.EINSUM:
        _check_equation(where, row, schema_names)
    elif row.equation:
        raise InvalidRowError(f"{where}: equation is only read by EINSUM rows")
    if row.whole_dims_arg:
        if row.alignment is not Alignment.BROADCAST:
            raise InvalidRowError(f"{where}: whole_dims_arg is only read by BROADCAST rows")
        arg = next((a for a in schema.arguments if a.name == row.whole_dims_arg), None)
        if arg is None or "int" not in str(arg.type):
            raise InvalidRowError(f"{where}: whole_dims_arg {row.whole_dims_arg!r} is not an int argument of {schema}")
    if row.linearity is Linearity.NONE and row.partial_only_if is not None and row.partials is None:
        raise InvalidRowError(f"{where}: partial_only_if makes no sense with Linearity.NONE")
    if row.partials is not None and row.linearity is not Linearity.NONE:
        raise InvalidRowError(f"{where}: give either partials or linearity, not both")
    if row.linearity is not Linearity.NONE and not any(a.partial for a in aligned):
        raise InvalidRowError(f"{where}: Linearity.{row.linearity.name} but no argument is Partial-capable")
    if row.partial_only_if is not None:
        _check_flag(where, row.partial_only_if, schema, "flag")
    by_name = {a.name: a for a in row.args}
    for combo in row.combos:
        if not isinstance(combo, PartialCombo):
            raise InvalidRowError(f"{where}: partials must be PartialCombo entries, got {type(combo).__name__}")
        if not combo.args or not combo.reduce:
            raise InvalidRowError(f"{where}: Partial combination {combo.describe()} names no argument or reduce op")
        for n in combo.args:
            spec = by_name.get(n)
            if spec is None:
                raise InvalidRowError(f"{where}: Partial combination names {n!r}, which is not an argument of "
                                      f"the row ({', '.join(names)})")
            if spec.role is not Role.ALIGNED or not spec.partial:
                raise InvalidRowError(f"{where}: Partial combination names {n!r}, which may never be Partial")
        if not all(isinstance(r, Reduce) for r in combo.reduce):
            raise InvalidRowError(f"{where}: reduce ops must be Reduce members, got {combo.reduce!r}")
        if combo.out and len(combo.out) != len(combo.reduce):
            raise InvalidRowError(f"{where}: Partial combination out {combo.out!r} must give one entry per reduce "
                                  f"op {combo.reduce!r}")
        if not isinstance(combo.take, Take):
            raise InvalidRowError(f"{where}: Partial combination take must be a Take, got {combo.take!r}")
        if combo.only_if is not None:
            _check_flag(where, combo.only_if, schema, "Partial combination flag")


def _check_equation(where: str, row: OpRule, schema_names: set[str]) -> None:
    if not row.equation:
        if "equation" not in schema_names:
            raise InvalidRowError(f"{where}: an EINSUM row needs equation=... (the op has no 'equation' argument)")
        return
    lhs, arrow, rhs = row.equation.replace(" ", "").partition("->")
    operands = lhs.split(",")
    if len(operands) != len(row.args):
        raise InvalidRowError(f"{where}: equation {row.equation!r} has {len(operands)} operands but the row "
                              f"{len(row.args)} arguments")
    for spec in [*operands, rhs]:
        letters = spec.replace("...", "")
        if not all(c.isalpha() for c in letters) or len(set(letters)) != len(letters):
            raise InvalidRowError(f"{where}: equation {row.equation!r}: each operand needs distinct letters")


_DEFAULT: Table | None = None


def default_table() -> Table:
    """The process-wide table holding the built-in rows and the user's registered rows."""
    global _DEFAULT
    if _DEFAULT is None:
        from ._rows import builtin_rules

        _DEFAULT = Table(builtin_rules())
    return _DEFAULT
