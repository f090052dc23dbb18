"""The plugin's and the solver route's hooks on one optimizer (shims ``plugin_hooks`` and
``solver_route``, attached per object by ``add_op_constraints`` and ``use_solver``).

autoparallel's ``get_solution`` and ``resolve`` solve through ``ShardingOptimizer._solve``, which
(re)sets the objective with ``_set_objective`` (replacing any term added to ``prob`` before),
rebuilds the memory rows with ``_apply_memory_constraint`` and calls ``self.prob.solve(solver)``.
The plugin's arounds on those three methods, and the solver route's on ``_set_objective`` and on
the problem's ``solve``, are shadowed on that optimizer (and its problem) only, one dispatcher per
method: the plugin's outside the solver route's (the table's order). What each around does is the
plan stage's; this module only checks that autoparallel still calls the names it shadows (a
renamed method would make the shadow a silent no-op) and attaches them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._model import Target, TargetKind
from ._patching import hook_instance, resolve

__all__ = ["hook_plugin", "hook_solver"]

SOLVE = Target("autoparallel.optimize_sharding", "ShardingOptimizer._solve", TargetKind.INSTANCE)
SET_OBJECTIVE = Target("autoparallel.optimize_sharding", "ShardingOptimizer._set_objective", TargetKind.INSTANCE)
MEMORY = Target("autoparallel.optimize_sharding", "ShardingOptimizer._apply_memory_constraint", TargetKind.INSTANCE)
PROB_SOLVE = Target("pulp", "LpProblem.solve", TargetKind.INSTANCE)

Around = Callable[..., Any]


def hook_plugin(opt: Any, *, solve: Around, set_objective: Around, apply_memory: Around) -> None:
    """The plugin's arounds on ``opt._solve``, ``opt._set_objective``, ``opt._apply_memory_constraint``
    (each called as ``around(call, *args)``)."""
    for target, attr, around in ((SOLVE, "_solve", solve), (SET_OBJECTIVE, "_set_objective", set_objective),
                                 (MEMORY, "_apply_memory_constraint", apply_memory)):
        resolve("plugin_hooks", target)
        hook_instance("plugin_hooks", opt, attr, around)


def hook_solver(opt: Any, *, prob_solve: Around, set_objective: Around | None) -> None:
    """The solver route's arounds on ``opt.prob.solve`` and, when ``opt`` has one, ``opt._set_objective``."""
    resolve("solver_route", PROB_SOLVE)
    hook_instance("solver_route", opt.prob, "solve", prob_solve)
    if set_objective is not None and hasattr(opt, "_set_objective"):
        resolve("solver_route", SET_OBJECTIVE)
        hook_instance("solver_route", opt, "_set_objective", set_objective)
