"""One build, many formulations: :class:`Workbench`.

``AutoParallel.__enter__`` (trace, strategies, the ILP) is the same code and input for every
formulation the plugin adds afterwards, and at depth it dwarfs the rest (llama3 dim 4096, 32 layers,
8x8: 95-170 s of build against 9-16 s of ``highs-lp`` solve). The workbench takes the problem as
autoparallel built it and, for each formulation × solver, adds it, solves, optionally applies,
audits and verifies, records a :class:`WorkbenchRow`, and restores the problem exactly
(:class:`~._snapshot.ProblemSnapshot`) before the next::

    with AutoParallel(model, input_fn, mesh) as autop:
        autop.add_input_constraints([(Shard(0), Replicate())])
        bench = apc.Workbench(autop)
        for row in bench.compare(["none", "strict", "explicit", "lazy"], solvers=["highs-lp"], repeat=3):
            print(row)

A row's plan is the one an independent build would give: the problem each row solves is the one
``__enter__`` built, rows, variables, bounds and objective alike (``tests/test_workbench.py``
compares both, node by node, on several models).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TextIO

from ..apply._audit import audit
from ..core._stats import Spread, cpu_seconds, interleave
from ..errors import InvalidOptionError, PluginStateError
from ..formulations import Formulation, make_formulation
from ..plan._report import constraint_report
from ..plan._solvers import DEFAULT_SOLVER, solver_config, use_solver
from ..plan._state import get_state
from ..seam import autop as upstream
from ..seam._snapshot import ProblemSnapshot, problem_fingerprint
from ..seam.lp import registered_variables
from ..view._export import export, plan_choices

if TYPE_CHECKING:
    from autoparallel.api import AutoParallel

logger = logging.getLogger(__name__)

__all__ = ["BASELINE", "Workbench", "WorkbenchRow", "WorkbenchRows", "comm_cost", "plan_choices"]

BASELINE = "none"  # autoparallel alone (with the row's solver)


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkbenchRow:
    """One formulation × solver solved on the shared build (one repeat)."""

    formulation: str  # "none" for autoparallel alone
    solver: str
    variables: int
    constraints: int
    plugin_s: float  # add_op_constraints (the rows, variables and bounds of the formulation)
    plugin_cpu_s: float
    solve_s: float  # optimize_placement: every solve of the row (lazy: every round)
    solve_cpu_s: float  # process + the CBC subprocess
    restore_s: float  # putting the problem back afterwards
    objective: float
    comm_cost: float  # autoparallel's communication cost of the plan + the plugin's redistributions
    rounds: int
    gave_way: int
    solver_status: str
    relaxation: str | None = None  # highs-lp: "integral", or "fractional (N columns)" when the MIP ran
    redistributes: int = 0  # plugin redistributions in the applied graph
    apply_s: float = 0.0
    audit: str = "not applied"
    audit_ok: bool = False
    verify: str = "not applied"  # the verifier's verdict on the applied graph
    verify_ok: bool = False
    verify_s: float = 0.0  # the audit with the verifier
    unknown: int = 0  # nodes the verifier could not place
    unproven_outputs: int = 0
    choices: dict[str, str] = field(default_factory=dict, repr=False)  # node -> chosen strategy
    table_choices: dict[str, str] = field(default_factory=dict, repr=False)  # table ops only
    export: dict[str, Any] | None = field(default=None, repr=False, compare=False)  # Workbench(export=True)

    @property
    def label(self) -> str:
        return f"{self.formulation}/{self.solver}"

    @property
    def plugin_solve_s(self) -> float:
        """What the row costs on top of the shared build: the plugin's additions and the solve."""
        return self.plugin_s + self.solve_s

    @property
    def plugin_solve_cpu_s(self) -> float:
        return self.plugin_cpu_s + self.solve_cpu_s

    def __str__(self) -> str:
        return (
            f"{self.label}: objective {self.objective:.3f}, comm {self.comm_cost:.3f}, plugin {self.plugin_s:.2f}s, "
            f"solve {self.solve_s:.2f}s ({self.solver_status}), {self.redistributes} redistributes, "
            f"audit {self.audit}, verify {self.verify}"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkbenchRows:
    """One formulation × solver over its repeats (interleaved with the other rows)."""

    formulation: str
    solver: str
    runs: tuple[WorkbenchRow, ...]
    warmups: tuple[WorkbenchRow, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.formulation}/{self.solver}"

    @property
    def first(self) -> WorkbenchRow:
        return self.runs[0]

    def spread(self, metric: Callable[[WorkbenchRow], float]) -> Spread:
        return Spread.of([metric(r) for r in self.runs])

    @property
    def varies(self) -> tuple[str, ...]:
        """Fields other than timings that differed between repeats (expected: none)."""
        names = ("objective", "constraints", "variables", "redistributes", "audit", "verify", "rounds")
        out = [f for f in names if len({getattr(r, f) for r in self.runs}) > 1]
        if len({tuple(sorted(r.choices.items())) for r in self.runs}) > 1:
            out.append("choices")
        return tuple(out)


class Workbench:
    """Solve many formulations on one ``AutoParallel`` build; see the module docstring.

    Create it inside the ``with`` block after the input/output (and memory) constraints, before
    ``optimize_placement`` and without ``add_op_constraints``: that problem is what every row
    starts from. ``apply=True`` also builds each row's parallel graph (autoparallel's apply step
    with the plugin's, without compiling it), audits and verifies it. ``check_restore=True``
    fingerprints the problem before the first row and after every restore and raises
    :class:`~autoparallel_constraints.PluginStateError` if a row left anything behind (seconds per
    row on large problems: for tests). ``export=True`` keeps each row's plan as
    :func:`~autoparallel_constraints.export` gives it (``row.export``: the plan page's input).
    The ``AutoParallel`` is left as it was found.
    """

    def __init__(
        self, autop: AutoParallel, *, apply: bool = True, check_restore: bool = False, export: bool = False
    ) -> None:
        if getattr(autop, "active", False) is not True or getattr(autop, "sharding_optimizer", None) is None:
            raise PluginStateError(
                "Workbench needs an entered AutoParallel: `with AutoParallel(model, input_fn, mesh) as autop: "
                "bench = apc.Workbench(autop)`"
            )
        if get_state(autop) is not None:
            raise PluginStateError(
                "Workbench needs the problem as autoparallel built it: create it before add_op_constraints "
                "(each row adds its own formulation)"
            )
        if getattr(autop, "sharding_placement", None) is not None:
            raise PluginStateError("Workbench must be created before optimize_placement()")
        self.autop = autop
        self.apply = apply
        self.check_restore = check_restore
        self.export = export
        self._snapshot = ProblemSnapshot.take(autop)
        # counted once: it walks every row (1-2 s at 32 layers); each row adds its formulation's
        self._built_variables = _count_variables(autop.sharding_optimizer.prob)
        self._fingerprint = problem_fingerprint(autop.sharding_optimizer) if check_restore else None

    def run(
        self,
        formulation: str | Formulation | None = "explicit",
        solver: str = DEFAULT_SOLVER,
        *,
        ops: Any = None,
        time_limit: float | None = None,
        **options: Any,
    ) -> WorkbenchRow:
        """Add ``formulation`` (``None`` or ``"none"``: autoparallel alone) with ``solver``, solve,
        apply and check when the workbench applies, record the row, restore the problem.
        ``ops`` and ``options`` go to ``add_op_constraints`` (its ``verify`` is the workbench's:
        the verdict is recorded, never raised)."""
        name = _formulation_name(formulation)
        solver_config(solver, time_limit)  # validates before anything changes
        autop = self.autop
        try:
            c0, t0 = cpu_seconds(), time.perf_counter()
            if name == BASELINE:
                hook = use_solver(autop, solver, time_limit=time_limit) if solver != "cbc" or time_limit else None
            else:
                autop.add_op_constraints(
                    ops, formulation=formulation, solver=solver, time_limit=time_limit, verify="off", **options
                )
                hook = None
            plugin_s, plugin_cpu = time.perf_counter() - t0, cpu_seconds() - c0
            opt = autop.sharding_optimizer
            c1, t1 = cpu_seconds(), time.perf_counter()
            placement = autop.optimize_placement()
            solve_s, solve_cpu = time.perf_counter() - t1, cpu_seconds() - c1
            row = self._row(name, solver, opt, placement, hook, plugin_s, plugin_cpu, solve_s, solve_cpu)
        finally:
            t2 = time.perf_counter()
            self.restore()
            restore_s = time.perf_counter() - t2
        logger.info("workbench: %s (restored in %.3fs)", row, restore_s)
        return _replace(row, restore_s=restore_s)

    def compare(
        self,
        formulations: Sequence[str | Formulation | None],
        solvers: Sequence[str] = (DEFAULT_SOLVER,),
        *,
        repeat: int = 1,
        warmup: int = 0,
        progress: TextIO | None = None,
        **options: Any,
    ) -> list[WorkbenchRows]:
        """Every formulation × solver, ``warmup`` discarded rounds then ``repeat`` rounds,
        interleaved with the order reversed every other round (as the lab runs rows)."""
        if repeat < 1:
            raise InvalidOptionError(f"repeat must be >= 1, got {repeat}")
        if warmup < 0:
            raise InvalidOptionError(f"warmup must be >= 0, got {warmup}")
        by_key = {(_formulation_name(f), s): f for f in formulations for s in solvers}

        def one(key: tuple[str, str]) -> WorkbenchRow:
            if progress is not None:
                print(f"workbench: {key[0]}/{key[1]} ...", file=progress, flush=True)
            return self.run(by_key[key], key[1], **options)

        measured, warmups = interleave(list(by_key), one, repeat=repeat, warmup=warmup)
        return [
            WorkbenchRows(formulation=f, solver=s, runs=tuple(measured[(f, s)]), warmups=tuple(warmups[(f, s)]))
            for f, s in by_key
        ]

    def restore(self) -> None:
        """Put the problem back as the workbench found it (``run`` does this after every row)."""
        self._snapshot.restore()
        if self._fingerprint is not None:
            now = problem_fingerprint(self.autop.sharding_optimizer)
            if now != self._fingerprint:
                raise PluginStateError("Workbench: the problem differs from the build after a restore")

    def _row(
        self,
        name: str,
        solver: str,
        opt: Any,
        placement: dict[Any, Any],
        hook: Any,
        plugin_s: float,
        plugin_cpu: float,
        solve_s: float,
        solve_cpu: float,
    ) -> WorkbenchRow:
        autop = self.autop
        creport = constraint_report(autop)
        repaired = sum(s.cost for s in (creport.sites if creport else ()) if s.outcome == "repaired")
        outcomes = creport.solves if creport else (hook.outcomes if hook else ())
        plans = [o for o in outcomes if o.purpose == "plan"]
        choices = plan_choices(placement)
        state = get_state(autop)
        table_nodes = {s.orig.name for s in state.sites} if state is not None else set()
        row = WorkbenchRow(
            formulation=name,
            solver=solver,
            variables=self._built_variables + (len(state.added.variable_names) if state is not None else 0),
            constraints=len(opt.prob.constraints),
            plugin_s=plugin_s,
            plugin_cpu_s=plugin_cpu,
            solve_s=solve_s,
            solve_cpu_s=solve_cpu,
            restore_s=0.0,
            objective=float(opt.prob.objective.value()),
            comm_cost=comm_cost(opt, placement) + repaired,
            rounds=max(len(plans), 1),
            gave_way=len(creport.gave_way) if creport else 0,
            solver_status=plans[-1].describe() if plans else "autoparallel's CBC",
            relaxation=_relaxation(plans),
            choices=choices,
            table_choices={k: v for k, v in choices.items() if k in table_nodes},
        )
        if not self.apply:
            return _replace(row, export=export(autop, label=_export_label(row))) if self.export else row
        t0 = time.perf_counter()
        upstream.call_apply_placement_common(autop, placement)  # the parallel graph, as apply_placement builds it first
        apply_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        report = audit(autop)  # the plan checks, and the verifier on the parallel graph
        verify_s = time.perf_counter() - t1
        proof = report.verification
        return _replace(
            row,
            redistributes=len(report.redistributes),
            apply_s=apply_s,
            audit=report.verdict,
            audit_ok=report.ok,
            verify=proof.verdict if proof is not None else "no parallel graph",
            verify_ok=proof is not None and proof.ok,
            verify_s=verify_s,
            unknown=proof.n_unknown if proof is not None else 0,
            unproven_outputs=len(proof.unproven_outputs) if proof is not None else 0,
            export=export(autop, report=report, label=_export_label(row)) if self.export else None,
        )


def _export_label(row: WorkbenchRow) -> str:
    return f"autoparallel alone ({row.solver})" if row.formulation == BASELINE else row.label


def comm_cost(opt: Any, placement: dict[Any, Any]) -> float:
    """The plan's communication cost by autoparallel's own accounting (``_compute_solution_cost``)."""
    try:
        return upstream.solution_comm_cost(opt, placement)
    except Exception as exc:  # noqa: BLE001 - a figure for the record, never a reason to fail a row
        logger.warning("comm cost unavailable: %s", exc)
        return float("nan")


def _count_variables(prob: Any) -> int:
    """``len(prob.variables())`` without its side effect (it registers and sorts the problem's
    variable list, which the workbench must leave as built)."""
    seen = {id(v) for v in registered_variables(prob)}
    if prob.objective is not None:
        seen.update(map(id, prob.objective.keys()))
    for row in prob.constraints.values():
        seen.update(map(id, row.keys()))
    return len(seen)


def _formulation_name(formulation: str | Formulation | None) -> str:
    if formulation is None or formulation == BASELINE:
        return BASELINE
    return make_formulation(formulation).name if not isinstance(formulation, Formulation) else formulation.name


def _relaxation(plans: Sequence[Any]) -> str | None:
    """The LP relaxation's verdict over a row's solves: the first fractional one, else integral."""
    verdicts = [o.relaxation for o in plans if o.relaxation is not None]
    return next((v for v in verdicts if v != "integral"), verdicts[0] if verdicts else None)


def _replace(row: WorkbenchRow, **changes: Any) -> WorkbenchRow:
    return replace(row, **changes)
