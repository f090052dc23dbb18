"""``local_map`` regions: read by the contract their user declared, and their ``Replicate`` claims
checked by which mesh dims each value of the body may vary along.

A region's body runs on local shards, so DTensor's rules do not describe it. The apply step tags
the ops the body traces into the parallel graph with the region (``meta["custom"]["apc_region"]``,
the redistributions into its inputs left untagged); each region comes with its declared in and
out placements and the global shape of each output (from the joint graph's ``call_local_map``
node). An input from outside every region must be in one of the declared in placements
(``region_input``); an op whose value leaves the region is one of its outputs, read as a declared
output whose placements rebuild that output's global shape from the local one; every other op of
the body is proven by the declaration (``proven["local_map <region>"]``).

**Varying mesh dims** (the check JAX's ``shard_map`` makes of its replication claims). For every
value of a body, the set ``V`` of mesh dims along which it may differ from rank to rank:

* an input from outside: the mesh dims its placements do not replicate (``Shard`` or ``Partial``);
  a constant, a fill or a scalar: none;
* ``all_reduce`` / ``all_gather_into_tensor`` over the mesh dims ``G``: ``V(x) - G`` (every rank
  of the group ends with the same tensor); ``reduce_scatter_tensor`` / ``all_to_all_single``:
  ``V(x) ∪ G``;
* an op that reads only its inputs' shapes (``sym_size``, ``*_like``, ``new_*``): none;
* any other op: the union of its inputs' ``V`` (a deterministic local op of equal inputs gives
  equal outputs); a value from another region's body (a forward region's activation in its
  backward) keeps the ``V`` computed there.

An output declared ``Replicate`` on a mesh dim in its ``V`` breaks the declaration
(``region_output``): autoparallel takes it as the same on every rank, and each rank holds only its
own share. The backward region's outputs are the forward inputs' gradients in the forward's *in*
placements (the local_map HOP does not support ``in_grad_placements``), so a weight declared
``Replicate`` on a mesh dim its tokens are sharded on has a gradient that varies there unless the
body sums it over that dim. ``V`` over-approximates (``x * 0`` of a varying ``x`` still varies);
a value whose ``V`` cannot be read (a collective on a group outside the mesh) is not checked.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

from ..core._placements import fmt_placements, fmt_spec
from ..core._tags import REGION
from ..seam.tracing import schema_of
from ._values import (
    _NEW_FACTORY,
    _SCALAR,
    _concrete,
    _contiguous_stride,
    _Fill,
    _Gathered,
    _is_tensor,
    _Readings,
    _Unknown,
    _Violation,
    aten,
)

logger = logging.getLogger(__name__)

Varying = frozenset[int] | None  # mesh dims a body value may vary along; None: not known

# ops whose result depends on their tensor inputs' shapes only
_SHAPE_ONLY = frozenset({
    aten.empty_like.default,
    aten.full_like.default,
    aten.ones_like.default,
    aten.sym_numel.default,
    aten.sym_size.int,
    aten.sym_storage_offset.default,
    aten.sym_stride.int,
    aten.zeros_like.default,
    *_NEW_FACTORY,
})
# functional collective -> (position of its group argument, whether every rank of the group ends
# with the same tensor)
_COLLECTIVE_GROUP = {
    "all_gather_into_tensor": (2, True),
    "all_reduce": (2, True),
    "all_to_all_single": (3, False),
    "reduce_scatter_tensor": (3, False),
}


@dataclass(frozen=True, slots=True)
class _InRegion:
    """A value inside a local_map region's body: proven by the region's declaration."""

    region: str


def _same_shape(shape: tuple[int, ...], declared: tuple[int, ...] | None) -> bool:
    """A global shape against a declared output's (None: that output is not a tensor; -1: a size
    known only at run time)."""
    return declared is not None and len(shape) == len(declared) and all(
        d < 0 or s == d for s, d in zip(shape, declared))


def _not_replicated(placements: Iterable[Any]) -> frozenset[int]:
    return frozenset(m for m, p in enumerate(placements) if not isinstance(p, Replicate))


class _Regions:
    """The walk's methods for ops of a local_map region's body."""

    def _region(self, node: torch.fx.Node) -> str | None:
        """The region a node runs in, if it is one this verify was given a declaration for."""
        region = self._region_of_any(node)
        return region if region in self.regions else None

    def _region_of_any(self, node: torch.fx.Node) -> str | None:
        """The region a node runs in, for any region tag (known to this verify or not)."""
        return (node.meta.get("custom") or {}).get(REGION)

    def _region_value(self, node: torch.fx.Node, region: str) -> Any:
        """An op of a local_map region's body, read by the region's declaration (module docstring).

        Inputs from outside every region must be in one of its declared in placements (else a
        ``region_input`` violation: a wrong redistribution into it); inputs from a region
        (activations a forward region saves for its backward) are the regions' own business. An op
        whose value leaves the region (used outside every region, or returned) is the region's
        output: one reading per declared output whose placements rebuild its global shape from
        the local one, and whose ``Replicate`` dims its value does not vary along."""
        ins, outs, shapes = self._declared(region)
        declared = [tuple(p) for p in ins if p is not None]
        entering: dict[torch.fx.Node, Varying] = {}
        for a in node.all_input_nodes:
            if self._region_of_any(a) is not None or not _is_tensor(a):
                continue
            value = self.values.get(a)
            if isinstance(value, _Unknown):
                return _Unknown(f"depends on unknown {a.name}")
            specs = [s for v in (self._readings(value) or (value,)) for s in self._input_specs(v)]
            if not specs:
                if isinstance(value, _Fill) or value is _SCALAR:
                    entering[a] = frozenset()  # no placement to hold to, the same everywhere
                    continue
                return _Unknown(f"{a.name} enters local_map region {region} as {type(value).__name__}, not read")
            fitting = [s for s in specs if not declared or tuple(s.placements) in declared]
            if not fitting:
                raise _Violation(
                    "region_input",
                    f"{a.name} enters local_map region {region} as {fmt_spec(specs[0])}; the region declares "
                    f"in placements {', '.join(fmt_placements(p) for p in declared)}",
                    inferred=fmt_spec(specs[0]), expected=" or ".join(fmt_placements(p) for p in declared),
                )
            # several readings: the dims every one of them varies along (never claim more)
            entering[a] = frozenset.intersection(*(_not_replicated(s.placements) for s in fitting))
        varies = self._varying(node, entering)
        self.varies[node] = varies
        leaves = any(self._region_of_any(u) is None for u in node.users)
        if not leaves or not _is_tensor(node):
            return _InRegion(region)
        return self._region_output(node, region, outs, shapes, varies)

    def _declared(self, region: str) -> tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]:
        """A region's declared in placements, out placements and output global shapes (the last
        empty when the caller gave in and out placements only: then any output fits by shape)."""
        entry = tuple(self.regions[region])
        ins, outs = entry[0], entry[1]
        shapes = tuple(entry[2]) if len(entry) > 2 and entry[2] is not None else ()
        return tuple(ins), tuple(outs), shapes

    def _varying(self, node: torch.fx.Node, entering: dict[torch.fx.Node, Varying]) -> Varying:
        """``V(node)``: the mesh dims its value may vary along (module docstring)."""
        target = node.target
        if target in _SHAPE_ONLY:
            return frozenset()
        of: dict[torch.fx.Node, Varying] = {}
        for a in node.all_input_nodes:
            if a in entering:
                of[a] = entering[a]
            elif self._region_of_any(a) is not None:
                of[a] = self.varies.get(a)
            else:
                of[a] = frozenset()  # a scalar from outside (a size): the same on every rank
        if any(v is None for v in of.values()):
            return None
        union = frozenset().union(*of.values())
        if getattr(target, "namespace", "") != "_c10d_functional":
            return union
        name = schema_of(target).name.split("::")[-1]  # type: ignore[union-attr]
        if name == "wait_tensor":
            return union
        if name not in _COLLECTIVE_GROUP or not isinstance(node.args[0], torch.fx.Node):
            return None
        position, same = _COLLECTIVE_GROUP[name]
        group = node.args[position] if len(node.args) > position else None
        if isinstance(group, torch.fx.Node):
            group = self.values.get(group)
        try:
            dims = frozenset(self._group(group))
        except Exception:  # noqa: BLE001 - a group this mesh cannot place: V not known
            logger.debug("apc verify: %s's group %r is not a group of the mesh", node.name, group)
            return None
        base = of[node.args[0]]
        return base - dims if same else base | dims  # type: ignore[operator]

    def _region_output(
        self, node: torch.fx.Node, region: str, outs: tuple[Any, ...], shapes: tuple[Any, ...], varies: Varying
    ) -> Any:
        """A body value leaving its region: the declared outputs it can be (their placements rebuild
        that output's declared global shape from its local one) whose Replicate dims it does not
        vary along; none of those left is a ``region_output`` violation."""
        local = self._traced_local_shape(node.meta["val"].shape)
        fits: list[tuple[tuple[Any, ...], Any]] = []
        for i, placements in enumerate(outs):
            if placements is None:
                continue
            spec = self._region_spec(node, tuple(placements), local)
            if spec is None or any(spec == s for _, s in fits):
                continue
            if i < len(shapes) and not _same_shape(tuple(spec.tensor_meta.shape), shapes[i]):
                continue  # not this output: it is no tensor, or its global shape differs
            fits.append((tuple(placements), spec))
        if not fits:
            return _Unknown(f"no declared out placement of local_map region {region} fits its output {node.name}")
        kept = [spec for placements, spec in fits if varies is None or not self._claims_replicated(placements, varies)]
        if not kept:
            placements, _ = fits[0]
            dims = sorted(m for m in varies if isinstance(placements[m], Replicate))  # type: ignore[union-attr]
            raise _Violation(
                "region_output",
                f"{node.name} leaves local_map region {region} declared {fmt_placements(placements)}, but its value "
                f"varies along mesh dim{'s' if len(dims) > 1 else ''} {', '.join(map(str, dims))} (it depends on "
                "inputs sharded or partial there, and no all_reduce or all_gather over that dim makes it the same "
                "on every rank): sum it over that dim inside the region (a backward region's gradient takes its "
                "input's declared placements), or declare it other than Replicate there",
                inferred=f"varies along mesh dims {sorted(varies)}",  # type: ignore[arg-type]
                expected=fmt_placements(placements),
            )
        return kept[0] if len(kept) == 1 else _Readings(tuple(kept))

    def _traced_local_shape(self, shape: Any) -> tuple[int, ...]:
        """A body value's traced local shape; a size traced from rank coordinates (torch 2.15's
        clamped chunk bounds: ``Min((c + 1) * chunk, n) - Min(c * chunk, n)``) is evaluated on every
        rank, and is that size where every rank gets the same one; -1 where not known."""
        return tuple(s if s >= 0 else self._same_on_every_rank(shape[i]) for i, s in enumerate(_concrete(shape)))

    def _same_on_every_rank(self, size: Any) -> int:
        import sympy

        expr = getattr(getattr(size, "node", None), "expr", None)
        if not isinstance(expr, sympy.Expr) or not expr.free_symbols or not expr.free_symbols <= self.traced_coords.keys():
            return -1
        dims = sorted({self.traced_coords[s] for s in expr.free_symbols})
        seen: set[int] = set()
        # a rank is one coordinate per mesh dim: every symbol of a dim takes that dim's value
        for point in itertools.product(*(range(self.sizes[d]) for d in dims)):
            at = dict(zip(dims, point))
            value = expr.xreplace({s: sympy.Integer(at[self.traced_coords[s]]) for s in expr.free_symbols})
            if not isinstance(value, sympy.Integer):
                return -1
            seen.add(int(value))
            if len(seen) > 1:
                return -1  # an uneven split: each rank its own size
        return seen.pop()

    @staticmethod
    def _claims_replicated(placements: tuple[Any, ...], varies: frozenset[int]) -> bool:
        return any(isinstance(placements[m], Replicate) for m in varies if m < len(placements))

    def _input_specs(self, value: Any) -> list[Any]:
        """The placements a value delivers to an op that takes it as it is."""
        if isinstance(value, _Gathered):
            return [value.spec]
        return self._reading_specs(value)

    def _region_spec(self, node: torch.fx.Node, placements: tuple[Any, ...], local: tuple[int, ...]) -> Any:
        from ..seam.dtensor import DTensorSpec, TensorMeta

        if len(placements) != len(self.sizes) or any(s < 0 for s in local):
            return None
        shape = list(local)
        for m, p in enumerate(placements):
            if isinstance(p, Partial):
                continue
            if isinstance(p, Shard):
                if p.dim >= len(shape):
                    return None
                shape[p.dim] *= self.sizes[m]
        size = torch.Size(shape)
        return DTensorSpec(self.mesh, tuple(placements),
                           tensor_meta=TensorMeta(size, _contiguous_stride(size), node.meta["val"].dtype))
