"""What every formulation receives and returns: the public formulation API.

A formulation is a pure function of the optimizer's problem and the table sites: it *builds* the
named variables, constraints, variable bounds and objective terms it wants, and the plugin adds
them to the ILP in one step afterwards (so a failure while building leaves the problem untouched).
The guide for authors is ``docs/formulations.md``.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import InvalidOptionError

if TYPE_CHECKING:
    import pulp
    from autoparallel.optimize_sharding import ShardingOptimizer

    from ..seam.dtensor import DTensorSpec
    from ._sites import Site

logger = logging.getLogger(__name__)

__all__ = [
    "FORBID_MODES",
    "Additions",
    "Bound",
    "Elastic",
    "Formulation",
    "Namer",
    "Repair",
    "check_forbid_mode",
    "elastic_constraint",
    "forbid",
]

# How a formulation keeps strategies out of the plan: fixed at 0 by their upper bounds (the
# solver's presolve drops the columns), or by one row Σ x = 0 per site. Same feasible set; the
# bounds leave CBC's search as it is without the plugin (one extra row made it 1.13-1.33x slower
# on llama3 2 layers 8x8: docs/performance.md, "At real depth").
FORBID_MODES = ("bounds", "row")
"""How :func:`forbid` keeps a strategy out: upper bounds of 0 on its variables, or one named row."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Repair:
    """An explicit redistribution planned for strategy ``out_idx`` of a site's root node.

    ``targets`` maps an input-spec index to the spec it is brought to; ``source`` holds the spec
    the strategy itself asks for (what autoparallel's apply step delivers), so the transition
    the plugin materializes is ``source[i] -> targets[i]``.
    """

    variable: str
    link: str
    root_idx: int
    out_idx: int
    sources: Mapping[int, DTensorSpec]
    targets: Mapping[int, DTensorSpec]
    cost: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Elastic:
    """A table rule made elastic at one site: ``variable`` > 0 in a plan means the rule gave way.

    ``weight`` is the objective coefficient of ``variable`` (penalty × cluster multiplier).
    """

    variable: str
    constraint: str
    root_idx: int
    weight: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Bound:
    """New bounds for existing variables (autoparallel's own, usually): ``low ≤ v ≤ up`` for each.

    ``None`` keeps that side as it is. ``Bound(variables=..., up=0)`` fixes binaries to 0 without
    adding a row, so the solver's presolve removes them. The plugin sets the bounds when it adds
    the rest and restores the old ones if adding fails.
    """

    variables: tuple[pulp.LpVariable, ...]
    low: float | None = None
    up: float | None = None


