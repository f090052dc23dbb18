"""Finding user pins (node constraints) that restrict a table site to given strategies."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pulp

if TYPE_CHECKING:
    from autoparallel.optimize_sharding import ShardingOptimizer

    from .._problem import Site

# Constraint families autoparallel adds by itself; everything else on a site is a user's pin.
DEFAULT_FAMILIES = (
    "unique_decision",
    "same_across_args",
    "output_input_consistent",
    "inf_cases",
    "grad_param_constraint",
    "grad_input_constraint",
    "grad_output_constraint",
    "fwd_param_dtype",
    "grad_reduce_dtype",
    "memory_constraint",
)


def _is_default(name: str) -> bool:
    """autoparallel's own families, and the plugin's (``<formulation>.<family>_<idx>``)."""
    return name.startswith(DEFAULT_FAMILIES) or "." in name


def find_pin_conflicts(
    opt: ShardingOptimizer, sites: Sequence[Site], forbidden: Callable[[Site], set[int]]
) -> list[tuple[Site, str, set[int]]]:
    """(site, pin name, strategies the pin allows) for pins that allow only forbidden strategies.

    A pin is a constraint ``Σ x[t,a,o,j] = 1`` over one site's variables; the strategies it allows
    are the ``o`` that appear in it.
    """
    var_owner: dict[str, tuple[Site, int]] = {}
    for site in sites:
        if not site.is_root:
            continue
        strategies = opt.strats[site.node].strategies
        for o, strategy in enumerate(strategies):
            for argi in range(len(strategy.redistribute_cost)):
                for j in range(len(strategy.redistribute_cost[argi])):
                    key = (site.node_idx, argi, o, j)
                    var = opt.pulp_variables.get(key)
                    if var is not None:
                        var_owner[var.name] = (site, o)
    if not var_owner:
        return []
    conflicts = []
    for name, constraint in opt.prob.constraints.items():
        if _is_default(name) or constraint.sense != pulp.LpConstraintEQ or constraint.constant != -1:
            continue
        owners = {var_owner.get(v.name) for v in constraint}
        if None in owners or not owners:
            continue
        sites_hit = {id(s) for s, _ in owners}  # type: ignore[misc]
        if len(sites_hit) != 1:
            continue
        site = next(iter(owners))[0]  # type: ignore[index]
        allowed = {o for _, o in owners}  # type: ignore[misc]
        bad = forbidden(site)
        if allowed and allowed <= bad:
            conflicts.append((site, name, allowed))
    return conflicts
