"""Infeasibility explained: which table rules and which user pins cannot hold together.

When a solve with the plugin's constraints is infeasible, autoparallel only lists the constraints
its last (infeasible) point violates. The plugin re-solves two elastic copies of the problem,
each with one side made to give way and the total slack minimized (the optimizer's own problem
is not modified):

    (D1) table elastic:  every plugin constraint c and bound entry gets slack, everything else hard
         → the table rules that had to give: R.  Infeasible even so ⇒ the conflict is not the
           table's (the pins contradict autoparallel's own constraints): say that.
    (D2) pins elastic:   every user constraint (input/output/node constraints, custom pins) gets
         slack, the table hard → the pins that had to give: P.

and raises :class:`~autoparallel_constraints.errors.InfeasibleConstraintsError` naming R (rule,
node, constraint), P, and every user pin on R's nodes. Slack for ``e (sense) 0``: ``e + p − n``
with ``p, n ∈ [0, 1]`` on the sides the sense allows, objective ``Σ (p + n)``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulp

from ..errors import InfeasibleConstraintsError
from ..formulations._base import elastic_constraint
from ..formulations._pins import site_variables, user_pins
from ..seam import autop as upstream

if TYPE_CHECKING:
    from autoparallel.optimize_sharding import ShardingOptimizer

    from ..formulations import Bound
    from ._solvers import SolverHook
    from ._state import PluginState, PriorBounds

logger = logging.getLogger(__name__)

__all__ = ["Diagnosis", "diagnose", "explain_infeasible"]

SLACK_TOL = 1e-6


@dataclass(frozen=True, kw_only=True, slots=True)
class Diagnosis:
    """What had to give in each elastic re-solve (None: that re-solve was infeasible too)."""

    table_gave: tuple[str, ...] | None
    pins_gave: tuple[str, ...] | None
    pins_on_sites: tuple[str, ...]
    timed_out: bool = False  # an elastic re-solve hit the time limit before it found a plan


class _TimedOut(Exception):
    """An elastic re-solve ran out of the time limit without a plan."""


def _elastic_solve(
    opt: ShardingOptimizer,
    hook: SolverHook,
    relax: set[str],
    relax_bounds: Mapping[str, tuple[Bound, PriorBounds]] | None = None,
) -> tuple[str, ...] | None:
    """Minimize the slack of the ``relax`` constraints and ``relax_bounds`` entries, the rest hard;
    the names that gave way (None: infeasible even so).

    A bound entry ``low ≤ v ≤ up`` gives way through one slack ``s ≥ 0`` shared by its variables:
    their bounds go back to what they were before the plugin, with rows ``v − s ≤ up`` and
    ``v + s ≥ low`` in the copy. The plugin's bounds are set again before returning."""
    diag = pulp.LpProblem("apc_diagnosis", pulp.LpMinimize)
    slacks: dict[str, list[pulp.LpVariable]] = {}
    relax_bounds = relax_bounds or {}
    for i, (name, constraint) in enumerate(opt.prob.constraints.items()):
        if name not in relax:
            diag.constraints[name] = constraint  # shared, not copied: it is not modified
            continue
        below = above = None
        if constraint.sense in (pulp.LpConstraintEQ, pulp.LpConstraintGE):
            below = pulp.LpVariable(f"apc_diag_below_{i}", lowBound=0)
        if constraint.sense in (pulp.LpConstraintEQ, pulp.LpConstraintLE):
            above = pulp.LpVariable(f"apc_diag_above_{i}", lowBound=0)
        diag.constraints[name] = elastic_constraint(constraint, below, above)
        slacks[name] = [v for v in (below, above) if v is not None]
    current: list[tuple[pulp.LpVariable, float | None, float | None]] = []
    for k, (name, (bound, prior)) in enumerate(relax_bounds.items()):
        slack = pulp.LpVariable(f"apc_diag_bound_{k}", lowBound=0)
        slacks[name] = [slack]
        for j, (var, low, up) in enumerate(prior):
            if bound.up is not None:
                diag.constraints[f"apc_diag_bound_{k}_up_{j}"] = var - slack <= bound.up
            if bound.low is not None:
                diag.constraints[f"apc_diag_bound_{k}_low_{j}"] = var + slack >= bound.low
    diag += pulp.lpSum(v for vs in slacks.values() for v in vs)
    try:
        for _, prior in relax_bounds.values():
            for var, low, up in prior:
                current.append((var, var.lowBound, var.upBound))
                var.lowBound, var.upBound = low, up
        outcome = hook.solve_problem(diag, purpose="diagnosis")
    finally:
        for var, low, up in reversed(current):
            var.lowBound, var.upBound = low, up
    if outcome.hit_time_limit and not outcome.feasible:
        raise _TimedOut
    if not outcome.feasible:
        return None
    return tuple(name for name, vs in slacks.items() if sum(v.varValue or 0.0 for v in vs) > SLACK_TOL)


