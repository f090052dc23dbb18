"""Finding user pins (node constraints) that restrict a table site to given strategies."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import pulp

from ..core._placements import fmt_spec
from ..errors import StrictConflictError

if TYPE_CHECKING:
    from autoparallel.optimize_sharding import ShardingOptimizer

    from ._sites import Site

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


def is_user_pin(name: str) -> bool:
    """A constraint the user added (input/output/node constraints, custom names)."""
    return not _is_default(name)


def user_pins(opt: ShardingOptimizer) -> Iterator[str]:
    """Names of the user's constraints in the optimizer's problem."""
    return (name for name in opt.prob.constraints if is_user_pin(name))


def site_variables(opt: ShardingOptimizer, sites: Sequence[Site]) -> dict[str, tuple[Site, int]]:
    """Variable name -> (root site, strategy index) for every variable of the root sites.

    Walks every strategy of every root site: for the infeasibility diagnosis, not a per-solve
    hook (:func:`find_pin_conflicts` looks up only the pins' variables).
    """
    var_owner: dict[str, tuple[Site, int]] = {}
    for site in sites:
        if not site.is_root:
            continue
        strategies = opt.strats[site.node].strategies
        for o, strategy in enumerate(strategies):
            for argi in range(len(strategy.redistribute_cost)):
                for j in range(len(strategy.redistribute_cost[argi])):
                    var = opt.pulp_variables.get((site.node_idx, argi, o, j))
                    if var is not None:
                        var_owner[var.name] = (site, o)
    return var_owner


# autoparallel names each decision variable after its key (optimize_sharding._create_pulp_variables)
_KEY_IN_NAME = re.compile(r".*,s=(\d+),arg=(\d+),output_p=(\d+),input_p=(\d+)")


def _pin_owners(
    opt: ShardingOptimizer, sites: Sequence[Site], pins: Sequence[pulp.LpConstraint]
) -> dict[str, tuple[Site, int]]:
    """(root site, strategy index) of each variable of ``pins`` that belongs to a root site.

    A variable's key is read from its name and accepted only when ``opt.pulp_variables`` holds
    this very variable under it, so the cost grows with the pins, not with the sites' strategies
    (at 32 layers walking them was most of the plugin's time around a solve). A name that does
    not parse that way falls back to the walk.
    """
    by_idx = {site.node_idx: site for site in sites if site.is_root}
    owners: dict[str, tuple[Site, int]] = {}
    for constraint in pins:
        for var in constraint.keys():
            match = _KEY_IN_NAME.fullmatch(var.name)
            key = tuple(int(g) for g in match.groups()) if match else None
            if key is None or opt.pulp_variables.get(key) is not var:
                return site_variables(opt, sites)
            site = by_idx.get(key[0])
            if site is not None:
                owners[var.name] = (site, key[2])
    return owners


def find_pin_conflicts(
    opt: ShardingOptimizer, sites: Sequence[Site], forbidden: Callable[[Site], set[int]]
) -> list[tuple[Site, str, set[int]]]:
    """(site, pin name, strategies the pin allows) for pins that allow only forbidden strategies.

    A pin is a user's constraint ``Σ x[t,a,o,j] = 1`` over one site's variables; the strategies it
    allows are the ``o`` that appear in it.
    """
    pins = {
        name: constraint
        for name, constraint in opt.prob.constraints.items()
        if not _is_default(name) and constraint.sense == pulp.LpConstraintEQ and constraint.constant == -1
    }
    if not pins or not any(site.is_root for site in sites):
        return []
    var_owner = _pin_owners(opt, sites, list(pins.values()))
    conflicts = []
    for name, constraint in pins.items():
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


def raise_pin_conflicts(
    opt: ShardingOptimizer, conflicts: Sequence[tuple[Site, str, set[int]]], formulation: str
) -> None:
    """Raise :class:`StrictConflictError` naming each pin, its node, the rule and the strategies."""
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
        f"{formulation} formulation conflicts with user pins:\n"
        + "\n".join(lines)
        + "\nRemove the pin (autop.sharding_optimizer.remove_constraints([...])), pin a co-sharded "
        "strategy instead, or use formulation='explicit' to repair the pinned strategy with an "
        "explicit redistribution."
    )


def refuse_all_bad(site: Site, formulation: str) -> None:
    """A site all of whose strategies break its rule cannot be forbidden: say so before building."""
    if len(site.bad_indices) == site.num_strategies:
        raise StrictConflictError(
            f"{formulation}: every one of the {site.num_strategies} strategies of {site.orig.name} "
            f"({site.rule.name}) breaks its rule — {site.rule.describe()}. First reason: "
            f"{site.verdicts[0][0]}. Use formulation='explicit' (which inserts the "
            "redistribution) or fix the op's strategies."
        )


def refuse_conflicting_pins(
    opt: ShardingOptimizer,
    sites: Sequence[Site],
    formulation: str,
    forbidden: Callable[[Site], set[int]] = lambda site: set(site.bad_indices),
) -> None:
    """For a formulation's ``check_pins``: raise :class:`StrictConflictError` when a user pin allows
    only strategies the formulation forbids (default: every non-co-sharded one), naming the pin,
    the node, the rule and the strategies."""
    raise_pin_conflicts(opt, find_pin_conflicts(opt, sites, forbidden=forbidden), formulation)
