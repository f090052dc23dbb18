"""Where the plugin's apply step attaches to autoparallel's (shim ``apply_observer``).

autoparallel builds the parallel graph in ``AutoParallel._apply_placement_common`` (which
``apply_placement`` and numerics harnesses both call), with ``ApplyShardingInterpreter``: its
``run_node`` runs each joint node, its ``redistribute_tensor`` moves each argument from the
producer's spec to the consumer's, through ``apply_sharding.ordered_redistribute_local_tensor``.
The shim puts one around on each of those four; what they do is the apply stage's
(``apply/_materialize.py``), which registers it as the handler ``"apply"`` when it is imported.
The seam knows where to attach, the stage what to do.

Without a plugin call the handlers only record what the interpreter executes and tag nodes'
``meta["custom"]``: the plan and the parallel graph's ops are autoparallel's (``Effect.OBSERVES``),
which is what lets ``apc.audit`` judge a baseline run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._handlers import handler
from ._model import Target

__all__ = ["ApplyHandlers", "TARGETS", "around"]

APPLY = Target("autoparallel.api", "AutoParallel._apply_placement_common")
RUN_NODE = Target("autoparallel.apply_sharding", "ApplyShardingInterpreter.run_node")
REDISTRIBUTE = Target("autoparallel.apply_sharding", "ApplyShardingInterpreter.redistribute_tensor")
ORDERED = Target("autoparallel.apply_sharding", "ordered_redistribute_local_tensor")
TARGETS = (APPLY, RUN_NODE, REDISTRIBUTE, ORDERED)


@dataclass(frozen=True, kw_only=True, slots=True)
class ApplyHandlers:
    """The apply stage's handlers, each given autoparallel's function (``call``) first."""

    apply_placement_common: Callable[..., Any]  # (call, autop, sharding_placement)
    run_node: Callable[..., Any]  # (call, interpreter, node)
    redistribute_tensor: Callable[..., Any]  # (call, interpreter, arg, curr_spec, tgt_spec, node)
    ordered_redistribute: Callable[..., Any]  # (call, arg, curr_spec, tgt_spec, *args, **kwargs)


def around(name: str) -> Callable[..., Any]:
    """The around the shim puts on the target ``name`` (a field of :class:`ApplyHandlers`): the
    registered handler, or autoparallel's own call when none is registered."""

    def dispatch(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        handlers = handler("apply")
        if handlers is None:
            return call(*args, **kwargs)
        return getattr(handlers, name)(call, *args, **kwargs)

    dispatch.__name__ = f"apply_observer_{name}"
    return dispatch
