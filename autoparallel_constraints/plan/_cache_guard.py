"""Guard against autoparallel's mesh-blind strategy caches.

At the pin, ``placement_options._placement_options_cache`` (and the comm-cost cache) are keyed by
op, placements and tensor metadata but not by the mesh, so a second ``AutoParallel`` on another
mesh with the same number of dims in one process silently reuses the first mesh's strategies
(wrong costs, wrong validity filtering; measured: 150 of 150 strategies stale).

Two lines of defence, both active once the plugin is imported:

* **repair** — ``AutoParallel.__enter__`` is wrapped so the caches are cleared whenever the mesh
  (or the view skip's setting) differs from the one the caches were filled for (the cache still
  helps within one mesh), and
  after any ``__enter__`` that raised: autoparallel's ``propagate_tensor_meta`` writes tensor
  metadata in place on specs the cache shares, so a build that failed half-way can leave entries
  that make the next model's build fail the same way (measured: recurrent_gemma's ``view_rule``
  error repeated by nine families built after it in one process);
* **detect** — :func:`check_strategies` (run by ``add_op_constraints``) refuses an optimizer whose
  strategies carry another mesh than its own, with the fix.

The same wrapper runs the build under :func:`._build_memo.memoized_redistribute_cost`, which
answers DTensor's repeated redistribution-cost questions from a per-build memo (same values), and
under :func:`._view_skip.skipping_unviewable_strategies`, which lets autoparallel's view rule skip
an input strategy DTensor refuses to view instead of stopping the build, under
:func:`._local_map_hop.reading_traced_local_map_hop`, which lets it read a ``local_map`` region as
torch 2.14+ trace it, and under :func:`._build_size.size_guard`, which refuses an ILP that cannot
fit in memory before autoparallel creates it.
"""

from __future__ import annotations

import functools
import logging
import operator
from typing import Any

from ..errors import StaleStrategiesError
from ._build_memo import memoized_redistribute_cost
from ._build_size import size_guard
from ._local_map_hop import reading_traced_local_map_hop
from ._view_skip import enabled as view_skip_enabled
from ._view_skip import skipping_unviewable_strategies

logger = logging.getLogger(__name__)

__all__ = ["cache_key", "check_strategies", "clear", "install", "mesh_key"]

_filled_for: tuple | None = None
_OUTPUT_MESH = operator.attrgetter("output_specs.mesh")


