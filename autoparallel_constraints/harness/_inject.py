"""Put a chosen strategy in front of the solver, pin strategies, and lower the result with Inductor.

These are test tools for reproducing what a wrong sharding rule does to autoparallel. Upstream issue
#348 crashed because DTensor's index_put rule (before pytorch#172350) offered a strategy whose
inputs are not co-sharded: ``self`` and the output ``(Replicate(), Shard(0))``, ``values``
``(Replicate(), Shard(1))``. At the pinned autoparallel that rule is fixed, so the strategy has to
be offered again by hand:

* :func:`offer_strategy` appends one strategy to every matching node's strategy list while the
  optimizer is built (inside ``AutoParallel.__enter__``);
* :func:`find_nodes`, :func:`strategy_index`, :func:`pin_strategy` and :func:`chosen_strategy`
  find nodes and strategies of the optimizer's graph, pin a node to one strategy, and read the
  solver's choice;
* :func:`lower_with_inductor` lowers the parallel joint graph with Inductor without running any
  collective, which is where the issue's ``"Broadcast failed in ExpandView(...)"`` surfaces.

Typical use (the seed block of #348 on a 2x4 mesh)::

    index_put = torch.ops.aten.index_put.default
    RS0, RS1, RR = (Replicate(), Shard(0)), (Replicate(), Shard(1)), (Replicate(), Replicate())
    with offer_strategy(index_put, input_placements=[RS0, RR, RS1], output_placements=RS0):
        with AutoParallel(model, input_fn, mesh) as autop:
            ...  # constraints, optimize_placement, apply_placement
            lower_with_inductor(autop)  # raises Inductor's error on the forced plan

Nodes returned here belong to the optimizer's own (concretized) copy of the graph; every helper
also accepts the matching node of ``autop.gm``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import torch
from torch.distributed.tensor.placement_types import Placement, Shard

from ..errors import InvalidOptionError, PluginStateError
from ..seam import autop as upstream
from ..seam._harness import offering
from ..seam.dtensor import DTensorSpec, OpSpec, OpStrategy, generate_redistribute_costs
from ..seam.tracing import compile_fx_inner, tracing_context, tree_flatten
from ..seam.tracing import inductor_config as inductor_config_module

if TYPE_CHECKING:
    from autoparallel.api import AutoParallel
    from autoparallel.optimize_sharding import ShardingOptimizer
    from torch import fx

    from ..seam.tracing import OpOverload

logger = logging.getLogger(__name__)

__all__ = [
    "OfferedStrategy",
    "chosen_strategy",
    "find_nodes",
    "lower_with_inductor",
    "offer_strategy",
    "pin_strategy",
    "strategy_index",
]

PlacementTuple = tuple[Placement, ...]
# One entry per input slot of the op's existing strategies: placements, or None where the existing
# strategies have no spec (a non-tensor slot).
InputPlacements = Sequence[Union[PlacementTuple, None]]
# Placements of a single-output op, or one entry per output of a multi-output op.
OutputPlacements = Union[PlacementTuple, Sequence[Union[PlacementTuple, None]]]


@dataclass(frozen=True, kw_only=True, slots=True)
class OfferedStrategy:
    """One strategy :func:`offer_strategy` appended: to which node, at which index.

    ``redistribute_cost`` is a snapshot of the costs computed when the strategy was offered
    (``generate_redistribute_costs``, one row per input, one entry per producer strategy);
    autoparallel later overwrites ``spec.redistribute_cost`` in place with its own comm estimates.
    """

    node_name: str
    strategy_index: int
    spec: OpSpec
    redistribute_cost: tuple[tuple[float, ...], ...]


# ---------------------------------------------------------------------------------------------
# Offering a strategy
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def offer_strategy(
    op: OpOverload,
    *,
    input_placements: InputPlacements,
    output_placements: OutputPlacements,
    where: Callable[[fx.Node], bool] | None = None,
) -> Iterator[list[OfferedStrategy]]:
    """Append one strategy to the strategy list of every ``op`` node built while active.

    Placement options are built in ``AutoParallel.__enter__`` (by the ``ShardingOptimizer``), so
    the ``AutoParallel`` must be entered inside this context; the optimizer keeps the extra
    strategy after the context exits.

    Args:
        op: the overload to match, e.g. ``torch.ops.aten.index_put.default``.
        input_placements: one entry per input slot of the op's existing strategies, in
            ``input_specs`` order (for index_put: ``self``, the index tensor, ``values``). An entry
            is a placement tuple, or ``None`` exactly where the existing strategies have no spec.
        output_placements: the output's placements; for a multi-output op, one entry per output
            (``None`` where existing strategies have none).
        where: optional filter; only nodes for which it returns True get the strategy. With
            repeated layers (``repeated_subgraphs=True``) twins must all match or all not.

    Yields:
        A list filled while active with one :class:`OfferedStrategy` per node that got one.

    Every spec of the new strategy carries the tensor meta of the node's first existing strategy,
    and its ``redistribute_cost`` holds, per input, the cost from each producer strategy. The
    strategy is appended even when an equal one exists. Autoparallel's placement-option cache is
    never touched: a matching node receives a fresh :class:`OpStrategy` with copied
    :class:`OpSpec` wrappers. On exit the lookup autoparallel's optimizer uses is restored.
    """
    input_placements = _check_input_request(op, input_placements)
    output_placements = _check_output_request(op, output_placements)
    offered: list[OfferedStrategy] = []

    def with_offer(previous: Callable[..., Any]) -> Callable[..., Any]:
        def get_placement_options_with_offer(mesh, node, specs, user_args, user_kwargs):
            op_strategy = previous(mesh, node, specs, user_args, user_kwargs)
            if node.target != op or (where is not None and not where(node)):
                return op_strategy
            extra = _build_offered_spec(node, mesh, specs, op_strategy, input_placements, output_placements)
            with_extra = _copy_op_strategy(op_strategy)
            with_extra.strategies.append(extra)
            offered.append(
                OfferedStrategy(
                    node_name=node.name,
                    strategy_index=len(with_extra.strategies) - 1,
                    spec=extra,
                    redistribute_cost=tuple(tuple(row) for row in extra.redistribute_cost),
                )
            )
            logger.debug("offered %s to %s at index %d", extra, node.name, offered[-1].strategy_index)
            return with_extra

        return get_placement_options_with_offer

    with offering(with_offer):
        yield offered


def _is_placement_tuple(value: object) -> bool:
    return isinstance(value, (tuple, list)) and all(isinstance(p, Placement) for p in value)


def _check_input_request(
    op: OpOverload, input_placements: InputPlacements
) -> list[PlacementTuple | None]:
    if isinstance(input_placements, (str, bytes)) or not isinstance(input_placements, Sequence):
        raise InvalidOptionError(
            f"offer_strategy({op}): input_placements must be a sequence with one entry per input "
            f"slot (a tuple of Placements or None), got {input_placements!r}"
        )
    checked: list[PlacementTuple | None] = []
    for i, entry in enumerate(input_placements):
        if entry is not None and not _is_placement_tuple(entry):
            raise InvalidOptionError(
                f"offer_strategy({op}): input_placements[{i}] must be a tuple of Placements or None, "
                f"got {entry!r}"
            )
        checked.append(None if entry is None else tuple(entry))
    return checked


def _check_output_request(op: OpOverload, output_placements: OutputPlacements) -> OutputPlacements:
    if _is_placement_tuple(output_placements) and len(output_placements) > 0:
        return tuple(output_placements)
    if isinstance(output_placements, (tuple, list)) and all(
        entry is None or _is_placement_tuple(entry) for entry in output_placements
    ):
        return tuple(None if entry is None else tuple(entry) for entry in output_placements)
    raise InvalidOptionError(
        f"offer_strategy({op}): output_placements must be a tuple of Placements (one per mesh "
        f"dim), or for a multi-output op a tuple with one such tuple (or None) per output; got "
        f"{output_placements!r}"
    )


def _copy_op_strategy(op_strategy: OpStrategy) -> OpStrategy:
    """A new OpStrategy with new OpSpec wrappers and cost rows; DTensorSpecs are shared."""
    specs = []
    for spec in op_strategy.strategies:
        costs = spec.redistribute_cost
        specs.append(
            OpSpec(
                output_specs=spec.output_specs,
                input_specs=spec.input_specs,
                redistribute_cost=None if costs is None else [list(row) for row in costs],
            )
        )
    return OpStrategy(specs)


def _spec_like(
    reference: DTensorSpec | None,
    placements: PlacementTuple | None,
    *,
    mesh: Any,
    where: str,
) -> DTensorSpec | None:
    """A DTensorSpec with ``placements`` and the tensor meta of ``reference``; None stays None."""
    if placements is None:
        if reference is not None:
            raise InvalidOptionError(
                f"{where} holds a tensor in the existing strategies (placements "
                f"{reference.placements}); give its placements instead of None, e.g. "
                f"{(tuple(reference.placements))}"
            )
        return None
    if reference is None:
        raise InvalidOptionError(
            f"{where} has no tensor in the existing strategies; pass None for it"
        )
    if reference.tensor_meta is None:
        raise InvalidOptionError(f"{where}: the existing strategy has no tensor_meta to copy")
    if len(placements) != mesh.ndim:
        raise InvalidOptionError(
            f"{where}: {len(placements)} placements given for a {mesh.ndim}-dim mesh ({placements})"
        )
    ndim = len(reference.tensor_meta.shape)
    for placement in placements:
        if isinstance(placement, Shard) and not 0 <= placement.dim < ndim:
            raise InvalidOptionError(
                f"{where}: {placement} is out of range for a tensor of shape "
                f"{tuple(reference.tensor_meta.shape)}; use a dim in [0, {ndim})"
            )
    return DTensorSpec(mesh=mesh, placements=tuple(placements), tensor_meta=reference.tensor_meta)


def _build_offered_spec(
    node: fx.Node,
    mesh: Any,
    specs: Any,
    op_strategy: OpStrategy,
    input_placements: list[PlacementTuple | None],
    output_placements: OutputPlacements,
) -> OpSpec:
    """The OpSpec to append to ``node``'s strategies, with tensor metas and redistribute costs."""
    if not op_strategy.strategies:
        raise InvalidOptionError(
            f"offer_strategy: node {node.name} ({node.target}) has no strategy to copy from"
        )
    reference = op_strategy.strategies[0]
    ref_inputs = list(reference.input_specs or ())
    label = f"offer_strategy: node {node.name} ({node.target})"
    if len(input_placements) != len(ref_inputs):
        raise InvalidOptionError(
            f"{label}: {len(input_placements)} input placements given, but its strategies have "
            f"{len(ref_inputs)} input slots (e.g. {reference}); give one entry per slot"
        )
    input_specs = [
        _spec_like(ref, placements, mesh=mesh, where=f"{label}, input slot {i}")
        for i, (ref, placements) in enumerate(zip(ref_inputs, input_placements))
    ]

    ref_out = reference.output_specs
    if isinstance(ref_out, DTensorSpec):
        if not _is_placement_tuple(output_placements):
            raise InvalidOptionError(f"{label}: the op has one output; give one tuple of placements")
        output_specs: Any = _spec_like(
            ref_out, output_placements, mesh=mesh, where=f"{label}, output"
        )
    else:
        ref_outs = tuple(ref_out or ())
        if _is_placement_tuple(output_placements) or len(output_placements) != len(ref_outs):
            raise InvalidOptionError(
                f"{label}: the op has {len(ref_outs)} outputs; give one placement tuple (or None) "
                "per output"
            )
        output_specs = tuple(
            _spec_like(ref, placements, mesh=mesh, where=f"{label}, output {i}")
            for i, (ref, placements) in enumerate(zip(ref_outs, output_placements))
        )

    producers = [leaf for leaf in tree_flatten(specs)[0] if isinstance(leaf, OpStrategy)]
    if not producers:
        # Factory ops: the existing strategies carry a dummy input slot with zero costs.
        redistribute_cost = [[0.0] * len(row) for row in (reference.redistribute_cost or [])]
    else:
        if len(producers) != len(input_specs):
            raise InvalidOptionError(
                f"{label}: {len(producers)} producing tensors but {len(input_specs)} input slots; "
                "offer_strategy only handles ops whose input slots are their tensor arguments"
            )
        redistribute_cost = [
            [0.0] * len(producer.strategies)
            if spec is None
            else generate_redistribute_costs(producer, spec)
            for producer, spec in zip(producers, input_specs)
        ]
    return OpSpec(
        output_specs=output_specs,
        input_specs=tuple(input_specs),
        redistribute_cost=redistribute_cost,
    )


