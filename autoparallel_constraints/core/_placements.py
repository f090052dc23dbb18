"""Compact, stable text for placements and specs: ``(S(0), R)``, ``P(sum)``, ``SS(1,2)``.

Results print placements in this form everywhere (reports, audit, errors), so two runs of the same
plan print the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from torch.distributed.tensor.placement_types import Partial, Placement, Replicate, Shard

from ..seam.dtensor import StridedShard

if TYPE_CHECKING:
    from ..seam.dtensor import DTensorSpec

__all__ = ["fmt_placement", "fmt_placements", "fmt_spec", "local_shape"]


def fmt_placement(p: Placement) -> str:
    """``S(d)``, ``R``, ``P(op)`` or ``SS(d,split)`` for a strided shard."""
    if isinstance(p, StridedShard):  # not a Shard subclass in torch 2.13
        return f"SS({p.dim},{p.split_factor})"
    if isinstance(p, Shard):
        return f"S({p.dim})"
    if isinstance(p, Replicate):
        return "R"
    if isinstance(p, Partial):
        return f"P({p.reduce_op})"
    return str(p)


def fmt_placements(placements: Sequence[Placement]) -> str:
    return "(" + ", ".join(fmt_placement(p) for p in placements) + ")"


def fmt_spec(spec: DTensorSpec | None) -> str:
    """Placements of a spec, with a non-default shard order appended as ``[order]``."""
    if spec is None:
        return "-"
    text = fmt_placements(spec.placements)
    order = getattr(spec, "shard_order", None)
    if order and any(len(entry.mesh_dims) > 1 for entry in order):
        default = all(tuple(entry.mesh_dims) == tuple(sorted(entry.mesh_dims)) for entry in order)
        if not default:
            text += "[" + ";".join(f"{e.tensor_dim}:{','.join(map(str, e.mesh_dims))}" for e in order) + "]"
    return text


def local_shape(spec: DTensorSpec | None) -> tuple[int, ...] | None:
    """The shape of rank 0's shard under ``spec`` (torch.chunk semantics), or None without meta."""
    if spec is None or spec.tensor_meta is None:
        return None
    from ..seam.dtensor import compute_local_shape_and_global_offset

    # The fake process group's rank is 0, so this is the first rank's shard.
    shape, _ = compute_local_shape_and_global_offset(
        spec.tensor_meta.shape, spec.mesh, spec.placements, skip_offset=True
    )
    return tuple(int(s) for s in shape)
