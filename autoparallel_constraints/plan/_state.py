"""The plugin's state for one ``AutoParallel``: what ``add_op_constraints`` added and decided.

It is kept on the AutoParallel (``seam.autop.put``). This module sits below everything that reads
it — the report, the infeasibility explanation, the plugin call, the verifier, the apply step and
the audit — and above what it is made of (table, sites, formulations, solver hook), so imports
point one way (``docs/architecture.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core._placements import fmt_spec
from ..formulations._sites import strategy_index
from ..seam import autop as upstream

if TYPE_CHECKING:
    import pulp
    import torch
    from autoparallel.optimize_sharding import ShardingOptimizer

    from ..formulations import Additions, Formulation, Namer
    from ..formulations._sites import Site
    from ..seam.dtensor import DTensorSpec
    from ..table import OpRule, Table
    from ._outcomes import ConstraintReport
    from ._solvers import HeldBack, SolverHook

__all__ = ["AddedConstraints", "PlannedRedistribute", "PluginState", "PriorBounds", "families", "get_state"]


VERIFY_MODES = ("raise", "warn", "off")  # add_op_constraints(verify=...): after apply, see the verifier

@dataclass(frozen=True, kw_only=True, slots=True)
class PlannedRedistribute:
    """One redistribution the plan needs in front of a table op, and where it landed."""

    node: str  # joint-graph node of the table op
    op: str
    arg: str  # argument label, e.g. "values"
    spec_index: int
    source: DTensorSpec
    target: DTensorSpec
    constraint: str  # the plugin variable/decision that created it
    cost: float
    parallel_node: str | None = None  # the node of the parallel graph that completes it

    def describe(self) -> str:
        where = f" as %{self.parallel_node}" if self.parallel_node else ""
        return (
            f"{self.node}.{self.arg}: {fmt_spec(self.source)} -> {fmt_spec(self.target)} "
            f"[{self.constraint}, cost {self.cost:.3f}]{where}"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class AddedConstraints:
    """What one ``add_op_constraints`` call added to the ILP."""

    formulation: str
    rows: tuple[str, ...]  # table rows in force
    nodes: tuple[str, ...]  # matched joint-graph nodes (every repeated layer)
    constrained_nodes: tuple[str, ...]  # matched nodes with at least one non-co-sharded strategy
    size_couplings: tuple[str, ...]  # "<node> dim <i> = <size expression>", see _sizes
    constraints: dict[str, int]  # family -> count
    variables: dict[str, int]
    constraint_names: tuple[str, ...]
    variable_names: tuple[str, ...]
    build_seconds: float
    bounds: dict[str, int] = field(default_factory=dict)  # family -> count of Bound entries
    bound_names: tuple[str, ...] = ()

    @property
    def num_constraints(self) -> int:
        return len(self.constraint_names)

    @property
    def num_variables(self) -> int:
        return len(self.variable_names)

    def __str__(self) -> str:
        fam = ", ".join(f"{k}={v}" for k, v in {**self.constraints, **self.variables, **self.bounds}.items()) or "nothing"
        return (
            f"{self.formulation}: {len(self.nodes)} table nodes matched, {len(self.constrained_nodes)} "
            f"with non-co-sharded strategies, {len(self.size_couplings)} size couplings; added {fam} "
            f"in {self.build_seconds:.3f}s"
        )


# A bound entry's variables with the (lowBound, upBound) each had before the plugin set it.
PriorBounds = tuple[tuple[Any, "float | None", "float | None"], ...]


@dataclass(kw_only=True)
class PluginState:
    """The plugin's bookkeeping for one AutoParallel instance."""

    autop: Any
    table: Table
    rules: list[OpRule]
    formulation: Formulation
    materialize: str
    sites: list[Site]
    additions: Additions
    added: AddedConstraints
    solver: SolverHook
    namer: Namer
    objective_terms: list[tuple[pulp.LpVariable, float]] = field(default_factory=list)
    report: ConstraintReport | None = None  # of the last solve
    hook_seconds: float = 0.0  # the plugin's Python work in the optimizer hooks, last solve
    verify: str = "raise"  # after apply: "raise", "warn" or "off" (see the verifier)
    prior_bounds: dict[str, PriorBounds] = field(default_factory=dict)  # bound name -> before the plugin
    # node -> strategies the nested-shard rows forbid (``_nested``), for the memory budget each solve
    nested_forbidden: dict[torch.fx.Node, frozenset[int]] = field(default_factory=dict)

    @property
    def optimizer(self) -> ShardingOptimizer:
        return self.autop.sharding_optimizer

    def held_back(self) -> HeldBack:
        """The plugin's part of the problem — its rows, and its variables with the bounds they had
        before it — for a staged HiGHS solve (``_solvers.solve_with_highs``)."""
        from ._solvers import HeldBack

        prior: dict[int, tuple[Any, float | None, float | None]] = {}
        for entries in self.prior_bounds.values():  # in the order set: the first entry is the original
            for var, low, up in entries:
                prior.setdefault(id(var), (var, low, up))
        return HeldBack(rows=frozenset(self.additions.constraints), prior=prior)

    def planned_redistributes(self, placement: dict[torch.fx.Node, Any]) -> list[PlannedRedistribute]:
        """The plugin redistributions the given plan needs, one per (node, offending input).

        A site runs its repaired strategy when the plan picked a strategy ``o`` with a repair
        ``(root, o)``; every cluster twin of the root gets its own node.
        """
        opt = self.optimizer
        out: list[PlannedRedistribute] = []
        for site in self.sites:
            chosen = placement.get(site.orig)
            if chosen is None:
                continue
            o = strategy_index(opt, site.node, chosen)
            repair = self.additions.repairs.get((site.root_idx, o)) if o is not None else None
            if repair is None:
                continue
            for i, target in repair.targets.items():
                arg = next((b.label for b in site.binding.args if b.spec_index == i), f"arg{i}")
                source = chosen.input_specs[i]
                out.append(
                    PlannedRedistribute(
                        node=site.orig.name,
                        op=site.rule.name,
                        arg=arg,
                        spec_index=i,
                        source=source,
                        target=type(target)(source.mesh, target.placements, tensor_meta=source.tensor_meta),
                        constraint=repair.variable,
                        cost=repair.cost,
                    )
                )
        return out


def get_state(autop: Any) -> PluginState | None:
    """The plugin state of ``autop``, or None when ``add_op_constraints`` was not called on it."""
    return upstream.get(autop, "state")




def families(named: dict[str, Any]) -> dict[str, int]:
    """``{"explicit.redistribute": 3, ...}``: names counted by family (the part before the last ``_``)."""
    counts: dict[str, int] = {}
    for name in named:
        family = name.rsplit("_", 1)[0]
        counts[family] = counts.get(family, 0) + 1
    return dict(sorted(counts.items()))
