"""Which root mesh dims a process group, a (sub/flattened) DeviceMesh object or a coordinate
layout tensor spans: how the verifier maps a collective's group to the mesh dims it moves.
"""

from __future__ import annotations

import itertools
import logging
import math
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


logger = logging.getLogger(__name__)


def _group_names(mesh: DeviceMesh) -> dict[str, tuple[int, ...]]:
    """Process-group name -> the root mesh dims it spans (single dims and flattened ones)."""
    names: dict[str, tuple[int, ...]] = {}
    for d in range(mesh.ndim):
        try:
            names[mesh.get_group(d).group_name] = (d,)
        except Exception:  # noqa: BLE001, S110 - a mesh dim without a group of its own
            pass
    try:
        from ..seam.dtensor import flattened_mesh_by_layout
    except ImportError:  # pragma: no cover - older torch
        return names
    for k in range(2, mesh.ndim + 1):
        for dims in itertools.combinations(range(mesh.ndim), k):
            try:
                flat = flattened_mesh_by_layout(mesh, dims)
            except Exception:  # noqa: BLE001
                flat = None
            if flat is not None:
                names[flat.get_group(0).group_name] = tuple(dims)
    return names


def _group_dims_by_ranks(name: str, mesh: DeviceMesh) -> tuple[int, ...] | None:
    """The root mesh dims a process group spans, from its ranks (another mesh object of the same
    layout, e.g. a strategy cached for an equal mesh, has groups of other names but the same ranks)."""
    import torch.distributed as dist

    from ..seam.dtensor import resolve_process_group

    try:
        ranks = dist.get_process_group_ranks(resolve_process_group(name))
    except Exception:  # noqa: BLE001 - not a live group
        return None
    dims = _rank_layout_dims(torch.tensor(sorted(ranks)), mesh)
    if dims is None or len(dims) != 1:
        return None
    me = dist.get_rank()
    return dims[0] if me in ranks else None


def _mesh_dims_of(obj: Any, root: DeviceMesh) -> tuple[tuple[int, ...], ...] | None:
    """For each dim of a (sub/flattened) DeviceMesh object, the root mesh dims it spans.

    Read from the object's rank layout: a root mesh gives ``((0,), (1,))``, a 1-D submesh along
    root dim 1 ``((1,),)``, a flattened mesh over both ``((0, 1),)``.
    """
    ranks = getattr(obj, "mesh", None)
    if not isinstance(ranks, torch.Tensor):
        return None
    return _rank_layout_dims(ranks, root)


def _rank_layout_dims(ranks: torch.Tensor, root: DeviceMesh) -> tuple[tuple[int, ...], ...] | None:
    root_ranks = root.mesh
    coords = {
        int(r): idx
        for idx, r in zip(itertools.product(*map(range, root_ranks.shape)), root_ranks.flatten().tolist())
    }
    if any(int(r) not in coords for r in ranks.flatten().tolist()):
        return None
    out = []
    for d in range(ranks.ndim):
        # ranks differing only along this dim of the object: which root dims vary among them
        line = ranks.movedim(d, -1).reshape(-1, ranks.shape[d])[0].tolist()
        varying = tuple(m for m in range(root.ndim) if len({coords[int(r)][m] for r in line}) > 1)
        if math.prod(int(root_ranks.shape[m]) for m in varying) != ranks.shape[d]:
            return None
        out.append(varying)
    return tuple(out)


def _layout_dims(layout: torch.Tensor, root: DeviceMesh) -> tuple[tuple[int, ...], ...] | None:
    """Mesh dims of a ``full_mesh`` layout tensor ``[batch, *mesh shape]`` (coordinate ops)."""
    if layout.ndim < 2:
        return None
    return _rank_layout_dims(layout[0], root)
