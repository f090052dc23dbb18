"""Run one model through autoparallel with and without the plugin and summarize what happened.

Used by the demo, the lab, the tests and the benchmarks, so the figures they print are measured
the same way: wall seconds and CPU seconds (this process plus waited-for children, i.e. the CBC
subprocess) per phase, so a busy machine shows up as wall > CPU instead of silently skewing a ratio.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch.distributed.tensor.placement_types import Placement, Replicate, Shard

from ..apply._audit import AuditReport, audit
from ..core._stats import cpu_seconds as _cpu_seconds
from ..models import SEED_CONFIG, SeedBlock, SeedConfig
from ..workbench import BASELINE
from ..workbench import comm_cost as plan_comm_cost

logger = logging.getLogger(__name__)

__all__ = ["BASELINE", "R", "RunSummary", "render_table", "run_model", "run_seed", "seed_mp_policy"]

R = TypeVar("R")


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSummary:
    """Figures of one solve+apply, all measured in this process."""

    model: str
    mesh: tuple[int, ...]
    formulation: str  # "none" for autoparallel alone
    variables: int
    constraints: int
    build_s: float  # AutoParallel.__enter__ (trace, strategies, ILP) + the plugin's additions
    plugin_s: float  # the plugin's share of build_s
    solve_s: float
    apply_s: float
    objective: float
    table_nodes: int
    constrained_nodes: int
    redistributes: int
    audit: str
    audit_ok: bool
    solver: str = "cbc"
    build_cpu_s: float = 0.0  # CPU seconds of build_s (process + children)
    solve_cpu_s: float = 0.0
    enter_s: float = 0.0  # autoparallel's own build: AutoParallel.__enter__
    plugin_hook_s: float = 0.0  # the plugin's Python work around the solves (objective, pins, checks)
    comm_cost: float = 0.0  # the plan's communication cost (autoparallel's model) + plugin redistributions
    rounds: int = 1  # solves of the plan (lazy: cutting-plane rounds)
    gave_way: int = 0  # table sites whose rule gave way (soft)
    solver_status: str = ""  # last plan solve, e.g. "Optimal", "time limit hit: feasible plan ..."
    # CPU seconds of this process for enter_s and plugin_s (None in runs recorded before they were):
    # on a shared machine a short window's wall time swings with whatever else runs in it
    enter_cpu_s: float | None = None
    plugin_cpu_s: float | None = None

    @property
    def build_solve_s(self) -> float:
        return self.build_s + self.solve_s

    @property
    def build_solve_cpu_s(self) -> float:
        return self.build_cpu_s + self.solve_cpu_s

    @property
    def label(self) -> str:
        return f"{self.formulation}/{self.solver}"


def render_table(rows: Sequence[R], columns: Sequence[tuple[str, str, Callable[[R], str]]]) -> str:
    """A plain-text table, one line per row; ``columns`` are (header, alignment, cell)."""
    cells = [[fmt(r) for _, _, fmt in columns] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (h, _, _) in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(f"{v:{a}{w}}" for v, (_, a, _), w in zip(values, columns, widths))

    out = [line([h for h, _, _ in columns]), line(["-" * w for w in widths])]
    out += [line(c) for c in cells]
    return "\n".join(out)


def run_model(
    model: torch.nn.Module,
    input_fn: Callable[[], Any],
    mesh: Any,
    *,
    name: str,
    formulation: str | None,
    input_placements: Sequence[tuple[Placement, ...] | None] | None = None,
    output_placements: Sequence[tuple[Placement, ...] | None] | None = None,
    mp_policy: Any = None,
    parameter_memory_constraint: bool = False,
    configure: Callable[[Any], None] | None = None,
    ops: Any = None,
    plugin_options: dict[str, Any] | None = None,
    apply: bool = True,
    after_apply: Callable[[Any], None] | None = None,
    solver: str = "cbc",
    time_limit: float | None = None,
) -> tuple[RunSummary, AuditReport | None]:
    """Trace, optionally add the plugin, solve, apply and audit ``model`` on ``mesh``.

    ``configure(autop)`` runs after the input/output constraints and before the plugin, for pins.
    ``after_apply(autop)`` runs inside the ``with`` block after the audit (e.g. Inductor lowering).
    ``solver``/``time_limit`` go to ``add_op_constraints``; without a formulation, a solver other
    than CBC (or a time limit) is installed with ``use_solver`` and plain CBC is autoparallel's own.
    The caller provides the CPU harness (device name, fresh caches) when needed.
    """
    from autoparallel.api import AutoParallel

    from ..plan._report import constraint_report
    from ..plan._solvers import use_solver

    t0 = time.perf_counter()
    c0 = _cpu_seconds()
    with AutoParallel(model, input_fn, mesh, mp_policy) as autop:
        t_enter = time.perf_counter() - t0
        c_enter = _cpu_seconds() - c0
        if input_placements is not None:
            autop.add_input_constraints(list(input_placements))
        if output_placements is not None:
            autop.add_output_constraints(list(output_placements))
        if parameter_memory_constraint:
            autop.add_parameter_memory_constraint()
        if configure is not None:
            configure(autop)
        plugin_s = plugin_cpu = 0.0
        table_nodes = constrained = 0
        hook = None
        if formulation is not None and formulation != BASELINE:
            t1 = time.perf_counter()
            c1 = _cpu_seconds()
            options = {"solver": solver, "time_limit": time_limit, **(plugin_options or {})}
            added = autop.add_op_constraints(ops, formulation=formulation, **options)
            plugin_s = time.perf_counter() - t1
            plugin_cpu = _cpu_seconds() - c1
            table_nodes, constrained = len(added.nodes), len(added.constrained_nodes)
        elif solver != "cbc" or time_limit is not None:
            hook = use_solver(autop, solver, time_limit=time_limit)
        opt = autop.sharding_optimizer
        t2 = time.perf_counter()
        c2 = _cpu_seconds()
        placement = autop.optimize_placement()
        solve_s = time.perf_counter() - t2
        solve_cpu = _cpu_seconds() - c2
        objective = float(opt.prob.objective.value())
        creport = constraint_report(autop)
        comm_cost = plan_comm_cost(opt, placement) + sum(
            site.cost for site in (creport.sites if creport else ()) if site.outcome == "repaired"
        )
        outcomes = creport.solves if creport else (hook.outcomes if hook else ())
        plans = [o for o in outcomes if o.purpose == "plan"]
        n_vars = len(opt.prob.variables())
        n_cons = len(opt.prob.constraints)
        report: AuditReport | None = None
        apply_s = 0.0
        if apply:
            t3 = time.perf_counter()
            autop.apply_placement(placement)
            apply_s = time.perf_counter() - t3
            report = audit(autop)
            if after_apply is not None:
                after_apply(autop)
        if not table_nodes and report is not None:
            table_nodes = report.table_nodes
    summary = RunSummary(
        model=name,
        mesh=tuple(mesh.shape),
        formulation=formulation or BASELINE,
        variables=n_vars,
        constraints=n_cons,
        build_s=t_enter + plugin_s,
        plugin_s=plugin_s,
        solve_s=solve_s,
        apply_s=apply_s,
        objective=objective,
        table_nodes=table_nodes,
        constrained_nodes=constrained,
        redistributes=len(report.redistributes) if report else 0,
        audit=report.verdict if report else "not applied",
        audit_ok=report.ok if report else False,
        solver=solver,
        build_cpu_s=c_enter + plugin_cpu,
        solve_cpu_s=solve_cpu,
        enter_s=t_enter,
        enter_cpu_s=c_enter,
        plugin_cpu_s=plugin_cpu,
        plugin_hook_s=creport.hook_seconds if creport else 0.0,
        comm_cost=comm_cost,
        rounds=max(len(plans), 1),
        gave_way=len(creport.gave_way) if creport else 0,
        solver_status=plans[-1].describe() if plans else "autoparallel's CBC",
    )
    logger.info("%s", summary)
    return summary, report


def seed_mp_policy() -> Any:
    """The seed's mixed precision: bf16 params, fp32 reduce."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def run_seed(
    formulation: str | None,
    mesh: Any,
    *,
    config: SeedConfig = SEED_CONFIG,
    mixed_precision: bool = True,
    **kwargs: Any,
) -> tuple[RunSummary, AuditReport | None]:
    """The seed block of #348 with the seed's input constraint ``(Shard(0), Replicate, ...)``."""
    with torch.device("meta"):
        model = SeedBlock(config)
    first = (Shard(0),) + (Replicate(),) * (mesh.ndim - 1)
    kwargs.setdefault("input_placements", [first])
    return run_model(
        model,
        lambda: model.make_input(),
        mesh,
        name="seed",
        formulation=formulation,
        mp_policy=seed_mp_policy() if mixed_precision else None,
        **kwargs,
    )
