"""The ``lazy`` formulation: strict's rows, added only where a plan breaks them (cutting planes)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import InvalidOptionError
from ._base import Additions, Formulation, Namer, check_forbid_mode, forbid
from ._pins import find_pin_conflicts, raise_pin_conflicts, refuse_all_bad

if TYPE_CHECKING:
    from autoparallel.optimize_sharding import ShardingOptimizer

    from ._sites import Site

logger = logging.getLogger(__name__)

__all__ = ["Lazy", "chosen_bad_strategy"]


def chosen_bad_strategy(opt: ShardingOptimizer, site: Site) -> int | None:
    """The strategy of B_t the current plan runs at ``site``, or None if it runs a co-sharded one."""
    from ._sites import strategy_indicator

    for o in site.bad_indices:
        if sum(var.varValue or 0.0 for var in strategy_indicator(opt, site.node_idx, o)) > 0.5:
            return o
    return None


class Lazy(Formulation):
    """Solve, check the plan against the table, forbid only what the plan broke, re-solve.

    Same optimum as ``strict``, with the ILP grown only by the rows a plan actually violated: when
    autoparallel's own plan already satisfies the table there is one solve and nothing is added.

    Sets:
        T            table sites, cluster roots only (linked nodes share the root's variables)
        B_t          strategies o of site t whose specs are not co-sharded
        C_k ⊆ T      sites cut before round k (C_0 = ∅)
        V_k          sites whose plan x^k runs a strategy of B_t:  {t : Σ_{o∈B_t} Σ_j x^k[t,0,o,j] = 1}
    Variables:
        x[t,0,o,j]   autoparallel's own
    Objective:
        unchanged
    Rounds:
        k = 0, 1, …: solve with the cuts of C_k; stop when V_k = ∅; else C_{k+1} = C_k ∪ V_k.
        Each round cuts at least one new site, so there are at most |{t : B_t ≠ ∅}| + 1 solves
        (option ``max_rounds`` caps them; the last plan is then reported with its violations).
    Constraints:
        (L1) cut:  ∀t ∈ C_k:   x[t,0,o,j] ≤ 0  ∀o ∈ B_t, j   (upper bounds, no row)
             → Implemented in: Lazy.after_solve()   (``lazy.cut_<idx>``, a ``Bound`` each;
             ``forbid="row"``: the row Σ_{o∈B_t} Σ_j x[t,0,o,j] = 0, as strict)
    Guards (as strict): a site whose every strategy breaks its row raises before anything is
    added; before each solve, a user pin allowing only strategies of B_t raises
    :class:`StrictConflictError` naming the rule and the pin.
    """

    name = "lazy"
    options = {"max_rounds": None, "forbid": "bounds"}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        check_forbid_mode(self.name, self.config["forbid"])
        rounds = self.config["max_rounds"]
        if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1):
            raise InvalidOptionError(f"lazy: max_rounds must be a positive int or None, got {rounds!r}")

    def build(self, opt: ShardingOptimizer, sites: Sequence[Site], namer: Namer) -> Additions:
        """Nothing before the first solve; only the guard that every site keeps a legal strategy."""
        for site in sites:
            if site.is_root and site.bad_indices:
                refuse_all_bad(site, self.name)
        return Additions()

    def check_pins(self, opt: ShardingOptimizer, sites: Sequence[Site], additions: Additions) -> None:
        """As strict: a user pin allowing only strategies in B_t raises, naming rule and pin."""
        raise_pin_conflicts(opt, find_pin_conflicts(opt, sites, forbidden=lambda site: set(site.bad_indices)), self.name)

    def after_solve(
        self, opt: ShardingOptimizer, sites: Sequence[Site], additions: Additions, namer: Namer, round_index: int
    ) -> Additions | None:
        """(L1) for t ∈ V_k: Σ_{o∈B_t} Σ_j x[t,0,o,j] = 0, or None when V_k = ∅."""
        from ._sites import strategy_indicator

        cut_sites = set(additions.owners.values())
        out = Additions()
        for site in sites:
            if not site.is_root or not site.bad_indices or site.root_idx in cut_sites:
                continue
            if chosen_bad_strategy(opt, site) is None:
                continue
            terms = [v for o in site.bad_indices for v in strategy_indicator(opt, site.node_idx, o)]
            forbid(out, namer("cut"), terms, root_idx=site.root_idx, mode=self.config["forbid"])
        if not out:
            return None
        limit = self.config["max_rounds"]
        if limit is not None and round_index + 1 >= limit:
            logger.warning(
                "lazy: stopped after %d rounds (max_rounds) with %d table sites still violated",
                round_index + 1,
                len(out.owners),
            )
            return None
        logger.info("lazy: round %d violated %d table sites; cutting and re-solving", round_index, len(out.owners))
        return out
