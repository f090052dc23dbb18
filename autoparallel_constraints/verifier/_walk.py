"""The walk: every node of the parallel graph in order, each interpreted by its concern
(collectives, views, propagation) into an abstract value, and the outputs checked against the
contract.
"""

from __future__ import annotations

import itertools
import logging
import math
import operator
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.fx
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

from ..core._placements import fmt_spec
from ..core._tags import TAG
from ..errors import AuditError
from ..seam._memos import dtensor_memos
from ..seam.dtensor import sharding_propagator
from ..seam.tracing import OpOverload, tree_flatten, tree_map
from ._collectives import _Collectives
from ._decomposed import _Decomposed
from ._mesh import _group_names, _mesh_dims_of
from ._orders import _as_shard_order
from ._propagation import _Propagation
from ._regions import _InRegion, _Regions
from ._report import GraphViolation, VerifyReport
from ._values import (
    _CASTS,
    _DIVS,
    _FACTORY,
    _MAX_READINGS,
    _NEW_FACTORY,
    _PASS_THROUGH,
    _SCALAR,
    _SPLITS,
    _as_dtype,
    _Chunks,
    _concrete,
    _Const,
    _even_local_shape,
    _fetch_attr,
    _Fill,
    _Gathered,
    _Group,
    _is_spec,
    _is_tensor,
    _Mesh,
    _op_name,
    _reading_combos,
    _Readings,
    _returns_tensors,
    _same_layout,
    _scalar_value,
    _Stacked,
    _Summed,
    _Unknowable,
    _Unknown,
    _Violation,
    aten,
)
from ._views import _Views

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from ..seam.dtensor import DTensorSpec
    from ..table import Table


logger = logging.getLogger(__name__)

__all__ = ["verify_graph"]


def verify_graph(
    gm: torch.fx.GraphModule,
    mesh: DeviceMesh,
    inputs: Sequence[DTensorSpec | None],
    outputs: Sequence[tuple[str, DTensorSpec | None]],
    *,
    table: Table | None = None,
    regions: Mapping[str, Sequence[Any]] | None = None,
) -> VerifyReport:
    """Verify ``gm`` given its interface: one spec per placeholder, one (name, spec) per output.

    ``regions``: each ``local_map`` region (its joint node's name, which the apply step puts on
    the ops of its body as ``meta["custom"]["apc_region"]``) with the in and out placements its
    user declared and, optionally third, each output's global shape. A region's body runs on local
    shards, so DTensor's rules do not describe it: it is read by that declaration instead, and its
    ``Replicate`` claims checked by the mesh dims its values vary along (:mod:`._regions`)."""
    from ..seam.tracing import unset_fake_temporarily

    start = time.perf_counter()
    v = _Verifier(gm, mesh, inputs, outputs, table, regions)
    # Candidate global shapes that do not fit make FakeTensor's meta kernels raise, which it logs
    # as errors with a traceback each: expected refusals here, not the user's business.
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)
    try:
        with unset_fake_temporarily(), dtensor_memos():  # constants and mesh layouts are real tensors
            v.run()
    finally:
        fake_log.setLevel(level)
    report = VerifyReport(
        violations=tuple(v.violations),
        proven=dict(v.proven),
        unknown=dict(v.unknown),
        unknown_reasons=v.unknown_reasons,
        nodes=len(gm.graph.nodes),
        seconds=time.perf_counter() - start,
        outputs_checked=v.outputs_checked,
        unproven_outputs=tuple(v.unproven),
        table_notes=tuple(v.table_notes),
    )
    logger.info("apc verify: %s", report.verdict)
    return report


