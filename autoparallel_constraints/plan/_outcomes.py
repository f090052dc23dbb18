"""The constraint report's records: what one ``add_op_constraints`` did to the ILP and to the
plan (:class:`ConstraintReport`), each table op whose plan is not co-sharded (:class:`SiteOutcome`)
and each round of a cutting-plane loop (:class:`LazyRound`).

Plain data, so the plugin's state can hold the last report without importing the code that builds
it (``_report``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ._solvers import SolveOutcome

__all__ = ["ARTIFACT_NAME", "OUTCOMES", "ConstraintReport", "LazyRound", "SiteOutcome"]

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
