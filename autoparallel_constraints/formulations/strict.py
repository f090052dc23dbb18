"""The ``strict`` formulation: a table op may only run a co-sharded strategy."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pulp

from .._placements import fmt_spec
from ..errors import StrictConflictError
from ._base import Additions, Formulation, Namer
from ._pins import find_pin_conflicts

if TYPE_CHECKING:
    from autoparallel.optimize_sharding import ShardingOptimizer

    from .._problem import Site

logger = logging.getLogger(__name__)

__all__ = ["Strict"]


class Strict(Formulation):
    """Forbid every strategy of a table op whose specs are not co-sharded.

    Sets:
        T            table sites (nodes whose op has a row), cluster roots only: a linked node
                     shares its root's variables, so one constraint binds every repeated layer
        B_t          strategies o of site t with check(row_t, input_specs_o, output_specs_o) ≠ ∅
    Variables:
        x[t,0,o,j]   autoparallel's own (argument 0 suffices: its consistency constraints make
                     every argument of a node select the same strategy o)
    Objective:
        unchanged
    Constraints:
        (S1) forbid:  ∀t ∈ T with B_t ≠ ∅:   Σ_{o∈B_t} Σ_j x[t,0,o,j] = 0
             → Implemented in: Strict.build()   (named ``strict.forbid_<idx>``)
    Guards (not constraints):
        every site keeps at least one strategy (else the row and the op's strategies disagree:
        raise before touching the problem); before each solve, a user pin whose allowed strategies
        all lie in B_t raises :class:`StrictConflictError` naming the rule and the pin.
    """

    name = "strict"

    def build(self, opt: ShardingOptimizer, sites: Sequence[Site], namer: Namer) -> Additions:
        """(S1): Σ_{o∈B_t} Σ_j x[t,0,o,j] = 0 for each root site t."""
        from .._problem import strategy_indicator

        out = Additions()
        for site in sites:
            if not site.is_root or not site.bad_indices:
                continue
            if len(site.bad_indices) == site.num_strategies:
                raise StrictConflictError(
                    f"strict: every one of the {site.num_strategies} strategies of {site.orig.name} "
                    f"({site.rule.name}) breaks its rule — {site.rule.describe()}. First reason: "
                    f"{site.verdicts[0][0]}. Use formulation='explicit' (which inserts the "
                    "redistribution) or fix the op's strategies."
                )
            terms = [v for o in site.bad_indices for v in strategy_indicator(opt, site.node_idx, o)]
            out.constraints[namer("forbid")] = pulp.lpSum(terms) == 0
        return out

    def check_pins(self, opt: ShardingOptimizer, sites: Sequence[Site], additions: Additions) -> None:
        conflicts = find_pin_conflicts(opt, sites, forbidden=lambda site: set(site.bad_indices))
        if not conflicts:
            return
        lines = []
        for site, pin, allowed in conflicts:
            strategies = opt.strats[site.node].strategies
            shown = "; ".join(
                f"#{o}: inputs {', '.join(fmt_spec(s) for s in strategies[o].input_specs)} "
                f"({site.verdicts[o][0]})"
                for o in sorted(allowed)
            )
            lines.append(
                f"  pin {pin!r} on {site.orig.name} ({site.rule.name}) allows only strategies that "
                f"break the rule: {shown}\n    rule: {site.rule.describe()}"
            )
        raise StrictConflictError(
            "strict formulation conflicts with user pins:\n"
            + "\n".join(lines)
            + "\nRemove the pin (autop.sharding_optimizer.remove_constraints([...])), pin a co-sharded "
            "strategy instead, or use formulation='explicit' to repair the pinned strategy with an "
            "explicit redistribution."
        )
