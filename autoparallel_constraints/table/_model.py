"""The compatibility table's data model and the co-sharding check.

A row (:class:`OpRule`) says, for one aten overload, which tensor arguments must be co-sharded,
how each argument's dims map onto the op's *logical* dims, and which arguments may be Partial
together. Rows are data; the rules they encode are applied by two functions:

* :func:`bind` turns a row plus one concrete FX node (shapes and non-tensor arguments known) into a
  :class:`Binding`: an explicit dim map per tensor input and per output, where every dim is either
  a logical dim index or a :class:`DimKind` marker (``BROADCAST``: size 1 against a larger logical
  dim; ``INDEXED``: addressed by an index tensor; ``WHOLE``: the op needs it whole — reduced,
  concatenated or scattered along). Marked dims must be Replicate. How the dims map is the row's
  :class:`Alignment`; each alignment's dim-map function lives in ``_binders``.
* :func:`check` decides whether one strategy's input and output specs are co-sharded under a
  binding, and returns every :class:`Mismatch` it finds (empty = co-sharded). It is a pure
  function of (binding, input specs, output specs), so :class:`CheckMemo` keeps each verdict by
  that key: repeated layers bind their rows to equal bindings with equal specs, and are checked
  once however deep the model is.

Logical dims are the first output's dims ``0..n-1``, plus dims the op sums over (an einsum's
contracted labels, the batch dims of a weight gradient), numbered after them. Co-sharded means,
on every mesh dim, one of:

* **Replicate**: every input is Replicate, and every output Replicate or ``Partial(avg|max|min)``
  (a value equal on every rank reduces to itself under those);
* **Shard**: the members that have logical dim ``L`` as a real dim all ``Shard`` it (same split
  factor; same mesh-dim order when several mesh dims shard it), at least one input among them; the
  other inputs are Replicate; an output without ``L`` is ``Partial(sum)`` (the op sums over
  ``L``), an output with it shards it;
* **Partial**: no member shards; the Partial inputs, all with one reduce op, form one of the row's
  :class:`PartialCombo` entries, and every output is Partial with the reduce op the combination
  gives (or Replicate where it says so).

The rules are checked against ground truth (the op run on every rank's shards) on 1-D and 2-D
meshes by ``autoparallel_constraints.lab._groundtruth``.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch.distributed.tensor.placement_types import Partial, Placement, Replicate, Shard

from ..core._placements import fmt_placement
from ..seam.dtensor import StridedShard
from ..seam.tracing import OpOverload, schema_of

if TYPE_CHECKING:
    from ..seam.dtensor import DTensorSpec

__all__ = [
    "ALL_REDUCES",
    "IDEMPOTENT",
    "SUM_AVG",
    "Alignment",
    "ArgSpec",
    "Binding",
    "BoundArg",
    "CheckMemo",
    "DimKind",
    "Flag",
    "Linearity",
    "Mismatch",
    "OpRule",
    "PartialCombo",
    "Reduce",
    "Role",
    "Take",
    "check",
    "repair_targets",
]

OUTPUT = "out"


class Role(enum.Enum):
    """What a tensor argument is to the co-shard group."""

    ALIGNED = "aligned"  # a member: its dims map onto logical dims and must be sharded alike
    # An index tensor: never Partial. Its dims are what the alignment makes them: an index_put or
    # scatter index addresses the indexed dim (INDEXED: Replicate), a gather index (index.Tensor,
    # embedding, index_select) lays out output dims and may shard with them.
    INDEX = "index"


class Alignment(enum.Enum):
    """How a row's tensor arguments map onto the op's logical dims (see ``_binders``)."""

    BROADCAST = "broadcast"  # right-aligned numpy broadcasting onto the output shape
    INDEX_PUT = "index_put"  # self's dims; values broadcast onto the shape of self[indices]
    GATHER = "gather"  # self[indices]: index tensors lay out the indexed result dims
    INDEX_SELECT = "index_select"  # self.index_select(dim, index): index lays out dim
    TAKE_ALONG = "take_along"  # gather(self, dim, index): index's dims are the output's
    EMBEDDING = "embedding"  # weight[indices]
    EMBEDDING_BACKWARD = "embedding_backward"  # rows of grad summed into the weight's shape
    EINSUM = "einsum"  # labelled dims; labels absent from the output are summed over
    CAT = "cat"  # every dim aligned except the cat dim
    STACK = "stack"  # every input dim aligned with the output, the new dim whole
    SLICE_SCATTER = "slice_scatter"  # self and src aligned except dim
    SELECT_SCATTER = "select_scatter"  # src is self without dim
    SCATTER = "scatter"  # scatter(self, dim, index, src): aligned off dim where sizes agree
    INDEX_SCATTER = "index_scatter"  # index_add/index_copy: 1-D index along dim
    LAYER_NORM = "layer_norm"  # leading dims aligned, normalized dims whole
    LAYER_NORM_BACKWARD = "layer_norm_backward"  # + weight/bias grads summed over leading dims
    ATTENTION = "attention"  # sdpa: batch and heads aligned (query seq when not causal)
    ATTENTION_BACKWARD = "attention_backward"  # + key/value grads summed over query seq


class Reduce(enum.Enum):
    """Reduce ops of ``Partial`` placements (DTensor's ``reduce_op`` strings)."""

    SUM = "sum"
    AVG = "avg"
    MAX = "max"
    MIN = "min"
    PRODUCT = "product"


SUM_AVG = (Reduce.SUM, Reduce.AVG)
# Reductions with r(x, ..., x) = x: a value replicated on every rank passes through them.
IDEMPOTENT = (Reduce.AVG, Reduce.MAX, Reduce.MIN)
# Every elementwise reduction: what commutes with picking elements (selection, gathering).
ALL_REDUCES = (Reduce.SUM, Reduce.AVG, Reduce.MAX, Reduce.MIN, Reduce.PRODUCT)
_IDEMPOTENT_OPS = frozenset(r.value for r in IDEMPOTENT)


class Take(enum.Enum):
    """Which of a combination's arguments are Partial (the others Replicate)."""

    ALL = "all"  # every listed argument (every element of a listed list argument)
    ANY = "any"  # any non-empty subset of them
    ONE = "one"  # exactly one of them


class Linearity(enum.Enum):
    """Shorthand for the usual Partial rules, expanded by :attr:`OpRule.combos`.

    ``LINEAR``: all Partial-capable args Partial together, sum or avg (add, where's branches).
    ``MULTILINEAR``: exactly one capable arg Partial, sum or avg (mul, div's numerator).
    A row that states ``partials`` explicitly leaves this at ``NONE``.
    """

    NONE = "none"
    LINEAR = "linear"
    MULTILINEAR = "multilinear"


class DimKind(enum.Enum):
    """Markers in a dim map for dims that cannot be sharded."""

    BROADCAST = "broadcast"
    INDEXED = "indexed"
    WHOLE = "whole"


DimMapEntry = int | DimKind


@dataclass(frozen=True, slots=True)
class ArgSpec:
    """One tensor argument of a row.

    ``position`` is the index in the op's schema arguments; for a list argument (index_put's
    ``indices``, cat's ``tensors``) every tensor element takes the same role.
    ``partial`` says whether the argument may take part in a Partial combination.
    """

    name: str
    position: int
    role: Role = Role.ALIGNED
    partial: bool = True


@dataclass(frozen=True, slots=True)
class Flag:
    """A non-tensor argument that gates Partial rules (index_put's ``accumulate``, add's
    ``alpha``). ``required`` is the value it must have, or a frozenset of allowed values."""

    name: str
    position: int
    required: Any
    default: Any

    def holds(self, value: Any) -> bool:
        if isinstance(self.required, frozenset):
            return value in self.required
        if isinstance(self.required, bool) or isinstance(value, bool):
            return value is self.required
        return bool(value == self.required)

    def describe(self) -> str:
        if isinstance(self.required, frozenset):
            return f"{self.name} in {{{', '.join(sorted(map(repr, self.required)))}}}"
        return f"{self.name}={self.required!r}"


@dataclass(frozen=True, slots=True)
class PartialCombo:
    """One Partial combination a row allows on a mesh dim.

    The inputs named in ``args`` (chosen as ``take`` says; every other input Replicate) are
    Partial with one reduce op ``r`` from ``reduce``; then every output is ``Partial(out[r])``
    — the same op unless ``out`` maps it (``None``: the output is Replicate). ``only_if`` gates
    the combination on a non-tensor argument; ``why`` says in words why it is exact.
    """

    args: tuple[str, ...]
    reduce: tuple[Reduce, ...]
    take: Take = Take.ALL
    out: tuple[Reduce | None, ...] = ()
    only_if: Flag | None = None
    why: str = ""

    def output_for(self, r: Reduce) -> Reduce | None:
        if not self.out:
            return r
        return self.out[self.reduce.index(r)]

    def describe(self) -> str:
        who = {Take.ALL: "all of", Take.ANY: "any of", Take.ONE: "one of"}[self.take]
        if len(self.args) == 1:
            who = "" if self.take is not Take.ONE else ""
        names = ", ".join(self.args)
        ops = "|".join(r.value for r in self.reduce)
        text = f"{who + ' ' if who else ''}{{{names}}} P({ops})"
        if self.out:
            mapped = ", ".join(
                f"{r.value}->{'R' if o is None else o.value}" for r, o in zip(self.reduce, self.out) if o is not r
            )
            text += f" (output {mapped})"
        if self.only_if is not None:
            text += f" when {self.only_if.describe()}"
        return text


@dataclass(frozen=True, slots=True)
class OpRule:
    """One row of the compatibility table: the co-sharding rule of one aten overload.

    ``partials`` states the Partial combinations explicitly; when it is None they come from the
    ``linearity`` shorthand. ``partial_only_if`` gates every combination (kept for rows written
    with ``linearity``). ``equation`` is an EINSUM row's fixed equation (``"mk,kn->mn"`` for mm;
    einsum itself reads its ``equation`` argument). ``whole_dims_arg`` names the argument holding
    the dim(s) a BROADCAST row needs whole (softmax backward's ``dim``).
    """

    op: OpOverload
    family: str
    args: tuple[ArgSpec, ...]
    alignment: Alignment = Alignment.BROADCAST
    linearity: Linearity = Linearity.NONE
    partial_only_if: Flag | None = None
    note: str = ""
    partials: tuple[PartialCombo, ...] | None = None
    equation: str = ""
    whole_dims_arg: str = ""

    @property
    def name(self) -> str:
        return str(self.op)  # "aten.index_put.default"

    @property
    def short_name(self) -> str:
        return self.op.name().split("::", 1)[-1]  # "index_put" (packet) + overload elided

    @property
    def combos(self) -> tuple[PartialCombo, ...]:
        """The row's Partial combinations, explicit or expanded from ``linearity``."""
        if self.partials is not None:
            return self.partials
        capable = tuple(a.name for a in self.args if a.partial and a.role is Role.ALIGNED)
        if self.linearity is Linearity.NONE or not capable:
            return ()
        take = Take.ALL if self.linearity is Linearity.LINEAR else Take.ONE
        why = "linear in all of them together" if take is Take.ALL else "linear in each separately"
        return (PartialCombo(capable, SUM_AVG, take, why=why),)

    def describe(self) -> str:
        """One line a user can read in an error: the row's rule in words."""
        roles = ", ".join(
            f"{a.name}{'' if a.role is Role.ALIGNED else ' (index)'}"
            + ("" if a.partial or a.role is Role.INDEX else " (never Partial)")
            for a in self.args
        )
        combos = self.combos
        partial = "no Partial" if not combos else "Partial: " + "; ".join(c.describe() for c in combos)
        if self.partial_only_if is not None and combos:
            partial += f", and only when {self.partial_only_if.describe()}"
        return f"{self.name} [{self.family}]: {roles} co-sharded by {self.alignment.value} alignment; {partial}"


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
    """A row bound to a node: explicit dim maps for every tensor input and for the outputs."""

    rule: OpRule
    args: tuple[BoundArg, ...]
    out_shape: tuple[int, ...]
    partial_allowed: bool  # some Partial combination is active for this node
    scalar_operand: bool  # a Partial-capable operand is a Python scalar
    num_inputs: int  # len(OpSpec.input_specs) expected
    out_dim_map: tuple[DimMapEntry, ...]  # the first output's dims, markers kept
    out_dim_maps: tuple[tuple[DimMapEntry, ...] | None, ...] = ()  # every output (None: not a tensor)
    out_shapes: tuple[tuple[int, ...] | None, ...] = ()
    active_combos: tuple[PartialCombo, ...] = ()  # the row's combinations whose flags hold here

    def out_label(self, i: int) -> str:
        return OUTPUT if len(self.out_dim_maps) <= 1 else f"{OUTPUT}[{i}]"


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


def _is_tensor_node(x: Any) -> bool:
    return isinstance(x, torch.fx.Node) and isinstance(x.meta.get("val"), torch.Tensor)


def argument_value(node: torch.fx.Node, name: str, position: int | None = None) -> Any:
    """The value of schema argument ``name`` of ``node`` (positional, keyword or default)."""
    schema = schema_of(node.target)  # type: ignore[union-attr]
    for i, a in enumerate(schema.arguments):
        if a.name == name:
            if i < len(node.args) and not a.kwarg_only:
                return node.args[i]
            if name in node.kwargs:
                return node.kwargs[name]
            if i < len(node.args):
                return node.args[i]
            return a.default_value if a.has_default_value() else None
    if position is not None and position < len(node.args):
        return node.args[position]
    return None


def _flag_holds(flag: Flag | None, node: torch.fx.Node) -> bool:
    if flag is None:
        return True
    value = argument_value(node, flag.name, flag.position)
    if value is None and flag.default is not None:
        value = flag.default
    return flag.holds(value)


# ---------------------------------------------------------------------------------------------
# The check


def _shard_dim(p: Placement) -> int | None:
    """The tensor dim ``p`` shards; StridedShard is not a Shard subclass in torch 2.13."""
    return p.dim if isinstance(p, (Shard, StridedShard)) else None


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
    arg: ArgSpec | None  # None for outputs
    is_output: bool

    @property
    def is_index(self) -> bool:
        return self.arg is not None and self.arg.role is Role.INDEX

    def logical(self, tensor_dim: int) -> DimMapEntry:
        if tensor_dim >= len(self.dim_map):
            return DimKind.BROADCAST
        return self.dim_map[tensor_dim]

    def real_dim_for(self, logical: int) -> int | None:
        for d, entry in enumerate(self.dim_map):
            if entry == logical:
                return d
        return None


def _output_specs(output_specs: Any) -> list[DTensorSpec | None]:
    if isinstance(output_specs, (list, tuple)):
        return list(output_specs)
    return [output_specs]


def _output_spec(output_specs: Any) -> DTensorSpec | None:
    specs = _output_specs(output_specs)
    return specs[0] if specs else None


def _members(binding: Binding, input_specs: Sequence[DTensorSpec | None], output_specs: Any) -> list[_Member]:
    members: list[_Member] = []
    for b in binding.args:
        spec = input_specs[b.spec_index] if b.spec_index < len(input_specs) else None
        if spec is None:
            continue
        members.append(_Member(b.label, spec, b.dim_map, b.arg, False))
    out_maps = binding.out_dim_maps or (binding.out_dim_map,)
    for i, spec in enumerate(_output_specs(output_specs)):
        if spec is None or i >= len(out_maps) or out_maps[i] is None:
            continue
        members.append(_Member(binding.out_label(i), spec, out_maps[i], None, True))
    return members


def check(binding: Binding, input_specs: Sequence[DTensorSpec | None], output_specs: Any) -> list[Mismatch]:
    """Every reason the specs are not co-sharded under ``binding``; empty when they are."""
    members = _members(binding, input_specs, output_specs)
    mismatches: list[Mismatch] = []
    if not members:
        return mismatches
    ndim = members[0].spec.mesh.ndim
    for m in range(ndim):
        mismatches.extend(_check_mesh_dim(binding, members, m))
    mismatches.extend(_check_shard_order(members, ndim))
    return mismatches


_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)