# ---------------------------------------------------------------------------------------------
# Finding, pinning and reading strategies
# ---------------------------------------------------------------------------------------------


def _optimizer(autop: AutoParallel) -> ShardingOptimizer:
    optimizer = getattr(autop, "sharding_optimizer", None)
    if optimizer is None:
        raise PluginStateError(
            "The AutoParallel has no sharding optimizer yet; call these helpers inside its "
            "`with` block"
        )
    return optimizer


def _optimizer_node(optimizer: ShardingOptimizer, node: fx.Node) -> fx.Node:
    node = upstream.normalize_node(optimizer, node)
    if node not in optimizer.strats or node.op == "output":
        raise InvalidOptionError(
            f"node {node.name} ({node.target}) has no strategies in the sharding optimizer"
        )
    return node


def _placements_of(spec: Any) -> Any:
    if spec is None:
        return None
    if isinstance(spec, DTensorSpec):
        return tuple(spec.placements)
    return tuple(_placements_of(s) for s in spec)


def find_nodes(autop: AutoParallel, op: OpOverload) -> list[fx.Node]:
    """Nodes of the optimizer's graph whose target is ``op``, in graph order."""
    return [node for node in _optimizer(autop).graph.nodes if node.target == op]


def strategy_index(
    autop: AutoParallel,
    node: fx.Node,
    input_placements: InputPlacements,
    output_placements: OutputPlacements,
) -> int:
    """Index in ``autop.sharding_optimizer.strats[node].strategies`` of the first strategy with
    exactly these input placements (one entry per slot, None for a slot without spec) and output
    placements."""
    optimizer = _optimizer(autop)
    node = _optimizer_node(optimizer, node)
    want_inputs = tuple(None if p is None else tuple(p) for p in input_placements)
    want_output = _placements_of_request(output_placements)
    strategies = optimizer.strats[node].strategies
    for i, spec in enumerate(strategies):
        if _placements_of(tuple(spec.input_specs or ())) == want_inputs and _placements_of(
            spec.output_specs
        ) == want_output:
            return i
    listing = "\n  ".join(f"{i}: {spec}" for i, spec in enumerate(strategies))
    raise InvalidOptionError(
        f"node {node.name} ({node.target}) has no strategy with inputs {want_inputs} and output "
        f"{want_output}; its strategies are:\n  {listing}"
    )


