"""The interface contract and the entry point :func:`verify`: the placements the parallel module
promises for its inputs (parameters, buffers, user inputs, tangents) and outputs (forward outputs,
each gradient as its parameter), read from the AutoParallel object, then the walk.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from ..core._tags import is_local_map_region
from ..errors import AuditError
from ..seam import autop as upstream
from ..seam.tracing import aot_descriptors, tree_flatten
from ._report import VerifyReport
from ._values import _contiguous_stride
from ._walk import verify_graph

if TYPE_CHECKING:
    from ..seam.dtensor import DTensorSpec
    from ..table import Table


logger = logging.getLogger(__name__)

__all__ = ["contract", "regions", "verify"]


def contract(
    autop: Any, placement: dict[torch.fx.Node, Any] | None = None
) -> tuple[list[DTensorSpec | None], list[tuple[str, DTensorSpec | None]]]:
    """The interface of ``autop``'s parallel graph: its inputs' and outputs' placements.

    Inputs: each joint-graph placeholder with the placements the parallel module holds it in
    (autoparallel's physical placements). Outputs: forward outputs as the plan delivers them to
    the user, each gradient as its parameter (or input) is held.
    """
    from autoparallel.shardings.ordered_sharding import compute_optimal_placement_order_for_parameters

    if placement is None:
        placement = getattr(autop, "sharding_placement", None)
    if placement is None:
        raise AuditError("verify() needs a solved and applied AutoParallel: call optimize_placement and apply first")
    gm = autop.gm
    order = compute_optimal_placement_order_for_parameters(gm, placement)
    physical = upstream.build_physical_placements(placement, order)
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    inputs: list[Any] = []
    by_desc: dict[Any, Any] = {}
    for node in placeholders:
        spec = physical.get(node)
        if spec is not None and spec.tensor_meta is None:
            spec = _with_meta(spec, node)
        inputs.append(spec)
        by_desc[id(node)] = spec
    out_node = gm.graph.find_nodes(op="output")[0]
    values = tree_flatten(out_node.args[0])[0]
    descs = list(out_node.meta.get("desc") or [None] * len(values))
    grads_of = _grad_targets(gm, placeholders, descs)
    outputs: list[tuple[str, Any]] = []
    for i, value in enumerate(values):
        if not isinstance(value, torch.fx.Node):
            outputs.append((f"output[{i}]", None))
            continue
        param = grads_of.get(i)
        if param is not None:
            outputs.append((f"grad of {param.name}", inputs[placeholders.index(param)]))
        elif value in placement:
            spec = placement[value].output_specs
            outputs.append((f"output[{i}]", spec if not isinstance(spec, (list, tuple)) else None))
        else:
            outputs.append((f"output[{i}]", None))
    return inputs, outputs


def regions(autop: Any) -> dict[str, tuple[tuple[Any, ...], tuple[Any, ...], tuple[tuple[int, ...] | None, ...]]]:
    """Every ``local_map`` region of ``autop``'s joint graph: its node's name -> the in and out
    placements its user declared and the global shape of each declared output (the contract the
    region is read by): None where that output is not a tensor (a backward region's gradient of
    an input that needs none), -1 for a data-dependent size."""
    out = {}
    for node in autop.gm.graph.nodes:
        if is_local_map_region(node):
            kwargs = node.meta["local_map_kwargs"]
            ins, outs = tuple(kwargs.get("in_placements") or ()), tuple(kwargs.get("out_placements") or ())
            out[node.name] = (ins, outs, _output_shapes(node)[: len(outs)])  # then the saved activations
    return out


def _output_shapes(node: torch.fx.Node) -> tuple[tuple[int, ...] | None, ...]:
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else (val,)
    return tuple(
        tuple(-1 if isinstance(s, torch.SymInt) and s.node.hint is None else int(_concrete_hint((s,))[0])
              for s in v.shape) if isinstance(v, torch.Tensor) else None
        for v in vals
    )


def _with_meta(spec: Any, node: torch.fx.Node) -> Any:
    from ..seam.dtensor import DTensorSpec, TensorMeta

    val = node.meta["val"]
    shape = torch.Size(_concrete_hint(val.shape))
    return DTensorSpec(spec.mesh, spec.placements, tensor_meta=TensorMeta(shape, _contiguous_stride(shape), val.dtype),
                       shard_order=spec.shard_order)


def _concrete_hint(shape: Any) -> tuple[int, ...]:
    from autoparallel.optimize_sharding import concretize_symint

    return tuple(int(concretize_symint(s)) for s in shape)


def _grad_targets(gm: torch.fx.GraphModule, placeholders: list[torch.fx.Node], descs: list[Any]) -> dict[int, torch.fx.Node]:
    """Output index -> the placeholder it is the gradient of (from AOT autograd's descriptors)."""
    d = aot_descriptors()

    by_desc = {}
    for node in placeholders:
        desc = node.meta.get("desc")
        if desc is not None:
            by_desc[desc] = node
    out = {}
    for i, desc in enumerate(descs):
        if isinstance(desc, d.GradAOTOutput) and desc.grad_of in by_desc:
            out[i] = by_desc[desc.grad_of]
    return out


def verify(
    autop: Any,
    *,
    gm: torch.fx.GraphModule | None = None,
    placement: dict[torch.fx.Node, Any] | None = None,
    table: Table | None = None,
) -> VerifyReport:
    """Prove the placements of ``autop``'s parallel graph (or of ``gm``) from the graph alone.

    Needs ``apply_placement`` (or the common apply step) to have run. Reads the graph and its
    interface contract (:func:`contract`: the placements the plan gives the graph's inputs and
    outputs, from ``placement``, default the plan last applied), never the plugin's records, the
    solver's values for inner nodes, or the plan of any inner node.
    """
    if gm is None:
        gm = getattr(autop, "parallel_gm", None)
        if gm is None:
            raise AuditError("verify() needs the applied graph: call autop.apply_placement(placement) first")
    if table is None:
        from ..plan._state import get_state
        from ..table import default_table

        state = get_state(autop)
        table = state.table if state is not None else default_table()
    if placement is None:
        record = upstream.get(autop, "apply_record")
        placement = record.placement if record is not None else None
    inputs, outputs = contract(autop, placement)
    return verify_graph(gm, autop.mesh, inputs, outputs, table=table, regions=regions(autop))