class CheckMemo:
    """:func:`check`'s verdicts by (binding, input specs, output specs).

    ``verdict(binding, in, out) == tuple(check(binding, in, out))`` for every argument (``check``
    reads nothing else). Keys compare bindings with ``==`` (frozen dataclasses: twins of a
    repeated layer bind to equal ones) and specs with ``DTensorSpec.__eq__`` (placements, mesh,
    shard order, tensor meta; its hash is cached on the spec). ``hits``/``misses`` count lookups.
    One memo lives for one ``find_sites`` call, so nothing outlives the optimizer it describes.

    A call whose every pair was answered before for the same objects (autoparallel's
    placement-option cache gives each copy of an op the same spec objects: an op's unlinked
    copies in every layer) is answered from the objects' ids in C loops, with no Python step per
    strategy; the memo keeps those objects alive, so an id is not reused while it stands.
    """

    __slots__ = ("_by_binding", "_by_objects", "hits", "misses")

    def __init__(self) -> None:
        self._by_binding: dict[Binding, dict[tuple[Any, Any], tuple[Mismatch, ...]]] = {}
        # binding -> (id(input_specs), id(output_specs)) -> (verdict, the two objects)
        self._by_objects: dict[Binding, dict[tuple[int, int], tuple[tuple[Mismatch, ...], Any, Any]]] = {}
        self.hits = 0
        self.misses = 0

    def verdicts(
        self, binding: Binding, strategies: Sequence[tuple[Sequence[DTensorSpec | None], Any]]
    ) -> tuple[tuple[Mismatch, ...], ...]:
        """The verdict of every ``(input_specs, output_specs)`` pair in ``strategies``."""
        same = self._by_objects.setdefault(binding, {})
        known = list(map(same.get, zip(map(id, map(_FIRST, strategies)), map(id, map(_SECOND, strategies)))))
        if None not in known:
            self.hits += len(known)
            return tuple(map(_FIRST, known))
        table = self._by_binding.setdefault(binding, {})
        out: list[tuple[Mismatch, ...]] = []
        for input_specs, output_specs in strategies:
            key = (tuple(input_specs), tuple(output_specs) if isinstance(output_specs, list) else output_specs)
            verdict = table.get(key)
            if verdict is None:
                verdict = table[key] = tuple(check(binding, input_specs, output_specs))
                self.misses += 1
            else:
                self.hits += 1
            same[(id(input_specs), id(output_specs))] = (verdict, input_specs, output_specs)
            out.append(verdict)
        return tuple(out)

    def verdict(
        self, binding: Binding, input_specs: Sequence[DTensorSpec | None], output_specs: Any
    ) -> tuple[Mismatch, ...]:
        """The verdict of one strategy (see :meth:`verdicts`)."""
        return self.verdicts(binding, ((input_specs, output_specs),))[0]

    def __len__(self) -> int:
        return sum(len(t) for t in self._by_binding.values())


