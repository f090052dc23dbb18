"""Which MILP solver answers autoparallel's ILP, with what time limit, and what came out.

autoparallel's ``ShardingOptimizer._solve`` builds a ``pulp.PULP_CBC_CMD`` itself and calls
``self.prob.solve(solver)``. To choose the solver per call without re-implementing that step
(memory constraint, selected keys, infeasibility check stay autoparallel's), :func:`install`
shadows ``solve`` on the optimizer's *instance* of the problem: the solver autoparallel passes in
is replaced by the configured one, the outcome is classified and recorded, and

* HiGHS's binary values (``0.9999999``) are rounded, because autoparallel selects a variable by
  ``var.value() == 1``;
* a time limit that stops the solver with a feasible plan keeps that plan and warns
  (:class:`SolverTimeLimitWarning`, with the gap when the solver reports one); without a
  feasible plan it raises :class:`~autoparallel_constraints.errors.SolverTimeLimitError`.

``use_solver(autop, "highs")`` does the same for a plain ``AutoParallel`` without plugin
constraints (the lab's baseline with HiGHS); ``add_op_constraints(..., solver=..., time_limit=...)``
installs it together with the plugin's constraints.

HiGHS is driven through ``highspy`` directly (:func:`solve_with_highs`): the problem is handed over
in one ``passModel`` call built from flat arrays, where PuLP's HiGHS API adds one column and one
row at a time (measured on llama3 2 layers, 8x8: 324k columns, 122k rows — PuLP's build ≈ 9 s of
Python, this one ≈ 2 s). It runs single-threaded by default (``threads=1``): on this 2-core machine,
shared with other work, HiGHS's parallel MIP took 8.8-28 s on that problem against a steady 8.1-8.2 s
with one thread. CBC goes through PuLP's ``PULP_CBC_CMD``, like autoparallel.

``"highs-lp"`` is the exact route that is fastest on autoparallel's ILPs (:func:`solve_with_highs`
with ``relax_first``): HiGHS solves the LP relaxation first; when every integer column of its optimum
is within 1e-6 of an integer, that vertex is an optimal solution of the ILP too (it is feasible for
the ILP and no ILP solution can beat the relaxation's optimum), so it is accepted, rounded. Otherwise
the same HiGHS instance solves the MIP, offered the relaxation's solution as a start
(``setSolution``; HiGHS uses what of it it can). The outcome says which path was taken
(``SolveOutcome.relaxation``: ``"integral"`` or ``"fractional (N columns)"``).

With the plugin, ``highs-lp`` solves that relaxation in two stages (``SolverConfig.staged``, on by
default): autoparallel's problem first, then the plugin's rows and bounds added to the same HiGHS
instance and the LP re-solved from the first optimum's basis (``solve_with_highs(held_back=...)``).
HiGHS's cold path on the whole problem is a longer one even when the plugin's part does not move
the optimum (llama3 2 layers 8x8: 9,045 simplex iterations with strict's bounds, 7,953 without);
staged it is the path without, plus what the plugin's part actually changes.

On the HiGHS routes the hook also builds autoparallel's objective, ``Σ cost·(1 + linked)·x`` over
its decision variables, in bulk (:func:`objective_in_bulk`): the same coefficients in the same
order, as one ``LpAffineExpression`` from (variable, coefficient) pairs, where autoparallel's
``_set_objective`` makes two expressions per variable and sums them (llama3 32 layers 8x8: 575,832
variables; 9.6 s of a profiled 18 s highs-lp solve). CBC's route keeps autoparallel's own, so that
a CBC comparison with autoparallel alone stays like for like.

``highs-lp`` is :data:`DEFAULT_SOLVER`, chosen by measurement: on every model and mesh the project
runs it gave CBC's objective, its relaxation integral, at a fraction of CBC's solve
(``benchmarks/solver_decision.py``). HiGHS comes with ``highspy``, a dependency; CBC ships with
PuLP and stays one argument away (``solver="cbc"``), as does autoparallel's own route.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulp

from ..errors import InvalidOptionError, PluginStateError, SolverTimeLimitError, SolverUnavailableError
from ..seam import autop as upstream
from ..seam._optimizer import hook_solver

if TYPE_CHECKING:
    from autoparallel.optimize_sharding import ShardingOptimizer

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_SOLVER",
    "SOLVERS",
    "HeldBack",
    "HighsRun",
    "SolveOutcome",
    "SolverConfig",
    "SolverHook",
    "SolverTimeLimitWarning",
    "get_hook",
    "highs_available",
    "install",
    "objective_in_bulk",
    "solve_with_highs",
    "solver_config",
    "use_solver",
]

SOLVERS = ("cbc", "highs", "highs-lp")
# add_op_constraints' and the workbench's default: CBC's objective in every row measured, its solve
# 0.08-0.23x CBC's (docs/performance.md, "The default solver"); autoparallel alone keeps CBC.
DEFAULT_SOLVER = "highs-lp"
HIGHS_ROUTES = ("highs", "highs-lp")  # solved by solve_with_highs
INTEGRAL_TOL = 1e-6  # a relaxation value this close to an integer counts as integral
HIGHS_HINT = 'pip install "autoparallel-constraints[highs]"  (or: pip install highspy)'


class SolverTimeLimitWarning(UserWarning):
    """The solver stopped at its time limit with a feasible, not proven optimal, plan."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SolverConfig:
    """A solver choice: ``name`` in :data:`SOLVERS`, an optional time limit in seconds."""

    name: str = DEFAULT_SOLVER
    time_limit: float | None = None
    msg: bool = False
    threads: int | None = 1  # HiGHS only; None = HiGHS's own choice
    staged: bool = True  # highs-lp with the plugin: its rows and bounds added to a solved LP (solve_with_highs)

    def make(self, time_limit: float | None = None, msg: bool | None = None) -> pulp.LpSolver:
        """A fresh PuLP CBC solver object (``time_limit`` overrides the configured one)."""
        limit = self.time_limit if time_limit is None else time_limit
        show = self.msg if msg is None else msg
        return pulp.PULP_CBC_CMD(msg=show, timeLimit=limit)


