"""The apply step: planned redistributions become real, named nodes; every edge is recorded.

autoparallel lowers the joint graph with ``ApplyShardingInterpreter`` inside
``AutoParallel._apply_placement_common``, which both ``apply_placement`` and numerics harnesses
call. The plugin wraps that method (so both paths carry it) and does three things around it:

1. **Materialize** (an FX pass on ``autop.gm``, undone afterwards): for every planned
   redistribution ``σ -> τ`` of a table op's input, insert a node calling :func:`apc_redistribute`
   between the producer and the op. The interpreter first delivers the producer's output to ``σ``
   (autoparallel's own planned edge), then the node computes ``σ -> τ`` with DTensor's
   ``redistribute_local_tensor`` — Partial stays Partial, shard order and uneven shards are
   DTensor's — and the op's strategy is given ``τ`` for that input so nothing else moves. Every
   traced op of the node carries ``meta["custom"]["apc_constraint"]`` in the parallel graph and
   the node's final op is renamed after the constraint (``apc_explicit_redistribute_000``).
   Inside an activation-checkpointed region the node carries the op's checkpoint tags
   (:data:`REGION_META_KEYS`), so the partitioner saves or recomputes it with the region.
2. **Record** what the interpreter really executes on every edge: the planned source and target
   specs and the target it actually redistributed to (at the pin, Partial targets are turned
   into Replicate: upstream PR #517). The audit compares these with the plan.
3. **Tag** table ops so the audit can find them in the parallel graph and read their local shapes.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import logging
import math
import operator
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx.traceback as fx_traceback

from ..core._tags import REGION, TAG, is_local_map_region
from ..plan._sizes import SizeCoupling, find_size_couplings, is_dynamic, size_mismatches
from ..plan._state import PlannedRedistribute, get_state
from ..seam import autop as upstream
from ..seam._apply import ApplyHandlers
from ..seam._handlers import provide
from ..seam.dtensor import DTensorSpec, OpSpec, redistribute_local_tensor
from ..seam.tracing import last_node, nodes_after, rename_node, tree_flatten
from ..table import default_table

logger = logging.getLogger(__name__)

__all__ = ["ApplyRecord", "EdgeRecord", "PlannedRedistribute", "apc_redistribute"]

NODE_TAG = "apc_node"  # meta["custom"] key: the joint-graph node a parallel-graph node came from
MATERIALIZED_PREFIX = "all."  # constraint name of a materialize="all" node: all.redistribute_000
OP_TAG = "apc_op"  # meta["custom"] key: that node's op family (see op_family)
# What a plugin node takes from the op it feeds besides its trace: the activation-checkpointing
# tags torch's checkpoint tracing puts on every op of a region (the policy, the region's id) and
# the forward/backward tag. The interpreter copies them from the node it runs onto every op it
# traces, so autoparallel's own redistributions into a region op carry them; an untagged plugin
# node would be an op outside the region to the partitioner, which saves such a node for backward
# (a collective, or an input of a recomputed op) instead of recomputing it with the region.
REGION_META_KEYS = ("recompute", "ac_graph_id", "partitioner_tag")


def op_family(target: Any) -> str | None:
    """``index_put`` for index_put/index_put_/_unsafe_index_put: one computation, several spellings
    (the lowering may turn one into another)."""
    packet = getattr(target, "overloadpacket", None)
    if packet is None:
        return None
    return packet.__name__.strip("_").removeprefix("unsafe_")


def apc_redistribute(local: torch.Tensor, source: DTensorSpec, target: DTensorSpec) -> torch.Tensor:
    """Move a local shard from ``source`` to ``target`` placements with DTensor's own machinery."""
    if source.placements == target.placements and source.shard_order == target.shard_order:
        return local
    return redistribute_local_tensor(local, source, target)


@dataclass(frozen=True, kw_only=True, slots=True)
class EdgeRecord:
    """What the interpreter did on one edge (producer -> consumer argument)."""

    consumer: str
    producer: str
    arg_index: int
    planned_source: DTensorSpec
    planned_target: DTensorSpec
    executed_target: DTensorSpec  # the spec the graph really redistributed to
    local_shape: tuple[int, ...] | None  # rank 0's local shape after redistribution