def _check_mesh_dim(binding: Binding, members: list[_Member], m: int) -> list[Mismatch]:
    out: list[Mismatch] = []
    shards: dict[str, tuple[int, int | None]] = {}  # label -> (logical dim, split factor)
    partials: dict[str, str] = {}
    for mem in members:
        p = mem.spec.placements[m]
        d = _shard_dim(p)
        if d is not None:
            logical = mem.logical(d)
            if isinstance(logical, DimKind):
                who = f"index tensor {mem.label}" if mem.is_index else mem.label
                out.append(Mismatch(m, f"{who} is {fmt_placement(p)} on its {logical.value} dim {d}", (mem.label,)))
                continue
            shards[mem.label] = (logical, _split(p))
        elif isinstance(p, Partial):
            partials[mem.label] = p.reduce_op
    if out:
        return out
    input_partials = [mem.label for mem in members if not mem.is_output and mem.label in partials]
    if shards and input_partials:
        return [
            Mismatch(
                m,
                f"{', '.join(input_partials)} Partial while {', '.join(shards)} Shard on the same mesh dim",
                tuple(input_partials) + tuple(shards),
            )
        ]
    if shards:
        return _check_shards(members, shards, m)
    if input_partials:
        return _check_partial(binding, members, partials, m)
    # every input Replicate: so is every output, and a replicated value is also a valid
    # Partial(avg|max|min) (r(v, ..., v) = v), but not a Partial(sum|product)
    return [
        Mismatch(m, f"{mem.label} is P({partials[mem.label]}) but every input is Replicate: the replicated "
                    "result would be reduced once per rank", (mem.label,))
        for mem in members if mem.is_output and mem.label in partials and partials[mem.label] not in _IDEMPOTENT_OPS
    ]


