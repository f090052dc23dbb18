"""Run a parallel joint graph on every simulated rank: build it on one rank
(:func:`apply_on_one_rank`), shard every primal and tangent by its placement, run it under
``LocalTensorMode`` and gather the outputs and gradients back (:func:`run_parallel_graph`).

What the harness works around (torch 2.13, autoparallel a54c252):

* **compile_on_one_rank only around apply.** With static shapes a rank's mesh coordinates get baked
  into the graph, so the graph is built with ``dynamic=True`` and
  ``torch.distributed.config.compile_on_one_rank`` on, which turns coordinates into a run-time op
  (``device_mesh::_runtime_compute_coordinate_on_dim``). The flag is on only around
  ``AutoParallel._apply_placement_common``: on during ``__enter__`` it makes placement-option
  generation about 15x slower. The public ``apply_placement`` deep-copies the graph, which fails on
  the ProcessGroup objects compile_on_one_rank puts there, so the common step (which
  ``apply_placement`` starts with, and which the plugin hooks) is called directly.
* **Rank-aware run time.** Those graphs pass ProcessGroup objects to the functional collectives
  and compute coordinates with an op whose kernel reads ``dist.get_rank()`` (0 for every simulated
  rank). torch 2.13's ``LocalTensorMode`` handles both itself, so nothing is patched; a probe
  (:func:`_require_rank_aware_local_tensor`) fails loudly on a torch where it would not.
* **all_to_all on CPU.** On a ``"cpu"`` mesh torch's ``shard_dim_alltoall`` falls back to
  all_gather plus ``chunks[mesh.get_local_rank(mesh_dim)]``, and that index is traced as rank 0's
  Python int: every rank would get rank 0's chunk. :func:`rank_aware_all_to_all` makes the
  redistribution emit the ``_dtensor::shard_dim_alltoall`` collective (what a GPU mesh emits),
  which LocalTensorMode runs per rank.
* **Uneven placeholders.** autoparallel's ``_make_local_args`` shards the example inputs with
  DTensor; under compile_on_one_rank an uneven shard's size becomes a function of the symbolic
  coordinate and symbolic-shape creation rejects it. :func:`~autoparallel_constraints.seam._harness.example_inputs_on_tracing_rank`
  computes those example shards with the flag off (rank 0's sizes, which autoparallel already
  turns into fresh dynamic sizes); the graph itself is still traced with the flag on.
* **Physical placements.** A parameter whose shard order autoparallel reverses
  (``compute_optimal_placement_order_for_parameters``) is laid out as ``StridedShard`` and so is
  its gradient: primals are sharded and gradients gathered by these physical placements.
* **torch.chunk semantics.** Sharding and gathering are DTensor's own (``redistribute`` from
  Replicate, ``full_tensor``) under LocalTensorMode, so uneven and strided shards match what the
  parallel graph expects.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import Placement, Replicate

from ..errors import InvalidOptionError
from ..seam import autop as upstream
from ..seam._harness import example_inputs_on_tracing_rank, rank_aware_all_to_all
from ..seam.dtensor import (
    LocalTensor,
    LocalTensorMode,
    local_ints,
    local_tensor_takes_process_groups,
    local_tensors,
)
from ..seam.tracing import OpOverload, aot_descriptors, pytree, schema_of

if TYPE_CHECKING:
    from autoparallel.api import AutoParallel
    from torch.distributed.device_mesh import DeviceMesh

    from ..seam.dtensor import DTensorSpec, OpSpec


logger = logging.getLogger(__name__)

__all__ = ["ParallelRun", "PlacementMap", "Placements", "ShardPerturbation", "apply_on_one_rank", "collective_counts", "rank_aware_all_to_all", "run_parallel_graph"]

Placements = tuple[Placement, ...]
PlacementMap = Mapping[Any, "OpSpec"]

# DTensor warns on every multi-step redistribution; sharding and gathering here do many on purpose.
_NOISY_LOGGERS = ("torch.distributed.tensor._redistribute",)


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardPerturbation:
    """Test hook: add ``delta`` to one simulated rank's shard of one primal before running.

    ``primal`` names a joint-graph input: ``param:<fqn>``, ``buffer:<fqn>``, ``input[i]`` or
    ``tangent[i]``. It exists to prove that the comparison catches a wrong shard.
    """

    primal: str
    rank: int = 0
    delta: float = 1.0


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelRun:
    """What :func:`run_parallel_graph` gathered: per tensor name, every rank's full tensor.

    Names follow :class:`TensorCheck` for outputs and gradients and :class:`ShardPerturbation`
    for primals. ``physical`` holds the placements each primal was sharded by and each output
    gathered by (``StridedShard`` where autoparallel reverses the shard order).
    """

    gathered: Mapping[str, Mapping[int, Tensor]]
    physical: Mapping[str, Placements]


# --------------------------------------------------------------------------------------------
# Building the parallel graph
# --------------------------------------------------------------------------------------------


def apply_on_one_rank(
    autop: AutoParallel, placement: PlacementMap, *, all_to_all_per_rank: bool = True
) -> torch.fx.GraphModule:
    """Build and return ``autop.parallel_gm`` with compile_on_one_rank on for this call only.

    Calls ``AutoParallel._apply_placement_common`` (the step ``apply_placement`` starts with, and
    the one the plugin hooks), inside :func:`rank_aware_all_to_all` and
    :func:`~autoparallel_constraints.seam._harness.example_inputs_on_tracing_rank`. ``autop`` must be entered and built with
    ``dynamic=True``. ``all_to_all_per_rank=False`` keeps torch's CPU all_to_all fallback; it
    exists only to show what :func:`rank_aware_all_to_all` fixes.
    """
    import torch.distributed.config as dist_config

    if autop.fake_mode.shape_env is None:
        raise InvalidOptionError(
            "apply_on_one_rank needs an AutoParallel built with dynamic=True: with static shapes "
            "rank coordinates are baked into the graph and correct plans compare wrong."
        )
    routing = rank_aware_all_to_all() if all_to_all_per_rank else contextlib.nullcontext()
    with routing, example_inputs_on_tracing_rank(), dist_config.patch(compile_on_one_rank=True):
        upstream.call_apply_placement_common(autop, placement)
    return autop.parallel_gm


def collective_counts(gm: torch.fx.GraphModule) -> dict[str, int]:
    """How many of each collective (``_c10d_functional`` ops but ``wait_tensor``, ``_dtensor``
    all_to_all) ``gm`` calls, by op name."""
    counts: Counter[str] = Counter()
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, OpOverload):
            continue
        namespace, name = node.target.namespace, schema_of(node.target).name.split("::")[-1]
        if (namespace == "_c10d_functional" and name != "wait_tensor") or (
            namespace == "_dtensor" and name == "shard_dim_alltoall"
        ):
            counts[name] += 1
    return dict(sorted(counts.items()))


# --------------------------------------------------------------------------------------------
# Running it under LocalTensorMode
# --------------------------------------------------------------------------------------------


def _require_rank_aware_local_tensor(mesh: DeviceMesh, ranks: Sequence[int]) -> None:
    """Fail loudly unless LocalTensorMode runs compile_on_one_rank graphs per rank.

    Such graphs (a) pass ProcessGroup objects, not group names, to the functional collectives and
    (b) compute each rank's mesh coordinate at run time with
    ``device_mesh::_runtime_compute_coordinate_on_dim``, whose kernel reads ``dist.get_rank()``:
    0 for every simulated rank under the fake process group. torch 2.13 handles both in
    LocalTensorMode itself (``_local_tensor._c10d._resolve_pg_or_name``, and a per-rank branch for
    the coordinate op in ``LocalTensorMode.__torch_dispatch__``). Without (b) every rank reads rank
    0's offsets and correct plans compare wrong, so it is probed on ``mesh`` rather than assumed.
    """
    if not local_tensor_takes_process_groups():
        raise RuntimeError(
            "this torch's LocalTensor collectives do not accept the ProcessGroup objects that "
            "compile_on_one_rank graphs pass; the numerics harness needs torch >= 2.13."
        )
    mesh_tensor = mesh.mesh
    for dim in range(mesh.ndim):
        if mesh_tensor.size(dim) < 2:
            continue
        expected = {r: int((mesh_tensor == r).nonzero()[0][dim]) for r in ranks}
        with LocalTensorMode(frozenset(ranks)):
            got = torch.ops.device_mesh._runtime_compute_coordinate_on_dim(mesh_tensor.unsqueeze(0), dim)
        per_rank = local_ints(got)
        if per_rank != expected:
            raise RuntimeError(
                "LocalTensorMode does not answer device_mesh::_runtime_compute_coordinate_on_dim "
                f"per simulated rank (mesh dim {dim}: expected {expected}, got {got!r}), so every "
                "rank would read rank 0's shard offsets; the numerics harness needs torch >= 2.13."
            )


@contextlib.contextmanager
def _quiet_redistribute_warnings() -> Iterator[None]:
    saved = [(log, log.level) for log in map(logging.getLogger, _NOISY_LOGGERS)]
    for log, _ in saved:
        log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for log, level in saved:
            log.setLevel(level)


def _reversed_physical(spec: DTensorSpec) -> Placements:
    """``spec``'s placements with each tensor dim's mesh-dim order reversed, as ``StridedShard``.

    The layout autoparallel gives a node whose ``OrderInfo.is_target_reversed_order`` is set.
    """
    from ..seam.dtensor import ShardOrderEntry, convert_shard_order_to_strided_shard

    order = tuple(
        ShardOrderEntry(tensor_dim=e.tensor_dim, mesh_dims=tuple(sorted(e.mesh_dims, reverse=True)))
        for e in spec.shard_order
    )
    return tuple(convert_shard_order_to_strided_shard(order, spec.placements, spec.mesh))


@dataclass(frozen=True, slots=True)
class _Slot:
    """A joint-graph input or output: its name, physical placements and global shape."""

    name: str
    physical: Placements
    shape: tuple[int, ...]


def _desc_name(desc: Any) -> str:
    d = aot_descriptors()
    if isinstance(desc, d.ParamAOTInput):
        return f"param:{desc.target}"
    if isinstance(desc, d.BufferAOTInput):
        return f"buffer:{desc.target}"
    if isinstance(desc, d.PlainAOTInput):
        return f"input[{desc.idx}]"
    if isinstance(desc, d.TangentAOTInput) and isinstance(desc.output, d.PlainAOTOutput):
        return f"tangent[{desc.output.idx}]"
    if isinstance(desc, d.PlainAOTOutput):
        return f"output[{desc.idx}]"
    if isinstance(desc, d.InputMutationAOTOutput) and isinstance(desc.mutated_input, d.BufferAOTInput):
        return f"mutated:buffer:{desc.mutated_input.target}"  # a buffer forward updates (MoE load counts)
    if isinstance(desc, d.GradAOTOutput):
        of = desc.grad_of
        if isinstance(of, d.ParamAOTInput):
            return f"grad:{of.target}"
        if isinstance(of, d.PlainAOTInput):
            return f"grad:input[{of.idx}]"
    raise NotImplementedError(
        f"the numerics harness does not handle joint-graph slots like {desc!r} "
        "(mutated inputs, subclass or RNG state); use a model without them."
    )


def _global_shape(spec: DTensorSpec, val: Tensor) -> tuple[int, ...]:
    if spec.tensor_meta is not None:
        return tuple(int(s) for s in spec.tensor_meta.shape)
    from autoparallel.optimize_sharding import concretize_symint

    return tuple(int(concretize_symint(s)) for s in val.shape)


def _joint_layout(autop: AutoParallel, placement: PlacementMap) -> tuple[list[_Slot], list[_Slot | None]]:
    """The joint graph's inputs and outputs, named, with physical placements and global shapes.

    Read from ``autop.gm`` (the graph ``placement`` is keyed by); ``autop.parallel_gm`` has the
    same placeholders and outputs in the same order. An output slot is None where the graph
    returns None. Primals use autoparallel's own ``_build_physical_placements`` (what apply shards
    parameters by); gradients are reversed to ``StridedShard`` by the same order information.
    """
    from autoparallel.shardings.ordered_sharding import compute_optimal_placement_order_for_parameters

    gm = autop.gm
    order = compute_optimal_placement_order_for_parameters(gm, placement)
    physical_specs = upstream.build_physical_placements(placement, order)

    inputs = []
    for node in gm.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if not isinstance(val, Tensor):
            raise NotImplementedError(f"non-tensor joint-graph input {node.name} ({type(val).__name__})")
        spec = physical_specs[node]
        inputs.append(_Slot(_desc_name(node.meta["desc"]), tuple(spec.placements), _global_shape(spec, val)))

    out_node = gm.graph.find_nodes(op="output")[0]
    values = pytree.tree_leaves(out_node.args[0], is_leaf=lambda x: x is None)
    descs = list(out_node.meta["desc"])
    if len(values) != len(descs):
        raise RuntimeError(f"the joint graph has {len(values)} outputs but {len(descs)} descriptors")
    outputs: list[_Slot | None] = []
    for value, desc in zip(values, descs):
        if value is None:
            outputs.append(None)
            continue
        spec = placement[value].output_specs
        info = order.get(value)
        reversed_order = info is not None and info.is_target_reversed_order
        physical = _reversed_physical(spec) if reversed_order else tuple(spec.placements)
        outputs.append(_Slot(_desc_name(desc), physical, _global_shape(spec, value.meta["val"])))
    return inputs, outputs


def _full_values(
    slots: Sequence[_Slot], model: nn.Module, inputs: Sequence[Tensor], grad_outputs: Sequence[Tensor]
) -> list[Tensor]:
    params = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers(remove_duplicate=False))
    values = []
    for slot in slots:
        kind, _, rest = slot.name.partition(":")
        if kind == "param":
            value = params[rest]
        elif kind == "buffer":
            value = buffers[rest]
        elif slot.name.startswith("input["):
            value = inputs[int(slot.name[len("input[") : -1])]
        else:  # tangent[i]
            value = grad_outputs[int(slot.name[len("tangent[") : -1])]
        if tuple(value.shape) != slot.shape:
            raise InvalidOptionError(
                f"{slot.name} has shape {tuple(value.shape)} on the reference but {slot.shape} in the "
                "traced graph: model_fn and input_fn must build the same shapes on every call."
            )
        values.append(value.detach())
    return values


def _replicated(value: Tensor, ranks: Sequence[int]) -> LocalTensor:
    return LocalTensor({r: value.clone() for r in ranks})


def _shard(value: Tensor, mesh: DeviceMesh, placements: Placements, ranks: Sequence[int]) -> LocalTensor:
    """Every rank's shard of ``value`` under ``placements`` (call under LocalTensorMode)."""
    replicate = (Replicate(),) * mesh.ndim
    local = DTensor.from_local(_replicated(value, ranks), mesh, replicate, run_check=False)
    local = local.redistribute(mesh, placements).to_local()
    return local if isinstance(local, LocalTensor) else _replicated(local, ranks)


