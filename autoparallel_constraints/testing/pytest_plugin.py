"""pytest fixtures for testing autoparallel plans on a CPU-only machine.

Enable in a ``conftest.py`` with ``pytest_plugins = ["autoparallel_constraints.testing.pytest_plugin"]``.

* ``fake_process_group`` (session): torch's ``"fake"`` backend with 64 ranks.
* ``cpu_device_name`` (session): answers the cost model's device-name question with "H100".
* ``make_mesh``: a factory, ``make_mesh((2, 4))`` -> a ``"cpu"`` DeviceMesh named dim0, dim1, ...
* ``fresh_strategies``: clears autoparallel's mesh-blind caches before and after the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest
from torch.distributed.device_mesh import DeviceMesh

from ..harness._cpu import cpu_mesh, device_name, fresh_strategy_cache, init_fake_process_group


@pytest.fixture(scope="session")
def fake_process_group() -> None:
    init_fake_process_group()


@pytest.fixture(scope="session")
def cpu_device_name() -> Iterator[str]:
    with device_name() as _:
        yield "H100"


@pytest.fixture
def make_mesh(fake_process_group: None) -> Callable[..., DeviceMesh]:
    def factory(shape: Sequence[int], names: Sequence[str] | None = None) -> DeviceMesh:
        return cpu_mesh(shape, names)

    return factory


@pytest.fixture
def fresh_strategies() -> Iterator[None]:
    with fresh_strategy_cache():
        yield