def solver_config(solver: str | SolverConfig = DEFAULT_SOLVER, time_limit: float | None = None) -> SolverConfig:
    """Validate a solver choice (a name, or a :class:`SolverConfig` for msg/threads); raise a package
    error naming the fix."""
    if isinstance(solver, SolverConfig):
        checked = solver_config(solver.name, solver.time_limit if time_limit is None else time_limit)
        return dataclasses.replace(checked, msg=solver.msg, threads=solver.threads, staged=solver.staged)
    if not isinstance(solver, str):
        raise InvalidOptionError(f"solver must be one of {SOLVERS}, got {type(solver).__name__}: {solver!r}")
    name = solver.lower()
    if name not in SOLVERS:
        close = difflib.get_close_matches(name, SOLVERS, n=2)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise InvalidOptionError(f"unknown solver {solver!r}; available: {', '.join(SOLVERS)}.{hint}")
    if time_limit is not None:
        if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not time_limit > 0:
            raise InvalidOptionError(f"time_limit must be a positive number of seconds or None, got {time_limit!r}")
    if name in HIGHS_ROUTES and not highs_available():
        raise SolverUnavailableError(
            f"solver {name!r} needs the highspy package, which is not importable here. Install it with\n"
            f"    {HIGHS_HINT}\nor use solver='cbc' (ships with PuLP)."
        )
    return SolverConfig(name=name, time_limit=None if time_limit is None else float(time_limit))


def highs_available() -> bool:
    """Whether ``highspy`` is importable."""
    try:
        import highspy  # noqa: F401
    except ImportError:
        return False
    return True


# HiGHS model status -> (PuLP status, PuLP solution status, time limit hit)
def _highs_status(model_status: Any, feasible: bool) -> tuple[int, int, bool]:
    import highspy

    status = highspy.HighsModelStatus
    if model_status == status.kOptimal:
        return pulp.LpStatusOptimal, pulp.LpSolutionOptimal, False
    if model_status in (status.kInfeasible, status.kUnboundedOrInfeasible):
        return pulp.LpStatusInfeasible, pulp.LpSolutionInfeasible, False
    if model_status == status.kUnbounded:
        return pulp.LpStatusUnbounded, pulp.LpSolutionUnbounded, False
    hit = model_status == status.kTimeLimit
    if feasible:
        return pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible, hit
    return pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound, hit