def _check_shards(members: list[_Member], shards: dict[str, tuple[int, int | None]], m: int) -> list[Mismatch]:
    targets = set(shards.values())
    if len(targets) > 1:
        desc = ", ".join(
            f"{label}->logical dim {ld}" + (f" split {sf}" if sf else "") for label, (ld, sf) in shards.items()
        )
        return [Mismatch(m, f"members shard different logical dims ({desc})", tuple(shards))]
    ((logical, _sf),) = targets
    out: list[Mismatch] = []
    if not any(not mem.is_output and mem.label in shards for mem in members):
        return [Mismatch(m, f"{', '.join(shards)} shard logical dim {logical} but no input does", tuple(shards))]
    for mem in members:
        if mem.label in shards:
            continue
        real = mem.real_dim_for(logical)
        p = mem.spec.placements[m]
        if real is not None:
            out.append(
                Mismatch(
                    m,
                    f"{mem.label} is {fmt_placement(p)} but has logical dim {logical} (its dim {real}) that others shard",
                    (mem.label,),
                )
            )
        elif mem.is_output and not (isinstance(p, Partial) and p.reduce_op == Reduce.SUM.value):
            out.append(
                Mismatch(
                    m,
                    f"{mem.label} is {fmt_placement(p)} but the op sums over logical dim {logical}, which the "
                    "inputs shard: it must be P(sum)",
                    (mem.label,),
                )
            )
    return out


