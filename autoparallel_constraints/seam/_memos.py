"""Memos of DTensor's pure functions: one ``redistribute_cost`` memo for autoparallel's build and
the verifier's walk, and the verifier's memos of an op's output meta and a strided shard's size.

**The build memo** (shim ``build_memo``). autoparallel's ``AutoParallel.__enter__`` asks DTensor,
through ``generate_redistribute_costs``, for the cost of every (producer strategy, consumer input
spec) pair. DTensor keeps a cache of the redistribution path (``_gen_transform_infos``) but skips
it while tracing, which is the case during the build, so every pair re-plans its path from scratch.
On a 2×2×2 mesh that is the largest share of the build (measured on the seed block: 2.17 M calls,
two thirds of a profiled build), although only about a fifth of the pairs are distinct (an MLP:
264,837 calls, 56,693 distinct). While one ``__enter__`` runs, the module-global name
``generate_redistribute_costs`` looks up answers from a memo keyed by the two ``DTensorSpec``
objects themselves (mesh, placements, shard order and tensor metadata: the key DTensor's own cache
uses outside tracing). A value is computed by DTensor the first time and returned as is after, so
the strategies, the ILP and the plan are the ones autoparallel builds without it
(``tests/seam/test_build_memo.py`` compares every cost). Specs that cannot be hashed (symbolic
shapes) go straight to DTensor. Off with :func:`use_build_memo` ``(False)``.

**The verifier's memos** (shim ``dtensor_memos``, for one :func:`~autoparallel_constraints.verify`
walk): the global output meta of an op (DTensor runs the op on fake tensors for every schema it
propagates, and the schemas the verifier asks differ only in placements, which the meta does not
depend on), ``redistribute_cost`` (the same memo as the build's) and a strided shard's local size
(an arange chunked per rank each). Under cProfile on llama3 2 layers 8x8 they were 2.6 s, 1.0 s
and 0.87 s of 8.3 s. Same arguments, same value; a refusal (the meta kernel raising) is kept too.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch

from ..errors import InvalidOptionError
from ._model import Target
from ._patching import swapped

logger = logging.getLogger(__name__)

__all__ = ["MemoStats", "dtensor_memos", "memoized_redistribute_cost", "use_build_memo"]

REDISTRIBUTE_COST = Target("torch.distributed.tensor._ops.utils", "redistribute_cost")
TENSOR_META = Target("torch.distributed.tensor._sharding_prop",
                     "ShardingPropagator._propagate_tensor_meta_non_cached")
STRIDED_SIZE = Target("torch.distributed.tensor.placement_types", "_StridedShard.local_shard_size_and_offset")

_enabled = True


class MemoStats:
    """Calls answered during one block, and how many of them DTensor computed."""

    __slots__ = ("calls", "computed", "unhashable")

    def __init__(self) -> None:
        self.calls = 0
        self.computed = 0
        self.unhashable = 0

    def __repr__(self) -> str:
        return f"MemoStats(calls={self.calls}, computed={self.computed}, unhashable={self.unhashable})"


#: The last build's stats (benchmarks and tests read them).
last_stats: MemoStats | None = None
_active: MemoStats | None = None  # the memo in force, so a nested block reuses it


def use_build_memo(enabled: bool) -> bool:
    """Switch the build memo on or off for later ``AutoParallel`` builds; returns the previous
    setting. On by default: it changes no cost, only how often DTensor computes one."""
    global _enabled
    if not isinstance(enabled, bool):
        raise InvalidOptionError(f"use_build_memo takes True or False, got {enabled!r}")
    previous, _enabled = _enabled, enabled
    return previous


def build_memo_enabled() -> bool:
    return _enabled


@contextlib.contextmanager
def memoized_redistribute_cost(shim: str = "build_memo") -> Iterator[MemoStats]:
    """Within the block, DTensor's ``redistribute_cost`` answers from a memo (yields its stats).

    A block inside another one uses the outer memo (one swap, one memo: the verifier inside a
    build, say). Restored on exit, also on error."""
    global _active
    if _active is not None:
        yield _active
        return
    stats = MemoStats()
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

    with swapped(shim, REDISTRIBUTE_COST, redistribute_cost) as original:
        _active = stats
        try:
            yield stats
        finally:
            _active = None
            memo.clear()


def around_build(call: Any, autop: Any) -> Any:
    """The ``build_memo`` shim's around on ``AutoParallel.__enter__``."""
    global last_stats
    if not _enabled:
        last_stats = MemoStats()
        return call(autop)
    with memoized_redistribute_cost("build_memo") as stats:
        last_stats = stats
        result = call(autop)
    if stats.calls:
        logger.info("apc: build memo answered %d redistribution costs, %d computed by DTensor", stats.calls, stats.computed)
    return result


