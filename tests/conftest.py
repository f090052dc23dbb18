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


def _torchtitan_status() -> str | None:
    """None when torchtitan's autoparallel path imports, else why not."""
    try:
        import torchtitan.experiments.graph_trainer.autoparallel_api  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means the cases cannot run
        return f"{type(exc).__name__}: {exc}"
    return None


def pytest_report_header(config: pytest.Config) -> str:
    why = _torchtitan_status()
    if why is None:
        return "torchtitan: importable, the torchtitan cases run"
    return (f"torchtitan: NOT importable ({why}); the torchtitan cases are skipped. "
            "Install them with: pip install -c autoparallel_constraints/constraints.txt -e '.[torchtitan]'")
