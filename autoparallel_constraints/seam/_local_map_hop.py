"""Let autoparallel read a ``local_map`` region as torch 2.14 and 2.15 trace it.

autoparallel's ``get_local_map_placement_option`` (``shardings/placement_options.py``) builds a
region's one strategy from the ``local_map_kwargs`` its node carries, after asserting that the
node's target is named ``call_local_map`` (or ``call_local_map_backward``): torch 2.13 traces the
``local_map`` HOP inside a wrapper of that name. torch 2.14 and 2.15 trace the HOP itself,
``local_map_hop``, with the same kwargs and values, so the assertion fails and every model with a
``local_map`` region stops in ``AutoParallel.__enter__`` (``AssertionError`` with no message),
with or without constraints. Past that line the function reads the node's ``meta["val"]`` only.

While one ``__enter__`` runs, :func:`reading_traced_local_map_hop` replaces the name
``get_placement_options_for_node`` looks up with a function that hands autoparallel a node whose
target reads as the wrapper's name when the node's target is the HOP; every other node, and every
node of a 2.13 trace, goes through unchanged. Measured on torch 2.15.0 with autoparallel at the pin:
the local_map example builds, and the default call on it is exact, audit clean and proven
(``tests/test_local_map.py``). Like the view skip, it swaps a module-global name for the block.

autoparallel's PRs #511 and #512 relax the assertion to ``"local_map" in str(node.target)``: the
probe hands the function a region node named ``local_map_hop`` and reports the shim not needed when
the function reads past the check.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

from ._model import Probe, Target, Verdict
from ._patching import swapped

__all__ = ["around_build", "probe", "reading_traced_local_map_hop"]

TARGET = Target("autoparallel.shardings.placement_options", "get_local_map_placement_option")

#: The target name autoparallel's check accepts (torch 2.13's wrapper of the HOP).
WRAPPER_NAME = "call_local_map"


class _AsWrapperNode:
    """``node`` with its ``target`` read as :data:`WRAPPER_NAME`: everything else is the node's."""

    __slots__ = ("_node",)

    def __init__(self, node: Any) -> None:
        self._node = node

    @property
    def target(self) -> str:
        return WRAPPER_NAME

    def __getattr__(self, name: str) -> Any:
        return getattr(self._node, name)


def _is_traced_hop(node: Any) -> bool:
    target = getattr(node, "target", None)
    return getattr(target, "__name__", None) == "local_map_hop" or str(target) == "local_map_hop"


@contextlib.contextmanager
def reading_traced_local_map_hop() -> Iterator[None]:
    """For the block, autoparallel's local_map strategy accepts a region traced as the HOP itself
    (torch 2.14+). Restores autoparallel's name on exit, also on error."""

    def get_local_map_placement_option(mesh: Any, specs: Any, user_args: Any, node: Any, local_map_kwargs: Any) -> Any:
        if _is_traced_hop(node):
            node = _AsWrapperNode(node)
        return original(mesh, specs, user_args, node, local_map_kwargs)

    with swapped("local_map_hop", TARGET, get_local_map_placement_option) as original:
        functools.update_wrapper(get_local_map_placement_option, original)
        yield


def around_build(call: Any, autop: Any) -> Any:
    """The ``local_map_hop`` shim's around on ``AutoParallel.__enter__``."""
    with reading_traced_local_map_hop():
        return call(autop)


class _Reached(Exception):
    """The probe's node was read past the target check."""


class _ProbeNode:
    target = "local_map_hop"

    @property
    def meta(self) -> Any:
        raise _Reached


def probe() -> Probe:
    """Needed while autoparallel asserts on a node named ``local_map_hop`` before reading it."""
    from autoparallel.shardings import placement_options

    kwargs = {"in_placements": (), "out_placements": (), "device_mesh": None}
    try:
        placement_options.get_local_map_placement_option(None, [], [], _ProbeNode(), kwargs)
    except _Reached:
        return Probe(Verdict.FIXED, "autoparallel accepts a region traced as local_map_hop")
    except AssertionError as exc:
        return Probe(Verdict.NEEDED, f"autoparallel asserts on a region traced as local_map_hop ({exc!r})")
    except Exception as exc:  # noqa: BLE001 - past the target check, failing on the probe's empty region
        return Probe(Verdict.FIXED, f"autoparallel reads a local_map_hop region past its check ({type(exc).__name__})")
    return Probe(Verdict.FIXED, "autoparallel accepts a region traced as local_map_hop")