def _combo_matches(combo: PartialCombo, r: Reduce, inputs: list[_Member], partials: dict[str, str]) -> bool:
    if r not in combo.reduce:
        return False
    partial_inputs = [mem for mem in inputs if mem.label in partials]
    if any(mem.arg is None or mem.arg.name not in combo.args for mem in partial_inputs):
        return False
    if combo.take is Take.ONE:
        return len(partial_inputs) == 1
    if combo.take is Take.ANY:
        return bool(partial_inputs)
    # ALL: every listed argument is present as a tensor, and every element of it is Partial
    present = {mem.arg.name for mem in inputs if mem.arg is not None}
    if not set(combo.args) <= present:
        return False
    return all(mem.label in partials for mem in inputs if mem.arg is not None and mem.arg.name in combo.args)


def _check_partial(binding: Binding, members: list[_Member], partials: dict[str, str], m: int) -> list[Mismatch]:
    rule = binding.rule
    inputs = [mem for mem in members if not mem.is_output]
    outputs = [mem for mem in members if mem.is_output]
    labels = tuple(mem.label for mem in inputs if mem.label in partials)
    in_partial = list(labels)
    bad = [mem.label for mem in inputs if mem.label in partials and (mem.is_index or not mem.arg.partial)]  # type: ignore[union-attr]
    if bad:
        return [Mismatch(m, f"{', '.join(bad)} may never be Partial", tuple(bad))]
    if not binding.active_combos:
        if rule.partial_only_if is not None and rule.combos:
            why = f"{rule.partial_only_if.describe()} is required"
        elif rule.combos:
            why = "no Partial combination of the row applies to this call (" + "; ".join(
                c.describe() for c in rule.combos) + ")"
        else:
            why = "the op is not linear in its inputs"
        return [Mismatch(m, f"{', '.join(labels)} Partial but {why}", labels)]
    ops = {partials[label] for label in in_partial}
    if len(ops) > 1:
        return [Mismatch(m, f"Partial reduce ops {sorted(ops)} differ", labels)]
    (op,) = ops
    try:
        r = Reduce(op)
    except ValueError:
        return [Mismatch(m, f"Partial reduce op {op!r} is none of sum/avg/max/min/product", labels)]
    matching = [c for c in binding.active_combos if _combo_matches(c, r, inputs, partials)]
    allowed = "; ".join(c.describe() for c in binding.active_combos)
    if not matching:
        return [Mismatch(m, f"{', '.join(labels)} P({op}) is not a combination the row allows ({allowed})", labels)]
    best: list[Mismatch] | None = None
    for combo in matching:
        expected = combo.output_for(r)
        found: list[Mismatch] = []
        for mem in outputs:
            p = mem.spec.placements[m]
            if expected is None:  # Replicate, or what equals it: P(avg|max|min) of equal values
                if not (isinstance(p, Replicate) or (isinstance(p, Partial) and p.reduce_op in _IDEMPOTENT_OPS)):
                    found.append(Mismatch(m, f"{', '.join(labels)} P({op}) make {mem.label} Replicate, "
                                             f"but it is {fmt_placement(p)}", (mem.label,)))
            elif not (isinstance(p, Partial) and p.reduce_op == expected.value):
                found.append(Mismatch(m, f"{', '.join(labels)} P({op}) make {mem.label} P({expected.value}), "
                                         f"but it is {fmt_placement(p)}", (mem.label,)))
        if not found:
            return []
        if best is None:
            best = found
    return best or []


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