@dataclass(frozen=True, slots=True)
class HighsRun:
    """What :func:`solve_with_highs` saw: the MIP gap when stopped early, whether the time limit
    hit, with ``relax_first`` the relaxation's verdict and seconds, and HiGHS's simplex
    iterations over the whole call (the path HiGHS took: benchmarks compare it between problems)."""

    gap: float | None
    hit: bool
    relaxation: str | None = None  # "integral", "fractional (N columns)", or None: not tried
    relaxation_seconds: float = 0.0
    simplex_iterations: int = 0
    staged: bool = False  # the relaxation solved in two stages (``held_back``)


def _new_highs(highspy: Any, msg: bool) -> Any:
    """A ``highspy.Highs`` with output as ``msg`` says. Its constructor prints HiGHS's banner to the
    process's C-level stdout before any option can be set: with ``msg`` off, file descriptor 1
    points at /dev/null while it runs (the default solver stays as quiet as CBC's route)."""
    if msg:
        h = highspy.Highs()
    else:
        with _c_stdout_to_devnull():
            h = highspy.Highs()
    h.setOptionValue("output_flag", bool(msg))
    return h


@contextmanager
def _c_stdout_to_devnull() -> Iterator[None]:
    import ctypes
    import os
    import sys

    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):  # no real fd 1 (an embedding host): leave it be
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        try:
            ctypes.CDLL(None).fflush(None)  # what the constructor buffered goes to /dev/null too
        except (OSError, AttributeError):
            pass
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def solve_with_highs(
    prob: pulp.LpProblem,
    *,
    time_limit: float | None = None,
    msg: bool = False,
    threads: int | None = 1,
    relax_first: bool = False,
    held_back: HeldBack | None = None,
) -> HighsRun:
    """Solve ``prob`` with HiGHS, handing it over in bulk; set PuLP's statuses and variable values.

    ``relax_first``: solve the LP relaxation first and accept it when every integer column is
    within :data:`INTEGRAL_TOL` of an integer (then it is an optimal ILP solution:
    ``z_LP <= z_ILP`` always, and an integral LP optimum is ILP-feasible, so ``z_ILP = z_LP``);
    otherwise restore the integrality and solve the MIP, offered the relaxation's solution.

    ``held_back`` (with ``relax_first``; the plugin passes its own rows and bounds): the relaxation
    is solved in two stages on one HiGHS instance — the problem without that part first, then its
    rows added (``addRows``) and its bounds set (``changeColsBounds``) and the LP re-solved from the
    first optimum's basis, which stays dual feasible, so dual simplex goes on from there. The
    second LP is the whole problem: the verdict and the MIP fallback are as without staging. Why:
    HiGHS's cold path on the whole problem is a different, longer one (llama3 2 layers 8x8:
    9,045 simplex iterations with strict's bounds against 7,953 without; staged, 7,953 + 0).

    The problem goes over as arrays (:func:`_highs_model`): single-term constraints become column
    bounds and columns fixed at 0 (that way, or by their own bounds, as the plugin's formulations
    forbid by default) are not passed (their value is 0). On llama3 2 layers,
    8x8 that removes 108k of 122k rows and 105k of 324k columns before HiGHS's presolve (HiGHS
    time 8.1 s -> 6.9 s there).
    """
    import highspy
    import numpy as np

    staging = relax_first and bool(held_back)
    model = _highs_model(prob, highspy.kHighsInf, held_back if staging else None)
    columns, integrality = model.columns, model.integrality
    h = _new_highs(highspy, msg)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    n_rows = model.first_rows if model.staged else len(model.row_lower)
    n_entries = int(model.starts[n_rows])
    h.passModel(
        len(columns),
        n_rows,
        n_entries,
        int(highspy.MatrixFormat.kRowwise),
        int(highspy.ObjSense.kMinimize),
        model.offset,
        model.cost,
        model.first_lower if model.staged else model.lower,
        model.first_upper if model.staged else model.upper,
        model.row_lower[:n_rows],
        model.row_upper[:n_rows],
        model.starts[: n_rows + 1],
        model.a_index[:n_entries],
        model.a_value[:n_entries],
        integrality,
    )
    relaxation: str | None = None
    relaxation_seconds = 0.0
    iterations = 0
    integer_cols = np.flatnonzero(integrality)
    values = None
    if relax_first and integer_cols.size:
        t0 = time.perf_counter()
        h.setOptionValue("solve_relaxation", True)
        h.run()
        iterations += int(h.getInfo().simplex_iteration_count)
        if model.staged:  # the held-back part, then the LP again from this basis
            _add_held_back(h, model, n_rows, n_entries)
            if time_limit is not None:
                h.setOptionValue("time_limit", max(float(time_limit) - (time.perf_counter() - t0), 1e-3))
            h.run()
            iterations += int(h.getInfo().simplex_iteration_count)
        relaxation_seconds = time.perf_counter() - t0
        lp_status = h.getModelStatus()
        if lp_status == highspy.HighsModelStatus.kOptimal:
            lp_values = np.asarray(h.getSolution().col_value, dtype=np.float64)
            frac = np.abs(lp_values[integer_cols] - np.round(lp_values[integer_cols])) > INTEGRAL_TOL
            n_frac = int(frac.sum())
            relaxation = "integral" if n_frac == 0 else f"fractional ({n_frac} columns)"
            if n_frac == 0:
                values = np.round(lp_values)  # integer columns exact; continuous ones unused here
                values[integrality == 0] = lp_values[integrality == 0]
            else:
                start = highspy.HighsSolution()  # offered to the MIP; HiGHS keeps what it can use
                start.col_value = list(lp_values)
                start.value_valid = True
                h.setSolution(start)
        else:  # infeasible/unbounded/time limit: let the MIP run say so with its own status
            relaxation = f"not solved ({h.modelStatusToString(lp_status)})"
        h.setOptionValue("solve_relaxation", False)
        if time_limit is not None:
            h.setOptionValue("time_limit", max(float(time_limit) - relaxation_seconds, 1e-3))
    elif model.staged:  # nothing to relax first: the whole problem at once
        _add_held_back(h, model, n_rows, n_entries)
    if values is not None:
        status, sol_status, hit = pulp.LpStatusOptimal, pulp.LpSolutionOptimal, False
        gap = None
    else:
        h.run()
        iterations += int(h.getInfo().simplex_iteration_count)
        info = h.getInfo()
        feasible = info.primal_solution_status == 2  # kSolutionStatusFeasible
        status, sol_status, hit = _highs_status(h.getModelStatus(), feasible)
        if feasible:
            values = np.asarray(h.getSolution().col_value, dtype=np.float64)
        gap = float(info.mip_gap) if hit and feasible else None
    if values is not None:
        for var, value in zip(columns, values.tolist()):
            var.varValue = value
        for var in model.left_out:  # fixed at 0
            var.varValue = 0.0
    prob.assignStatus(status, sol_status)
    return HighsRun(gap=gap, hit=hit, relaxation=relaxation, relaxation_seconds=relaxation_seconds,
                    simplex_iterations=iterations, staged=model.staged)