class _Verifier(_Regions, _Collectives, _Views, _Decomposed, _Propagation):
    def __init__(
        self,
        gm: torch.fx.GraphModule,
        mesh: DeviceMesh,
        inputs: Sequence[DTensorSpec | None],
        outputs: Sequence[tuple[str, DTensorSpec | None]],
        table: Table | None,
        regions: Mapping[str, Sequence[Any]] | None = None,
    ) -> None:
        self.gm = gm
        self.regions = dict(regions or {})
        self.varies: dict[torch.fx.Node, frozenset[int] | None] = {}  # region body value -> mesh dims it varies along
        self.mesh = mesh
        self.inputs = [_as_shard_order(s) for s in inputs]
        self.outputs = [(name, _as_shard_order(s)) for name, s in outputs]
        self.table = table
        self.values: dict[torch.fx.Node, Any] = {}
        self._local_shapes: dict[tuple[Any, ...], tuple[int, ...]] = {}
        self._computed: dict[tuple[Any, ...], tuple[tuple[Any, Exception | None], tuple[str, ...]]] = {}
        self.violations: list[GraphViolation] = []
        self.proven: Counter[str] = Counter()
        self.unknown: Counter[str] = Counter()
        self.unknown_reasons: dict[str, str] = {}
        self.outputs_checked = 0
        self.unproven: list[str] = []  # outputs whose placement could not be derived
        self.table_notes: list[str] = []  # table rows stricter than DTensor on a proven op
        # nodes whose readings come from a search cut at _MAX_READINGS combinations (theirs or an
        # input's): the reading the plan meant may be missing, so a mismatch there is unproven
        self.partial: set[torch.fx.Node] = set()
        self.sizes = tuple(int(s) for s in mesh.shape)
        self.coordinate = tuple(int(c) for c in (mesh.get_coordinate() or [0] * mesh.ndim))
        self.groups = _group_names(mesh)
        self.sym_coords: dict[Any, int] = {}  # unbacked symbol -> mesh dim
        self.traced_coords: dict[Any, int] = {}  # the trace's own symbol of a coordinate -> mesh dim
        self.propagator = sharding_propagator()

    # -- entry ---------------------------------------------------------------------------------

    def run(self) -> None:
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(self.inputs):
            raise AuditError(
                f"the parallel graph has {len(placeholders)} inputs, the contract {len(self.inputs)}: "
                "verify the graph built for this AutoParallel's plan"
            )
        for node, spec in zip(placeholders, self.inputs):
            self.values[node] = spec if spec is not None else _SCALAR
            if spec is not None:
                self._check_local(node, spec, "input")
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                self._check_outputs(node)
                continue
            try:
                region = self._region(node)
                value = self._interpret_readings(node) if region is None else self._region_value(node, region)
            except _Violation as v:
                self.violations.append(
                    GraphViolation(kind=v.kind, node=node.name, op=_op_name(node), reason=v.reason,
                                   inferred=v.inferred, expected=v.expected)
                )
                value = _Unknown(f"follows violation at {node.name}")
            except _Unknowable as exc:
                value = _Unknown(str(exc))
            except Exception as exc:  # noqa: BLE001 - an op we cannot interpret is an unknown, with why
                value = _Unknown(f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}" if str(exc) else type(exc).__name__)
            self.values[node] = value
            if any(a in self.partial for a in node.all_input_nodes):
                self.partial.add(node)
            if _is_tensor(node) or isinstance(value, (tuple, list)):
                self._count(node, value)
            elif isinstance(value, _Unknown) and not value.reason.startswith("depends on unknown"):
                self.unknown_reasons[node.name] = value.reason  # a non-tensor root cause (mesh, group, coordinate)

    def _readings(self, value: Any) -> tuple[Any, ...]:
        """The readings of an input that has several (none for an input that has one): a
        :class:`_Readings`, or a constant chunk of a static graph that more than one mesh dim can
        explain as this rank's shard (rank 0's coordinates on a square mesh are all 0): the chunk
        itself, for a cat or a reduce_scatter to reassemble, or the shard of each such mesh dim."""
        if isinstance(value, _Readings):
            # a chunk among them stands for its rank slices too, as a lone chunk does below: a
            # chunk of a chunk (RS(0) -> S(0)S(0) gathers, then chunks for dp, then for tp) is
            # read only through them
            expanded: list[Any] = []
            for v in value.values:
                for w in self._readings(v) or (v,):
                    if w not in expanded:
                        expanded.append(w)
            return tuple(expanded)
        if isinstance(value, _Chunks) and value.piece is not None:
            dims = self._slice_dims(value)
            if len(dims) > 1:
                return (value, *(self._with(value.spec, {d: Shard(value.dim)}, append_to=value.dim) for d in dims))
        return ()

    def _interpret_readings(self, node: torch.fx.Node) -> Any:
        """:meth:`_interpret`, once per combination of its inputs' readings (see :class:`_Readings`):
        the readings it accepts, or the first refusal when it accepts none."""
        readings = {a: self._readings(self.values.get(a)) for a in node.all_input_nodes}
        ambiguous = [a for a, r in readings.items() if r]
        if not ambiguous:
            return self._interpret(node)
        held = {a: self.values[a] for a in ambiguous}
        accepted: list[Any] = []
        refusal: Exception | None = None
        combos, total = _reading_combos([readings[a] for a in ambiguous])
        try:
            for combo in combos:
                self.values.update(zip(ambiguous, combo))
                try:
                    value = self._interpret(node)
                except _Violation as exc:
                    refusal = refusal or exc
                    continue
                except Exception as exc:  # noqa: BLE001 - a reading the op cannot take (shapes that do not fit)
                    refusal = refusal if isinstance(refusal, _Violation) else (refusal or exc)
                    continue
                leaves = value if isinstance(value, (tuple, list)) else (value,)
                if any(isinstance(v, _Unknown) for v in leaves):
                    refusal = refusal or _Unknowable(next(v.reason for v in leaves if isinstance(v, _Unknown)))
                else:
                    for v in value.values if isinstance(value, _Readings) else (value,):
                        if v not in accepted:
                            accepted.append(v)
        finally:
            self.values.update(held)
        if not accepted:
            if total > len(combos):  # the search was cut: nothing is proven wrong, nothing right either
                raise _Unknowable(f"none of the first {len(combos)} of {total} combinations of its inputs' "
                                  f"readings interpreted (the first refusal: {refusal})")
            raise refusal if refusal is not None else _Unknowable("no reading of the inputs interpreted")
        if total > len(combos):
            self.partial.add(node)
        if len(accepted) == 1:
            return accepted[0]
        if all(isinstance(v, (tuple, list)) for v in accepted):
            # a multi-output op: the readings per output (its getitems pick one each)
            per_output = [tuple(dict.fromkeys(w for v in vs for w in (v.values if isinstance(v, _Readings) else (v,))))
                          for vs in zip(*accepted)]
            return [vs[0] if len(vs) == 1 else _Readings(vs) for vs in per_output]
        return _Readings(tuple(accepted))

    def _count(self, node: torch.fx.Node, value: Any) -> None:
        op = _op_name(node)
        if isinstance(value, _InRegion):
            self.proven[f"local_map {value.region}"] += 1
            return
        leaves = value if isinstance(value, (tuple, list)) else (value,)
        if any(isinstance(v, _Unknown) for v in leaves):
            self.unknown[op] += 1
            why = next(v.reason for v in leaves if isinstance(v, _Unknown))
            if not why.startswith("depends on unknown") and not why.startswith("follows violation"):
                self.unknown_reasons[node.name] = why
        else:
            self.proven[op] += 1

    # -- one node ------------------------------------------------------------------------------

    def _interpret(self, node: torch.fx.Node) -> Any:
        if node.op == "get_attr":
            return self._get_attr(node)
        if node.op != "call_function":
            return _Unknown(f"{node.op} nodes are not interpreted")
        target = node.target
        args = tree_map(lambda a: self.values.get(a, _Unknown("undefined")) if isinstance(a, torch.fx.Node) else a,
                        node.args)
        kwargs = tree_map(lambda a: self.values.get(a, _Unknown("undefined")) if isinstance(a, torch.fx.Node) else a,
                          dict(node.kwargs))
        if not _is_tensor(node) and target is not operator.getitem and not _returns_tensors(node):
            return self._scalar(node, args)
        flat = tree_flatten((args, kwargs))[0]
        for a in flat:
            if isinstance(a, _Unknown):
                return _Unknown(f"depends on unknown ({a.reason})" if not a.reason.startswith("depends") else a.reason)
        if target is operator.getitem:
            return self._getitem(node, args)
        if target not in _PASS_THROUGH and target not in _SPLITS:
            unwrap = lambda a: a.spec if isinstance(a, _Gathered) else a
            args = tree_map(unwrap, args, is_leaf=lambda a: isinstance(a, _Gathered))
            kwargs = tree_map(unwrap, kwargs, is_leaf=lambda a: isinstance(a, _Gathered))
            flat = tree_flatten((args, kwargs))[0]
        consts = [a for a in flat if isinstance(a, _Const)]
        if consts and not any(_is_spec(a) or isinstance(a, _Fill) for a in flat) and isinstance(target, OpOverload):
            # constants only (e.g. the mesh layout a coordinate is read from): evaluate them
            real = tree_map(lambda a: a.tensor if isinstance(a, _Const) else a, (args, kwargs),
                            is_leaf=lambda a: isinstance(a, _Const))
            result = target(*real[0], **real[1])
            return _Const(result) if isinstance(result, torch.Tensor) else _SCALAR
        name = getattr(target, "__name__", str(target))
        if target in _PASS_THROUGH:
            return args[0]
        summed = [a for a in flat if isinstance(a, _Summed)]
        if summed or (target in _DIVS and (node.meta.get("custom") or {}).get(TAG)):
            return self._unscale(node, args, summed)
        if target in _CASTS and _is_spec(args[0]):
            return _as_dtype(args[0], node.meta["val"].dtype)
        ns = getattr(target, "namespace", "")
        if ns == "_c10d_functional" or (ns == "_dtensor" and "alltoall" in name):
            return self._collective(node, args)
        if target in _FACTORY or target in _NEW_FACTORY:
            return self._factory(node, args, kwargs)
        if target is aten.slice.Tensor:
            sliced = self._stacked_slice(args)
            if sliced is None:
                sliced = self._rank_slice(node, args)
            if sliced is not None:
                return sliced
        if target in _SPLITS:
            return self._split(node, args)
        if target is aten.cat.default:
            merged = self._cat(node, args)
            if merged is not None:
                return merged
        return self._compute_once(node, args, kwargs)

    def _unscale(self, node: torch.fx.Node, args: Any, summed: list[Any]) -> Any:
        """A sum over mesh dims that held a replicated or ``Partial("avg")`` value is ``scale``
        times it (:class:`_Summed`): only a division by exactly ``scale`` gives it back. A division
        inside a plugin redistribution (``meta["custom"]`` tag) is only ever that: without the sum
        before it, it divides the value (e.g. the sum was dropped)."""
        if target_is_div := node.target in _DIVS:
            divisor = args[1] if len(args) > 1 else None
            if len(summed) == 1 and args[0] is summed[0] and isinstance(divisor, (int, float)) \
                    and not isinstance(divisor, bool) and divisor == summed[0].scale:
                return summed[0].spec
        if not summed:
            partitions = self._partitions(args[0], args[1] if len(args) > 1 else None)
            if partitions:
                return partitions[0] if len(partitions) == 1 else _Readings(tuple(partitions))
            raise _Violation(
                "illegal_collective",
                f"{_op_name(node)} inside a plugin redistribution divides a value neither a sum-reduction "
                "scaled nor a partition into Partial(sum) explains",
                inferred=fmt_spec(args[0]) if _is_spec(args[0]) else type(args[0]).__name__,
                expected="the sum-reduction it scales back, or a replicated value split over mesh dims of that size",
            )
        x = summed[0]
        raise _Violation(
            "illegal_collective",
            f"{_op_name(node)} uses {x.node}, a sum over mesh dims {list(x.dims)} where the value was replicated "
            f"or Partial(avg): {x.scale} times the value" + ("" if target_is_div else f", never divided by {x.scale}"),
            inferred=f"{x.scale} x {fmt_spec(x.spec)}", expected=f"{fmt_spec(x.spec)} (divided by {x.scale})",
        )

    def _partitions(self, x: Any, divisor: Any) -> list[Any]:
        """``Replicate -> Partial("sum")`` as DTensor computes it (``Partial._partition_value``:
        ``v / n``): the readings of ``x / divisor`` as ``x`` Partial(sum) over a set of mesh dims
        where ``x`` is replicated and whose sizes multiply to ``divisor``."""
        if not _is_spec(x) or not isinstance(divisor, int) or isinstance(divisor, bool) or divisor < 2:
            return []
        free = [d for d, p in enumerate(x.placements) if isinstance(p, Replicate)]
        out = []
        for k in range(1, len(free) + 1):
            for dims in itertools.combinations(free, k):
                if math.prod(self.sizes[d] for d in dims) == divisor:
                    out.append(self._with(x, {d: Partial("sum") for d in dims}))
        return out

    def _get_attr(self, node: torch.fx.Node) -> Any:
        obj = _fetch_attr(self.gm, str(node.target))
        if isinstance(obj, torch.Tensor):
            return _Const(obj)
        dims = _mesh_dims_of(obj, self.mesh)
        if dims is not None:
            return _Mesh(dims)
        return _SCALAR

    def _scalar(self, node: torch.fx.Node, args: Any) -> Any:
        target = node.target
        if getattr(target, "__name__", "") == "mesh_get_process_group" or str(target).endswith("mesh_get_process_group.default"):
            mesh, index = args[0], args[1]
            if isinstance(mesh, _Mesh):
                return _Group(mesh.dims[index])
            return _Unknown("process group of an unknown mesh")
        if str(target).endswith("_get_flattened_submesh.default"):
            mesh, dims = args[0], args[1]
            if isinstance(mesh, _Mesh):
                return _Mesh((tuple(m for d in dims for m in mesh.dims[d]),))
            return _Unknown("flattened submesh of an unknown mesh")
        if str(target).endswith("_runtime_compute_coordinate_on_dim.default"):
            layout, index = args[0], args[1]
            dims = layout.mesh_dims(self.mesh) if isinstance(layout, _Const) else None
            if dims is None:
                return _Unknown("coordinate on a mesh layout the verifier cannot read")
            if len(dims[index]) != 1:
                return _Unknown("coordinate on a flattened mesh dim")
            (mesh_dim,) = dims[index]
            import sympy

            # the graph's own arithmetic on it is replayed with this symbol (never the traced vals)
            symbol = sympy.Symbol(f"coord{mesh_dim}_{node.name}", integer=True, nonnegative=True)
            self.sym_coords[symbol] = mesh_dim
            traced = node.meta.get("val")
            if isinstance(traced, torch.SymInt) and isinstance(traced.node.expr, sympy.Symbol):
                self.traced_coords[traced.node.expr] = mesh_dim  # read back in traced sizes (_regions)
            return symbol
        if target is aten.sym_size.int and len(args) == 2 and isinstance(args[1], int):
            size = self._even_local_size(args[0], args[1])
            if size is not None:
                return size
        return _scalar_value(node, args)

    def _even_local_size(self, x: Any, dim: int) -> int | None:
        """This rank's size of ``x`` on ``dim`` where every rank has the same: a spec that splits
        evenly, or the stack an all_gather of one makes (group size times the shard on dim 0).
        torch traces such sizes as unbacked symbols when a rank slice made them (a gather then
        cut back into pieces by ``size // group``); an uneven split is left to the traced value."""
        spec = x.spec if isinstance(x, _Stacked) and x.piece is None else x
        if not _is_spec(spec) or spec.tensor_meta is None:
            return None
        shape = _even_local_shape(tuple(spec.tensor_meta.shape), tuple(spec.placements), self.sizes)
        if shape is None or not -len(shape) <= dim < len(shape):
            return None
        size = shape[dim]
        if isinstance(x, _Stacked) and dim % len(shape) == 0:
            size *= math.prod(self.sizes[d] for d in x.dims)
        return size if isinstance(size, int) else None

    def _getitem(self, node: torch.fx.Node, args: Any) -> Any:
        base, index = args
        if isinstance(base, (list, tuple)):
            return base[index]
        if isinstance(base, _Stacked):
            return _Stacked(base.spec, base.dims, piece=index)
        return _Unknown(f"getitem of {type(base).__name__}")

    # -- factories and compute -----------------------------------------------------------------

    def _factory(self, node: torch.fx.Node, args: Any, kwargs: Any) -> Any:
        val = node.meta.get("val")
        fill = _FACTORY.get(node.target, _NEW_FACTORY.get(node.target))
        if isinstance(fill, int) and not isinstance(fill, bool) and node.target in (aten.full.default, aten.new_full.default):
            fill = args[fill] if len(args) > fill else kwargs.get("fill_value")
            fill = float(fill) if isinstance(fill, (int, float)) else None
        return _Fill(_concrete(val.shape), fill, val.dtype)

    def _check_outputs(self, node: torch.fx.Node) -> None:
        flat = tree_flatten(node.args[0])[0] if node.args else []
        values = [self.values.get(a, _SCALAR) if isinstance(a, torch.fx.Node) else None for a in flat]
        outs = [o for o in self.outputs]
        if len(values) != len(outs):
            self.violations.append(GraphViolation(
                kind="output_mismatch", node="output", op="output",
                reason=f"the graph returns {len(values)} values, the contract has {len(outs)}",
            ))
            return
        for arg, value, (name, expected) in zip(flat, values, outs):
            if expected is None or value is None:
                continue
            readings = self._readings(value)
            if readings:  # the reading the contract names, if any; else the first, to report
                # A constant chunk among the readings is the tracing rank's shard of each mesh dim
                # that can explain it: read as those specs too. Without that, a static graph on a
                # square mesh whose last step is such a chunk (torchtitan's Llama3 gradients on
                # 2x2, RS(1) -> S(0)S(1)) was judged by its first reading and refused.
                specs = [s for v in readings for s in self._reading_specs(v)]
                fits = [v for v in specs if _same_layout(v, expected)
                        and tuple(v.tensor_meta.shape) == tuple(expected.tensor_meta.shape)]
                value = (fits or specs or list(readings))[0]
            self.outputs_checked += 1
            if isinstance(value, _Gathered):
                value = value.spec
            if isinstance(value, _Summed):
                self.violations.append(GraphViolation(
                    kind="illegal_collective", node=value.node, op=value.op,
                    reason=f"{value.op} sums over mesh dims {list(value.dims)} a tensor that is "
                           f"{fmt_spec(value.source)} there: {value.scale} times its value reaches {name}",
                    inferred=f"{value.scale} x {fmt_spec(value.spec)}", expected=fmt_spec(expected),
                ))
                continue
            if isinstance(value, _Chunks) and value.piece is not None:
                value = self._chunk_as_rank_slice(value)
            if isinstance(value, _Unknown) or value is _SCALAR:
                self.unproven.append(f"{name} ({getattr(arg, 'name', arg)}): {getattr(value, 'reason', 'no placement')}")
                continue
            if isinstance(value, _Fill):
                if value.value != 0.0 and any(isinstance(p, Partial) for p in expected.placements):
                    self._output_violation(arg, name, "a fill", expected)
                continue
            if not _is_spec(value) or not _same_layout(value, expected):
                if arg in self.partial:
                    self.unproven.append(
                        f"{name} ({getattr(arg, 'name', arg)}): read as "
                        f"{fmt_spec(value) if _is_spec(value) else type(value).__name__}, the contract says "
                        f"{fmt_spec(expected)}, but a search of its inputs' readings was cut at "
                        f"{_MAX_READINGS} combinations"
                    )
                    continue
                self._output_violation(arg, name, fmt_spec(value) if _is_spec(value) else type(value).__name__, expected)
                continue
            got_shape = tuple(value.tensor_meta.shape) if value.tensor_meta is not None else None
            want_shape = tuple(expected.tensor_meta.shape) if expected.tensor_meta is not None else None
            if got_shape is not None and want_shape is not None and got_shape != want_shape:
                self.violations.append(GraphViolation(
                    kind="output_mismatch", node=getattr(arg, "name", str(arg)), op=f"output {name}",
                    reason=f"{name} leaves the graph with global shape {list(got_shape)}, the contract says {list(want_shape)}",
                    inferred=f"{fmt_spec(value)} {list(got_shape)}", expected=f"{fmt_spec(expected)} {list(want_shape)}",
                ))

    def _reading_specs(self, value: Any) -> list[Any]:
        """The specs one reading of an output stands for: itself, or for a constant chunk the
        tracing rank's shard on each mesh dim that can explain it."""
        if _is_spec(value):
            return [value]
        if isinstance(value, _Chunks) and value.piece is not None:
            return [self._with(value.spec, {d: Shard(value.dim)}, append_to=value.dim) for d in self._slice_dims(value)]
        return []

    def _output_violation(self, arg: Any, name: str, inferred: str, expected: Any) -> None:
        self.violations.append(GraphViolation(
            kind="output_mismatch", node=getattr(arg, "name", str(arg)), op=f"output {name}",
            reason=f"{name} leaves the graph as {inferred}, the contract says {fmt_spec(expected)}",
            inferred=inferred, expected=fmt_spec(expected),
        ))
