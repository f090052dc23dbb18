"""Shared fixtures: every test runs on the CPU harness (device name, fake ranks).

autoparallel's strategy cache is not cleared per test: importing the plugin installs its cache
guard, which clears the mesh-blind caches whenever an ``AutoParallel`` is entered on another mesh
(tests/test_cache_guard.py and tests/test_harness.py prove it), so setups on one mesh share
strategies, as they would in one user process.
"""

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
def _cpu_harness(cpu_device_name: str, fake_process_group: None) -> None:
    """Every test: the cost model's device name answered, fake ranks."""