def _placements_of_request(output_placements: OutputPlacements) -> Any:
    if _is_placement_tuple(output_placements):
        return tuple(output_placements)
    return tuple(None if p is None else tuple(p) for p in output_placements)


def pin_strategy(
    autop: AutoParallel, node: fx.Node, strategy_index: int, name: str = "user_pin"
) -> list[str]:
    """Constrain ``node`` to exactly strategy ``strategy_index`` of its strategy list.

    Adds, per input argument, ``sum_j x[node, arg, strategy_index, j] == 1`` through the
    optimizer's ``_add_node_constraint`` (constraints named ``<name>_000``, ...) and records the
    names in ``_node_constraint_names`` as ``add_node_constraint`` does, so ``remove_constraints``
    and the memory constraint treat them like user pins. Repeated layers share variables, so the
    pin binds the node's twins too. Pins by index are not replayed by the optimizer's save/load.
    Returns the constraint names.
    """
    optimizer = _optimizer(autop)
    node = _optimizer_node(optimizer, node)
    count = len(optimizer.strats[node].strategies)
    valid = isinstance(strategy_index, int) and not isinstance(strategy_index, bool)
    if not valid or not 0 <= strategy_index < count:
        raise InvalidOptionError(
            f"pin_strategy: node {node.name} has {count} strategies; strategy_index must be an "
            f"int in [0, {count}), got {strategy_index!r}"
        )
    return upstream.add_node_constraint(optimizer, node, strategy_index, name)


