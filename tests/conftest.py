"""Shared fixtures: every test runs on the CPU harness with autoparallel's caches cleared."""

from __future__ import annotations

import sys

import pytest

try:
    import autoparallel.api  # noqa: F401
except ImportError as exc:  # fail loudly: CI must never skip for want of autoparallel
    from autoparallel_constraints.errors import INSTALL_HINT

    sys.stderr.write(f"autoparallel is not importable ({exc}).\n{INSTALL_HINT}\n")
    raise

pytest_plugins = ["autoparallel_constraints.testing.pytest_plugin"]


@pytest.fixture(autouse=True)
def _cpu_harness(cpu_device_name: str, fake_process_group: None, fresh_strategies: None) -> None:
    """Every test: the cost model's device name answered, fake ranks, mesh-blind caches cleared."""