def _gather(
    local: Any, mesh: DeviceMesh, placements: Placements, shape: tuple[int, ...], ranks: Sequence[int]
) -> dict[int, Tensor]:
    """Every rank's reconstruction of the full tensor (call under LocalTensorMode)."""
    if not isinstance(local, LocalTensor):
        local = _replicated(local, ranks)
    size = torch.Size(shape)
    stride = torch.empty(size, device="meta").stride()
    full = DTensor.from_local(local, mesh, placements, run_check=False, shape=size, stride=stride).full_tensor()
    if not isinstance(full, LocalTensor):
        return {r: full for r in ranks}
    return {r: t.detach().clone() for r, t in local_tensors(full).items()}


def run_parallel_graph(
    autop: AutoParallel,
    placement: PlacementMap,
    model: nn.Module,
    inputs: Sequence[Tensor],
    grad_outputs: Sequence[Tensor],
    *,
    perturb: ShardPerturbation | None = None,
) -> ParallelRun:
    """Run ``autop.parallel_gm`` on every simulated rank and gather all it returns.

    ``model`` supplies the real parameter and buffer values (by fqn), ``inputs`` the positional
    inputs, ``grad_outputs`` one gradient per forward output. Each is sharded by its physical
    placement in ``placement``; forward outputs and gradients are gathered by theirs. Call after
    :func:`apply_on_one_rank`; ``autop`` may already have been exited.
    """
    gm = getattr(autop, "parallel_gm", None)
    if gm is None:
        raise InvalidOptionError("autop has no parallel_gm yet: call apply_on_one_rank(autop, placement) first.")
    in_slots, out_slots = _joint_layout(autop, placement)
    values = _full_values(in_slots, model, inputs, grad_outputs)
    mesh = autop.mesh
    ranks = list(range(mesh.size()))
    if sorted(mesh.mesh.flatten().tolist()) != ranks:
        raise InvalidOptionError(f"the mesh must hold ranks 0..{len(ranks) - 1}, got {mesh.mesh.tolist()}")
    if perturb is not None:
        if perturb.primal not in {s.name for s in in_slots}:
            raise InvalidOptionError(
                f"ShardPerturbation names {perturb.primal!r}, which is not a joint-graph input; "
                f"the inputs are: {', '.join(s.name for s in in_slots)}"
            )
        if perturb.rank not in ranks:
            raise InvalidOptionError(f"ShardPerturbation rank {perturb.rank} is not in 0..{len(ranks) - 1}")

    _require_rank_aware_local_tensor(mesh, ranks)
    gathered: dict[str, dict[int, Tensor]] = {}
    physical: dict[str, Placements] = {s.name: s.physical for s in in_slots}
    with _quiet_redistribute_warnings(), LocalTensorMode(frozenset(ranks)) as mode:
        args = []
        for slot, value in zip(in_slots, values):
            local = _shard(value, mesh, slot.physical, ranks)
            if perturb is not None and slot.name == perturb.primal:
                with mode.disable():
                    shards = {r: t.clone() for r, t in local_tensors(local).items()}
                    shards[perturb.rank] = shards[perturb.rank] + perturb.delta
                local = LocalTensor(shards)
            args.append(local)
        flat = pytree.tree_leaves(gm(*args), is_leaf=lambda x: x is None)
        if len(flat) != len(out_slots):
            raise RuntimeError(f"the parallel graph returned {len(flat)} values, the joint graph {len(out_slots)}")
        for slot, value in zip(out_slots, flat):
            if slot is None or value is None:
                continue
            physical[slot.name] = slot.physical
            gathered[slot.name] = _gather(value, mesh, slot.physical, slot.shape, ranks)
    logger.debug("ran the parallel graph on %d simulated ranks, gathered %d tensors", len(ranks), len(gathered))
    return ParallelRun(gathered=gathered, physical=physical)
