"""Checks that the importable ``autoparallel`` is meta-pytorch/autoparallel with the internals we use.

The PyPI name ``autoparallel`` belongs to an unrelated project (a joblib decorator), so importing
"something called autoparallel" proves nothing: we look for the modules and attributes the plugin
relies on and fail with an install hint naming the pinned commit.
"""

from __future__ import annotations

import importlib
import logging

from ..errors import INSTALL_HINT, PIN_COMMIT, AutoParallelMissingError

logger = logging.getLogger(__name__)

# (module, attribute) pairs this package touches. Kept as data so the error can say which is missing.
REQUIRED_INTERNALS: tuple[tuple[str, str], ...] = (
    ("autoparallel.api", "AutoParallel"),
    ("autoparallel.api", "AutoParallel._apply_placement_common"),
    ("autoparallel.optimize_sharding", "ShardingOptimizer"),
    ("autoparallel.optimize_sharding", "ShardingOptimizer._set_objective"),
    ("autoparallel.optimize_sharding", "ShardingOptimizer._add_node_constraint"),
    ("autoparallel.optimize_sharding", "get_placement_options_for_node"),
    ("autoparallel.apply_sharding", "ApplyShardingInterpreter.redistribute_tensor"),
    ("autoparallel.shardings.placement_options", "reset_placement_options_cache"),
    ("autoparallel.shardings.placement_options", "get_local_map_placement_option"),  # torch 2.14+'s trace
    ("autoparallel.shardings.propagation_rules", "propagate_shape_and_sharding"),  # the view skip
    ("autoparallel.cost_models.collective_runtime_estimation", "estimate_strategy_comms_cost"),
)


def _resolve(module_name: str, dotted: str) -> object:
    obj: object = importlib.import_module(module_name)
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def require_autoparallel() -> None:
    """Raise :class:`AutoParallelMissingError` unless the pinned autoparallel's internals import."""
    try:
        import autoparallel  # noqa: F401
    except ImportError as exc:
        raise AutoParallelMissingError(
            f"autoparallel_constraints needs meta-pytorch/autoparallel, which is not importable "
            f"({exc}).\n{INSTALL_HINT}"
        ) from exc
    missing = []
    for module_name, attr in REQUIRED_INTERNALS:
        try:
            _resolve(module_name, attr)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{module_name}.{attr} ({type(exc).__name__}: {exc})")
    if missing:
        origin = getattr(importlib.import_module("autoparallel"), "__file__", "?")
        raise AutoParallelMissingError(
            f"The importable 'autoparallel' (from {origin}) lacks internals this plugin needs:\n  "
            + "\n  ".join(missing)
            + f"\nIt is either the unrelated PyPI package or a meta-pytorch/autoparallel far from "
            f"commit {PIN_COMMIT[:7]}, the one this plugin is tested with.\n{INSTALL_HINT}"
        )