def _is_spec(arg: Any) -> bool:
    return type(arg).__name__ == "DTensorSpec"


def _meta_key(arg: Any) -> Any:
    """What an op's output meta depends on: tensor metas for specs, placements left out; lists
    as tuples (marked, a list and a tuple schema are different ops' arguments)."""
    if _is_spec(arg):
        return ("spec", arg.tensor_meta)
    if isinstance(arg, (list, tuple)):
        return (type(arg).__name__, *(_meta_key(a) for a in arg))
    if isinstance(arg, dict):
        return ("dict", *((k, _meta_key(v)) for k, v in sorted(arg.items())))
    if isinstance(arg, torch.Tensor):
        raise TypeError("a tensor argument")  # not cached: its values may matter
    hash(arg)
    return (type(arg), arg)  # 1, 1.0 and True hash alike but promote differently


@contextlib.contextmanager
def dtensor_memos() -> Iterator[Counter[str]]:
    """The verifier's three memos for the length of one walk (shim ``dtensor_memos``); yields the
    hits per memo. Only calls whose arguments hash (concrete sizes, integer ranks) are kept."""
    from torch.distributed.tensor import DTensor

    propagator = DTensor._op_dispatcher.sharding_propagator
    meta_fn = propagator._propagate_tensor_meta_non_cached
    metas: dict[Any, Any] = {}
    sizes: dict[Any, Any] = {}
    hits: Counter[str] = Counter()

    def meta(op_schema: Any) -> Any:
        try:
            key = (op_schema.op, _meta_key(op_schema.args_schema), _meta_key(op_schema.kwargs_schema))
            found = metas.get(key)
        except TypeError:
            return meta_fn(op_schema)
        if found is None:
            try:
                found = metas[key] = (meta_fn(op_schema), None)
            except Exception as exc:  # noqa: BLE001 - kept and raised again, as the kernel would
                found = metas[key] = (None, exc)
        else:
            hits["meta"] += 1
        out, exc = found
        if exc is not None:
            raise exc.with_traceback(None)
        return out

    def size(self: Any, curr_local_size: Any, num_chunks: Any, rank: Any, *rest: Any, **kw: Any) -> Any:
        if not (type(curr_local_size) is int and type(num_chunks) is int and type(rank) is int):
            return size_fn(self, curr_local_size, num_chunks, rank, *rest, **kw)
        key = (self, curr_local_size, num_chunks, rank, rest, tuple(sorted(kw.items())))
        found = sizes.get(key)
        if found is None:
            found = sizes[key] = size_fn(self, curr_local_size, num_chunks, rank, *rest, **kw)
        else:
            hits["strided_size"] += 1
        length, offset = found
        return length, list(offset) if isinstance(offset, list) else offset  # callers own their list

    # the propagator is one object: its method is shadowed on it, then the class's shows again
    propagator._propagate_tensor_meta_non_cached = meta
    try:
        with memoized_redistribute_cost("dtensor_memos") as costs, \
                swapped("dtensor_memos", STRIDED_SIZE, size) as size_fn:
            calls_before, computed_before = costs.calls, costs.computed
            yield hits
            hits["cost"] += (costs.calls - calls_before) - (costs.computed - computed_before)
    finally:
        del propagator._propagate_tensor_meta_non_cached
        logger.debug("dtensor memos: %d metas, %d strided sizes", len(metas), len(sizes))