def chosen_strategy(autop: AutoParallel, node: fx.Node, solution: dict | None = None) -> OpSpec:
    """The strategy the solver chose for ``node`` (in ``solution``, default
    ``autop.sharding_placement``, whose keys are nodes of ``autop.gm``)."""
    optimizer = _optimizer(autop)
    if solution is None:
        solution = getattr(autop, "sharding_placement", None)
        if solution is None:
            raise PluginStateError("no solution yet; call autop.optimize_placement() first")
    concrete = upstream.normalize_node(optimizer, node)
    original = upstream.concrete_to_orig(optimizer).get(concrete, concrete)
    if original not in solution:
        raise InvalidOptionError(f"node {node.name} ({node.target}) has no entry in the solution")
    return solution[original]


# ---------------------------------------------------------------------------------------------
# Lowering with Inductor
# ---------------------------------------------------------------------------------------------


def _flat_output_copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose output node returns a flat tuple of its (nested) outputs."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op == "output":
            leaves = tree_flatten(node.args[0])[0]
            graph.output(
                tuple(env[leaf] if isinstance(leaf, torch.fx.Node) else leaf for leaf in leaves)
            )
        else:
            env[node] = graph.node_copy(node, lambda n: env[n])
    flat = torch.fx.GraphModule(gm, graph)
    flat.recompile()
    return flat


