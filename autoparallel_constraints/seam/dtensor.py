"""DTensor's and c10d's internals the package reads, under the names the rest of it uses.

DTensor keeps the types every strategy is made of (``DTensorSpec``, ``OpSpec``, ``OpStrategy``,
``OpSchema``, ``_StridedShard``) and the helpers that compute with them in private modules; torch
has moved them before (``torch.distributed._tensor`` to ``torch.distributed.tensor._*``). They are
imported here and nowhere else, so a move is one edit. Nothing here changes torch.
"""

from __future__ import annotations

from typing import Any

from torch.distributed.tensor._dtensor_spec import DTensorSpec, ShardOrderEntry, TensorMeta
from torch.distributed.tensor._op_schema import OpSchema, OpSpec, OpStrategy
from torch.distributed.tensor._ops._view_ops import Flatten, InputDim, Singleton, view_groups
from torch.distributed.tensor._ops._view_ops import propagate_shape_and_sharding as view_propagate
from torch.distributed.tensor._ops.utils import generate_redistribute_costs
from torch.distributed.tensor._redistribute import redistribute_local_tensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
from torch.distributed.tensor.placement_types import _StridedShard as StridedShard

__all__ = [
    "DTensorSpec",
    "Flatten",
    "InputDim",
    "LocalTensor",
    "LocalTensorMode",
    "OpSchema",
    "OpSpec",
    "OpStrategy",
    "ShardOrderEntry",
    "Singleton",
    "StridedShard",
    "TensorMeta",
    "compute_local_shape_and_global_offset",
    "convert_shard_order_to_strided_shard",
    "fake_store",
    "flattened_mesh_by_layout",
    "generate_redistribute_costs",
    "group_name",
    "local_ints",
    "local_tensor_takes_process_groups",
    "local_tensors",
    "normalize_placements_into_shard_order",
    "redistribute_local_tensor",
    "resolve_group",
    "resolve_process_group",
    "sharding_propagator",
    "view_groups",
    "view_propagate",
]

from torch.distributed._local_tensor import LocalTensor, LocalTensorMode  # noqa: E402


def sharding_propagator() -> Any:
    """DTensor's process-wide sharding propagator (the one its dispatcher asks)."""
    from torch.distributed.tensor import DTensor

    return DTensor._op_dispatcher.sharding_propagator


def normalize_placements_into_shard_order(*args: Any, **kwargs: Any) -> Any:
    """``DTensorSpec._normalize_placements_into_shard_order``: placements with ``_StridedShard`` as
    plain shards plus the shard order they stand for."""
    return DTensorSpec._normalize_placements_into_shard_order(*args, **kwargs)


def convert_shard_order_to_strided_shard(*args: Any, **kwargs: Any) -> Any:
    """``DTensorSpec._convert_shard_order_to_StridedShard``: the physical placements of a shard order
    (its arguments: the shard order, the placements, the mesh)."""
    return DTensorSpec._convert_shard_order_to_StridedShard(*args, **kwargs)


def flattened_mesh_by_layout(*args: Any, **kwargs: Any) -> Any:
    """``_redistribute._get_flattened_mesh_by_layout_impl``: the flattened mesh of some mesh dims."""
    from torch.distributed.tensor._redistribute import _get_flattened_mesh_by_layout_impl

    return _get_flattened_mesh_by_layout_impl(*args, **kwargs)


def resolve_process_group(group: Any) -> Any:
    """c10d's ``_resolve_process_group``: a process group from its name."""
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(group)


def resolve_group(mesh_and_dim: Any) -> Any:
    """The functional collectives' ``_resolve_group`` (a group from ``(mesh, mesh_dim)``)."""
    import torch.distributed._functional_collectives as funcol

    return funcol._resolve_group(mesh_and_dim)


def group_name(group: Any) -> Any:
    """The functional collectives' ``_group_or_group_name``."""
    import torch.distributed._functional_collectives as funcol

    return funcol._group_or_group_name(group)


def functional_collectives() -> Any:
    """``torch.distributed._functional_collectives`` (all_reduce, all_gather_tensor, ...)."""
    import torch.distributed._functional_collectives as funcol

    return funcol


def local_tensors(tensor: Any) -> dict[int, Any]:
    """A ``LocalTensor``'s per-rank tensors."""
    return tensor._local_tensors


def local_tensor_takes_process_groups() -> bool:
    """Whether LocalTensorMode's collectives accept the ProcessGroup objects compile_on_one_rank
    graphs pass (``_local_tensor._c10d._resolve_pg_or_name``); importing
    ``torch.distributed._ops.device_mesh`` registers the run-time coordinate op on the way."""
    import torch.distributed._local_tensor._c10d as local_c10d
    from torch.distributed._ops import device_mesh  # noqa: F401  (registers the coordinate op)

    return hasattr(local_c10d, "_resolve_pg_or_name")


def local_ints(value: Any) -> Any:
    """The per-rank ints of a LocalTensorMode integer (``LocalIntNode._local_ints``), or None."""
    return getattr(getattr(value, "node", None), "_local_ints", None)


def fake_store() -> Any:
    """torch's ``FakeStore`` for the ``"fake"`` process-group backend (from its testing internals)."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    return FakeStore()
