"""Run one model through autoparallel with and without the plugin and summarize what happened.

Used by the demo (``python -m autoparallel_constraints demo``), the tests and the benchmarks, so
the figures they print are measured the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.tensor.placement_types import Placement, Replicate, Shard

from ._audit import AuditReport, audit
from .models import SEED_CONFIG, SeedBlock, SeedConfig

logger = logging.getLogger(__name__)

__all__ = ["RunSummary", "render_table", "run_model", "run_seed"]

BASELINE = "none"


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

    @property
    def build_solve_s(self) -> float:
        return self.build_s + self.solve_s


COLUMNS: tuple[tuple[str, str, Callable[[RunSummary], str]], ...] = (
    ("formulation", "<", lambda r: r.formulation),
    ("variables", ">", lambda r: f"{r.variables:,}"),
    ("constraints", ">", lambda r: f"{r.constraints:,}"),
    ("build s", ">", lambda r: f"{r.build_s:.2f}"),
    ("plugin s", ">", lambda r: f"{r.plugin_s:.3f}"),
    ("solve s", ">", lambda r: f"{r.solve_s:.2f}"),
    ("objective", ">", lambda r: f"{r.objective:.3f}"),
    ("table ops", ">", lambda r: str(r.table_nodes)),
    ("constrained", ">", lambda r: str(r.constrained_nodes)),
    ("redistributes", ">", lambda r: str(r.redistributes)),
    ("audit", "<", lambda r: r.audit),
)


def render_table(rows: Sequence[RunSummary]) -> str:
    """A plain-text table, one row per run."""
    cells = [[fmt(r) for _, _, fmt in COLUMNS] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (h, _, _) in enumerate(COLUMNS)]
    def line(values: Sequence[str]) -> str:
        return "  ".join(f"{v:{a}{w}}" for v, (_, a, _), w in zip(values, COLUMNS, widths))
    out = [line([h for h, _, _ in COLUMNS]), line(["-" * w for w in widths])]
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
) -> tuple[RunSummary, AuditReport | None]:
    """Trace, optionally add the plugin, solve, apply and audit ``model`` on ``mesh``.

    ``configure(autop)`` runs after the input/output constraints and before the plugin, for pins.
    ``after_apply(autop)`` runs inside the ``with`` block after the audit (e.g. Inductor lowering).
    The caller provides the CPU harness (device name, fresh caches) when needed.
    """
    from autoparallel.api import AutoParallel

    t0 = time.perf_counter()
    with AutoParallel(model, input_fn, mesh, mp_policy) as autop:
        t_enter = time.perf_counter() - t0
        if input_placements is not None:
            autop.add_input_constraints(list(input_placements))
        if output_placements is not None:
            autop.add_output_constraints(list(output_placements))
        if parameter_memory_constraint:
            autop.add_parameter_memory_constraint()
        if configure is not None:
            configure(autop)
        plugin_s = 0.0
        table_nodes = constrained = 0
        if formulation is not None and formulation != BASELINE:
            t1 = time.perf_counter()
            added = autop.add_op_constraints(ops, formulation=formulation, **(plugin_options or {}))
            plugin_s = time.perf_counter() - t1
            table_nodes, constrained = len(added.nodes), len(added.constrained_nodes)
        opt = autop.sharding_optimizer
        t2 = time.perf_counter()
        placement = autop.optimize_placement()
        solve_s = time.perf_counter() - t2
        objective = float(opt.prob.objective.value())
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
