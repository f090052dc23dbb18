"""The ``soft`` formulation: every table rule may give way, at a price, and says so."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pulp

from ..errors import InvalidOptionError
from ._base import Additions, Elastic, Formulation, Namer

if TYPE_CHECKING:
    from autoparallel.optimize_sharding import ShardingOptimizer

    from ._sites import Site

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_PENALTY", "Soft"]

# In autoparallel's cost units (estimated microseconds): far above any single redistribution, so a
# rule gives way only where keeping it is infeasible or the user asked for a lower price.
DEFAULT_PENALTY = 1.0e6


class Soft(Formulation):
    """strict with elastic slack: a table op may run a non-co-sharded strategy, at a penalty.

    The problem is never infeasible on the table's account; the report lists every rule that gave
    way, at which nodes, with which strategy and at what cost.

    Sets:
        T            table sites, cluster roots only (linked nodes share the root's variables)
        B_t          strategies o of site t whose specs are not co-sharded
    Variables:
        x[t,0,o,j]   autoparallel's own
        s[t] ∈ [0,1] for t with B_t ≠ ∅: "the rule of t gives way"; named ``soft.slack_<idx>``
    Objective (added to autoparallel's after it sets its own, so it survives get_solution):
        + Σ_t λ · m_t · s[t]
        λ    = option ``penalty`` (default 1e6 cost units)
        m_t  = 1 + number of cluster twins of t (the same multiplier autoparallel applies)
    Constraints:
        (F1) elastic:  ∀t with B_t ≠ ∅:   Σ_{o∈B_t} Σ_j x[t,0,o,j] − s[t] ≤ 0
             → Implemented in: Soft.build()   (``soft.elastic_<idx>``)
    With s[t] = 0 (F1) is strict's (S1). Since x is binary and s[t] is penalized, s[t] equals
    Σ_{o∈B_t} Σ_j x[t,0,o,j] ∈ {0, 1} at an optimum: s[t] = 1 exactly when t runs a strategy of B_t.
    A plan that already satisfies the table has s = 0 and autoparallel's objective.
    """

    name = "soft"
    options = {"penalty": DEFAULT_PENALTY}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        penalty = self.config["penalty"]
        if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not (
            math.isfinite(penalty) and penalty > 0
        ):
            raise InvalidOptionError(
                f"soft: penalty must be a positive finite number (cost units per rule that gives "
                f"way), got {penalty!r}"
            )

    def build(self, opt: ShardingOptimizer, sites: Sequence[Site], namer: Namer) -> Additions:
        """(F1) Σ_{o∈B_t} Σ_j x[t,0,o,j] − s[t] ≤ 0; objective + λ·m_t·s[t]."""
        from ._sites import strategy_indicator, twin_count

        penalty = float(self.config["penalty"])
        out = Additions()
        for site in sites:
            if not site.is_root or not site.bad_indices:
                continue
            slack_name = namer("slack")
            slack = pulp.LpVariable(slack_name, lowBound=0, upBound=1)
            terms = [v for o in site.bad_indices for v in strategy_indicator(opt, site.node_idx, o)]
            elastic = namer("elastic")
            weight = penalty * (1 + twin_count(opt, site.root_idx))
            out.variables[slack_name] = slack
            out.constraints[elastic] = pulp.lpSum(terms) - slack <= 0
            out.owners[elastic] = site.root_idx
            out.objective.append((slack, weight))
            out.elastic[slack_name] = Elastic(
                variable=slack_name, constraint=elastic, root_idx=site.root_idx, weight=weight
            )
        return out