def lower_with_inductor(autop: AutoParallel) -> None:
    """Lower a copy of ``autop.parallel_gm`` with Inductor's ``compile_fx_inner``; nothing runs.

    Call after ``autop.apply_placement(...)``, inside the ``with`` block. The joint graph is
    lowered (and code generated) in autoparallel's fake mode with its placeholder values as example
    inputs; the compiled artifact is dropped, so no kernel and no collective ever executes.
    Inductor's exception propagates unchanged; on the forced plan of issue #348 it is
    ``"Broadcast failed in ExpandView([16, 32, 1, 64], [4, 128, 1, 64]) on dimension 0"``.
    Inductor's configuration is patched only for the duration of the call: the FX-graph caches
    are off, so every call really lowers (compiled C++ kernels may still come from Inductor's
    on-disk code cache, which makes a second successful lowering faster).
    """
    inductor_config = inductor_config_module()
    parallel_gm = getattr(autop, "parallel_gm", None)
    if parallel_gm is None:
        raise PluginStateError(
            "lower_with_inductor needs autop.parallel_gm: call autop.apply_placement() first"
        )
    gm = _flat_output_copy(parallel_gm)
    example_inputs = [node.meta["val"] for node in gm.graph.nodes if node.op == "placeholder"]
    scoped_config = {"fx_graph_cache": False, "fx_graph_remote_cache": False}
    with (
        inductor_config.patch(scoped_config),
        tracing_context(autop.fake_mode),
        autop.fake_mode,
    ):
        compile_fx_inner(gm, example_inputs)
