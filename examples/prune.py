"""A formulation in 40 lines, written only with the public API: ``prune``.

Instead of adding a row, it fixes the variables of every non-co-sharded strategy to 0 through
their upper bounds, so the solver's presolve removes them. Use it with
``autop.add_op_constraints(formulation=Prune())`` or ``--formulations examples.prune:Prune``.
"""

from autoparallel_constraints.formulations import (
    Additions,
    Bound,
    Formulation,
    refuse_conflicting_pins,
    strategy_indicator,
)


class Prune(Formulation):
    """Fix every non-co-sharded strategy of a table op to 0 by its bounds (no rows).

    Sets:
        T            table sites, cluster roots only (twins share the root's variables)
        B_t          strategies o of site t whose specs are not co-sharded
    Variables:
        x[t,0,o,j]   autoparallel's own; none added
    Objective:
        unchanged
    Constraints:
        (P1) fix, as an upper bound, not a row:  ∀t ∈ T, o ∈ B_t, j:   x[t,0,o,j] ≤ 0
             → Implemented in: Prune.build()   (``prune.fix_<idx>``, one per site)
    Guard: a user pin allowing only strategies of B_t raises StrictConflictError.
    """

    name = "prune"

    def build(self, opt, sites, namer):
        """(P1): upBound 0 on x[t,0,o,j] for o ∈ B_t, at each root site t."""
        out = Additions()
        for site in sites:
            if site.is_root and site.bad_indices:
                xs = [v for o in site.bad_indices for v in strategy_indicator(opt, site.node_idx, o)]
                out.bounds[namer("fix")] = Bound(variables=tuple(xs), up=0)
        return out

    def check_pins(self, opt, sites, additions):
        refuse_conflicting_pins(opt, sites, self.name)
