"""Memoize DTensor's ``redistribute_cost`` while autoparallel enumerates strategies.

autoparallel's ``AutoParallel.__enter__`` asks DTensor, through ``generate_redistribute_costs``,
for the cost of every (producer strategy, consumer input spec) pair. DTensor keeps a cache of the
redistribution path (``_gen_transform_infos``) but skips it while tracing, which is the case
during the build, so every pair re-plans its path from scratch. On a 2×2×2 mesh that is the
largest share of the build (measured on the seed block: 2.17 M calls, two thirds of a profiled
build), although only about a fifth of the pairs are distinct (measured on an MLP: 264,837 calls,
56,693 distinct).

While one ``__enter__`` runs, :func:`memoized_redistribute_cost` replaces the module-global name
``generate_redistribute_costs`` looks up with a memo keyed by the two ``DTensorSpec`` objects
themselves (mesh, placements, shard order and tensor metadata: the key DTensor's own cache uses
outside tracing). A value is computed by DTensor's function the first time and returned as is
after, so the strategies, the ILP and the plan are the ones autoparallel builds without it
(``tests/test_build_memo.py`` compares every cost). Specs that cannot be hashed (symbolic
shapes) go straight to DTensor. The memo lives for one ``__enter__`` and is dropped after it.

Turn it off with :func:`use_build_memo` ``(False)`` to time or debug autoparallel's own path.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["MemoStats", "memoized_redistribute_cost", "use_build_memo"]

_enabled = True


class MemoStats:
    """Calls answered during one build, and how many of them DTensor computed."""

    __slots__ = ("calls", "computed", "unhashable")

    def __init__(self) -> None:
        self.calls = 0
        self.computed = 0
        self.unhashable = 0

    def __repr__(self) -> str:
        return f"MemoStats(calls={self.calls}, computed={self.computed}, unhashable={self.unhashable})"


last_stats: MemoStats | None = None


def use_build_memo(enabled: bool) -> bool:
    """Switch the build memo on or off for later ``AutoParallel`` builds; returns the previous
    setting. On by default: it changes no cost, only how often DTensor computes one."""
    global _enabled
    if not isinstance(enabled, bool):
        from ..errors import InvalidOptionError

        raise InvalidOptionError(f"use_build_memo takes True or False, got {enabled!r}")
    previous, _enabled = _enabled, enabled
    return previous


@contextlib.contextmanager
def memoized_redistribute_cost() -> Iterator[MemoStats]:
    """Within the block, DTensor's strategy expansion asks a memo for redistribution costs.

    Yields the block's :class:`MemoStats`; restores DTensor's function on exit, also on error.
    When the memo is switched off the block runs DTensor's function untouched (stats stay 0).
    """
    global last_stats
    stats = MemoStats()
    last_stats = stats
    if not _enabled:
        yield stats
        return
    from torch.distributed.tensor._ops import utils as dtensor_op_utils

    original = dtensor_op_utils.redistribute_cost
    memo: dict[tuple[Any, Any], float] = {}

    def redistribute_cost(current_spec: Any, target_spec: Any) -> float:
        stats.calls += 1
        key = (current_spec, target_spec)
        try:
            return memo[key]
        except KeyError:
            pass
        except TypeError:  # a spec with symbolic sizes: no key, ask DTensor every time
            stats.unhashable += 1
            stats.computed += 1
            return original(current_spec, target_spec)
        stats.computed += 1
        cost = memo[key] = original(current_spec, target_spec)
        return cost

    dtensor_op_utils.redistribute_cost = redistribute_cost
    try:
        yield stats
    finally:
        dtensor_op_utils.redistribute_cost = original
        memo.clear()
        if stats.calls:
            logger.info("apc: build memo answered %d redistribution costs, %d computed by DTensor",
                        stats.calls, stats.computed)
