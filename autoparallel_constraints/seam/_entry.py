"""The plugin's entry points on autoparallel's classes.

* shim ``add_op_constraints``: ``AutoParallel.add_op_constraints``, the plugin's call (a name added,
  nothing of autoparallel's changed);
* shim ``load_refusal``: ``ShardingOptimizer.apc_add_op_constraints``, the method name autoparallel's
  ``load()`` replays for the entry ``add_op_constraints`` leaves in the optimizer's constraint log,
  so loading a plugin-saved optimizer raises a clear error instead of dropping the plugin's rows
  (autoparallel alone never meets it);
* shim ``enable_hook``: an around on ``AutoParallel.optimize_placement`` that calls
  ``add_op_constraints(**options)`` first while ``apc.enable()`` is in force (attached by
  ``enable``, not by the import).

The functions themselves are the plan stage's, registered as handlers.
"""

from __future__ import annotations

from typing import Any

from ._handlers import handler
from ._model import Target, TargetKind
from ._patching import add_name, remove_name, unwrap, wrap

__all__ = ["METHOD", "OPTIMIZE", "REPLAY"]

METHOD = Target("autoparallel.api", "AutoParallel.add_op_constraints", TargetKind.NEW)
REPLAY = Target("autoparallel.optimize_sharding", "ShardingOptimizer.apc_add_op_constraints", TargetKind.NEW)
OPTIMIZE = Target("autoparallel.api", "AutoParallel.optimize_placement")


def attach_method() -> None:
    add_name("add_op_constraints", METHOD, handler("add_op_constraints"))


def detach_method() -> None:
    remove_name("add_op_constraints", METHOD)


def attach_replay() -> None:
    add_name("load_refusal", REPLAY, handler("load_refusal"))


def detach_replay() -> None:
    remove_name("load_refusal", REPLAY)


def _before_solve(call: Any, autop: Any, *args: Any, **kwargs: Any) -> Any:
    hook = handler("enable")
    if hook is not None:
        hook(autop)
    return call(autop, *args, **kwargs)


def attach_enable() -> None:
    wrap("enable_hook", OPTIMIZE, _before_solve)


def detach_enable() -> None:
    unwrap("enable_hook", OPTIMIZE)