def _add_held_back(h: Any, model: _HighsModel, n_rows: int, n_entries: int) -> None:
    """Give ``h`` (holding the first stage) the held-back rows and the whole problem's bounds."""
    import numpy as np

    more = len(model.row_lower) - n_rows
    if more:
        starts = model.starts[n_rows:-1] - n_entries
        h.addRows(more, model.row_lower[n_rows:], model.row_upper[n_rows:], len(model.a_index) - n_entries,
                  starts.astype(np.int32), model.a_index[n_entries:], model.a_value[n_entries:])
    changed = model.changed
    if changed is not None and changed.size:
        h.changeColsBounds(changed.size, changed, model.lower[changed], model.upper[changed])


@dataclass(frozen=True, slots=True)
class HeldBack:
    """The part of a problem a staged solve adds second: constraints by name, and variables with
    the bounds they had before that part tightened them (the plugin's rows and bounds, read from
    its state: :meth:`PluginState.held_back`)."""

    rows: frozenset[str]
    prior: dict[int, tuple[pulp.LpVariable, float | None, float | None]]  # id(var) -> (var, low, up)

    def __bool__(self) -> bool:
        return bool(self.rows or self.prior)


@dataclass(frozen=True, slots=True)
class _HighsModel:
    """``prob`` as HiGHS's arrays (row-wise matrix), and the PuLP variable of each column.

    With a held-back part (:class:`HeldBack`) the arrays are the whole problem, ordered so that
    its first ``first_rows`` rows with the bounds ``first_lower``/``first_upper`` are the problem
    without that part; ``changed`` are the columns whose bounds differ between the two."""

    columns: list[pulp.LpVariable]
    left_out: list[pulp.LpVariable]  # fixed at 0 (both bounds 0): not passed, their value is 0
    offset: float
    cost: Any
    lower: Any
    upper: Any
    integrality: Any
    row_lower: Any
    row_upper: Any
    starts: Any
    a_index: Any
    a_value: Any
    first_rows: int = -1  # -1: every row (nothing held back)
    first_lower: Any = None
    first_upper: Any = None
    changed: Any = None

    @property
    def staged(self) -> bool:
        return self.first_rows >= 0


