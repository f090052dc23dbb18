"""The CPU harness's changes to torch and autoparallel, each for the length of one block (shims
of kind :attr:`~autoparallel_constraints.seam.When.SCOPED`, used by ``autoparallel_constraints.testing``).

* ``device_name``: autoparallel's cost model asks ``torch.get_device_module().get_device_name()`` for
  a GPU name to look up FLOP and bandwidth limits; ``torch.cpu`` has no such function (and a CUDA
  build without a GPU raises "Found no NVIDIA driver"), so a known GPU's name answers.
* ``rank_aware_all_to_all``: on a ``"cpu"`` mesh DTensor's ``shard_dim_alltoall`` falls back to
  all_gather plus ``chunks[mesh.get_local_rank(mesh_dim)]``, and under compile_on_one_rank that index
  is traced as rank 0's Python int: every rank would get rank 0's chunk. Swapped (both bindings: its
  module's and the one ``placement_types`` imported) for one that always emits the
  ``_dtensor::shard_dim_alltoall`` collective, which LocalTensorMode runs per rank.
* ``example_inputs_on_tracing_rank``: autoparallel's ``_make_local_args`` shards the example inputs
  with DTensor; under compile_on_one_rank an uneven shard's size is a function of the symbolic
  coordinate, which ``ShapeEnv`` refuses as a placeholder size. Run with the flag off (rank 0's
  sizes, which autoparallel then replaces by fresh dynamic sizes).
* ``strategy_offer``: the optimizer's placement-option lookup (``get_placement_options_for_node``
  as ``optimize_sharding`` imported it) replaced while a strategy is offered to the solver.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ._model import Target
from ._patching import swapped

__all__ = ["device_name", "example_inputs_on_tracing_rank", "offering", "rank_aware_all_to_all"]

ALLTOALL = Target("torch.distributed.tensor._collective_utils", "shard_dim_alltoall")
ALLTOALL_IMPORTED = Target("torch.distributed.tensor.placement_types", "shard_dim_alltoall")
LOCAL_ARGS = Target("autoparallel.apply_sharding", "_make_local_args")
LOOKUP = Target("autoparallel.optimize_sharding", "get_placement_options_for_node")


@contextlib.contextmanager
def device_name(name: str) -> Iterator[None]:
    """The cost model's device-name question answered with ``name`` while active."""
    module = torch.get_device_module()
    target = Target(module.__name__, "get_device_name")
    had = hasattr(module, "get_device_name")
    answer = lambda device=None: name  # noqa: E731
    if had:
        with swapped("device_name", target, answer):
            yield
        return
    module.get_device_name = answer  # type: ignore[attr-defined]
    try:
        yield
    finally:
        del module.get_device_name  # type: ignore[attr-defined]


def _shard_dim_alltoall_collective(input: torch.Tensor, gather_dim: int, shard_dim: int, mesh: Any, mesh_dim: int) -> Any:
    """``shard_dim_alltoall`` without the CPU fallback: always the ``_dtensor`` collective op."""
    from .dtensor import group_name, resolve_group

    group = resolve_group((mesh, mesh_dim))
    return torch.ops._dtensor.shard_dim_alltoall(input, gather_dim, shard_dim, group_name(group))


@contextlib.contextmanager
def rank_aware_all_to_all() -> Iterator[None]:
    """While active, S(a) -> S(b) redistributions emit the ``_dtensor::shard_dim_alltoall`` op.
    Not covered: an *uneven* S(a) -> S(b), where ``_to_new_shard_dim`` also unpads with the
    tracing rank's coordinate from ``mesh.get_coordinate()``."""
    with swapped("rank_aware_all_to_all", ALLTOALL, _shard_dim_alltoall_collective), \
            swapped("rank_aware_all_to_all", ALLTOALL_IMPORTED, _shard_dim_alltoall_collective):
        yield


@contextlib.contextmanager
def example_inputs_on_tracing_rank() -> Iterator[None]:
    """autoparallel's ``_make_local_args`` run with compile_on_one_rank off while active."""
    import torch.distributed.config as dist_config

    def make_local_args(*args: Any, **kwargs: Any) -> Any:
        with dist_config.patch(compile_on_one_rank=False):
            return original(*args, **kwargs)

    with swapped("example_inputs_on_tracing_rank", LOCAL_ARGS, make_local_args) as original:
        yield


@contextlib.contextmanager
def offering(lookup: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """The optimizer's placement-option lookup replaced by ``lookup(original)`` while active."""
    from autoparallel import optimize_sharding

    replacement = lookup(getattr(optimize_sharding, LOOKUP.path))
    with swapped("strategy_offer", LOOKUP, replacement):
        yield
