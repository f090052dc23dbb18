"""autoparallel's module-global caches: keyed on the mesh where upstream does not, and cleaned up
after a build that failed half-way.

At the pin two caches ignore the mesh:

* ``placement_options._placement_options_cache`` (strategies), keyed by op, input placements,
  tensor metadata and args. A second ``AutoParallel`` on another mesh with the same number of dims
  reuses the first mesh's strategies (measured: 150 of 150 strategies stale, wrong costs, wrong
  validity filtering; one run ended infeasible). autoparallel's PR #511 puts the mesh in that key.
* ``collective_runtime_estimation._comms_cost_cache`` (the ILP's communication cost of every
  variable), keyed by the two specs' placements and tensor metadata. #511 leaves that key as it is.

Shims ``mesh_strategy_cache`` and ``mesh_comm_cost_cache`` clear their cache when an
``AutoParallel`` is entered on another mesh than the one it was filled for (within one mesh the
cache still helps). Each probe reads the key its cache is looked up by (the function's source) and
reports the shim not needed once the key holds the mesh. They change what autoparallel alone
computes in a process that builds two meshes (its own answer there is another mesh's), so they are
attached by the calls that use the plugin (``add_op_constraints``, ``enable``, the test kit), not
by the import.

Shim ``failed_build_cleanup``: autoparallel's ``propagate_tensor_meta`` writes tensor metadata in
place on specs the strategy cache shares, so a build that raised half-way can leave entries that
make the next model's build fail the same way (measured: recurrent_gemma's ``view_rule`` error
repeated by nine families built after it in one process); and ``__enter__`` sets Inductor's
``comprehensive_padding`` and the cost model's NCCL topology before building, which only
``__exit__`` (never called after a failed ``__enter__``) puts back. After an ``__enter__`` that
raised, the caches are emptied and both settings restored.
"""

from __future__ import annotations

import ast
import inspect
import logging
from typing import Any

from ._model import Probe, Target, Verdict

logger = logging.getLogger(__name__)

__all__ = [
    "around_build_comm_costs",
    "around_build_strategies",
    "around_failed_build",
    "clear_strategy_caches",
    "mesh_key",
    "probe_comm_cost_cache",
    "probe_strategy_cache",
]

STRATEGY_CACHE = Target("autoparallel.shardings.placement_options", "reset_placement_options_cache")
STRATEGY_KEY = Target("autoparallel.shardings.placement_options", "get_placement_options")
COMM_CACHE = Target("autoparallel.cost_models.collective_runtime_estimation", "_comms_cost_cache")
COMM_KEY = Target("autoparallel.cost_models.collective_runtime_estimation", "estimate_strategy_comms_cost")
PADDING = Target("torch._inductor.config", "comprehensive_padding")
NCCL = Target("autoparallel.cost_models.collective_runtime_estimation", "set_nccl_topo_config")

# The mesh each cache was last filled for (None: unknown, clear on the next build).
_filled_for: dict[str, tuple | None] = {"strategies": None, "comm_costs": None}


