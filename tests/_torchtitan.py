"""torchtitan for the tests: skipped with the reason (and said in pytest's header, conftest.py)
when it is not installed, except under CI, where its absence fails: .ci/run installs it."""

from __future__ import annotations

import os

import pytest


def require_torchtitan() -> None:
    try:
        import torchtitan.experiments.graph_trainer.autoparallel_api  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        if os.environ.get("CI"):
            raise RuntimeError(f"torchtitan is not importable under CI ({exc}); .ci/run installs it") from exc
        pytest.skip(f"torchtitan is not importable ({exc}): pip install -e '.[torchtitan]'", allow_module_level=True)
