"""``AutoParallel.add_op_constraints``: bind the table to an optimizer and add a formulation.

The plugin's state for one ``AutoParallel`` is kept on it (``seam.autop.put``). Adding is
atomic: everything is computed first, then the variables and constraints go into the ILP in one
step, rolled back if any of them fails, so a failed call leaves the optimizer's problem as it was.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pulp

from ..errors import ConstraintsError, FormulationError, InvalidOptionError, PluginStateError
from ..formulations import Additions, Formulation, Namer, make_formulation
from ..formulations._sites import Site, find_sites
from ..seam import attach_for_use
from ..seam import autop as upstream
from ..seam._handlers import provide
from ..seam._optimizer import hook_plugin
from ..seam.lp import forget_variables_after, registered_count
from ..seam.tracing import OpOverload, OpOverloadPacket
from ..table import OpRule, Table, default_table
from . import _solvers
from ._nested import build_nested_constraints, rebudget_parameter_memory
from ._report import LazyRound, build_report, emit
from ._sizes import build_size_constraints, find_size_couplings, is_dynamic, not_tensor_nodes
from ._stale import check_strategies
from ._state import VERIFY_MODES, AddedConstraints, PluginState, PriorBounds, families, get_state

if TYPE_CHECKING:
    from autoparallel.api import AutoParallel
    from autoparallel.optimize_sharding import ShardingOptimizer

logger = logging.getLogger(__name__)

__all__ = ["NoMatchingNodesWarning", "add_op_constraints"]

MATERIALIZE_MODES = ("table", "all")

# Private switch: match, bind, check, size and nested-shard analysis once per cluster root of
# autoparallel's repeated layers, its linked nodes taking their root's results (True), or on
# every node (False: the reference path the equality tests and ``benchmarks/plugin_depth.py
# --per-node`` compare against). Both add the same rows, bounds and variables.
PER_CLUSTER = True


class NoMatchingNodesWarning(UserWarning):
    """An op asked for in ``add_op_constraints`` does not occur in the traced graph."""


def _normalize_ops(ops: Any) -> Any:
    if ops is None or isinstance(ops, (str, OpOverload, OpOverloadPacket)):
        return ops
    if isinstance(ops, Iterable) and not isinstance(ops, (bytes, dict)):
        items = list(ops)
        for item in items:
            if not isinstance(item, (str, OpOverload, OpOverloadPacket)):
                raise InvalidOptionError(
                    f"ops must hold op names, op packets or overloads (e.g. 'index_put', "
                    f"torch.ops.aten.add.Tensor); got an item of type {type(item).__name__}: {item!r}"
                )
        if not items:
            raise InvalidOptionError("ops is empty; pass None for the whole table")
        return items
    raise InvalidOptionError(
        f"ops must be None, a name, an op or a list of them; got {type(ops).__name__}: {ops!r}"
    )


def _check_autop(autop: Any) -> ShardingOptimizer:
    active = getattr(autop, "active", False)
    if active is not True or getattr(autop, "sharding_optimizer", None) is None:
        raise PluginStateError(
            "add_op_constraints must be called inside the AutoParallel context: "
            "`with AutoParallel(model, input_fn, mesh) as autop: autop.add_op_constraints(...)`"
            + (" (this AutoParallel's with-block has already exited)" if active is None else "")
        )
    if getattr(autop, "sharding_placement", None) is not None:
        raise PluginStateError(
            "add_op_constraints was called after optimize_placement(); call it before solving so "
            "the constraints are part of the problem"
        )
    if get_state(autop) is not None:
        prev = get_state(autop)
        raise PluginStateError(
            f"add_op_constraints was already called on this AutoParallel (formulation "
            f"{prev.formulation.name!r}, {len(prev.rules)} rows); calls do not merge — pass every op "
            "in one call"
        )
    return autop.sharding_optimizer


def add_op_constraints(
    self: AutoParallel,
    ops: Any = None,
    *,
    formulation: str | Formulation = "explicit",
    materialize: str = "all",
    verify: str = "raise",
    table: Table | None = None,
    solver: str = _solvers.DEFAULT_SOLVER,
    time_limit: float | None = None,
    sizes: bool = True,
    **options: Any,
) -> AddedConstraints:
    """Add the compatibility table's rules for ``ops`` to this AutoParallel's ILP.

    Args:
        ops: None for the whole table, or names (``"index_put"``, ``"aten.add.Tensor"``, a family
            such as ``"pointwise"``), op packets or overloads. Unknown names raise
            :class:`~autoparallel_constraints.UnknownOpError` listing close names.
        formulation: ``"explicit"`` (default: a non-co-sharded strategy only with a priced,
            materialized redistribution), ``"strict"`` (forbid it), ``"soft"`` (allow it at a
            penalty, option ``penalty``, and report it) or ``"lazy"`` (strict's rows added only
            where a plan breaks them, re-solving until clean; option ``max_rounds``); or your own:
            a name given to ``register_formulation``, ``"package.module:Class"``, or an instance
            of a :class:`~autoparallel_constraints.Formulation` subclass.
        materialize: ``"all"`` (default) — every planned redistribution of the graph becomes a
            real node computing exactly the planned transition with DTensor's redistribute (a
            planned Partial stays Partial, which autoparallel a54c252's own apply breaks: PR #517);
            ``"table"`` — only planned redistributions into table ops do. The default was chosen
            by measurement (docs/verifier.md, "Safe defaults"): on clean plans both give the same collectives.
        verify: after ``apply_placement`` builds the parallel graph, run the verifier on it
            (:func:`~autoparallel_constraints.verify`): ``"raise"`` (default) raises
            :class:`~autoparallel_constraints.VerificationError` naming the node and the inferred
            and expected placements, ``"warn"`` warns (``VerificationWarning``), ``"off"`` skips it.
        table: a :class:`Table` to use instead of the process-wide default.
        solver: ``"highs-lp"`` (default: HiGHS's LP relaxation first, accepted when integral — then
            optimal for the ILP — else HiGHS's MIP; the fastest exact route on autoparallel's
            ILPs, CBC's objective on every model measured), ``"cbc"`` (autoparallel's own solver,
            ships with PuLP) or ``"highs"`` (HiGHS's MIP). On ``highs-lp`` autoparallel's LP is
            solved first and the plugin's rows and bounds are added to it and re-solved from its
            basis (``SolveOutcome.staged``).
        time_limit: seconds for all solves of one ``optimize_placement`` (lazy rounds share it);
            stopped with a feasible plan: kept, with a ``SolverTimeLimitWarning``; without one:
            :class:`~autoparallel_constraints.SolverTimeLimitError`.
        sizes: add the size couplings (``_sizes``): a factory op, or with ``dynamic=True`` a view
            op, whose shape comes from ``sym_size(x, d)`` is sharded on that dim exactly like
            ``x``, and one with a concrete size splits it only evenly (autoparallel's apply
            localizes these sizes by rule); and no tensor dim is split over two or more mesh dims
            by a product that does not divide it (``_nested``: DTensor cannot view or
            redistribute such a shard). Hard in every formulation; ``False`` leaves them out.
        **options: options of the formulation.

    Returns:
        :class:`AddedConstraints`: matched nodes, and the variables and constraints added by family.
    """
    opt = _check_autop(self)
    check_strategies(opt, self.mesh, per_cluster=PER_CLUSTER)
    attach_for_use()  # the plugin is in use: later builds get the caches keyed on the mesh
    if materialize not in MATERIALIZE_MODES:
        raise InvalidOptionError(f"materialize must be one of {MATERIALIZE_MODES}, got {materialize!r}")
    if verify not in VERIFY_MODES:
        raise InvalidOptionError(f"verify must be one of {VERIFY_MODES}, got {verify!r}")
    if not isinstance(sizes, bool):
        raise InvalidOptionError(f"sizes must be True or False, got {type(sizes).__name__}: {sizes!r}")
    if table is not None and not isinstance(table, Table):
        raise InvalidOptionError(f"table must be an autoparallel_constraints.Table, got {type(table).__name__}")
    t0 = time.perf_counter()
    solver_choice = _solvers.solver_config(solver, time_limit)
    selectors = _normalize_ops(ops)
    table = table if table is not None else default_table()
    rules = table.select(selectors)
    form = make_formulation(formulation, **options)
    sites, t_sites = find_sites(opt, rules, per_cluster=PER_CLUSTER)
    if selectors is not None:
        _warn_missing(opt, rules, sites, selectors)
    namer = Namer(form.name, taken=opt.prob.constraints)
    additions = _call_formulation(form, "build", opt, lambda: form.build(opt, sites, namer))
    # Couplings are read off the traced graph (symbolic sizes) and priced on the optimizer's copy.
    to_opt = upstream.orig_to_concrete(opt)  # empty: one graph for both
    couplings = (
        find_size_couplings(
            self.gm.graph,
            lambda n: to_opt.get(n, n) in opt.strats,
            tuple(self.mesh.shape),
            dynamic=is_dynamic(self.gm),
            not_tensors=not_tensor_nodes(self.gm.graph, opt) if PER_CLUSTER else None,
        )
        if sizes
        else []
    )
    additions.merge(
        build_size_constraints(opt, couplings, Namer("size", taken=opt.prob.constraints), to_opt, per_cluster=PER_CLUSTER)
    )
    nested_forbidden = {}
    if sizes:
        nested = build_nested_constraints(opt, Namer("nested", taken=opt.prob.constraints), per_cluster=PER_CLUSTER)
        additions.merge(nested.additions)
        nested_forbidden = nested.forbidden
    prior_bounds = _add_atomically(opt.prob, additions)
    build_seconds = time.perf_counter() - t0

    nodes = tuple(s.orig.name for s in sites)
    constrained = tuple(s.orig.name for s in sites if any(s.verdicts))  # some strategy with a mismatch
    added = AddedConstraints(
        formulation=form.name,
        rows=tuple(r.name for r in rules),
        nodes=nodes,
        constrained_nodes=constrained,
        size_couplings=tuple(c.describe() for c in couplings),
        constraints=families(additions.constraints),
        variables=families(additions.variables),
        constraint_names=tuple(additions.constraints),
        variable_names=tuple(additions.variables),
        bounds=families(additions.bounds),
        bound_names=tuple(additions.bounds),
        build_seconds=build_seconds,
    )
    state = PluginState(
        autop=self,
        table=table,
        rules=rules,
        formulation=form,
        materialize=materialize,
        verify=verify,
        sites=sites,
        additions=additions,
        added=added,
        solver=_solvers.install(opt, solver_choice),
        namer=namer,
        objective_terms=list(additions.objective),
        prior_bounds=prior_bounds,
        nested_forbidden=nested_forbidden,
    )
    state.solver.held_back = state.held_back  # highs-lp: autoparallel's problem first, then the plugin's part
    _install_optimizer_hooks(opt, state)
    upstream.put(self, "state", state)
    # autoparallel's save() keeps this log and load() replays it by method name: the entry makes
    # load refuse clearly instead of silently dropping the plugin's constraints.
    upstream.constraint_log(opt).append(
        ("apc_add_op_constraints", {"formulation": form.name, "rows": list(added.rows), "materialize": materialize})
    )
    logger.info("apc: %s (sites %.3fs)", added, t_sites)
    return added


def _warn_missing(opt: ShardingOptimizer, rules: Sequence[OpRule], sites: Sequence[Site], selectors: Any) -> None:
    present = {s.rule.op for s in sites}
    missing = [r.name for r in rules if r.op not in present]
    if missing and not present:
        ops_in_graph = sorted({str(n.target) for n in opt.graph.nodes if n.op == "call_function"})
        warnings.warn(
            f"none of the requested ops ({', '.join(missing)}) occurs in the traced graph; nothing "
            f"was constrained. Ops in the graph: {', '.join(ops_in_graph)}",
            NoMatchingNodesWarning,
            stacklevel=3,
        )


def _call_formulation(form: Formulation, hook: str, opt: ShardingOptimizer, call: Any) -> Any:
    """Run one of ``form``'s hooks and hold it to its contract (see ``Formulation``).

    Package errors pass through; any other exception, a result that is not ``Additions`` (or None
    from ``after_solve``), a write to the problem, or a name outside ``<name>.`` becomes a
    :class:`FormulationError` naming the formulation and the hook.
    """
    where = f"formulation {form.name!r} ({type(form).__module__}.{type(form).__qualname__}).{hook}()"
    n_rows = len(opt.prob.constraints)
    try:
        out = call()
    except ConstraintsError:
        raise
    except Exception as exc:
        raise FormulationError(f"{where} raised {type(exc).__name__}: {exc}") from exc
    if len(opt.prob.constraints) != n_rows:
        raise FormulationError(
            f"{where} changed the optimizer's problem itself ({n_rows} -> {len(opt.prob.constraints)} rows); "
            "return the additions in an Additions instead, the plugin adds them atomically"
        )
    if out is None and hook != "build":
        return None
    if not isinstance(out, Additions):
        raise FormulationError(f"{where} must return an Additions, got {type(out).__name__}")
    prefix = f"{form.name}."
    wrong = [n for n in [*out.constraints, *out.variables, *out.bounds] if not n.startswith(prefix)]
    if wrong:
        raise FormulationError(
            f"{where} named additions outside '{prefix}<family>_<idx>': {', '.join(wrong[:5])}; "
            "make names with the Namer it receives"
        )
    return out


def _add_atomically(prob: pulp.LpProblem, additions: Additions) -> dict[str, PriorBounds]:
    """Set the bounds, then add the rows; on any failure restore the bounds, drop the rows and
    forget the variables PuLP registered with them (which PuLP never prunes), so the problem is as
    it was. Returns each bound entry's variables with the
    bounds they had before (what the infeasibility diagnosis relaxes them to)."""
    added: list[str] = []
    old_bounds: list[tuple[pulp.LpVariable, float | None, float | None]] = []
    prior: dict[str, PriorBounds] = {}
    # PuLP registers new variables at the end of its list: the variables past ``n_vars`` are
    # exactly the ones to forget (no copy of every id up front: 0.3 s per call on llama3 2 layers 8x8).
    n_vars, n_modified = registered_count(prob), len(prob.modifiedConstraints)
    try:
        for bound_name, bound in additions.bounds.items():
            start = len(old_bounds)
            for var in bound.variables:
                old_bounds.append((var, var.lowBound, var.upBound))
                if bound.low is not None:
                    var.lowBound = bound.low
                if bound.up is not None:
                    var.upBound = bound.up
            prior[bound_name] = tuple(old_bounds[start:])
        for name, constraint in additions.constraints.items():
            if name in prob.constraints:
                raise PluginStateError(f"constraint name {name!r} is already in the problem")
            prob.addConstraint(constraint, name)
            added.append(name)
    except BaseException:
        for name in added:
            prob.constraints.pop(name, None)
        forget_variables_after(prob, n_vars)
        del prob.modifiedConstraints[n_modified:]
        for var, low, up in reversed(old_bounds):
            var.lowBound, var.upBound = low, up
        raise
    return prior


def _install_optimizer_hooks(opt: ShardingOptimizer, state: PluginState) -> None:
    """Make the plugin's costs part of every objective; check pins, iterate and report around every solve.

    autoparallel (re)sets the objective in ``get_solution`` (``_set_objective``), replacing any
    term added to ``prob`` beforehand, so the terms are appended right after it sets its own.
    autoparallel rebuilds its memory rows at the end of the problem before each solve; with the
    nested-shard rows their budget is recomputed over the strategies left (``_nested``), and the
    plugin's rows are moved behind them (:func:`_rows_last`).
    ``_solve`` (used by ``get_solution`` and ``resolve``) becomes: check pins; solve with the
    chosen solver (``_solvers``); let the formulation add rows and re-solve while it asks to
    (``lazy``); explain an infeasible problem (``_explain``); build and emit the report.
    """

    def _apply_memory_constraint(apply_memory: Any) -> None:
        apply_memory()
        if state.nested_forbidden:
            rebudget_parameter_memory(opt, state.nested_forbidden)
        _rows_last(opt.prob, state.additions.constraints)

    def _set_objective(set_objective: Any) -> None:
        set_objective()
        if state.objective_terms:
            t0 = time.perf_counter()
            opt.prob.objective += pulp.lpSum(cost * var for var, cost in state.objective_terms)
            state.hook_seconds += time.perf_counter() - t0

    def _solve(solve: Any, verbose: bool = False) -> None:
        _solve_rounds(opt, state, solve, verbose)

    hook_plugin(opt, solve=_solve, set_objective=_set_objective, apply_memory=_apply_memory_constraint)


def _solve_rounds(opt: Any, state: PluginState, solve: Any, verbose: bool) -> None:
    """One ``_solve`` of an optimizer the plugin was added to: check pins; solve with the chosen
    solver; let the formulation add rows and re-solve while it asks to; explain an infeasible
    problem; build and emit the report."""
    hook_seconds = 0.0
    t0 = time.perf_counter()
    state.formulation.check_pins(opt, state.sites, state.additions)
    first = len(state.solver.outcomes)
    rounds: list[LazyRound] = []
    hook_seconds += time.perf_counter() - t0
    with state.solver.budget():
        for round_index in range(len(state.sites) + 2):  # lazy cuts >= 1 new site per round
            try:
                solve(verbose)
            except ConstraintsError:
                raise
            except RuntimeError as exc:
                if opt.prob.status != pulp.LpStatusInfeasible:
                    raise
                from ._explain import explain_infeasible

                raise explain_infeasible(opt, state) from exc
            t1 = time.perf_counter()
            more = _call_formulation(
                state.formulation,
                "after_solve",
                opt,
                lambda: state.formulation.after_solve(opt, state.sites, state.additions, state.namer, round_index),
            )
            if more is not None:
                state.prior_bounds.update(_add_atomically(opt.prob, more))
                state.additions.merge(more)
            last = state.solver.outcomes[-1]
            roots = set((more.owners if more is not None else {}).values())
            rounds.append(
                LazyRound(
                    round=round_index,
                    seconds=last.seconds,
                    objective=last.objective,
                    violated=tuple(s.orig.name for s in state.sites if s.root_idx in roots),
                    cuts=(*more.constraints, *more.bounds) if more is not None else (),
                )
            )
            hook_seconds += time.perf_counter() - t1
            if more is None:
                break
    t2 = time.perf_counter()
    state.report = build_report(opt, state, state.solver.outcomes[first:], rounds, state.hook_seconds + hook_seconds)
    emit(state.report)
    state.hook_seconds = 0.0
    hook_seconds += time.perf_counter() - t2
    logger.debug("apc: plugin hooks took %.3fs around the solve", hook_seconds)


def _rows_last(prob: pulp.LpProblem, names: Iterable[str]) -> None:
    """Move the plugin's rows behind every row autoparallel has (its memory rows are rebuilt at
    the end of the problem on each solve), so the problem autoparallel alone would solve is an
    exact prefix of ours. CBC's search depends on row order: on llama3 32 layers 8x8, strict's
    one row placed before the memory rows made CBC's solve 3x longer, placed after them 1.1x
    (docs/performance.md, "At real depth")."""
    moved = [(name, prob.constraints.pop(name)) for name in names if name in prob.constraints]
    for name, constraint in moved:
        prob.constraints[name] = constraint


def _refuse_replay(self: Any, formulation: str, rows: list[str], materialize: str) -> None:
    """Installed as ``ShardingOptimizer.apc_add_op_constraints``: what ``load()`` replays."""
    raise PluginStateError(
        f"this optimizer was saved with autoparallel_constraints ({formulation}, {len(rows)} rows, "
        f"materialize={materialize!r}); autoparallel's load() replays only its own constraint log and "
        "the plugin's constraints need the traced graph and a live mesh, so they cannot be restored. "
        "Re-create the AutoParallel and call add_op_constraints again (or use save_placements / "
        "load_placements for a solved plan)."
    )


provide("add_op_constraints", add_op_constraints)
provide("load_refusal", _refuse_replay)