def mesh_key(mesh: Any) -> tuple:
    """What distinguishes meshes for the caches: device type, shape, ranks and dim names."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():  # called inside AutoParallel's FakeTensorMode too
        ranks = tuple(mesh.mesh.flatten().tolist())
    return (mesh.device_type, tuple(mesh.shape), ranks, mesh.mesh_dim_names)


def _clear_strategies() -> None:
    from autoparallel.shardings.placement_options import reset_placement_options_cache

    reset_placement_options_cache()
    _filled_for["strategies"] = None


def _clear_comm_costs() -> None:
    from autoparallel.cost_models import collective_runtime_estimation

    cache = getattr(collective_runtime_estimation, "_comms_cost_cache", None)
    if isinstance(cache, dict):
        cache.clear()
    _filled_for["comm_costs"] = None


def clear_strategy_caches() -> None:
    """Empty autoparallel's module-global placement-option and comm-cost caches, and forget which
    mesh they were filled for."""
    _clear_strategies()
    _clear_comm_costs()


def filled_for(cache: str) -> tuple | None:
    return _filled_for[cache]


def set_filled_for(cache: str, key: tuple | None) -> None:
    """Tell the guard which mesh ``cache`` ("strategies" or "comm_costs") holds (tests forge it)."""
    _filled_for[cache] = key


def _guard(cache: str, clear: Any, call: Any, autop: Any) -> Any:
    key = mesh_key(autop.mesh)
    if _filled_for[cache] != key:
        if _filled_for[cache] is not None:
            logger.info("apc: the mesh changed (%s -> %s): clearing autoparallel's mesh-blind %s cache",
                        _filled_for[cache][1], key[1], cache)
        clear()
        _filled_for[cache] = key
    return call(autop)


def around_build_strategies(call: Any, autop: Any) -> Any:
    """The ``mesh_strategy_cache`` shim's around on ``AutoParallel.__enter__``."""
    return _guard("strategies", _clear_strategies, call, autop)


def around_build_comm_costs(call: Any, autop: Any) -> Any:
    """The ``mesh_comm_cost_cache`` shim's around on ``AutoParallel.__enter__``."""
    return _guard("comm_costs", _clear_comm_costs, call, autop)


def around_failed_build(call: Any, autop: Any) -> Any:
    """The ``failed_build_cleanup`` shim's around on ``AutoParallel.__enter__``."""
    try:
        return call(autop)
    except BaseException:
        logger.info("apc: AutoParallel.__enter__ raised; clearing autoparallel's caches it may have left half-written")
        clear_strategy_caches()
        _restore_globals(autop)
        raise


def _restore_globals(autop: Any) -> None:
    """Undo what a failed ``__enter__`` set process-wide and left for ``__exit__``: Inductor's
    ``comprehensive_padding`` and the NCCL topology of the cost model."""
    import torch._inductor.config as inductor_config

    state = vars(autop)
    if "old_inductor_comprehensive_padding" in state:
        inductor_config.comprehensive_padding = state["old_inductor_comprehensive_padding"]
    if "_prev_nccl_config" in state:
        from autoparallel.cost_models.collective_runtime_estimation import set_nccl_topo_config

        set_nccl_topo_config(state["_prev_nccl_config"])


def _key_names(function: Any, key_name: str) -> set[str] | None:
    """The names and attributes the expression assigned to ``key_name`` in ``function`` reads,
    through the local names it is built from; None when the source cannot be read."""
    try:
        tree = ast.parse(inspect.getsource(function).lstrip())
    except (OSError, TypeError, SyntaxError):
        return None
    assigned: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            names = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            names |= {n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute)}
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, set()).update(names)
    if key_name not in assigned:
        return None
    seen, todo = set(), [key_name]
    while todo:
        name = todo.pop()
        for read in assigned.get(name, ()):
            if read not in seen:
                seen.add(read)
                todo.append(read)
    return seen


def _probe_key(function: Any, key_name: str, what: str) -> Probe:
    names = _key_names(function, key_name)
    if names is None:
        return Probe(Verdict.NEEDED, f"{what}'s key could not be read; kept on")
    if "mesh" in names or "mesh_key" in names:
        return Probe(Verdict.FIXED, f"{what} is keyed on the mesh")
    return Probe(Verdict.NEEDED, f"{what}'s key ({key_name}) holds no mesh")


def probe_strategy_cache() -> Probe:
    from autoparallel.shardings import placement_options

    return _probe_key(placement_options.get_placement_options, "cache_key", "the placement-option cache")


def probe_comm_cost_cache() -> Probe:
    from autoparallel.cost_models import collective_runtime_estimation

    return _probe_key(collective_runtime_estimation.estimate_strategy_comms_cost, "key", "the comm-cost cache")