@dataclass(kw_only=True)
class ApplyRecord:
    """Everything recorded during one ``_apply_placement_common`` call."""

    placement: dict[torch.fx.Node, Any] = field(default_factory=dict)  # the plan as given
    effective: dict[torch.fx.Node, Any] = field(default_factory=dict)  # plan + plugin repairs
    edges: list[EdgeRecord] = field(default_factory=list)
    redistributes: list[PlannedRedistribute] = field(default_factory=list)
    materialize_all: bool = False
    materialized: list[PlannedRedistribute] = field(default_factory=list)  # materialize="all" edges
    parallel_gm: torch.fx.GraphModule | None = None
    # read before the apply runs: its tracing may specialize the graph's symbolic sizes
    size_couplings: list[SizeCoupling] = field(default_factory=list)
    verification: Any = None  # the verifier's VerifyReport, when the plugin ran it after apply


_RECORD: contextvars.ContextVar[ApplyRecord | None] = contextvars.ContextVar("apc_apply_record", default=None)


# ---------------------------------------------------------------------------------------------
# FX pass: insert the planned redistributions into the joint graph (temporarily)


def _input_node_positions(node: torch.fx.Node, placement: dict[torch.fx.Node, Any]) -> list[tuple[int, int | None]]:
    """(arg position, list element) of each input that owns an input_specs slot, in order."""
    out: list[tuple[int, int | None]] = []
    for pos, a in enumerate(node.args):
        if isinstance(a, (list, tuple)):
            out.extend((pos, k) for k, e in enumerate(a) if isinstance(e, torch.fx.Node) and e in placement)
        elif isinstance(a, torch.fx.Node) and a in placement:
            out.append((pos, None))
    return out


def _replace_arg(node: torch.fx.Node, where: tuple[int, int | None], new: torch.fx.Node) -> None:
    args = list(node.args)
    pos, k = where
    if k is None:
        args[pos] = new
    else:
        seq = list(args[pos])
        seq[k] = new
        args[pos] = type(node.args[pos])(seq)
    node.args = tuple(args)


@contextlib.contextmanager
def materialize(
    gm: torch.fx.GraphModule, placement: dict[torch.fx.Node, Any], planned: Sequence[PlannedRedistribute]
) -> Iterator[dict[torch.fx.Node, Any]]:
    """Insert one ``apc_redistribute`` node per planned redistribution; yield the effective plan.

    The graph and the caller's placement dict are restored on exit, so ``autop.gm`` stays the
    traced joint graph the plan refers to.
    """
    effective = dict(placement)
    inserted: list[tuple[torch.fx.Node, torch.fx.Node, tuple[int, int | None], torch.fx.Node]] = []
    by_name = {n.name: n for n in gm.graph.nodes}
    try:
        for plan in planned:
            node = by_name[plan.node]
            where = _input_node_positions(node, placement)[plan.spec_index]
            pos, k = where
            producer = node.args[pos] if k is None else node.args[pos][k]
            with gm.graph.inserting_before(node):
                new = gm.graph.call_function(apc_redistribute, (producer, plan.source, plan.target))
            new.meta["val"] = producer.meta.get("val")
            for key in ("stack_trace", "nn_module_stack", "seq_nr", *REGION_META_KEYS):
                if key in node.meta:
                    new.meta[key] = node.meta[key]
            new.meta["custom"] = {**node.meta.get("custom", {}), TAG: plan.constraint, NODE_TAG: plan.node}
            _replace_arg(node, where, new)
            inserted.append((node, producer, where, new))
            effective[new] = OpSpec(output_specs=plan.target, input_specs=[plan.source], redistribute_cost=[[0.0]])
            chosen = effective[node]
            input_specs = list(chosen.input_specs)
            input_specs[plan.spec_index] = plan.target
            effective[node] = OpSpec(
                output_specs=chosen.output_specs,
                input_specs=input_specs,
                redistribute_cost=chosen.redistribute_cost,
            )
        yield effective
    finally:
        for node, producer, where, new in reversed(inserted):
            _replace_arg(node, where, producer)
            gm.graph.erase_node(new)


@contextlib.contextmanager
def tag_nodes(gm: torch.fx.GraphModule, targets: set[Any]) -> Iterator[None]:
    """Put ``meta["custom"][NODE_TAG] = node.name`` on nodes with these targets while active."""
    tagged: list[tuple[torch.fx.Node, Any]] = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in targets:
            previous = node.meta.get("custom")
            node.meta["custom"] = {**(previous or {}), NODE_TAG: node.name, OP_TAG: op_family(node.target)}
            tagged.append((node, previous))
    try:
        yield
    finally:
        for node, previous in tagged:
            if previous is None:
                node.meta.pop("custom", None)
            else:
                node.meta["custom"] = previous


