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
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ._placements import fmt_spec
from ._problem import twin_count
from ._solvers import SolveOutcome
from ._state import families, get_state
from .formulations.lazy import chosen_bad_strategy

if TYPE_CHECKING:
    from autoparallel.optimize_sharding import ShardingOptimizer

    from ._state import PluginState

logger = logging.getLogger(__name__)

__all__ = ["ARTIFACT_NAME", "ConstraintReport", "LazyRound", "SiteOutcome", "build_report", "constraint_report", "emit"]

ARTIFACT_NAME = "autoparallel_constraints_report"
OUTCOMES = ("repaired", "gave_way", "violated")


@dataclass(frozen=True, kw_only=True, slots=True)
class SiteOutcome:
    """A table op whose plan runs a strategy that is not co-sharded, and what answers for it."""

    outcome: str  # one of OUTCOMES
    nodes: tuple[str, ...]  # the site and its cluster twins (one shared decision)
    rule: str
    strategy: int
    inputs: str  # the strategy's input specs, compact
    reason: str  # the first mismatch
    cost: float  # penalty paid (gave_way) or redistribution cost (repaired), × twins
    decision: str | None  # the plugin variable: soft.slack_*, explicit.redistribute_*

    def describe(self) -> str:
        via = f" [{self.decision}]" if self.decision else ""
        return (
            f"{self.outcome}: {', '.join(self.nodes)} ({self.rule}) strategy #{self.strategy} inputs "
            f"{self.inputs}: {self.reason}; cost {self.cost:.3f}{via}"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class LazyRound:
    """One solve of a cutting-plane loop: what it found violated and cut."""

    round: int
    seconds: float
    objective: float | None
    violated: tuple[str, ...]  # nodes whose plan broke their row in this round
    cuts: tuple[str, ...]  # constraints and bounds added after it


@dataclass(frozen=True, kw_only=True)
class ConstraintReport:
    """What one ``add_op_constraints`` did to the ILP and to the plan, after a solve."""

    formulation: str
    options: dict[str, Any]
    solver: str
    time_limit: float | None
    rows: tuple[str, ...]
    table_nodes: int
    constrained_nodes: tuple[str, ...]  # with at least one non-co-sharded strategy
    constraints: dict[str, int]  # family -> count, including lazy cuts added while solving
    variables: dict[str, int]
    build_seconds: float  # add_op_constraints
    hook_seconds: float  # the plugin's Python work around the solves (objective, pins, checks)
    objective: float | None
    plugin_objective: float  # the plugin's share of the objective (penalties, redistributions)
    solves: tuple[SolveOutcome, ...]
    bounds: dict[str, int] = field(default_factory=dict)  # family -> count of Bound entries (lazy cuts too)
    rounds: tuple[LazyRound, ...] = ()
    sites: tuple[SiteOutcome, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def by_outcome(self, outcome: str) -> list[SiteOutcome]:
        return [s for s in self.sites if s.outcome == outcome]

    @property
    def gave_way(self) -> list[SiteOutcome]:
        return self.by_outcome("gave_way")

    @property
    def violated(self) -> list[SiteOutcome]:
        return self.by_outcome("violated")

    @property
    def solve_seconds(self) -> float:
        return sum(s.seconds for s in self.solves if s.purpose == "plan")

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["solves"] = [asdict(s) for s in self.solves]
        return out

    def stable_text(self) -> str:
        """The report without wall-clock timings, as sorted JSON: equal bytes for equal runs."""

        def strip(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: strip(v) for k, v in value.items() if "seconds" not in k}
            if isinstance(value, (list, tuple)):
                return [strip(v) for v in value]
            return value

        import json

        return json.dumps(strip(self.to_json()), sort_keys=True, default=str)

    def __str__(self) -> str:
        fams = ", ".join(f"{k}={v}" for k, v in {**self.constraints, **self.variables, **self.bounds}.items()) or "nothing"
        obj = "-" if self.objective is None else f"{self.objective:.3f}"
        lines = [
            f"constraint report ({self.formulation}, {self.solver}): {self.table_nodes} table nodes, "
            f"{len(self.constrained_nodes)} with non-co-sharded strategies; added {fams}",
            f"  objective {obj} (plugin share {self.plugin_objective:.3f}); plugin build "
            f"{self.build_seconds:.3f}s + hooks {self.hook_seconds:.3f}s; solve {self.solve_seconds:.2f}s",
        ]
        lines += [f"  solve: {s.describe()}" for s in self.solves]
        for r in self.rounds if len(self.rounds) > 1 or self.formulation == "lazy" else ():
            cut = f", cut {', '.join(r.cuts)}" if r.cuts else ""
            lines.append(
                f"  round {r.round}: {r.seconds:.2f}s, violated {', '.join(r.violated) or 'none'}{cut}"
            )
        lines += [f"  {s.describe()}" for s in self.sites]
        if not self.sites:
            lines.append("  every table op runs a co-sharded strategy")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


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
    from torch._logging import trace_structured

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
