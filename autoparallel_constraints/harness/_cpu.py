"""CPU harness: a fake process group, CPU device meshes, the cost model's device name, and a
mesh-safe strategy cache.

autoparallel was written for GPUs. On a CPU-only machine three things need help, and all three are
opt-in here, never switched on by importing the library (the changes to torch and autoparallel
are the seam's shims ``device_name``, ``mesh_strategy_cache`` and ``mesh_comm_cost_cache``):

* the cost model asks ``torch.get_device_module().get_device_name()`` for a GPU name to look up
  FLOP and bandwidth limits; ``torch.cpu`` has no such function, so :func:`device_name` answers
  with a known GPU ("H100" by default) while it is active;
* a world of N ranks needs a process group: :func:`init_fake_process_group` starts torch's
  ``"fake"`` backend, which accepts every collective without running it;
* autoparallel's placement-option and comm-cost caches are keyed without the mesh, so a second
  ``AutoParallel`` on a different mesh in the same process would reuse the first mesh's strategies
  and costs: :func:`cpu_mesh` attaches the seam's guards that clear them when the mesh changes
  (where upstream has not fixed the key), and :func:`fresh_strategy_cache` clears them on entry
  and exit.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from ..seam import attach_for_use
from ..seam._caches import clear_strategy_caches
from ..seam._harness import device_name as answering_device_name
from ..seam.dtensor import fake_store

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_DEVICE_NAME",
    "cpu_mesh",
    "device_name",
    "fresh_strategy_cache",
    "init_fake_process_group",
]

DEFAULT_DEVICE_NAME = "H100"
"""The GPU whose limits autoparallel's cost model uses on a CPU machine (see :func:`device_name`)."""
# Large enough for every mesh the tests and the demo build (8x8 for llama3).
DEFAULT_FAKE_WORLD_SIZE = 64


def init_fake_process_group(world_size: int = DEFAULT_FAKE_WORLD_SIZE) -> None:
    """Initialise torch's ``"fake"`` process group with ``world_size`` ranks, once per process.

    If a process group already exists it is kept; a smaller existing world than requested is an
    error because meshes larger than the world cannot be built.
    """
    if dist.is_initialized():
        current = dist.get_world_size()
        if current < world_size:
            raise RuntimeError(
                f"A process group of world size {current} is already initialised; "
                f"{world_size} ranks were asked for. Destroy it first or ask for fewer."
            )
        return
    dist.init_process_group("fake", store=fake_store(), rank=0, world_size=world_size)


def cpu_mesh(shape: Sequence[int], names: Sequence[str] | None = None) -> DeviceMesh:
    """A ``"cpu"`` :class:`DeviceMesh` of ``shape`` over the fake process group.

    ``names`` defaults to ``("dim0", "dim1", ...)``, the seed's naming. Attaches the seam's
    mesh-cache guards: a test process builds many meshes.
    """
    attach_for_use()
    shape = tuple(int(s) for s in shape)
    world = 1
    for s in shape:
        world *= s
    init_fake_process_group(max(world, DEFAULT_FAKE_WORLD_SIZE))
    if names is None:
        names = tuple(f"dim{i}" for i in range(len(shape)))
    if len(names) != len(shape):
        raise ValueError(f"mesh shape {shape} has {len(shape)} dims but names {tuple(names)} do not")
    if world == dist.get_world_size():
        return init_device_mesh("cpu", shape, mesh_dim_names=tuple(names))
    # A sub-world mesh: ranks 0..world-1 of the fake group.
    return DeviceMesh("cpu", torch.arange(world).reshape(shape), mesh_dim_names=tuple(names))


@contextlib.contextmanager
def device_name(name: str = DEFAULT_DEVICE_NAME) -> Iterator[None]:
    """Answer the cost model's device-name question with ``name`` while active (CPU only).

    autoparallel's compute-cost estimate looks the device's name up in a table of GPU limits; on
    CPU there is no name to give, so the costs of a named GPU are used. The previous state is
    restored on exit. The module asked is ``torch.get_device_module()``, as in the cost model:
    ``torch.cpu`` on a CPU build, ``torch.cuda`` on a CUDA build running without a GPU (whose own
    ``get_device_name`` would raise "Found no NVIDIA driver"). The seam's shim ``device_name``.
    """
    with answering_device_name(name):
        yield


def reset_strategy_cache() -> None:
    """Empty autoparallel's mesh-blind module-global caches: placement options and comm costs.

    Both are keyed by placements and tensor metadata only, so entries computed on one mesh are
    wrong on another mesh with the same number of dims; and autoparallel writes tensor metadata in
    place on the specs the placement cache shares, so clear it between unrelated models too.
    """
    clear_strategy_caches()


@contextlib.contextmanager
def fresh_strategy_cache() -> Iterator[None]:
    """Clear autoparallel's placement-option cache on entry and on exit.

    The cache key has no mesh in it, so strategies computed for one mesh are otherwise served to
    the next ``AutoParallel`` on another mesh with the same number of dims.
    """
    reset_strategy_cache()
    try:
        yield
    finally:
        reset_strategy_cache()
