"""Checks that the importable ``autoparallel`` is meta-pytorch/autoparallel.

The PyPI name ``autoparallel`` belongs to an unrelated project (a joblib decorator), so importing
"something called autoparallel" proves nothing: we look for its two public classes and fail with an
install hint naming the pinned commit. Every internal the package attaches to or reads is the
seam's to check (``seam/``): each shim's targets at its install, each read where it is made, each
failing with the shim's name and what stops working.
"""

from __future__ import annotations

import importlib
import logging

from ..errors import INSTALL_HINT, PIN_COMMIT, AutoParallelMissingError

logger = logging.getLogger(__name__)

# What tells meta-pytorch/autoparallel from a namesake. Kept as data so the error can say which is missing.
REQUIRED_INTERNALS: tuple[tuple[str, str], ...] = (
    ("autoparallel.api", "AutoParallel"),
    ("autoparallel.optimize_sharding", "ShardingOptimizer"),
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