def _highs_model(prob: pulp.LpProblem, inf: float, held_back: HeldBack | None = None) -> _HighsModel:
    """Convert ``prob`` in bulk: the per-nonzero work runs in ``map``/numpy, not in Python loops
    (on llama3 32 layers the conversion was a third of the highs-lp solve).

    Rows are the constraints with two or more terms, in order; single-term constraints become
    column bounds, and columns fixed at 0 (both bounds 0, from those rows or their own bounds)
    are left out. Columns are numbered in order of
    first appearance (rows, then the objective, then variables only singleton rows mention).

    ``held_back``: its constraints (any length) become the last rows, and its variables' bounds
    before it are kept as ``first_lower``/``first_upper``; a column is left out only when it is
    fixed at 0 with and without the held-back part.
    """
    import numpy as np

    held_rows = held_back.rows if held_back else frozenset()
    # Singleton rows (autoparallel's ``inf_cases``: x == 0, most of the rows) become bounds.
    bounds: dict[int, list[float]] = {}  # id(var) -> [lower, upper] of its singleton rows alone
    var_of: dict[int, pulp.LpVariable] = {}
    rows: list[pulp.LpConstraint] = []
    later: list[pulp.LpConstraint] = []
    for name, constraint in prob.constraints.items():
        if name in held_rows:
            later.append(constraint)
            continue
        expr = constraint.expr
        if len(expr) != 1:
            rows.append(constraint)
            continue
        ((var, coef),) = expr.items()
        if coef == 0:
            rows.append(constraint)
            continue
        key = id(var)
        lo_hi = bounds.get(key)
        if lo_hi is None:
            var_of[key] = var
            lo_hi = bounds[key] = [-inf, inf]
        value = -constraint.constant / coef
        sense = constraint.sense if coef > 0 else -constraint.sense
        if sense != pulp.LpConstraintLE:  # EQ or GE: a lower bound
            lo_hi[0] = max(lo_hi[0], value)
        if sense != pulp.LpConstraintGE:  # EQ or LE: an upper bound
            lo_hi[1] = min(lo_hi[1], value)
    first_rows = len(rows) if held_back else -1
    rows.extend(later)

    ids: list[int] = []  # the rows' entries, then the objective's, then the singleton-bounded
    variables: list[pulp.LpVariable] = []  # the variable of each of ``ids``
    a_value: list[float] = []
    starts = [0]
    row_lower: list[float] = []
    row_upper: list[float] = []
    for constraint in rows:
        expr = constraint.expr
        ids.extend(map(id, expr))
        variables.extend(expr)
        a_value.extend(expr.values())
        starts.append(len(ids))
        rhs = -constraint.constant
        sense = constraint.sense
        row_lower.append(rhs if sense != pulp.LpConstraintLE else -inf)
        row_upper.append(rhs if sense != pulp.LpConstraintGE else inf)
    n_entries = len(ids)
    objective = prob.objective if prob.objective is not None else pulp.LpAffineExpression()
    ids.extend(map(id, objective))
    variables.extend(objective)
    n_obj = len(ids) - n_entries
    ids.extend(bounds)
    variables.extend(var_of.values())
    prior = held_back.prior if held_back else {}
    ids.extend(prior)  # held-back bounds keep their columns even where nothing else mentions them
    variables.extend(v for v, _, _ in prior.values())

    # Column numbers by first appearance, columns fixed at 0 left out (-1): np.unique's sort
    # instead of a dict lookup per entry. Fixed at 0 means both bounds 0, from singleton rows or
    # from the variable's own bounds (how strict, lazy and explicit forbid by default).
    uniq, first, inverse = np.unique(np.array(ids, dtype=np.int64), return_index=True, return_inverse=True)
    uvars = list(map(variables.__getitem__, first.tolist()))

    def own(lows: list[Any], ups: list[Any]) -> tuple[Any, Any]:
        lower = np.array(lows, dtype=np.float64)  # None -> nan
        upper = np.array(ups, dtype=np.float64)
        lower[np.isnan(lower)] = -inf
        upper[np.isnan(upper)] = inf
        return lower, upper

    lower, upper = own([v.lowBound for v in uvars], [v.upBound for v in uvars])
    if prior:  # the bounds before the held-back part
        at_prior = np.searchsorted(uniq, np.fromiter(prior, dtype=np.int64, count=len(prior)))
        lower0, upper0 = lower.copy(), upper.copy()
        lower0[at_prior], upper0[at_prior] = own([lo for _, lo, _ in prior.values()], [up for _, _, up in prior.values()])
    else:
        lower0, upper0 = lower, upper
    if bounds:  # the singleton rows' bounds, on top of the variable's own
        at = np.searchsorted(uniq, np.fromiter(bounds, dtype=np.int64, count=len(bounds)))
        lo_hi = np.array(list(bounds.values()), dtype=np.float64).reshape(-1, 2)
        lower[at], upper[at] = np.maximum(lower[at], lo_hi[:, 0]), np.minimum(upper[at], lo_hi[:, 1])
        if prior:
            lower0[at], upper0[at] = np.maximum(lower0[at], lo_hi[:, 0]), np.minimum(upper0[at], lo_hi[:, 1])
    fixed0 = (lower == 0) & (upper == 0) & (lower0 == 0) & (upper0 == 0)
    first[fixed0] = len(ids)  # after every kept one
    order = np.argsort(first, kind="stable")
    n_cols = int(len(uniq) - fixed0.sum())
    kept = order[:n_cols]
    col_of = np.full(len(uniq), -1, dtype=np.int64)
    col_of[kept] = np.arange(n_cols)
    columns = list(map(uvars.__getitem__, kept.tolist()))
    left_out = list(map(uvars.__getitem__, np.flatnonzero(fixed0).tolist()))
    lower, upper, lower0, upper0 = lower[kept], upper[kept], lower0[kept], upper0[kept]
    col = col_of[inverse.reshape(-1)]

    a_index = col[:n_entries]
    values = np.array(a_value, dtype=np.float64)
    starts_arr = np.array(starts, dtype=np.int64)
    keep = a_index >= 0
    if not keep.all():  # entries of left-out columns: drop them, shift the row starts
        starts_arr = np.concatenate(([0], np.cumsum(keep)))[starts_arr]
        a_index, values = a_index[keep], values[keep]

    sign = -1.0 if prob.sense == pulp.LpMaximize else 1.0
    cost = np.zeros(n_cols)
    obj_cols = col[n_entries : n_entries + n_obj]
    used = obj_cols >= 0
    if n_obj:
        coefs = np.fromiter(objective.values(), dtype=np.float64, count=n_obj)
        cost[obj_cols[used]] = sign * coefs[used]

    integrality = np.array([v.cat == pulp.LpInteger for v in columns], dtype=np.int32)
    staged = {}
    if held_back:
        staged = {
            "first_rows": first_rows,
            "first_lower": lower0,
            "first_upper": upper0,
            "changed": np.flatnonzero((lower0 != lower) | (upper0 != upper)).astype(np.int32),
        }
    return _HighsModel(
        columns=columns,
        left_out=left_out,
        offset=sign * float(objective.constant),
        cost=cost,
        lower=lower,
        upper=upper,
        integrality=integrality,
        row_lower=np.array(row_lower, dtype=np.float64),
        row_upper=np.array(row_upper, dtype=np.float64),
        starts=starts_arr.astype(np.int32),
        a_index=a_index.astype(np.int32),
        a_value=values,
        **staged,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class SolveOutcome:
    """One solver run: what it was asked, how long it took, what it proved."""

    solver: str
    status: str  # PuLP's LpStatus text: "Optimal", "Infeasible", "Not Solved", ...
    solution: str  # PuLP's LpSolution text: "Optimal Solution Found", "Solution Found", ...
    seconds: float
    time_limit: float | None
    hit_time_limit: bool
    objective: float | None
    gap: float | None = None  # relative MIP gap when stopped early and the solver reports it
    purpose: str = "plan"  # "plan", or "diagnosis" for the elastic re-solves of an infeasible problem
    relaxation: str | None = None  # highs-lp: "integral" (accepted, optimal) or "fractional (N columns)"
    staged: bool = False  # highs-lp: autoparallel's LP solved first, the plugin's part added to it

    @property
    def feasible(self) -> bool:
        return self.solution in ("Optimal Solution Found", "Solution Found")

    @property
    def optimal(self) -> bool:
        return self.solution == "Optimal Solution Found" and not self.hit_time_limit

    def describe(self) -> str:
        limit = "" if self.time_limit is None else f", limit {self.time_limit:g}s"
        verdict = self.status
        if self.hit_time_limit:
            verdict = "time limit hit: " + ("feasible plan, not proven optimal" if self.feasible else "no feasible plan")
            if self.gap is not None and self.feasible:
                verdict += f" (gap {self.gap:.2%})"
        obj = "-" if self.objective is None else f"{self.objective:.3f}"
        lp = "" if self.relaxation is None else f", LP relaxation {self.relaxation}"
        lp += " (staged)" if self.staged else ""
        return f"{self.solver} {self.purpose}: {verdict}, objective {obj}, {self.seconds:.2f}s{limit}{lp}"


@dataclass(kw_only=True)
class SolverHook:
    """The solver installed on one optimizer's problem, and every outcome it produced."""

    opt: Any
    config: SolverConfig
    outcomes: list[SolveOutcome] = field(default_factory=list)
    deadline: float | None = None  # while a budget is open: shared by lazy rounds and diagnoses
    held_back: Callable[[], HeldBack] | None = None  # the plugin's part of the problem (staged highs-lp)

    def remaining(self) -> float | None:
        """Seconds left for the next solve (the budget's rest, or the per-solve limit)."""
        if self.deadline is None:
            return self.config.time_limit
        return max(self.deadline - time.perf_counter(), 1e-3)

    @contextmanager
    def budget(self) -> Iterator[None]:
        """One time limit for every solve inside (lazy rounds, diagnosis re-solves)."""
        if self.config.time_limit is None or self.deadline is not None:
            yield
            return
        self.deadline = time.perf_counter() + self.config.time_limit
        try:
            yield
        finally:
            self.deadline = None

    def solve_problem(self, prob: pulp.LpProblem, *, msg: bool = False, purpose: str = "plan") -> SolveOutcome:
        """Solve ``prob`` (the optimizer's or a diagnosis copy) with the configured solver."""
        limit = self.remaining()
        t0 = time.perf_counter()
        gap = None
        relaxation = None
        staged = False
        if self.config.name in HIGHS_ROUTES:
            relax_first = self.config.name == "highs-lp"
            staged = relax_first and self.config.staged and purpose == "plan" and self.held_back is not None
            run = solve_with_highs(
                prob,
                time_limit=limit,
                msg=msg or self.config.msg,
                threads=self.config.threads,
                relax_first=relax_first,
                held_back=self.held_back() if staged else None,
            )
            gap, hit, relaxation, staged = run.gap, run.hit, run.relaxation, run.staged
        else:
            solver = self.config.make(time_limit=limit, msg=msg)
            # like autoparallel: PuLP's .mps/.sol files in a directory removed afterwards
            with tempfile.TemporaryDirectory() as tmpdir:
                solver.tmpDir = tmpdir
                pulp.LpProblem.solve(prob, solver)
            # CBC "Stopped on time" with a plan: Optimal + "Solution Found"; without: Not Solved
            hit = limit is not None and (
                prob.sol_status == pulp.LpSolutionIntegerFeasible or prob.status == pulp.LpStatusNotSolved
            )
        seconds = time.perf_counter() - t0
        solution = pulp.LpSolution.get(prob.sol_status, str(prob.sol_status))
        objective = None
        if solution in ("Optimal Solution Found", "Solution Found"):
            objective = float(pulp.value(prob.objective) or 0.0)
        outcome = SolveOutcome(
            solver=self.config.name,
            status=pulp.LpStatus.get(prob.status, str(prob.status)),
            solution=solution,
            seconds=seconds,
            time_limit=limit,
            hit_time_limit=hit,
            objective=objective,
            gap=gap,
            purpose=purpose,
            relaxation=relaxation,
            staged=staged,
        )
        self.outcomes.append(outcome)
        logger.debug("apc solver: %s", outcome.describe())
        return outcome

    def _round_binaries(self) -> None:
        """autoparallel picks ``var.value() == 1``: make HiGHS's near-integers exact."""
        for var in self.opt.pulp_variables.values():
            value = var.varValue
            if value is not None:
                var.varValue = float(round(value))

    def route(self, prob: pulp.LpProblem, solver: Any = None, **_: Any) -> int:
        """What ``prob.solve`` does on the optimizer's problem: ignore autoparallel's CBC object."""
        outcome = self.solve_problem(prob, msg=bool(getattr(solver, "msg", False)))
        if self.config.name in HIGHS_ROUTES and outcome.feasible:
            self._round_binaries()
        elif self.config.name in HIGHS_ROUTES:
            # HiGHS leaves no point behind an infeasible model, and autoparallel's
            # violated-constraints log reads one (abs(None): a TypeError inside autoparallel
            # instead of its infeasibility error, which the plugin explains); CBC leaves its last
            # point, this the origin
            for var in prob.variables():
                if var.varValue is None:
                    var.varValue = 0.0
        if outcome.hit_time_limit:
            if not outcome.feasible:
                raise SolverTimeLimitError(
                    f"{self.config.name} found no feasible plan within the time limit of "
                    f"{outcome.time_limit:g}s (problem: {len(self.opt.pulp_variables):,} variables, "
                    f"{len(prob.constraints):,} constraints). Raise time_limit, try solver='highs', "
                    "or shrink the problem (formulation='lazy' adds table rows only where violated)."
                )
            warnings.warn(
                f"{outcome.describe()}: the plan is feasible but not proven optimal; raise time_limit "
                "for an optimal plan",
                SolverTimeLimitWarning,
                stacklevel=2,
            )
        return prob.status


def objective_in_bulk(opt: Any) -> pulp.LpAffineExpression | None:
    """autoparallel's objective (``ShardingOptimizer._set_objective``), ``Σ_k cost_k·(1 +
    |linked_k|)·x_k``, built from (variable, coefficient) pairs in one expression: the same
    coefficients (``(1·cost)·multiplier``, zeros dropped, as PuLP's products do) in the same order.
    ``None`` when the optimizer lacks the fields it reads or a cost is not finite (autoparallel's
    own step then runs, and raises what it raises)."""
    decision_vars = getattr(opt, "decision_vars", None)
    linked = upstream.root_to_linked(opt)
    if not isinstance(decision_vars, dict) or not isinstance(linked, dict):
        return None
    coefficients: dict[pulp.LpVariable, float] = {}
    for key, dv in decision_vars.items():
        cost = dv.cost
        if not math.isfinite(cost):
            return None
        coef = cost * (1 + len(linked.get(key, ())))
        if coef != 0:
            coefficients[dv.var] = coefficients.get(dv.var, 0) + coef
    return pulp.LpAffineExpression(coefficients)


def install(opt: ShardingOptimizer, config: SolverConfig) -> SolverHook:
    """Route every solve of ``opt`` through ``config``'s solver; return the hook (idempotent).
    On the HiGHS routes autoparallel's objective is built in bulk (:func:`objective_in_bulk`)."""
    hook = get_hook(opt)
    if hook is not None:
        hook.config = config
        return hook
    hook = SolverHook(opt=opt, config=config)

    def prob_solve(call: Any, solver: Any = None, **kwargs: Any) -> int:
        return hook.route(opt.prob, solver, **kwargs)

    def set_objective(call: Any) -> None:
        objective = objective_in_bulk(opt) if hook.config.name in HIGHS_ROUTES else None
        if objective is None:
            call()
        else:
            opt.prob += objective

    hook_solver(opt, prob_solve=prob_solve, set_objective=set_objective)
    upstream.put(opt, "solver", hook)
    return hook


def get_hook(opt: Any) -> SolverHook | None:
    hook = upstream.get(opt, "solver")
    return hook if isinstance(hook, SolverHook) else None


def use_solver(autop: Any, solver: str | SolverConfig = "highs", *, time_limit: float | None = None) -> SolverHook:
    """Solve a plain ``AutoParallel`` (no plugin constraints needed) with ``solver``.

    Call inside the ``with`` block, before ``optimize_placement``. Returns the hook, whose
    ``outcomes`` list every solve (solver, status, seconds, time limit hit, objective).
    """
    opt = getattr(autop, "sharding_optimizer", autop)
    if getattr(opt, "prob", None) is None or not hasattr(opt, "pulp_variables"):
        raise PluginStateError(
            "use_solver needs an entered AutoParallel (or its sharding_optimizer): call it inside "
            "`with AutoParallel(...) as autop:` before optimize_placement()"
        )
    return install(opt, solver_config(solver, time_limit))