@dataclass(kw_only=True, slots=True)
class Additions:
    """Everything a formulation adds to the ILP, by name and family."""

    constraints: dict[str, pulp.LpConstraint] = field(default_factory=dict)
    variables: dict[str, pulp.LpVariable] = field(default_factory=dict)
    objective: list[tuple[pulp.LpVariable, float]] = field(default_factory=list)
    bounds: dict[str, Bound] = field(default_factory=dict)  # name -> new bounds of existing variables
    repairs: dict[tuple[int, int], Repair] = field(default_factory=dict)  # (root_idx, out_idx)
    elastic: dict[str, Elastic] = field(default_factory=dict)  # slack variable name -> its rule
    owners: dict[str, int] = field(default_factory=dict)  # constraint or bound name -> root_idx of its site
    notes: dict[str, str] = field(default_factory=dict)  # constraint name -> what it is, for siteless rows

    def merge(self, other: Additions) -> None:
        """Take ``other``'s additions (a later round) into this record."""
        self.constraints.update(other.constraints)
        self.variables.update(other.variables)
        self.objective.extend(other.objective)
        self.bounds.update(other.bounds)
        self.repairs.update(other.repairs)
        self.elastic.update(other.elastic)
        self.owners.update(other.owners)
        self.notes.update(other.notes)

    def __bool__(self) -> bool:
        return bool(self.constraints or self.variables or self.objective or self.bounds)

    def by_family(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for name in [*self.constraints, *self.variables, *self.bounds]:
            family = name.rsplit("_", 1)[0]
            counts[family] = counts.get(family, 0) + 1
        return dict(sorted(counts.items()))


class Namer:
    """``<formulation>.<family>_<idx>`` names, counted per family."""

    def __init__(self, prefix: str, taken: Mapping[str, Any] | None = None) -> None:
        self.prefix = prefix
        self._counts: dict[str, int] = {}
        self._taken = taken or {}

    def __call__(self, family: str) -> str:
        while True:
            idx = self._counts.get(family, 0)
            self._counts[family] = idx + 1
            name = f"{self.prefix}.{family}_{idx:03d}"
            if name not in self._taken:
                return name


class Formulation(abc.ABC):
    """Base class: a named way of adding the table's rules to autoparallel's ILP.

    Subclasses set ``name`` (lowercase, ``[a-z][a-z0-9]*``), list their options in ``options``
    (name -> default; ``self.config`` holds the values) and implement :meth:`build`. Their own
    docstring states the math: ``Sets:``, ``Variables:``, ``Objective`` and ``Constraints:`` with
    numbered families, each with "→ Implemented in". ``register_formulation(cls)`` checks all of
    this and makes the class available by name to ``add_op_constraints(formulation=...)`` and the
    lab; an instance can also be passed directly.

    The hooks, in the order the plugin calls them:

    * :meth:`build` (once, in ``add_op_constraints``): receives autoparallel's optimizer ``opt``
      (read it, never write it), the table ``sites`` (one per matched node, cluster twins included:
      act on ``site.is_root`` ones, whose variables the twins share) and a ``namer`` that makes
      ``<name>.<family>_<idx>`` names. Returns an :class:`Additions`; every name in it must start
      with ``<name>.``. The plugin adds it atomically: all or nothing.
    * :meth:`check_pins` (before every solve): raise a package error when the user's pins
      contradict the formulation (``refuse_conflicting_pins`` does it for "strategies B are
      forbidden"); otherwise an infeasible solve is explained by ``InfeasibleConstraintsError``.
    * :meth:`after_solve` (after every solve, lazy rounds): read the plan from the variables'
      values; return more :class:`Additions` to add them and re-solve, or None to stop.

    Objective terms (``Additions.objective``) are appended after autoparallel sets its own
    objective in ``get_solution``, so they survive it. A strategy that may run only with a
    redistribution in front of it is declared with ``Additions.repairs[(root_idx, out_idx)] =
    Repair(...)``: when the plan picks that strategy, the apply step inserts a named node per
    offending input computing ``sources[i] -> targets[i]``, and the audit checks it.
    """

    name: ClassVar[str]
    options: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            known = ", ".join(sorted(self.options)) or "none"
            raise InvalidOptionError(
                f"formulation {self.name!r} has no option(s) {', '.join(unknown)}; its options are: {known}"
            )
        self.config = {**self.options, **options}

    @abc.abstractmethod
    def build(self, opt: ShardingOptimizer, sites: Sequence[Site], namer: Namer) -> Additions:
        """Compute the additions for ``sites`` without touching ``opt.prob``.

        ``site.bad_indices`` are the strategies whose specs break the site's row,
        ``strategy_indicator(opt, site.node_idx, o)`` the variables whose sum is 1 when strategy
        ``o`` runs, ``twin_count(opt, site.root_idx)`` the repeated layers sharing them.
        """

    def check_pins(self, opt: ShardingOptimizer, sites: Sequence[Site], additions: Additions) -> None:
        """Called before every solve: raise if user pins contradict this formulation. Default: no-op."""

    def after_solve(
        self, opt: ShardingOptimizer, sites: Sequence[Site], additions: Additions, namer: Namer, round_index: int
    ) -> Additions | None:
        """Called after solve number ``round_index`` (0-based) with the plan in the variables' values.

        Return more additions to add and re-solve (cutting planes), or None when the plan is
        final. Default: None (one solve).
        """
        return None


def check_forbid_mode(formulation: str, mode: object) -> None:
    """Refuse a ``forbid`` option that is not one of :data:`FORBID_MODES`."""
    if mode not in FORBID_MODES:
        raise InvalidOptionError(
            f"{formulation}: forbid must be one of {', '.join(map(repr, FORBID_MODES))}, got {mode!r}"
        )


def forbid(
    out: Additions, name: str, variables: Sequence[pulp.LpVariable], *, root_idx: int, mode: str = "bounds"
) -> None:
    """Keep ``variables`` at 0 in every plan: ``Bound(up=0)`` (``mode="bounds"``) or the row
    ``Σ variables = 0`` (``mode="row"``), recorded in ``out`` under ``name``, owned by ``root_idx``."""
    import pulp

    if mode == "row":
        out.constraints[name] = pulp.lpSum(variables) == 0
    else:
        out.bounds[name] = Bound(variables=tuple(variables), up=0)
    out.owners[name] = root_idx


def elastic_constraint(
    constraint: pulp.LpConstraint, below: pulp.LpVariable | None, above: pulp.LpVariable | None
) -> pulp.LpConstraint:
    """``constraint`` with slack: ``e + below − above (sense) 0``; None leaves that side hard.

    For ``e = 0`` both sides are needed; ``e ≤ 0`` only gives way with ``above``, ``e ≥ 0``
    only with ``below``. The original constraint is not modified.
    """
    import pulp

    expr = pulp.LpAffineExpression(constraint.expr)
    expr.constant = constraint.constant
    if below is not None:
        expr = expr + below
    if above is not None:
        expr = expr - above
    return pulp.LpConstraint(expr, sense=constraint.sense)
