"""The ``explicit`` formulation: a bad strategy only together with a priced, named redistribution."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pulp

from ..table import repair_targets
from ._base import Additions, Formulation, Namer, Repair, check_forbid_mode, forbid

if TYPE_CHECKING:
    from autoparallel.optimize_sharding import ShardingOptimizer

    from ._sites import Site

logger = logging.getLogger(__name__)

__all__ = ["Explicit"]


class Explicit(Formulation):
    """Let a table op run a non-co-sharded strategy only with an explicit redistribute variable.

    Sets:
        T            table sites, cluster roots only (linked nodes share the root's variables)
        B_t          strategies o of site t whose specs are not co-sharded
        R_t ⊆ B_t    those a redistribution of the inputs can fix: anchored on o's output spec,
                     every offending input a gets a target spec τ[t,o,a] that makes the group
                     co-sharded (table.repair_targets)
    Variables:
        x[t,0,o,j]   autoparallel's own
        r[t,o] ∈ [0,1]  for o ∈ R_t: "strategy o runs, preceded by the redistributions
                     σ[t,o,a] -> τ[t,o,a]" (σ = the input spec strategy o asks for); named
                     ``explicit.redistribute_<idx>``
    Objective (added to autoparallel's after it sets its own, so it survives get_solution):
        + Σ_t Σ_{o∈R_t} m_t · c[t,o] · r[t,o]
        c[t,o] = Σ_a comm(σ[t,o,a] -> τ[t,o,a]) with autoparallel's cost model
        m_t    = 1 + number of cluster twins of t (the same multiplier autoparallel applies)
    Constraints:
        (E1) link:    ∀t, o∈R_t:   r[t,o] − Σ_j x[t,0,o,j] = 0
             → Implemented in: Explicit.build()   (``explicit.link_<idx>``)
        (E2) forbid:  ∀t with B_t∖R_t ≠ ∅:   x[t,0,o,j] ≤ 0  ∀o ∈ B_t∖R_t, j   (upper bounds)
             → Implemented in: Explicit.build()   (``explicit.forbid_<idx>``, a ``Bound`` each;
             ``forbid="row"``: the row Σ_{o∈B_t∖R_t} Σ_j x[t,0,o,j] = 0, as strict)
    Apply: every r[t,o] = 1 becomes one named node per offending input (and per twin layer) in
    front of the op, computing σ -> τ with DTensor's redistribute (see ``apply._materialize``).
    """

    name = "explicit"
    options = {"forbid": "bounds"}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        check_forbid_mode(self.name, self.config["forbid"])

    def build(self, opt: ShardingOptimizer, sites: Sequence[Site], namer: Namer) -> Additions:
        """(E1) r[t,o] − Σ_j x[t,0,o,j] = 0, objective + m_t·c[t,o]·r[t,o]; (E2) forbid the rest."""
        from autoparallel.cost_models.collective_runtime_estimation import estimate_strategy_comms_cost

        from ._sites import strategy_indicator, twin_count

        out = Additions()
        for site in sites:
            if not site.is_root or not site.bad_indices:
                continue
            strategies = opt.strats[site.node].strategies
            unrepairable: list[int] = []
            multiplier = 1 + twin_count(opt, site.root_idx)
            for o in site.bad_indices:
                strategy = strategies[o]
                targets = repair_targets(site.binding, strategy.input_specs, strategy.output_specs)
                if not targets:  # None: not fixable by moving inputs; {}: the output itself is off
                    unrepairable.append(o)
                    continue
                sources = {i: strategy.input_specs[i] for i in targets}
                cost = float(sum(estimate_strategy_comms_cost(sources[i], targets[i]) for i in targets))
                var_name = namer("redistribute")
                var = pulp.LpVariable(var_name, lowBound=0, upBound=1)
                link = namer("link")
                out.variables[var_name] = var
                out.constraints[link] = var - pulp.lpSum(strategy_indicator(opt, site.node_idx, o)) == 0
                out.owners[link] = site.root_idx
                out.objective.append((var, cost * multiplier))
                out.repairs[(site.root_idx, o)] = Repair(
                    variable=var_name,
                    link=link,
                    root_idx=site.root_idx,
                    out_idx=o,
                    sources=sources,
                    targets=targets,
                    cost=cost,
                )
            if unrepairable:
                terms = [v for o in unrepairable for v in strategy_indicator(opt, site.node_idx, o)]
                forbid(out, namer("forbid"), terms, root_idx=site.root_idx, mode=self.config["forbid"])
        return out
