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
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

__all__ = ["reading_traced_local_map_hop"]

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
    from autoparallel.shardings import placement_options

    original = placement_options.get_local_map_placement_option

    @functools.wraps(original)
    def get_local_map_placement_option(mesh: Any, specs: Any, user_args: Any, node: Any, local_map_kwargs: Any) -> Any:
        if _is_traced_hop(node):
            node = _AsWrapperNode(node)
        return original(mesh, specs, user_args, node, local_map_kwargs)

    placement_options.get_local_map_placement_option = get_local_map_placement_option
    try:
        yield
    finally:
        placement_options.get_local_map_placement_option = original