def _traced_graph() -> torch.fx.Graph | None:
    """The graph make_fx is tracing into right now (None outside a trace)."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    mode = get_proxy_mode()
    return None if mode is None else mode.tracer.graph


_REDISTRIBUTED: contextvars.ContextVar[list[torch.fx.Node] | None] = contextvars.ContextVar(
    "apc_redistributed", default=None
)


def _run_node(call: Any, interp: Any, n: torch.fx.Node) -> Any:
    """Tag the ops a local_map region's body traces into the parallel graph with
    ``meta["custom"][REGION] = <its joint node>`` (the redistributions into its inputs excluded), so
    the verifier can read the region by the placements its user declared. The body runs in a
    nested interpreter that sets each body node's own meta, so the tag cannot ride on the current
    meta as the plugin's redistribution tags do: the nodes are found by position instead."""
    graph = _traced_graph() if is_local_map_region(n) else None
    if graph is None:
        return call(interp, n)
    last = last_node(graph)
    redistributed: list[torch.fx.Node] = []
    token = _REDISTRIBUTED.set(redistributed)
    try:
        result = call(interp, n)
    finally:
        _REDISTRIBUTED.reset(token)
    skip = set(redistributed)
    for node in list(nodes_after(graph, last)):
        if node not in skip and node.op == "call_function":
            node.meta["custom"] = {**(node.meta.get("custom") or {}), REGION: n.name}
    return result


def name_redistribute_nodes(
    parallel_gm: torch.fx.GraphModule, planned: Sequence[PlannedRedistribute]
) -> list[PlannedRedistribute]:
    """Rename the last parallel-graph op of each plugin redistribution after its constraint."""
    by_constraint: dict[str, list[torch.fx.Node]] = {}
    for node in parallel_gm.graph.nodes:
        tag = (node.meta.get("custom") or {}).get(TAG)
        if tag is not None and node.op == "call_function":
            by_constraint.setdefault(tag, []).append(node)
    named: list[PlannedRedistribute] = []
    seen: dict[str, int] = {}
    for plan in planned:
        nodes = by_constraint.get(plan.constraint, [])
        # several twins share one constraint: each gets its own trailing node, in graph order
        tails = [n for n in nodes if not any((u.meta.get("custom") or {}).get(TAG) == plan.constraint for u in n.users)]
        i = seen.get(plan.constraint, 0)
        seen[plan.constraint] = i + 1
        parallel_name = None
        if i < len(tails):
            tail = tails[i]
            stem = "apc_" + plan.constraint.replace(".", "_")
            rename_node(tail, stem if i == 0 else f"{stem}_{i}")
            parallel_name = tail.name
        named.append(
            PlannedRedistribute(
                node=plan.node,
                op=plan.op,
                arg=plan.arg,
                spec_index=plan.spec_index,
                source=plan.source,
                target=plan.target,
                constraint=plan.constraint,
                cost=plan.cost,
                parallel_node=parallel_name,
            )
        )
    parallel_gm.recompile()
    return named


# ---------------------------------------------------------------------------------------------
# Recording the interpreter's edges


def _redistribute_tensor(call: Any, interp: Any, arg: Any, curr_spec: Any, tgt_spec: Any, node: torch.fx.Node) -> Any:
    collected = _REDISTRIBUTED.get()
    graph = _traced_graph() if collected is not None else None
    if graph is None:
        return _redistribute(call, interp, arg, curr_spec, tgt_spec, node)
    last = last_node(graph)
    out = _redistribute(call, interp, arg, curr_spec, tgt_spec, node)
    collected.extend(nodes_after(graph, last))  # a redistribution into a region is not in it
    return out


def _redistribute(call: Any, interp: Any, arg: Any, curr_spec: Any, tgt_spec: Any, node: torch.fx.Node) -> Any:
    record = _RECORD.get()
    if record is None:
        return call(interp, arg, curr_spec, tgt_spec, node)
    index, producer = _edge_position(record, interp, node, tgt_spec)
    if record.materialize_all and node.target is not apc_redistribute:
        out, executed_target = _explicit_edge(record, interp, arg, curr_spec, tgt_spec, node, index)
    else:
        executed: list[Any] = []
        token = _EXECUTED.set(executed)
        try:
            out = call(interp, arg, curr_spec, tgt_spec, node)
        finally:
            _EXECUTED.reset(token)
        executed_target = executed[-1] if executed else curr_spec
    shape = tuple(_same_on_every_rank(d) for d in out.shape) if isinstance(out, torch.Tensor) else None
    record.edges.append(
        EdgeRecord(
            consumer=node.name,
            producer=producer,
            arg_index=index,
            planned_source=curr_spec,
            planned_target=tgt_spec,
            executed_target=executed_target,
            local_shape=shape,
        )
    )
    return out


