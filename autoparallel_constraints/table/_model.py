"""The compatibility table's data model and the co-sharding check.

A row (:class:`OpRule`) says, for one aten overload, which tensor arguments must be co-sharded,
how each argument's dims map onto the op's *logical* dims, and which arguments may be Partial
together. Rows are data; the rules they encode are applied by two functions:

* :func:`bind` turns a row plus one concrete FX node (shapes and non-tensor arguments known) into a
  :class:`Binding`: an explicit dim map per tensor input, where every dim is either a logical dim
  index or a :class:`DimKind` marker (``BROADCAST``: size 1 against a larger logical dim, so it must
  be Replicate; ``INDEXED``: addressed by an index tensor, so it must be Replicate).
* :func:`check` decides whether one strategy's input and output specs are co-sharded under a
  binding, and returns every :class:`Mismatch` it finds (empty = co-sharded).

Co-sharded means: on every mesh dim, the group's members (every ``ALIGNED`` input and the output)
are all Replicate; or every member that has the logical dim ``L`` as a real dim is ``Shard`` of
it (same split factor, same order across mesh dims), and members without it are Replicate; or the
members are Partial in a combination the row's :class:`Linearity` allows. ``INDEX`` inputs must be
Replicate on every mesh dim.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch.distributed.tensor.placement_types import Partial, Placement, Replicate, Shard, _StridedShard

from .._placements import fmt_placement

if TYPE_CHECKING:
    from torch.distributed.tensor._dtensor_spec import DTensorSpec

__all__ = [
    "Alignment",
    "ArgSpec",
    "Binding",
    "BoundArg",
    "DimKind",
    "Flag",
    "Linearity",
    "Mismatch",
    "OpRule",
    "Role",
    "bind",
    "check",
    "repair_targets",
]

OUTPUT = "out"
# Reduce ops under which a sum-linear op commutes with the pending reduction.
LINEAR_REDUCE_OPS = frozenset({"sum", "avg"})


class Role(enum.Enum):
    """What a tensor argument is to the co-shard group."""

    ALIGNED = "aligned"  # a member: its dims map onto logical dims and must be sharded alike
    INDEX = "index"  # an index tensor (index_put's ``indices``): must be Replicate


class Alignment(enum.Enum):
    """How the ALIGNED arguments' dims map onto the op's logical dims (= the output's dims)."""

    BROADCAST = "broadcast"  # right-aligned numpy broadcasting onto the output shape
    INDEX_PUT = "index_put"  # self's dims; values broadcast onto the shape of self[indices]


class Linearity(enum.Enum):
    """Which Partial combinations of the Partial-capable arguments give a correct result."""

    NONE = "none"  # no argument may be Partial
    LINEAR = "linear"  # all capable args Partial together, same reduce op (add, where's branches)
    MULTILINEAR = "multilinear"  # exactly one capable arg Partial, the rest Replicate (mul, div)


class DimKind(enum.Enum):
    """Markers in a dim map for dims that cannot be sharded."""

    BROADCAST = "broadcast"
    INDEXED = "indexed"


DimMapEntry = int | DimKind


@dataclass(frozen=True, slots=True)
class ArgSpec:
    """One tensor argument of a row.

    ``position`` is the index in the op's positional arguments (as in the schema); for a list
    argument (index_put's ``indices``) every tensor element takes the same role.
    ``partial`` says whether the argument may take part in a Partial combination.
    """

    name: str
    position: int
    role: Role = Role.ALIGNED
    partial: bool = True


@dataclass(frozen=True, slots=True)
class Flag:
    """A non-tensor argument that gates the Partial rule (index_put's ``accumulate``)."""

    name: str
    position: int
    required: Any
    default: Any


@dataclass(frozen=True, slots=True)
class OpRule:
    """One row of the compatibility table: the co-sharding rule of one aten overload."""

    op: torch._ops.OpOverload
    family: str
    args: tuple[ArgSpec, ...]
    alignment: Alignment = Alignment.BROADCAST
    linearity: Linearity = Linearity.NONE
    partial_only_if: Flag | None = None
    note: str = ""

    @property
    def name(self) -> str:
        return str(self.op)  # "aten.index_put.default"

    @property
    def short_name(self) -> str:
        return self.op.name().split("::", 1)[-1]  # "index_put" (packet) + overload elided

    def describe(self) -> str:
        """One line a user can read in an error: the row's rule in words."""
        roles = ", ".join(
            f"{a.name}{'' if a.role is Role.ALIGNED else ' (index, Replicate)'}"
            + ("" if a.partial or a.role is Role.INDEX else " (never Partial)")
            for a in self.args
        )
        partial = {
            Linearity.NONE: "no Partial",
            Linearity.LINEAR: "Partial only with all of them Partial(sum|avg)",
            Linearity.MULTILINEAR: "Partial on one of them at a time",
        }[self.linearity]
        if self.partial_only_if is not None and self.linearity is not Linearity.NONE:
            flag = self.partial_only_if
            partial += f", and only when {flag.name}={flag.required!r}"
        return (
            f"{self.name} [{self.family}]: {roles} co-sharded by {self.alignment.value} alignment; "
            f"{partial}"
        )


@dataclass(frozen=True, slots=True)
class BoundArg:
    """A row argument bound to one tensor input of a node."""

    spec_index: int  # index into OpSpec.input_specs
    label: str  # "self", "indices[2]", "values"
    arg: ArgSpec
    shape: tuple[int, ...]
    dim_map: tuple[DimMapEntry, ...]


@dataclass(frozen=True, slots=True)
class Binding:
    """A row bound to a node: explicit dim maps for every tensor input and for the output."""

    rule: OpRule
    args: tuple[BoundArg, ...]
    out_shape: tuple[int, ...]
    partial_allowed: bool  # the row's Linearity is not NONE and its flag holds
    scalar_operand: bool  # a Partial-capable operand is a Python scalar (forbids LINEAR Partial)
    num_inputs: int  # len(OpSpec.input_specs) expected
    out_dim_map: tuple[DimMapEntry, ...]  # the output's dims are the logical dims, markers kept


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One reason a strategy is not co-sharded."""

    mesh_dim: int
    reason: str
    members: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        return f"mesh dim {self.mesh_dim}: {self.reason}"


# ---------------------------------------------------------------------------------------------
# Binding a row to a node


def _shape_of(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, torch.Tensor):
        return tuple(int(s) for s in value.shape)
    return None


def _broadcast_map(shape: Sequence[int], out_shape: Sequence[int]) -> tuple[DimMapEntry, ...]:
    offset = len(out_shape) - len(shape)
    entries: list[DimMapEntry] = []
    for i, size in enumerate(shape):
        logical = offset + i
        if logical < 0:
            entries.append(DimKind.BROADCAST)  # more dims than the output: cannot happen in aten
        elif size == 1 and out_shape[logical] != 1:
            entries.append(DimKind.BROADCAST)
        else:
            entries.append(logical)
    return tuple(entries)


def _index_put_maps(
    self_shape: Sequence[int], index_shapes: Sequence[tuple[int, ...] | None], values_shape: Sequence[int]
) -> tuple[tuple[DimMapEntry, ...], tuple[DimMapEntry, ...]]:
    """Dim maps of ``self`` and ``values`` for ``self[indices] = values``.

    Advanced indexing replaces the indexed dims of self by the broadcast shape of the index
    tensors, placed where the indexed dims were if they are adjacent, else in front (numpy rule).
    ``values`` is broadcast onto that result shape.
    """
    indexed = [d for d, s in enumerate(index_shapes) if s is not None]
    self_map: list[DimMapEntry] = [DimKind.INDEXED if d in indexed else d for d in range(len(self_shape))]
    if not indexed:
        return tuple(self_map), _broadcast_map(values_shape, self_shape)
    idx_shape = tuple(torch.broadcast_shapes(*[s for s in index_shapes if s is not None]))
    adjacent = indexed == list(range(indexed[0], indexed[-1] + 1))
    rest = [d for d in range(len(self_shape)) if d not in indexed]
    # result dims: each entry is (size, logical-or-INDEXED)
    result: list[tuple[int, DimMapEntry]]
    idx_part = [(size, DimKind.INDEXED) for size in idx_shape]
    if adjacent:
        before = [(self_shape[d], d) for d in rest if d < indexed[0]]
        after = [(self_shape[d], d) for d in rest if d > indexed[-1]]
        result = before + idx_part + after
    else:
        result = idx_part + [(self_shape[d], d) for d in rest]
    offset = len(result) - len(values_shape)
    values_map: list[DimMapEntry] = []
    for i, size in enumerate(values_shape):
        j = offset + i
        if j < 0:
            values_map.append(DimKind.BROADCAST)
            continue
        res_size, logical = result[j]
        if isinstance(logical, DimKind):
            values_map.append(logical)
        elif size == 1 and res_size != 1:
            values_map.append(DimKind.BROADCAST)
        else:
            values_map.append(logical)
    return tuple(self_map), tuple(values_map)


def _is_tensor_node(x: Any) -> bool:
    return isinstance(x, torch.fx.Node) and isinstance(x.meta.get("val"), torch.Tensor)


def bind(
    rule: OpRule, node: torch.fx.Node, is_input: Callable[[torch.fx.Node], bool] = _is_tensor_node
) -> Binding | None:
    """Bind ``rule`` to ``node`` (its target must be ``rule.op``).

    ``is_input`` says which argument Nodes own a slot in the strategy's ``input_specs``
    (autoparallel: the nodes it has strategies for); by default, tensor-valued nodes.

    Returns None when the node has fewer than one aligned tensor input and nothing to check
    (e.g. ``add.Tensor`` called with a non-tensor where the schema allows it).
    """
    out_val = node.meta.get("val")
    out_shape = _shape_of(out_val)
    if out_shape is None:
        return None
    # input_specs order: tensor-valued Nodes of the flattened positional args (autoparallel's
    # all_input_nodes), so count them in that order.
    flat_positions: list[tuple[int, int | None]] = []  # (arg position, list element or None)
    for pos, a in enumerate(node.args):
        if isinstance(a, (list, tuple)):
            for k, elem in enumerate(a):
                if isinstance(elem, torch.fx.Node) and is_input(elem):
                    flat_positions.append((pos, k))
        elif isinstance(a, torch.fx.Node) and is_input(a):
            flat_positions.append((pos, None))
    spec_index = {fp: i for i, fp in enumerate(flat_positions)}

    bound: list[BoundArg] = []
    scalar_operand = False
    index_shapes: list[tuple[int, ...] | None] = []
    for a in rule.args:
        if a.position >= len(node.args):
            continue
        value = node.args[a.position]
        if isinstance(value, (list, tuple)):
            for k, elem in enumerate(value):
                shape = _shape_of(elem.meta.get("val")) if isinstance(elem, torch.fx.Node) else None
                if a.role is Role.INDEX:
                    index_shapes.append(shape)
                if shape is None or (a.position, k) not in spec_index:
                    continue
                bound.append(BoundArg(spec_index[(a.position, k)], f"{a.name}[{k}]", a, shape, ()))
        elif _is_tensor_node(value) and (a.position, None) in spec_index:
            shape = tuple(int(s) for s in value.meta["val"].shape)
            bound.append(BoundArg(spec_index[(a.position, None)], a.name, a, shape, ()))
        elif isinstance(value, (int, float, bool, complex)) and a.partial:
            scalar_operand = True

    # dim maps
    mapped: list[BoundArg] = []
    out_map: tuple[DimMapEntry, ...] = tuple(range(len(out_shape)))
    if rule.alignment is Alignment.INDEX_PUT:
        self_arg = next((b for b in bound if b.arg.name == "self"), None)
        values_arg = next((b for b in bound if b.arg.name == "values"), None)
        if self_arg is None or values_arg is None:
            return None
        self_map, values_map = _index_put_maps(self_arg.shape, index_shapes, values_arg.shape)
        out_map = self_map  # the output is self, updated in place or copied
        for b in bound:
            if b is self_arg:
                dim_map = self_map
            elif b is values_arg:
                dim_map = values_map
            else:
                dim_map = tuple(DimKind.INDEXED for _ in b.shape)
            mapped.append(BoundArg(b.spec_index, b.label, b.arg, b.shape, dim_map))
    else:
        for b in bound:
            dim_map = (
                _broadcast_map(b.shape, out_shape)
                if b.arg.role is Role.ALIGNED
                else tuple(DimKind.INDEXED for _ in b.shape)
            )
            mapped.append(BoundArg(b.spec_index, b.label, b.arg, b.shape, dim_map))

    partial_allowed = rule.linearity is not Linearity.NONE
    if partial_allowed and rule.partial_only_if is not None:
        flag = rule.partial_only_if
        if flag.position < len(node.args):
            value = node.args[flag.position]
        else:
            value = node.kwargs.get(flag.name, flag.default)
        partial_allowed = value == flag.required
    return Binding(
        rule=rule,
        args=tuple(sorted(mapped, key=lambda b: b.spec_index)),
        out_shape=out_shape,
        partial_allowed=partial_allowed,
        scalar_operand=scalar_operand,
        num_inputs=len(flat_positions),
        out_dim_map=out_map,
    )


# ---------------------------------------------------------------------------------------------
# The check


def _shard_dim(p: Placement) -> int | None:
    """The tensor dim ``p`` shards; _StridedShard is not a Shard subclass in torch 2.13."""
    return p.dim if isinstance(p, (Shard, _StridedShard)) else None


def _split(p: Placement) -> int | None:
    return getattr(p, "split_factor", None)


def _mesh_order(spec: DTensorSpec, tensor_dim: int) -> tuple[int, ...]:
    """Mesh dims sharding ``tensor_dim``, in the order they were applied."""
    order = getattr(spec, "shard_order", None)
    if order:
        for entry in order:
            if entry.tensor_dim == tensor_dim:
                return tuple(entry.mesh_dims)
        return ()
    return tuple(m for m, p in enumerate(spec.placements) if _shard_dim(p) == tensor_dim)


@dataclass(frozen=True, slots=True)
class _Member:
    label: str
    spec: DTensorSpec
    dim_map: tuple[DimMapEntry, ...]
    partial_capable: bool
    is_output: bool

    def logical(self, tensor_dim: int) -> DimMapEntry:
        if tensor_dim >= len(self.dim_map):
            return DimKind.BROADCAST
        return self.dim_map[tensor_dim]

    def real_dim_for(self, logical: int) -> int | None:
        for d, entry in enumerate(self.dim_map):
            if entry == logical:
                return d
        return None


def _output_spec(output_specs: Any) -> DTensorSpec | None:
    if isinstance(output_specs, (list, tuple)):
        return output_specs[0] if output_specs else None
    return output_specs


def check(binding: Binding, input_specs: Sequence[DTensorSpec | None], output_specs: Any) -> list[Mismatch]:
    """Every reason the specs are not co-sharded under ``binding``; empty when they are."""
    mismatches: list[Mismatch] = []
    members: list[_Member] = []
    index_members: list[tuple[str, DTensorSpec]] = []
    for b in binding.args:
        spec = input_specs[b.spec_index] if b.spec_index < len(input_specs) else None
        if spec is None:
            continue
        if b.arg.role is Role.INDEX:
            index_members.append((b.label, spec))
        else:
            members.append(_Member(b.label, spec, b.dim_map, b.arg.partial, False))
    out_spec = _output_spec(output_specs)
    if out_spec is not None:
        members.append(_Member(OUTPUT, out_spec, binding.out_dim_map, True, True))
    if not members:
        return mismatches
    ndim = members[0].spec.mesh.ndim

    for m in range(ndim):
        for label, spec in index_members:
            p = spec.placements[m]
            if not isinstance(p, Replicate):
                mismatches.append(
                    Mismatch(m, f"index tensor {label} is {fmt_placement(p)}; index tensors must be R", (label,))
                )
        shards: dict[str, tuple[int, int | None]] = {}  # label -> (logical dim, split factor)
        partials: dict[str, str] = {}
        for mem in members:
            p = mem.spec.placements[m]
            d = _shard_dim(p)
            if d is not None:
                logical = mem.logical(d)
                if isinstance(logical, DimKind):
                    mismatches.append(
                        Mismatch(m, f"{mem.label} is {fmt_placement(p)} on its {logical.value} dim {d}", (mem.label,))
                    )
                    continue
                shards[mem.label] = (logical, _split(p))
            elif isinstance(p, Partial):
                partials[mem.label] = p.reduce_op
        if shards and partials:
            mismatches.append(
                Mismatch(
                    m,
                    f"{', '.join(partials)} Partial while {', '.join(shards)} Shard on the same mesh dim",
                    tuple(partials) + tuple(shards),
                )
            )
            continue
        if shards:
            targets = {v for v in shards.values()}
            if len(targets) > 1:
                desc = ", ".join(
                    f"{label}->logical dim {ld}" + (f" split {sf}" if sf else "") for label, (ld, sf) in shards.items()
                )
                mismatches.append(Mismatch(m, f"members shard different logical dims ({desc})", tuple(shards)))
                continue
            (logical, _sf), = targets
            for mem in members:
                if mem.label in shards:
                    continue
                real = mem.real_dim_for(logical)
                if real is not None:
                    mismatches.append(
                        Mismatch(
                            m,
                            f"{mem.label} is {fmt_placement(mem.spec.placements[m])} but has logical dim "
                            f"{logical} (its dim {real}) that others shard",
                            (mem.label,),
                        )
                    )
            continue
        if partials:
            mismatches.extend(_check_partial(binding, members, partials, m))
    mismatches.extend(_check_shard_order(members, ndim))
    return mismatches


def _check_partial(binding: Binding, members: list[_Member], partials: dict[str, str], m: int) -> list[Mismatch]:
    rule = binding.rule
    out: list[Mismatch] = []
    labels = tuple(partials)
    if not binding.partial_allowed:
        why = (
            f"{rule.partial_only_if.name}={rule.partial_only_if.required!r} is required"
            if rule.partial_only_if is not None and rule.linearity is not Linearity.NONE
            else "the op is not linear in its inputs"
        )
        return [Mismatch(m, f"{', '.join(labels)} Partial but {why}", labels)]
    ops = set(partials.values())
    if len(ops) > 1 or not ops <= LINEAR_REDUCE_OPS:
        return [Mismatch(m, f"Partial reduce ops {sorted(ops)} are not one of sum/avg", labels)]
    inputs = [mem for mem in members if not mem.is_output]
    output_partial = any(mem.is_output for mem in members if mem.label in partials)
    partial_inputs = [mem for mem in inputs if mem.label in partials]
    for mem in partial_inputs:
        if not mem.partial_capable:
            out.append(Mismatch(m, f"{mem.label} may never be Partial", (mem.label,)))
    if not output_partial:
        out.append(Mismatch(m, f"{', '.join(labels)} Partial but the output is not", labels))
    if not partial_inputs:
        out.append(Mismatch(m, "the output is Partial but no input is", (OUTPUT,)))
        return out
    capable = [mem for mem in inputs if mem.partial_capable]
    if rule.linearity is Linearity.LINEAR:
        missing = [mem.label for mem in capable if mem.label not in partials]
        if missing:
            out.append(Mismatch(m, f"linear op: {', '.join(missing)} must be Partial too", tuple(missing)))
        if binding.scalar_operand:
            out.append(Mismatch(m, "linear op with a scalar operand cannot take Partial inputs", labels))
    elif rule.linearity is Linearity.MULTILINEAR and len(partial_inputs) > 1:
        out.append(
            Mismatch(m, f"multilinear op: only one of {', '.join(p.label for p in partial_inputs)} may be Partial", labels)
        )
    return out


def _check_shard_order(members: list[_Member], ndim: int) -> list[Mismatch]:
    """A logical dim sharded over several mesh dims must be split in the same order by all."""
    if ndim < 2:
        return []
    orders: dict[int, dict[str, tuple[int, ...]]] = {}
    for mem in members:
        for d, entry in enumerate(mem.dim_map):
            if isinstance(entry, DimKind):
                continue
            order = _mesh_order(mem.spec, d)
            if len(order) > 1:
                orders.setdefault(entry, {})[mem.label] = order
    out = []
    for logical, by_label in orders.items():
        if len(set(by_label.values())) > 1:
            desc = ", ".join(f"{k}:{v}" for k, v in by_label.items())
            out.append(Mismatch(-1, f"logical dim {logical} sharded in different mesh orders ({desc})", tuple(by_label)))
    return out


# ---------------------------------------------------------------------------------------------
# Repair targets (used by the explicit formulation)


def repair_targets(
    binding: Binding, input_specs: Sequence[DTensorSpec | None], output_specs: Any
) -> dict[int, DTensorSpec] | None:
    """Input specs that would make this strategy co-sharded, anchored on its output spec.

    Returns ``{spec_index: target_spec}`` for the inputs that must change (possibly empty), or
    None when no redistribution of the inputs alone can make it co-sharded (e.g. the output
    shards a broadcast dim, or is Partial where the row forbids it).
    """
    from torch.distributed.tensor._dtensor_spec import DTensorSpec

    out_spec = _output_spec(output_specs)
    if out_spec is None:
        return None
    ndim = out_spec.mesh.ndim
    changes: dict[int, DTensorSpec] = {}
    new_specs = list(input_specs)
    for b in binding.args:
        spec = input_specs[b.spec_index]
        if spec is None:
            continue
        placements: list[Placement] = []
        for m in range(ndim):
            p = out_spec.placements[m]
            current = spec.placements[m]
            if b.arg.role is Role.INDEX:
                placements.append(Replicate())
            elif isinstance(p, (Shard, _StridedShard)):
                real = next((d for d, e in enumerate(b.dim_map) if e == p.dim), None)
                if real is None:
                    placements.append(Replicate())
                elif isinstance(p, _StridedShard):
                    placements.append(_StridedShard(real, split_factor=p.split_factor))
                else:
                    placements.append(Shard(real))
            elif isinstance(p, Partial):
                # keep whatever Partial combination the inputs already carry; check() decides
                placements.append(current if isinstance(current, (Partial, Replicate)) else Replicate())
            else:
                placements.append(Replicate())
        if tuple(placements) != tuple(spec.placements):
            target = DTensorSpec(spec.mesh, tuple(placements), tensor_meta=spec.tensor_meta)
            changes[b.spec_index] = target
            new_specs[b.spec_index] = target
    if check(binding, new_specs, output_specs):
        return None
    return changes
