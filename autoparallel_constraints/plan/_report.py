"""The constraint report: what the plugin added, how the solves went, and what the plan does at
every table op — kept, repaired by an explicit redistribution, gave way (``soft``), or still
violated.

Built after every plan solve (``optimize_placement`` and ``resolve``), stored on the plugin state
(:func:`constraint_report`), logged at INFO and emitted as a TORCH_TRACE artifact named
``autoparallel_constraints_report`` (JSON), beside autoparallel's own ``autoparallel_solution``.
Read from the solver's values; the audit (``apc.audit``) checks the applied graph independently.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core._placements import fmt_spec
from ..formulations._sites import twin_count
from ..formulations.lazy import chosen_bad_strategy
from ..seam.tracing import trace_structured
from ._outcomes import ARTIFACT_NAME, ConstraintReport, LazyRound, SiteOutcome
from ._solvers import SolveOutcome
from ._state import families, get_state

if TYPE_CHECKING:
    from autoparallel.optimize_sharding import ShardingOptimizer

    from ._state import PluginState

logger = logging.getLogger(__name__)

__all__ = ["ARTIFACT_NAME", "ConstraintReport", "LazyRound", "SiteOutcome", "build_report", "constraint_report", "emit"]

def _decision_value(state: PluginState, name: str) -> float:
    var = state.additions.variables.get(name)
    return float(var.varValue or 0.0) if var is not None else 0.0


def site_outcomes(opt: ShardingOptimizer, state: PluginState) -> list[SiteOutcome]:
    """Every root site whose current plan runs a non-co-sharded strategy, classified."""
    twins: dict[int, list[str]] = {}
    for site in state.sites:
        twins.setdefault(site.root_idx, []).append(site.orig.name)
    slack_of = {e.root_idx: e for e in state.additions.elastic.values()}
    out: list[SiteOutcome] = []
    for site in state.sites:
        if not site.is_root or not site.bad_indices:
            continue
        o = chosen_bad_strategy(opt, site)
        if o is None:
            continue
        multiplier = 1 + twin_count(opt, site.root_idx)
        repair = state.additions.repairs.get((site.root_idx, o))
        elastic = slack_of.get(site.root_idx)
        if repair is not None and _decision_value(state, repair.variable) > 0.5:
            outcome, cost, decision = "repaired", repair.cost * multiplier, repair.variable
        elif elastic is not None and _decision_value(state, elastic.variable) > 0.5:
            outcome, cost, decision = "gave_way", elastic.weight, elastic.variable
        else:
            outcome, cost, decision = "violated", 0.0, None
        strategy = opt.strats[site.node].strategies[o]
        out.append(
            SiteOutcome(
                outcome=outcome,
                nodes=tuple(twins.get(site.root_idx, [site.orig.name])),
                rule=site.rule.name,
                strategy=o,
                inputs=", ".join(fmt_spec(s) for s in strategy.input_specs),
                reason=str(site.verdicts[o][0]),
                cost=float(cost),
                decision=decision,
            )
        )
    return out


def build_report(
    opt: ShardingOptimizer,
    state: PluginState,
    solves: Sequence[SolveOutcome],
    rounds: Sequence[LazyRound],
    hook_seconds: float,
) -> ConstraintReport:
    """The report for the plan now in the variables' values."""
    import pulp

    sites = site_outcomes(opt, state)
    objective = pulp.value(opt.prob.objective)
    plugin_objective = sum(cost * float(var.varValue or 0.0) for var, cost in state.objective_terms)
    notes = []
    if any(s.outcome == "violated" for s in sites):
        notes.append(
            "some table ops run a strategy that is not co-sharded with nothing to answer for it; "
            "apc.audit() after apply_placement shows what the graph delivers"
        )
    hook = state.solver
    return ConstraintReport(
        formulation=state.formulation.name,
        options=dict(state.formulation.config),
        solver=hook.config.name,
        time_limit=hook.config.time_limit,
        rows=state.added.rows,
        table_nodes=len(state.added.nodes),
        constrained_nodes=state.added.constrained_nodes,
        constraints=families(state.additions.constraints),
        variables=families(state.additions.variables),
        bounds=families(state.additions.bounds),
        build_seconds=state.added.build_seconds,
        hook_seconds=hook_seconds,
        objective=None if objective is None else float(objective),
        plugin_objective=float(plugin_objective),
        solves=tuple(solves),
        rounds=tuple(rounds),
        sites=tuple(sites),
        notes=tuple(notes),
    )


def emit(report: ConstraintReport) -> None:
    """Log the report at INFO and emit it as the ``autoparallel_constraints_report`` TORCH_TRACE artifact."""
    logger.info("apc: %s", report)
    trace_structured(
        "artifact",
        metadata_fn=lambda: {"name": ARTIFACT_NAME, "encoding": "json"},
        payload_fn=lambda: json.dumps(report.to_json(), default=str),
    )


def constraint_report(autop: Any) -> ConstraintReport | None:
    """The report of the last solve of ``autop`` (None before ``optimize_placement`` or without the plugin)."""
    state = get_state(autop)
    return None if state is None else state.report