def _same_on_every_rank(size: Any, most: int = 4096) -> int:
    """A traced local size as an int, or -1 where it is symbolic and not one value for every value
    of its symbols (at most ``most`` combinations of finite ranges).

    torch 2.15 traces an even shard's size as ``Min(n, c*(k + 1)) - Min(n, c*k)`` of the unbacked
    rank coordinate ``k``: ``c`` on every rank, but left unsimplified (2.13 traced ``c``)."""
    if isinstance(size, int):
        return size
    node = getattr(size, "node", None)
    expr = getattr(node, "expr", None)
    if expr is None:
        return -1
    symbols = sorted(expr.free_symbols, key=str)
    values: list[range] = []
    for symbol in symbols:
        bounds = node.shape_env.var_to_range.get(symbol)
        try:
            values.append(range(int(bounds.lower), int(bounds.upper) + 1))
        except (AttributeError, TypeError, ValueError, OverflowError):  # no range, or not finite
            return -1
    if not symbols or math.prod(len(v) for v in values) > most:
        return -1
    seen = {expr.subs(dict(zip(symbols, point))) for point in itertools.product(*values)}
    if len(seen) != 1:
        return -1
    (value,) = seen
    return int(value) if value.is_integer else -1


_EXECUTED: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar("apc_executed", default=None)


def _ordered_redistribute(call: Any, arg: Any, curr_spec: Any, tgt_spec: Any, *args: Any, **kwargs: Any) -> Any:
    sink = _EXECUTED.get()
    if sink is not None:
        sink.append(tgt_spec)
    return call(arg, curr_spec, tgt_spec, *args, **kwargs)


def _edge_position(record: ApplyRecord, interp: Any, node: torch.fx.Node, tgt_spec: Any) -> tuple[int, str]:
    """(input_specs index, producer name) of the edge the interpreter is redistributing."""
    placement = interp.sharding_placement
    inputs = [x for x in tree_flatten(node.args)[0] if isinstance(x, torch.fx.Node) and x in placement]
    index = 0
    if node.target is not operator.getitem:
        specs = list(placement[node].input_specs)
        # the same spec object may serve several args: take the first not yet recorded
        done = {e.arg_index for e in record.edges if e.consumer == node.name}
        index = next((i for i, s in enumerate(specs) if s is tgt_spec and i not in done), -1)
    producer = inputs[index].name if 0 <= index < len(inputs) else "?"
    return index, producer


@contextlib.contextmanager
def _tagged_meta(name: str) -> Iterator[None]:
    """Ops traced while active carry ``meta["custom"][TAG] = name`` in the parallel graph.

    The interpreter runs each joint node under ``fx.traceback.set_current_meta`` (a copy of the
    node's meta) and ``preserve_node_meta`` copies ``custom`` onto every traced node.
    """
    meta = fx_traceback.get_current_meta()
    previous = meta.get("custom")
    meta["custom"] = {**(previous or {}), TAG: name}
    try:
        yield
    finally:
        if previous is None:
            meta.pop("custom", None)
        else:
            meta["custom"] = previous


def _explicit_edge(
    record: ApplyRecord, interp: Any, arg: Any, curr_spec: Any, tgt_spec: Any, node: torch.fx.Node, index: int
) -> tuple[Any, Any]:
    """materialize="all": the planned transition itself, with DTensor's redistribute.

    Shard orders are autoparallel's (its parameter/gradient order optimization decides physical
    layouts); Partial targets stay Partial, unlike the interpreter at the pin (PR #517).
    """
    from autoparallel.cost_models.collective_runtime_estimation import estimate_strategy_comms_cost

    curr_order, tgt_order = upstream.shard_orders(interp, node, curr_spec, tgt_spec)
    if curr_spec.placements == tgt_spec.placements and curr_order == tgt_order:
        return arg, tgt_spec
    source = DTensorSpec(curr_spec.mesh, curr_spec.placements, tensor_meta=curr_spec.tensor_meta, shard_order=curr_order)
    target = DTensorSpec(tgt_spec.mesh, tgt_spec.placements, tensor_meta=tgt_spec.tensor_meta, shard_order=tgt_order)
    name = f"{MATERIALIZED_PREFIX}redistribute_{len(record.materialized):03d}"
    with _tagged_meta(name):
        out = apc_redistribute(arg, source, target)  # the one function every plugin node runs
    record.materialized.append(
        PlannedRedistribute(
            node=node.name,
            op=str(node.target),
            arg=f"arg{index}",
            spec_index=index,
            source=curr_spec,
            target=tgt_spec,
            constraint=name,
            cost=float(estimate_strategy_comms_cost(curr_spec, tgt_spec)),
        )
    )
    return out, tgt_spec