def mesh_key(mesh: Any) -> tuple:
    """What distinguishes meshes for the caches: device type, shape, ranks and dim names."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():  # called inside AutoParallel's FakeTensorMode too
        ranks = tuple(mesh.mesh.flatten().tolist())
    return (mesh.device_type, tuple(mesh.shape), ranks, mesh.mesh_dim_names)


def cache_key(mesh: Any) -> tuple:
    """What the caches were filled for: the mesh, and whether the view skip was on (it changes
    which strategies a view gets)."""
    return (*mesh_key(mesh), view_skip_enabled())


def clear() -> None:
    """Empty autoparallel's module-global placement-option and comm-cost caches, and forget which
    mesh they were filled for."""
    global _filled_for
    from autoparallel.cost_models import collective_runtime_estimation
    from autoparallel.shardings.placement_options import reset_placement_options_cache

    reset_placement_options_cache()
    cache = getattr(collective_runtime_estimation, "_comms_cost_cache", None)
    if isinstance(cache, dict):
        cache.clear()
    _filled_for = None


def _wrap_enter(original: Any) -> Any:
    @functools.wraps(original)
    def __enter__(self: Any) -> Any:
        global _filled_for
        key = cache_key(self.mesh)
        if key != _filled_for:
            if _filled_for is not None:
                logger.info("apc: mesh or view skip changed (%s, skip %s -> %s, skip %s); clearing autoparallel's "
                            "mesh-blind caches", _filled_for[1], _filled_for[-1], key[1], key[-1])
            clear()
            _filled_for = key
        try:
            with memoized_redistribute_cost(), skipping_unviewable_strategies(), reading_traced_local_map_hop(), \
                    size_guard():
                return original(self)
        except BaseException:
            logger.info("apc: AutoParallel.__enter__ raised; clearing autoparallel's caches it may have left half-written")
            clear()
            _restore_globals(self)
            raise

    __enter__.__apc_wrapped__ = True  # type: ignore[attr-defined]
    return __enter__


def _restore_globals(autop: Any) -> None:
    """Undo what a failed ``__enter__`` set process-wide and left for ``__exit__``, which Python
    never calls then: Inductor's ``comprehensive_padding`` and the NCCL topology of the cost model
    (autoparallel at the pin sets both before building its optimizer)."""
    import torch

    if hasattr(autop, "old_inductor_comprehensive_padding"):
        torch._inductor.config.comprehensive_padding = autop.old_inductor_comprehensive_padding
    if hasattr(autop, "_prev_nccl_config"):
        from autoparallel.cost_models.collective_runtime_estimation import set_nccl_topo_config

        set_nccl_topo_config(autop._prev_nccl_config)


def install() -> None:
    """Wrap ``AutoParallel.__enter__`` once per process (idempotent)."""
    from autoparallel.api import AutoParallel

    if not getattr(AutoParallel.__enter__, "__apc_wrapped__", False):
        AutoParallel.__enter__ = _wrap_enter(AutoParallel.__enter__)


def check_strategies(opt: Any, mesh: Any, *, per_cluster: bool = True) -> None:
    """Raise :class:`StaleStrategiesError` if any strategy of ``opt`` was computed for another mesh.

    ``per_cluster`` (the default): nodes autoparallel links to a cluster root are not read again;
    it links nodes whose strategies print the same (every spec and the mesh's shape), which come
    from the same placement-option cache entry as the root's (the cache is keyed by the op and its
    inputs' placements and metadata, equal for both). ``False`` reads every node.
    """
    from ..formulations._sites import cluster_layout
    want = mesh_key(mesh)
    keys: dict[int, tuple] = {id(mesh): want}  # meshes are few: key each object once

    def differs(other: Any) -> bool:
        key = keys.get(id(other))
        if key is None:
            key = keys[id(other)] = mesh_key(other)
        return key != want

    stale: list[str] = []
    read: dict[int, bool] = {}  # output specs already read (the cache's copies share them): stale?
    visit: Any = opt.strats.items()
    if per_cluster:  # the roots and the nodes of non-repeated parts, in order
        visit = ((node, opt.strats[node]) for node in map(opt.nodes.__getitem__, cluster_layout(opt).unlinked))
    for node, op_strategy in visit:
        strategies = getattr(op_strategy, "strategies", ())
        try:  # one output spec a strategy, the usual case: their meshes in a C loop, each mesh object keyed once
            meshes = list(map(_OUTPUT_MESH, strategies))
        except AttributeError:  # a tuple of outputs, or none: spec by spec
            meshes = None
        if meshes is not None:
            if any(map(differs, dict(zip(map(id, meshes), meshes)).values())):
                stale.append(node.name)
        else:
            for strategy in strategies:
                out = strategy.output_specs
                found = read.get(id(out))
                if found is None:
                    specs = out if isinstance(out, (list, tuple)) else (out,)
                    found = read[id(out)] = any(spec is not None and differs(spec.mesh) for spec in specs)
                if found:
                    stale.append(node.name)
                    break
        if len(stale) >= 5:
            break
    if stale:
        other = next(
            s.mesh
            for node in opt.strats
            if node.name == stale[0]
            for st in opt.strats[node].strategies
            for s in (st.output_specs if isinstance(st.output_specs, (list, tuple)) else [st.output_specs])
            if s is not None and differs(s.mesh)
        )
        raise StaleStrategiesError(
            f"strategies of {', '.join(stale)} were computed for mesh {tuple(other.shape)} but this "
            f"AutoParallel's mesh is {tuple(mesh.shape)}: autoparallel's placement-option cache ignores "
            "the mesh and served another run's strategies. Build this AutoParallel again after "
            "autoparallel_constraints.testing.reset_strategy_cache() (importing autoparallel_constraints "
            "before the first AutoParallel clears it automatically when the mesh changes)."
        )