def _column_candidates(binding: Binding, out_spec: DTensorSpec, m: int,
                       current: Sequence[DTensorSpec | None]) -> list[dict[int, Placement]]:
    """Input placements on mesh dim ``m`` that could fit the output's placement there."""
    p = out_spec.placements[m]
    out_map = binding.out_dim_map
    candidates: list[dict[int, Placement]] = []

    def column(logical: int | None) -> dict[int, Placement]:
        col: dict[int, Placement] = {}
        for b in binding.args:
            real = None if logical is None else next((d for d, e in enumerate(b.dim_map) if e == logical), None)
            if real is None:
                col[b.spec_index] = Replicate()
            elif isinstance(p, StridedShard):
                col[b.spec_index] = StridedShard(real, split_factor=p.split_factor)
            else:
                col[b.spec_index] = Shard(real)
        return col

    d = _shard_dim(p)
    if d is not None:
        logical = out_map[d] if d < len(out_map) else DimKind.BROADCAST
        if isinstance(logical, DimKind):
            return []
        return [column(logical)]
    if isinstance(p, Partial):
        # What the strategy already has; its Partial inputs kept and the rest Replicate; then
        # every dim the op sums over, sharded by the inputs that have it. Only transitions into
        # Shard or Replicate are proposed, never into Partial.
        present = [b for b in binding.args if current[b.spec_index] is not None]
        candidates.append({b.spec_index: current[b.spec_index].placements[m] for b in present})  # type: ignore[union-attr]
        kept = {b.spec_index: current[b.spec_index].placements[m] for b in present}  # type: ignore[union-attr]
        candidates.append({i: q if isinstance(q, Partial) else Replicate() for i, q in kept.items()})
        if p.reduce_op == Reduce.SUM.value:
            summed = {e for b in binding.args for e in b.dim_map if isinstance(e, int)} - {
                e for e in out_map if isinstance(e, int)}
            candidates.extend(column(logical) for logical in sorted(summed))
        return candidates
    return [column(None)]