# ---------------------------------------------------------------------------------------------
# The wrapper around AutoParallel._apply_placement_common


def _note_broken_sizes(exc: BaseException, record: ApplyRecord, mesh_shape: tuple[int, ...], *, plugin_sizes: bool) -> None:
    """Tell why an apply that raised most likely did: the size couplings its plan breaks.

    autoparallel's apply localizes shape arguments by rule (``plan/_sizes.py``); a plan that breaks
    one builds tensors of the wrong local size, and the apply fails far from the cause (a broadcast
    or view error, #348's class). The note names the couplings, so the error points at the plan.
    """
    spec_of = lambda n: record.placement[n].output_specs if n in record.placement else None  # noqa: E731
    try:
        broken = size_mismatches(record.size_couplings, spec_of, mesh_shape)
    except Exception:  # noqa: BLE001 - a note must never replace the error it explains
        logger.debug("size check of a failed apply failed", exc_info=True)
        return
    if not broken:
        return
    shown = "; ".join(why for _, why in broken[:3]) + (f"; and {len(broken) - 3} more" if len(broken) > 3 else "")
    advice = ("" if plugin_sizes else
              " autop.add_op_constraints() (sizes=True, the default) keeps plans out of them.")
    exc.add_note(f"autoparallel_constraints: the plan breaks {len(broken)} size coupling(s) autoparallel's apply "
                 f"localizes by rule, the likely cause: {shown}.{advice}")
    logger.warning("apply failed on a plan that breaks %d size coupling(s)", len(broken))


def _apply_placement_common(call: Any, autop: Any, sharding_placement: dict[torch.fx.Node, Any]) -> Any:
    state = get_state(autop)
    record = ApplyRecord(
        placement=dict(sharding_placement),
        materialize_all=state is not None and state.materialize == "all",
    )
    record.size_couplings = find_size_couplings(
        autop.gm.graph, lambda n: n in sharding_placement, tuple(autop.mesh.shape), dynamic=is_dynamic(autop.gm)
    )
    planned = state.planned_redistributes(sharding_placement) if state is not None else []
    table_ops = {row.op for row in (state.table if state is not None else default_table())}
    token = _RECORD.set(record)
    try:
        with tag_nodes(autop.gm, table_ops), materialize(autop.gm, sharding_placement, planned) as effective:
            record.effective = effective
            result = call(autop, effective)
    except Exception as exc:
        _note_broken_sizes(exc, record, tuple(autop.mesh.shape), plugin_sizes=bool(state and state.added.size_couplings))
        raise
    finally:
        _RECORD.reset(token)
    record.parallel_gm = autop.parallel_gm
    record.redistributes = name_redistribute_nodes(autop.parallel_gm, [*planned, *record.materialized])
    upstream.put(autop, "apply_record", record)
    for plan in record.redistributes:
        logger.info("apc: materialized %s", plan.describe())
    if state is not None and state.verify != "off":
        _verify_applied(autop, record, state.verify, state.materialize)
    return result


def _verify_applied(autop: Any, record: ApplyRecord, mode: str, materialize: str) -> None:
    """The safe default: the parallel graph just built is proven before anyone trains on it."""
    from ..errors import VerificationError, VerificationWarning
    from ..verifier._contract import verify

    report = verify(autop, gm=record.parallel_gm, placement=record.placement)
    record.verification = report
    if report.ok:
        return
    if mode == "raise" and report.violations:
        raise VerificationError(report, materialize=materialize)
    # unproven outputs only (or verify="warn"): nothing wrong was found, nothing proven either
    warnings.warn(str(VerificationError(report, materialize=materialize)), VerificationWarning, stacklevel=3)


provide("apply", ApplyHandlers(
    apply_placement_common=_apply_placement_common,
    run_node=_run_node,
    redistribute_tensor=_redistribute_tensor,
    ordered_redistribute=_ordered_redistribute,
))
