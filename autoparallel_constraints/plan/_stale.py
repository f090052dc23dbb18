"""Refuse an optimizer whose strategies were computed for another mesh.

autoparallel's placement-option cache ignores the mesh at the pin (``seam/_caches.py``): without the
seam's ``mesh_strategy_cache`` shim, a second ``AutoParallel`` on another mesh in the same process
is served the first mesh's strategies. :func:`check_strategies` (run by ``add_op_constraints``)
reads every strategy's mesh and raises :class:`~autoparallel_constraints.StaleStrategiesError`
with the fix, whoever filled the cache.
"""

from __future__ import annotations

import logging
import operator
from typing import Any

from ..errors import StaleStrategiesError
from ..formulations._sites import cluster_layout
from ..seam._caches import mesh_key

logger = logging.getLogger(__name__)

__all__ = ["check_strategies"]

_OUTPUT_MESH = operator.attrgetter("output_specs.mesh")


def check_strategies(opt: Any, mesh: Any, *, per_cluster: bool = True) -> None:
    """Raise :class:`StaleStrategiesError` if any strategy of ``opt`` was computed for another mesh.

    ``per_cluster`` (the default): nodes autoparallel links to a cluster root are not read again;
    it links nodes whose strategies print the same (every spec and the mesh's shape), which come
    from the same placement-option cache entry as the root's (the cache is keyed by the op and its
    inputs' placements and metadata, equal for both). ``False`` reads every node.
    """
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
            "autoparallel_constraints.testing.reset_strategy_cache() (once add_op_constraints or "
            "apc.enable() has run, the package clears it whenever the mesh changes: seam shim mesh_strategy_cache)."
        )