def repair_targets(
    binding: Binding, input_specs: Sequence[DTensorSpec | None], output_specs: Any
) -> dict[int, DTensorSpec] | None:
    """Input specs that would make this strategy co-sharded, anchored on its output specs.

    Returns ``{spec_index: target_spec}`` for the inputs that must change (possibly empty), or
    None when no redistribution of the inputs alone can make it co-sharded (e.g. the output
    shards a broadcast dim, or is Partial where the row forbids it).
    """
    from ..seam.dtensor import DTensorSpec

    out_spec = _output_spec(output_specs)
    if out_spec is None:
        return None
    ndim = out_spec.mesh.ndim
    new_specs = list(input_specs)
    placements: dict[int, list[Placement]] = {
        b.spec_index: list(input_specs[b.spec_index].placements) for b in binding.args
        if input_specs[b.spec_index] is not None
    }

    def rebuilt() -> list[DTensorSpec | None]:
        specs = list(input_specs)
        for i, pl in placements.items():
            spec = input_specs[i]
            if tuple(pl) != tuple(spec.placements):  # type: ignore[union-attr]
                specs[i] = DTensorSpec(spec.mesh, tuple(pl), tensor_meta=spec.tensor_meta)  # type: ignore[union-attr]
        return specs

    for m in range(ndim):
        chosen = False
        for col in _column_candidates(binding, out_spec, m, input_specs):
            saved = {i: pl[m] for i, pl in placements.items()}
            for i, p in col.items():
                if i in placements:
                    placements[i][m] = p
            if not [x for x in check(binding, rebuilt(), output_specs) if x.mesh_dim == m]:
                chosen = True
                break
            for i, p in saved.items():
                placements[i][m] = p
        if not chosen:
            return None
    new_specs = rebuilt()
    if check(binding, new_specs, output_specs):
        return None
    return {i: new_specs[i] for i in placements if new_specs[i] is not input_specs[i]}  # type: ignore[misc]