def diagnose(opt: ShardingOptimizer, state: PluginState) -> Diagnosis:
    """Run (D1) and (D2) on the optimizer's problem (left unchanged)."""
    table = {n for n in state.additions.constraints if n in opt.prob.constraints}
    table_bounds = {n: (b, state.prior_bounds[n]) for n, b in state.additions.bounds.items() if n in state.prior_bounds}
    pins = set(user_pins(opt))
    try:
        table_gave = _elastic_solve(opt, state.solver, table, table_bounds) if table or table_bounds else None
        pins_gave = _elastic_solve(opt, state.solver, pins) if pins and table_gave else None
    except _TimedOut:
        return Diagnosis(table_gave=None, pins_gave=None, pins_on_sites=(), timed_out=True)
    # every user pin that constrains the variables of a node whose rule gave way
    roots = {state.additions.owners.get(n) for n in table_gave or ()}
    owned = {name for name, (site, _) in site_variables(opt, state.sites).items() if site.root_idx in roots}
    pins_on_sites = tuple(
        sorted(p for p in pins if any(v.name in owned for v in opt.prob.constraints[p].keys()))
    )
    return Diagnosis(table_gave=table_gave, pins_gave=pins_gave, pins_on_sites=pins_on_sites)


def _describe_rule(opt: ShardingOptimizer, state: PluginState, name: str) -> str:
    root = state.additions.owners.get(name)
    sites = [s for s in state.sites if s.root_idx == root]
    if not sites:
        note = state.additions.notes.get(name)
        return f"  {name}" + (f": {note}" if note else "")
    nodes = ", ".join(s.orig.name for s in sites)
    return f"  {name} at {nodes}: rule {sites[0].rule.describe()}"


def _describe_pin(opt: ShardingOptimizer, name: str) -> str:
    node = upstream.node_constraint_names(opt).get(name)
    return f"  pin {name!r}" + (f" on {node}" if node else "")


def _pin_list(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in names)


def explain_infeasible(opt: ShardingOptimizer, state: PluginState) -> InfeasibleConstraintsError:
    """The package error for an infeasible solve with the plugin's constraints in the problem."""
    form = state.formulation.name
    try:
        d = diagnose(opt, state)
    except Exception as exc:  # noqa: BLE001 - the diagnosis must never hide the infeasibility
        logger.warning("apc: could not diagnose the infeasible problem: %s", exc)
        return InfeasibleConstraintsError(
            f"no plan satisfies the compatibility table ({form}) together with the other constraints "
            f"(diagnosis failed: {exc}). Table nodes involved: {', '.join(state.added.constrained_nodes)}. "
            "Try formulation='explicit' or 'soft', or relax input/output/node constraints."
        )
    if d.timed_out:
        return InfeasibleConstraintsError(
            f"no plan satisfies the compatibility table ({form}) together with the other constraints; "
            "the time limit ran out before the elastic re-solves could tell which table rules and pins "
            f"conflict. Table nodes involved: {', '.join(state.added.constrained_nodes)}. Raise "
            "time_limit for the diagnosis, try formulation='explicit' or 'soft', or relax "
            "input/output/node constraints."
        )
    if d.table_gave is None:
        return InfeasibleConstraintsError(
            f"the problem is infeasible even with every table rule of {form} relaxed: the conflict is "
            "between your input/output/node constraints and autoparallel's own constraints, not the "
            "table. See autoparallel's violated-constraint WARNING above; relax those constraints "
            "or use a larger mesh."
        )
    lines = [
        f"no plan satisfies the compatibility table ({form}) together with your constraints.",
        "Table rules that had to give way (re-solved with the table elastic, everything else kept):",
        *(_describe_rule(opt, state, n) for n in d.table_gave),
    ]
    if d.pins_gave:
        lines.append("User constraints that had to give way (re-solved with them elastic, the table kept):")
        lines += [_describe_pin(opt, n) for n in d.pins_gave]
    elif d.pins_gave is None:
        lines.append("No user constraint alone explains it (the table is infeasible with autoparallel's own constraints).")
    if d.pins_on_sites:
        lines.append(f"User constraints on those nodes: {_pin_list(d.pins_on_sites)}")
    culprits = list(dict.fromkeys([*(d.pins_gave or ()), *d.pins_on_sites]))
    fix = "Fix: "
    if culprits:
        fix += (
            f"remove or change {_pin_list(culprits)} "
            f"(autop.sharding_optimizer.remove_constraints([...])), or "
        )
    fix += _give_way(form, d.table_gave)
    lines.append(fix)
    return InfeasibleConstraintsError("\n".join(lines))


#: What each formulation does with a co-sharding rule that cannot hold, for the advice.
_GIVES_WAY = {
    "explicit": "formulation='explicit' repairs it with a named redistribution",
    "soft": "formulation='soft' keeps the plan and reports it",
}


def _give_way(form: str, gave: Iterable[str]) -> str:
    """The advice for the rules that had to give way, fitted to the call that was made: size
    couplings are hard in every formulation, and the formulation in use is not advised again."""
    gave = tuple(gave)
    advice = []
    if any(n.startswith("size.") for n in gave):
        advice.append(
            "the size couplings are hard in every formulation: where a region autoparallel does not see "
            "into sets those sizes (a local_map), add_op_constraints(sizes=False) leaves them out and the "
            "verifier still checks the applied graph"
        )
    if any(not n.startswith("size.") for n in gave):
        others = [text for name, text in _GIVES_WAY.items() if name != form]
        if others:
            advice.append("let the rule give way: " + ", ".join(others))
    return "; ".join(advice) + "." if advice else "relax the constraints named above."

