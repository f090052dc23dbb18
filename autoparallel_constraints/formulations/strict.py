"""The ``strict`` formulation: a table op may only run a co-sharded strategy."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._base import Additions, Formulation, Namer, check_forbid_mode, forbid
from ._pins import find_pin_conflicts, raise_pin_conflicts, refuse_all_bad

if TYPE_CHECKING:
    from autoparallel.optimize_sharding import ShardingOptimizer

    from ._sites import Site

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
        (S1) forbid:  ∀t ∈ T with B_t ≠ ∅:   x[t,0,o,j] ≤ 0  ∀o ∈ B_t, j    (upper bounds, no row)
             → Implemented in: Strict.build()   (named ``strict.forbid_<idx>``, a ``Bound`` each)
             With ``forbid="row"``: one row Σ_{o∈B_t} Σ_j x[t,0,o,j] = 0 per site instead. The
             same feasible set; the bounds are the default because presolve drops the fixed
             columns and leaves CBC's search as without the plugin, where one row more changed
             it (llama3 2 layers 8x8: solve 1.13-1.33x with the row, 0.95-1.03x with bounds).
    Guards (not constraints):
        every site keeps at least one strategy (else the row and the op's strategies disagree:
        raise before touching the problem); before each solve, a user pin whose allowed strategies
        all lie in B_t raises :class:`StrictConflictError` naming the rule and the pin.
    """

    name = "strict"
    options = {"forbid": "bounds"}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        check_forbid_mode(self.name, self.config["forbid"])

    def build(self, opt: ShardingOptimizer, sites: Sequence[Site], namer: Namer) -> Additions:
        """(S1): x[t,0,o,j] ≤ 0 for o ∈ B_t (or the row Σ_{o∈B_t} Σ_j x[t,0,o,j] = 0) per root site t."""
        from ._sites import strategy_indicator

        out = Additions()
        for site in sites:
            if not site.is_root or not site.bad_indices:
                continue
            refuse_all_bad(site, self.name)
            terms = [v for o in site.bad_indices for v in strategy_indicator(opt, site.node_idx, o)]
            forbid(out, namer("forbid"), terms, root_idx=site.root_idx, mode=self.config["forbid"])
        return out

    def check_pins(self, opt: ShardingOptimizer, sites: Sequence[Site], additions: Additions) -> None:
        """Before each solve: a user pin allowing only strategies in B_t raises, naming rule and pin."""
        raise_pin_conflicts(opt, find_pin_conflicts(opt, sites, forbidden=lambda site: set(site.bad_indices)), self.name)
