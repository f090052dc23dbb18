"""Proof by mutation: break one thing in a correct parallel graph and check the verifier agrees
with the numbers.

A *source* is a model, its interface pins and the call that configures the plugin; built on a
mesh the way the numerics harness builds it (:func:`~._numerics.apply_on_one_rank`:
``dynamic=True``, compile_on_one_rank, so rank coordinates stay symbolic) it gives one correct
parallel graph. A *mutation operator* finds every site of that graph where it applies and, per
site, returns a copy of the graph with exactly one thing broken. Every mutant is named by the
reproducible tuple ``(source, mesh, operator, node, variant)`` (:class:`MutantId`).

Each mutant is run under LocalTensorMode against the single-device reference
(:func:`~._numerics.run_parallel_graph` + :func:`~._numerics.compare`; raising at run time is
``crash``, which is numerically wrong) and then given to the verifier (``apc.verify(autop,
gm=mutant)``). The two verdicts give one of four outcomes (:data:`OUTCOMES`):

========  =========  ========  ===============================================================
numbers   verifier   outcome   meaning
========  =========  ========  ===============================================================
wrong     flagged    caught    the verifier saw the break
wrong     clean      MISS      the verifier let a wrong graph through (must be 0)
exact     clean      fine      the break does not change the numbers (e.g. a redundant collective)
exact     flagged    flagged   the verifier rejects a graph that computes the right thing
========  =========  ========  ===============================================================

The unmutated graph of every (source, mesh) is checked too, as operator ``none``: it must be
``fine``.

Operators (:data:`OPERATORS`), each breaking ONE thing; a site where the break cannot keep the
mutated node's local shape is recorded as not constructible, with the reason, never forced:

* ``drop_collective``: a collective and its wait become their input, made shape-consistent:
  all_reduce and all_to_all_single -> ``x``; all_gather of ``n`` -> ``cat([x] * n, 0)`` (this
  rank's shard repeated); reduce_scatter -> ``chunk(x, n, 0)[0]`` (the unreduced first chunk);
  shard_dim_alltoall -> ``chunk(cat([x] * n, gather_dim), n, shard_dim)[0]``.
* ``reduce_op``: all_reduce / reduce_scatter with ``sum`` -> ``avg`` and -> ``max``.
* ``collective_dim``: all_gather along ``d != 0`` (``cat(chunk(y, n, 0), d)``, reshaped to the
  gathered shape); reduce_scatter along ``d != 0`` (input ``cat(chunk(x, n, d), 0)``, output
  reshaped); shard_dim_alltoall with another gather or shard dim (output reshaped).
* ``other_mesh_dim``: a collective's group taken on another mesh dim
  (``mesh_get_process_group(mesh, k) -> (mesh, k')``; gather/scatter only where both dims have
  the same size, else the local shape changes); a rank coordinate
  (``device_mesh._runtime_compute_coordinate_on_dim``) read on another mesh dim.
* ``plugin_identity``: a plugin redistribute (the nodes whose ``meta["custom"]`` carries
  ``apc_constraint``, one group per constraint) replaced by its input.
* ``plugin_wrong_target``: the same group delivering the target with its two mesh dims swapped:
  what makes the target's shards (rank coordinates, reduce_scatter, all_to_all) reads the other
  mesh dim; what undoes the source's (all_gather, all_reduce) is kept.
* ``drop_rank_slice``: a rank slice (the slice/narrow/split whose bounds come from a rank
  coordinate) takes chunk 0 on every rank (the coordinate replaced by 0 in its bounds).

Usage::

    python -m autoparallel_constraints mutate --sources seed --meshes 2x2 --json out.json

or :func:`run_mutations` from Python. Building a source takes ~10-60 s; every mutant of one
(source, mesh) shares that build, and one LocalTensorMode run takes well under a second at these
sizes.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import math
import operator
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.distributed.tensor.placement_types import Placement, Replicate, Shard

from ._harness import cpu_mesh, device_name
from ._numerics import Reference, apply_on_one_rank, build_reference, compare, run_parallel_graph

if TYPE_CHECKING:
    from autoparallel.api import AutoParallel
    from torch.fx import Graph, GraphModule, Node

logger = logging.getLogger(__name__)

__all__ = [
    "MESHES",
    "OPERATORS",
    "OUTCOMES",
    "Built",
    "MutantId",
    "MutantResult",
    "MutationReport",
    "NotConstructible",
    "NumbersCache",
    "Site",
    "Source",
    "build_source",
    "classify",
    "find_sites",
    "make_mutant",
    "run_mutations",
    "sources",
]

Placements = tuple[Placement, ...]
MESHES: tuple[tuple[int, ...], ...] = ((2,), (2, 2), (2, 4), (4, 2))

# numbers x verifier -> outcome (the module docstring's table)
OUTCOMES: dict[tuple[bool, bool], str] = {
    (True, True): "caught",  # wrong, flagged
    (True, False): "MISS",  # wrong, clean
    (False, False): "fine",  # exact, clean
    (False, True): "flagged",  # exact, flagged
}


def classify(numerics: str, verdict: str) -> str:
    """Outcome of one mutant: ``numerics`` is exact/wrong/crash, ``verdict`` clean/flagged/error.

    A crash is numerically wrong; a verifier that raised did not call the graph clean.
    """
    if numerics not in ("exact", "wrong", "crash"):
        raise ValueError(f"numerics must be exact, wrong or crash, got {numerics!r}")
    if verdict not in ("clean", "flagged", "error"):
        raise ValueError(f"verdict must be clean, flagged or error, got {verdict!r}")
    return OUTCOMES[(numerics != "exact", verdict != "clean")]


# --------------------------------------------------------------------------------------------
# Sources of correct parallel graphs
# --------------------------------------------------------------------------------------------


class _Logits(nn.Module):
    """A causal LM's logits as a plain tensor (transformers returns an output object)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: Tensor) -> Tensor:
        out = self.model(ids)
        return getattr(out, "logits", out)


def _batch_pins(ndim: int) -> list[Placements]:
    return [(Shard(0),) + (Replicate(),) * (ndim - 1)]


@dataclass(frozen=True, kw_only=True)
class Source:
    """A model, its interface pins and the plugin call: one correct parallel graph per mesh.

    ``input_placements(ndim)`` / ``output_placements(ndim)`` give the pins on a mesh of ``ndim``
    dims (an output entry None leaves it to the solver). ``configure(autop)`` runs after those
    pins and the parameter-memory constraint, then ``autop.add_op_constraints(**op_constraints)``
    (the plugin's default call when empty; None: the plugin is not called), then the solve.
    ``context()`` is active for the whole build (e.g. a strategy offered to the solver).
    """

    name: str
    model_fn: Callable[[], nn.Module]
    input_fn: Callable[[], Tensor]
    configure: Callable[[AutoParallel], None] | None = None
    op_constraints: dict[str, Any] | None = field(default_factory=dict)
    input_placements: Callable[[int], list[Placements]] = _batch_pins
    output_placements: Callable[[int], list[Placements | None]] = _batch_pins
    parameter_memory_constraint: bool = True
    context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    meshes: tuple[tuple[int, ...], ...] = MESHES
    atol: float = 1e-5
    rtol: float = 1e-5
    limit: int | None = None  # at most this many sites per operator per build (a seeded sample)
    note: str = ""


def _fuzz_spec() -> Any:
    from ._fuzz import MENU, ModelSpec, Step

    # every menu pattern once, in menu order, between two linears; sizes even on every mesh
    steps = tuple(Step(k, 1) for k in MENU) + (Step("linear"),)
    return ModelSpec(batch=4, seq=4, heads=4, head_dim=4, steps=steps)


def sources() -> dict[str, Source]:
    """The sources by name: ``seed``, ``seed_swapped``, ``llama3``, ``falcon``, ``fuzz``, ``fuzz_all``."""
    from ..models import SeedBlock, SeedConfig, falcon_tiny, llama3_small
    from ._fuzz import FuzzModel

    # conformance.SWAPPED_CONFIG and SWAPPED (not imported: conformance imports the lab, which
    # imports this package): batch == seq, so the swapped shardings have equal local shapes
    seed_cfg = SeedConfig(num_heads=6, head_dim=8, batch=8, seq=8)
    swapped = ((Shard(0), Shard(1)), (Shard(1), Shard(0)))

    def seed_input() -> Tensor:
        return torch.randn(seed_cfg.batch, seed_cfg.seq, seed_cfg.hidden)

    def swapped_configure(autop: AutoParallel) -> None:
        from ._inject import find_nodes, pin_strategy, strategy_index

        (node,) = find_nodes(autop, torch.ops.aten.index_put.default)
        opt = autop.sharding_optimizer
        opt.add_node_constraint(node.args[0], swapped[0], constraint_name="pin_self")
        opt.add_node_constraint(node.args[2], swapped[1], constraint_name="pin_values")
        rr = (Replicate(), Replicate())
        pin_strategy(autop, node, strategy_index(autop, node, [swapped[0], rr, swapped[1]], swapped[0]),
                     name="pin_illegal")

    def swapped_context() -> contextlib.AbstractContextManager[Any]:
        from ._inject import offer_strategy

        rr = (Replicate(), Replicate())
        return offer_strategy(
            torch.ops.aten.index_put.default, input_placements=[swapped[0], rr, swapped[1]],
            output_placements=swapped[0],
        )

    llama_model, llama_input = llama3_small()
    falcon_model, falcon_input = falcon_tiny()
    spec = _fuzz_spec()
    return {
        "seed": Source(name="seed", model_fn=lambda: SeedBlock(seed_cfg), input_fn=seed_input,
                       note="seed block, 6 heads x 8, batch = seq = 8"),
        "seed_swapped": Source(
            name="seed_swapped", model_fn=lambda: SeedBlock(seed_cfg), input_fn=seed_input,
            configure=swapped_configure, op_constraints={"formulation": "explicit"}, context=swapped_context,
            parameter_memory_constraint=False,
            output_placements=lambda ndim: [None], meshes=((2, 2),),
            note="issue 10's swapped index_put case: producers pinned (S0,S1)/(S1,S0), the illegal "
                 "index_put strategy offered and pinned, explicit formulation (plugin redistribute nodes)",
        ),
        "llama3": Source(name="llama3", model_fn=lambda: _Logits(llama_model()), input_fn=llama_input,
                         atol=1e-4, rtol=1e-4, limit=3, note="llama3_small(): 2 layers, dim 64"),
        "falcon": Source(name="falcon", model_fn=lambda: _Logits(falcon_model()), input_fn=falcon_input,
                         atol=1e-4, rtol=1e-4, limit=3, note="falcon_tiny(): 1 layer, hidden 64, multi-query"),
        "fuzz": Source(
            name="fuzz", model_fn=lambda: FuzzModel(spec), input_fn=lambda: torch.randn(4, 4, 16),
            output_placements=lambda ndim: [None], parameter_memory_constraint=False, atol=1e-4, rtol=1e-4,
            note="the fuzz menu: " + ", ".join(s.kind for s in spec.steps),
        ),
        # the fuzz harness's own call: every planned redistribution a plugin node, so the plugin
        # operators have sites on every mesh
        "fuzz_all": Source(
            name="fuzz_all", model_fn=lambda: FuzzModel(spec), input_fn=lambda: torch.randn(4, 4, 16),
            output_placements=lambda ndim: [None], parameter_memory_constraint=False, atol=1e-4, rtol=1e-4,
            op_constraints={"materialize": "all"}, note="the fuzz menu, add_op_constraints(materialize='all')",
        ),
    }


@dataclass
class Built:
    """One source built on one mesh: what every mutant of it shares."""

    source: Source
    mesh_shape: tuple[int, ...]
    autop: AutoParallel
    placement: Any
    reference: Reference
    gm: GraphModule
    seconds: float


def build_source(source: Source, mesh_shape: tuple[int, ...]) -> Built:
    """Solve and apply ``source`` on ``mesh_shape`` as :func:`~._numerics.run_numerics` does."""
    from autoparallel.api import AutoParallel

    start = time.perf_counter()
    ndim = len(mesh_shape)
    reference = build_reference(source.model_fn, source.input_fn, seed=0)
    mesh = cpu_mesh(mesh_shape)
    with torch.device("meta"):
        meta_model = source.model_fn()
    traced = [(tuple(t.shape), t.dtype) for t in reference.inputs]

    def traced_inputs() -> tuple[Tensor, ...]:
        return tuple(torch.empty(shape, dtype=dtype) for shape, dtype in traced)

    with device_name(), source.context(), AutoParallel(meta_model, traced_inputs, mesh, dynamic=True) as autop:
        autop.add_input_constraints(source.input_placements(ndim))
        autop.add_output_constraints(source.output_placements(ndim))
        if source.parameter_memory_constraint:
            autop.add_parameter_memory_constraint()
        if source.configure is not None:
            source.configure(autop)
        if source.op_constraints is not None:
            autop.add_op_constraints(**source.op_constraints)
        placement = autop.optimize_placement()
        gm = apply_on_one_rank(autop, placement)
    seconds = time.perf_counter() - start
    logger.info("built %s on %s in %.1f s (%d nodes)", source.name, mesh_shape, seconds, len(gm.graph.nodes))
    return Built(source=source, mesh_shape=tuple(mesh_shape), autop=autop, placement=placement,
                 reference=reference, gm=gm, seconds=seconds)


# --------------------------------------------------------------------------------------------
# Graph helpers
# --------------------------------------------------------------------------------------------


class NotConstructible(Exception):
    """A mutation site where the break cannot be made with consistent shapes; the message says why."""


def _ops() -> dict[str, Any]:
    c10d = torch.ops._c10d_functional
    return {
        "all_gather": c10d.all_gather_into_tensor.default,
        "reduce_scatter": c10d.reduce_scatter_tensor.default,
        "all_reduce": c10d.all_reduce.default,
        "all_to_all_single": c10d.all_to_all_single.default,
        "shard_dim_alltoall": torch.ops._dtensor.shard_dim_alltoall.default,
    }


def _collective_kind(node: Node) -> str | None:
    if node.op != "call_function":
        return None
    for kind, target in _ops().items():
        if node.target is target:
            return kind
    return None


def _is(node: Any, name: str) -> bool:
    """``node`` is a call of the op overload whose qualified name ends with ``name``."""
    return (
        getattr(node, "op", None) == "call_function"
        and isinstance(node.target, torch._ops.OpOverload)
        and str(node.target).endswith(name)
    )


def _is_coordinate(node: Any) -> bool:
    return _is(node, "_runtime_compute_coordinate_on_dim.default")


def _wait_of(node: Node) -> Node:
    waits = [u for u in node.users if _is(u, "wait_tensor.default")]
    if len(waits) != 1 or len(node.users) != 1:
        raise NotConstructible(f"{node.name} is not used by exactly one wait_tensor")
    return waits[0]


def _group(gm: GraphModule, node: Node) -> tuple[Node, Any, int] | None:
    """``(group node, mesh, mesh dim)`` when ``node``'s group is ``mesh_get_process_group(mesh, k)``."""
    group = node.args[-1]
    if not _is(group, "mesh_get_process_group.default"):
        return None
    mesh_node, dim = group.args[0], group.args[1]
    if getattr(mesh_node, "op", None) != "get_attr":
        return None
    return group, getattr(gm, mesh_node.target), int(dim)


def _group_size(gm: GraphModule, node: Node) -> int:
    kind = _collective_kind(node)
    if kind == "all_gather":
        return int(node.args[1])
    if kind == "reduce_scatter":
        return int(node.args[2])
    found = _group(gm, node)
    if found is None:
        raise NotConstructible(f"{node.name}: its group is not a mesh dim, so its size is unknown")
    _, mesh, dim = found
    return int(mesh.size(dim))


def _val(arg: Any) -> Any:
    return arg.meta.get("val") if hasattr(arg, "meta") else arg


def _fake_mode(gm: GraphModule) -> Any:
    for node in gm.graph.nodes:
        fake = getattr(node.meta.get("val"), "fake_mode", None)
        if fake is not None:
            return fake
    raise NotConstructible("the graph carries no fake tensors to compute new shapes with")


def _shape(node: Node) -> tuple[Any, ...]:
    val = node.meta.get("val")
    if not isinstance(val, Tensor):
        raise NotConstructible(f"{node.name} has no tensor value")
    return tuple(val.shape)


def _concrete(shape: Sequence[Any], what: str) -> list[int]:
    if not all(isinstance(s, int) for s in shape):
        raise NotConstructible(f"{what} has a symbolic shape {tuple(shape)}")
    return [int(s) for s in shape]


class _Editor:
    """Adds nodes to a mutant's graph with their fake values, tagged ``meta["mutation"]``."""

    def __init__(self, gm: GraphModule, note: str) -> None:
        self.gm = gm
        self.graph: Graph = gm.graph
        self.fake = _fake_mode(gm)
        self.note = note

    def call(self, where: Node, target: Any, *args: Any, after: bool = False) -> Node:
        """A new node calling ``target(*args)``, before ``where`` (``after``: before the node that
        follows ``where``, so successive calls keep their order)."""
        with self.graph.inserting_before(where.next if after else where):
            node = self.graph.call_function(target, tuple(args))
        values = torch.fx.node.map_arg(node.args, _val)
        with self.fake:
            node.meta["val"] = target(*values)
        node.meta["mutation"] = self.note
        return node

    def empty_like(self, ref: Node, shape: Sequence[int]) -> Tensor:
        val = ref.meta["val"]
        with self.fake:
            return torch.empty(list(shape), dtype=val.dtype, device=val.device)


def copy_graph_module(gm: GraphModule) -> GraphModule:
    """A copy of ``gm`` with its own graph and node meta (shallow); attributes (meshes, constants)
    are shared read-only. ``copy.deepcopy`` can't be used: the ProcessGroups compile_on_one_rank
    puts in the graph don't copy."""
    graph = torch.fx.Graph()
    graph._codegen = copy.deepcopy(gm.graph._codegen)
    val_map: dict[Any, Any] = {}
    result = graph.graph_copy(gm.graph, val_map, return_output_node=True)
    if result is None:
        raise NotConstructible("the graph has no output")
    rv, out_node = result
    new_out = graph.output(rv)
    new_out.meta = copy.copy(out_node.meta)
    new = torch.fx.GraphModule(gm, graph)
    new.meta = dict(getattr(gm, "meta", {}))
    return new


def _erase_dead(graph: Graph, nodes: Sequence[Node]) -> None:
    """Erase ``nodes`` and the group/mesh nodes only they used, once nothing uses them."""
    pending = list(nodes)
    while pending:
        node = pending.pop()
        if node.graph is not graph or node.users:
            continue
        inputs = list(node.all_input_nodes)
        graph.erase_node(node)
        pending += [n for n in inputs if n.op == "get_attr" or _is(n, "mesh_get_process_group.default")]


def _tag(node: Node) -> str | None:
    return (node.meta.get("custom") or {}).get("apc_constraint")


# --------------------------------------------------------------------------------------------
# Operators
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class Site:
    """Where an operator applies: the node (by name, in the unmutated graph) and a variant."""

    operator: str
    node: str
    variant: str = ""


def _node(gm: GraphModule, name: str) -> Node:
    for node in gm.graph.nodes:
        if node.name == name:
            return node
    raise NotConstructible(f"no node {name!r} in the graph")


def _collectives(gm: GraphModule) -> list[Node]:
    return [n for n in gm.graph.nodes if _collective_kind(n) is not None]


# drop_collective ------------------------------------------------------------------------------


def _sites_drop(gm: GraphModule) -> list[Site]:
    return [Site("drop_collective", n.name) for n in _collectives(gm)]


def _apply_drop(gm: GraphModule, site: Site) -> str:
    node = _node(gm, site.node)
    kind = _collective_kind(node)
    wait = _wait_of(node)
    x = node.args[0]
    ed = _Editor(gm, f"drop {kind} {node.name}")
    aten = torch.ops.aten
    if kind in ("all_reduce", "all_to_all_single"):
        sub, what = x, "its input"
    elif kind == "all_gather":
        n = _group_size(gm, node)
        sub, what = ed.call(wait, aten.cat.default, [x] * n, 0, after=True), f"cat([x] * {n}, 0)"
    elif kind == "reduce_scatter":
        n = _group_size(gm, node)
        chunks = ed.call(wait, aten.chunk.default, x, n, 0, after=True)
        sub, what = ed.call(chunks, operator.getitem, chunks, 0, after=True), f"chunk(x, {n}, 0)[0]"
    else:  # shard_dim_alltoall
        n, gather_dim, shard_dim = _group_size(gm, node), int(node.args[1]), int(node.args[2])
        cat = ed.call(wait, aten.cat.default, [x] * n, gather_dim, after=True)
        chunks = ed.call(cat, aten.chunk.default, cat, n, shard_dim, after=True)
        sub = ed.call(chunks, operator.getitem, chunks, 0, after=True)
        what = f"chunk(cat([x] * {n}, {gather_dim}), {n}, {shard_dim})[0]"
    if _shape(sub) != _shape(wait):
        raise NotConstructible(f"{what} has shape {_shape(sub)}, the collective {_shape(wait)}")
    wait.replace_all_uses_with(sub)
    _erase_dead(gm.graph, [wait, node])
    return f"{kind} {node.name} replaced by {what}"


# reduce_op ------------------------------------------------------------------------------------

_REDUCE_OPS = ("sum", "avg", "max")


def _sites_reduce(gm: GraphModule) -> list[Site]:
    out = []
    for n in _collectives(gm):
        if _collective_kind(n) in ("all_reduce", "reduce_scatter"):
            out += [Site("reduce_op", n.name, op) for op in _REDUCE_OPS if op != n.args[1]]
    return out


def _apply_reduce(gm: GraphModule, site: Site) -> str:
    node = _node(gm, site.node)
    before = node.args[1]
    node.args = (node.args[0], site.variant, *node.args[2:])
    return f"{_collective_kind(node)} {node.name}: reduce op {before} -> {site.variant}"


# collective_dim -------------------------------------------------------------------------------


def _sites_dim(gm: GraphModule) -> list[Site]:
    out = []
    for n in _collectives(gm):
        kind = _collective_kind(n)
        ndim = len(_shape(n.args[0])) if isinstance(_val(n.args[0]), Tensor) else 0
        if kind in ("all_gather", "reduce_scatter"):
            out += [Site("collective_dim", n.name, f"dim{d}") for d in range(1, ndim)]
        elif kind == "shard_dim_alltoall":
            g, s = int(n.args[1]), int(n.args[2])
            out += [Site("collective_dim", n.name, f"gather{d}") for d in range(ndim) if d not in (g, s)]
            out += [Site("collective_dim", n.name, f"shard{d}") for d in range(ndim) if d not in (g, s)]
    return out


def _apply_dim(gm: GraphModule, site: Site) -> str:
    node = _node(gm, site.node)
    kind = _collective_kind(node)
    wait = _wait_of(node)
    n = _group_size(gm, node)
    out_shape = _concrete(_shape(wait), f"{wait.name}")
    ed = _Editor(gm, f"{kind} {node.name} along {site.variant}")
    aten = torch.ops.aten
    users = [u for u in wait.users]
    if kind == "all_gather":
        d = int(site.variant.removeprefix("dim"))
        chunks = ed.call(wait, aten.chunk.default, wait, n, 0, after=True)
        item_nodes: list[Node] = []
        for i in range(n):
            item_nodes.append(ed.call(item_nodes[-1] if item_nodes else chunks, operator.getitem, chunks, i,
                                      after=True))
        cat = ed.call(item_nodes[-1], aten.cat.default, item_nodes, d, after=True)
        sub = ed.call(cat, aten.reshape.default, cat, out_shape, after=True)
        what = f"gathered along dim {d} (cat(chunk(y, {n}, 0), {d})), reshaped to {out_shape}"
    elif kind == "reduce_scatter":
        d = int(site.variant.removeprefix("dim"))
        x = node.args[0]
        x_shape = _concrete(_shape(x), x.name)
        if x_shape[d] % n:
            raise NotConstructible(f"dim {d} of {x.name} ({x_shape[d]}) does not split {n} ways")
        chunks = ed.call(node, aten.chunk.default, x, n, d)
        items = [ed.call(node, operator.getitem, chunks, i) for i in range(n)]
        stacked = ed.call(node, aten.cat.default, items, 0)
        node.args = (stacked, *node.args[1:])
        scattered = list(x_shape)
        scattered[d] //= n
        node.meta["val"] = ed.empty_like(wait, scattered)
        wait.meta["val"] = ed.empty_like(wait, scattered)
        sub = ed.call(wait, aten.reshape.default, wait, out_shape, after=True)
        what = f"scattered along dim {d}, reshaped to {out_shape}"
    elif kind == "shard_dim_alltoall":
        which, d = site.variant[:-1], int(site.variant[-1])
        x_shape = _concrete(_shape(node.args[0]), node.args[0].name)
        g, s = int(node.args[1]), int(node.args[2])
        g, s = (d, s) if which == "gather" else (g, d)
        if x_shape[s] % n:
            raise NotConstructible(f"dim {s} of the input ({x_shape[s]}) does not split {n} ways")
        new_shape = list(x_shape)
        new_shape[g] *= n
        new_shape[s] //= n
        node.args = (node.args[0], g, s, *node.args[3:])
        node.meta["val"] = ed.empty_like(wait, new_shape)
        wait.meta["val"] = ed.empty_like(wait, new_shape)
        sub = ed.call(wait, aten.reshape.default, wait, out_shape, after=True)
        what = f"all_to_all with gather dim {g}, shard dim {s}, reshaped to {out_shape}"
    else:
        raise NotConstructible(f"{kind} has no dim")
    for user in users:
        user.replace_input_with(wait, sub)
    return f"{kind} {node.name} {what}"


# other_mesh_dim -------------------------------------------------------------------------------


def _coordinate_dims(node: Node) -> tuple[int, list[int]]:
    """The mesh-dim index a coordinate op reads, and the indices of its mesh view's mesh dims."""
    view = _val(node.args[0])
    if not isinstance(view, Tensor):
        raise NotConstructible(f"{node.name}: its mesh view has no value")
    # the view is the root mesh with a leading group dim, [-1, *mesh.shape]; the op's dim is a mesh dim
    return int(node.args[1]), list(range(view.dim() - 1))


def _sites_mesh_dim(gm: GraphModule) -> list[Site]:
    out = []
    for n in _collectives(gm):
        found = _group(gm, n)
        if found is not None and found[1].ndim > 1:
            out += [Site("other_mesh_dim", n.name, f"mesh{k}") for k in range(found[1].ndim) if k != found[2]]
    for n in gm.graph.nodes:
        if _is_coordinate(n):
            with contextlib.suppress(NotConstructible):
                dim, dims = _coordinate_dims(n)
                out += [Site("other_mesh_dim", n.name, f"coord{k}") for k in dims if k != dim]
    return out


def _regroup(gm: GraphModule, node: Node, k: int, ed: _Editor) -> str:
    """Put collective ``node`` on mesh dim ``k`` of its mesh (a new group node)."""
    found = _group(gm, node)
    if found is None:
        raise NotConstructible(f"{node.name}: its group is not a mesh dim")
    group, mesh, old = found
    kind = _collective_kind(node)
    if kind in ("all_gather", "reduce_scatter", "shard_dim_alltoall", "all_to_all_single") and (
        mesh.size(k) != mesh.size(old)
    ):
        raise NotConstructible(
            f"{kind} {node.name}: mesh dim {k} has size {mesh.size(k)}, dim {old} {mesh.size(old)}: "
            "the local shape would change"
        )
    with gm.graph.inserting_before(node):
        new_group = gm.graph.call_function(group.target, (group.args[0], k))
    new_group.meta = copy.copy(group.meta)
    new_group.meta["mutation"] = ed.note
    node.args = (*node.args[:-1], new_group)
    _erase_dead(gm.graph, [group])
    return f"{kind} {node.name}: group on mesh dim {k} instead of {old}"


def _apply_mesh_dim(gm: GraphModule, site: Site) -> str:
    node = _node(gm, site.node)
    ed = _Editor(gm, f"{node.name} on {site.variant}")
    if site.variant.startswith("mesh"):
        return _regroup(gm, node, int(site.variant.removeprefix("mesh")), ed)
    k = int(site.variant.removeprefix("coord"))
    old = node.args[1]
    node.args = (node.args[0], k, *node.args[2:])
    return f"rank coordinate {node.name} read on mesh dim {k} instead of {old}"


# plugin redistributes -------------------------------------------------------------------------


def _plugin_groups(gm: GraphModule) -> dict[str, list[Node]]:
    groups: dict[str, list[Node]] = defaultdict(list)
    for node in gm.graph.nodes:
        tag = _tag(node)
        if tag:
            groups[tag].append(node)
    return dict(groups)


def _data_nodes(gm: GraphModule) -> set[Node]:
    """Nodes that depend on a placeholder (values, not constants or meshes)."""
    out: set[Node] = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder" or any(a in out for a in node.all_input_nodes):
            out.add(node)
    return out


def _group_io(gm: GraphModule, tag: str) -> tuple[list[Node], Node, Node]:
    nodes = _plugin_groups(gm).get(tag)
    if not nodes:
        raise NotConstructible(f"no plugin nodes tagged {tag!r}")
    members = set(nodes)
    data = _data_nodes(gm)
    entries = {a for n in nodes for a in n.all_input_nodes if a not in members and a in data}
    exits = [n for n in nodes if any(u not in members for u in n.users)]
    if len(entries) != 1 or len(exits) != 1:
        raise NotConstructible(
            f"plugin redistribute {tag}: {len(entries)} inputs and {len(exits)} outputs, expected one of each"
        )
    return nodes, next(iter(entries)), exits[0]


def _sites_plugin_identity(gm: GraphModule) -> list[Site]:
    return [Site("plugin_identity", nodes[-1].name, tag) for tag, nodes in _plugin_groups(gm).items()]


def _apply_plugin_identity(gm: GraphModule, site: Site) -> str:
    nodes, entry, exit_ = _group_io(gm, site.variant)
    if _shape(entry) != _shape(exit_):
        raise NotConstructible(
            f"plugin redistribute {site.variant} changes the local shape {_shape(entry)} -> {_shape(exit_)}"
        )
    exit_.replace_all_uses_with(entry)
    _erase_dead(gm.graph, nodes)
    return f"plugin redistribute {site.variant} ({len(nodes)} nodes) replaced by its input {entry.name}"


def _sites_plugin_target(gm: GraphModule) -> list[Site]:
    out = []
    target_makers = ("reduce_scatter", "all_to_all_single", "shard_dim_alltoall")
    for tag, nodes in _plugin_groups(gm).items():
        if any(_collective_kind(n) in target_makers or _is_coordinate(n) for n in nodes):
            out.append(Site("plugin_wrong_target", nodes[-1].name, tag))
    return out


def _apply_plugin_target(gm: GraphModule, site: Site) -> str:
    nodes, _, _ = _group_io(gm, site.variant)
    ed = _Editor(gm, f"plugin redistribute {site.variant} with mesh dims swapped")
    changed = []
    for node in nodes:
        # what makes the target's shards (rank slices, reduce_scatter, all_to_all) moves to the other
        # mesh dim; what undoes the source's (all_gather, all_reduce) stays: swapping both would
        # transpose the block grid twice and give the right target
        if _collective_kind(node) in ("all_gather", "all_reduce"):
            continue
        if _collective_kind(node):
            found = _group(gm, node)
            if found is None or found[1].ndim != 2:
                continue
            changed.append(_regroup(gm, node, 1 - found[2], ed))
        elif _is_coordinate(node):
            dim, dims = _coordinate_dims(node)
            if len(dims) != 2:
                continue
            view = _val(node.args[0])
            if view.shape[1] != view.shape[2]:
                raise NotConstructible(f"{node.name}: the two mesh dims differ in size {tuple(view.shape)[1:]}")
            swapped = dims[1] if dim == dims[0] else dims[0]
            node.args = (node.args[0], swapped, *node.args[2:])
            changed.append(f"coordinate {node.name} on view dim {swapped}")
    if not changed:
        raise NotConstructible(f"plugin redistribute {site.variant} has nothing on a 2-D mesh to swap")
    return f"plugin redistribute {site.variant} with mesh dims swapped: " + "; ".join(changed)


# drop_rank_slice ------------------------------------------------------------------------------


def _rank_slices(gm: GraphModule) -> dict[Node, Node]:
    """Tensor-valued nodes whose scalar arguments depend on a rank coordinate -> that coordinate."""
    scalar_from: dict[Node, Node] = {}  # scalar node -> the coordinate it depends on
    out: dict[Node, Node] = {}
    for node in gm.graph.nodes:
        if _is_coordinate(node):
            scalar_from[node] = node
            continue
        deps = [scalar_from[a] for a in node.all_input_nodes if a in scalar_from]
        if not deps:
            continue
        if isinstance(node.meta.get("val"), Tensor) or node.op == "output":
            if node.op != "output":
                out[node] = deps[0]
        else:
            scalar_from[node] = deps[0]
    return out


def _sites_rank_slice(gm: GraphModule) -> list[Site]:
    return [Site("drop_rank_slice", n.name, "chunk0") for n in _rank_slices(gm)]


def _apply_rank_slice(gm: GraphModule, site: Site) -> str:
    node = _node(gm, site.node)
    coord = _rank_slices(gm).get(node)
    if coord is None:
        raise NotConstructible(f"{node.name} is not a rank slice")
    memo: dict[Node, Any] = {coord: 0}
    graph = gm.graph

    def clone(arg: Node) -> Any:
        if arg in memo:
            return memo[arg]
        if not any(clone_needed(a) for a in arg.all_input_nodes):
            return arg
        with graph.inserting_before(node):
            new = graph.node_copy(arg, clone)
        new.meta["mutation"] = "rank coordinate replaced by 0"
        memo[arg] = new
        return new

    def clone_needed(arg: Node) -> bool:
        return arg is coord or any(clone_needed(a) for a in arg.all_input_nodes if not isinstance(_val(a), Tensor))

    node.args = torch.fx.node.map_arg(node.args, clone)
    node.kwargs = torch.fx.node.map_arg(node.kwargs, clone)
    _erase_dead(graph, [coord])
    return f"rank slice {node.name}: every rank takes chunk 0 ({coord.name} replaced by 0)"


@dataclass(frozen=True, slots=True)
class Operator:
    """One mutation operator: what it breaks, where it applies, how it breaks it."""

    description: str
    sites: Callable[[GraphModule], list[Site]]
    apply: Callable[[GraphModule, Site], str]


OPERATORS: dict[str, Operator] = {
    "drop_collective": Operator("a collective and its wait replaced by its (reshaped) input", _sites_drop, _apply_drop),
    "reduce_op": Operator("all_reduce / reduce_scatter with another reduce op", _sites_reduce, _apply_reduce),
    "collective_dim": Operator("gather / scatter / all_to_all along another tensor dim", _sites_dim, _apply_dim),
    "other_mesh_dim": Operator("a collective or a rank coordinate on another mesh dim", _sites_mesh_dim,
                               _apply_mesh_dim),
    "plugin_identity": Operator("a plugin redistribute replaced by its input", _sites_plugin_identity,
                                _apply_plugin_identity),
    "plugin_wrong_target": Operator("a plugin redistribute with its two mesh dims swapped", _sites_plugin_target,
                                    _apply_plugin_target),
    "drop_rank_slice": Operator("a rank slice takes chunk 0 on every rank", _sites_rank_slice, _apply_rank_slice),
}


def find_sites(gm: GraphModule, operators: Sequence[str] | None = None) -> list[Site]:
    """Every site of ``gm`` where each of ``operators`` (default: all) applies, in graph order."""
    names = list(OPERATORS) if operators is None else list(operators)
    unknown = [n for n in names if n not in OPERATORS]
    if unknown:
        raise KeyError(f"unknown mutation operators {unknown}; there are: {', '.join(OPERATORS)}")
    return [site for name in names for site in OPERATORS[name].sites(gm)]


def make_mutant(gm: GraphModule, site: Site) -> tuple[GraphModule, str]:
    """A copy of ``gm`` with ``site`` broken, and what was done; :class:`NotConstructible` if it
    can't be done with consistent shapes. ``gm`` itself is never changed."""
    mutant = copy_graph_module(gm)
    what = OPERATORS[site.operator].apply(mutant, site)
    mutant.graph.lint()
    mutant.recompile()
    return mutant, what


# --------------------------------------------------------------------------------------------
# Running and classifying
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class MutantId:
    """The reproducible name of one mutant: ``source@mesh:operator:node[variant]``."""

    source: str
    mesh: tuple[int, ...]
    operator: str
    node: str
    variant: str = ""

    def __str__(self) -> str:
        mesh = "x".join(map(str, self.mesh))
        return f"{self.source}@{mesh}:{self.operator}:{self.node}" + (f"[{self.variant}]" if self.variant else "")


@dataclass(frozen=True, kw_only=True, slots=True)
class MutantResult:
    """One mutant's numbers and the verifier's verdict.

    ``numerics`` is ``exact``, ``wrong`` or ``crash`` (with the worst failing check or the error
    in ``numerics_detail``); ``verdict`` is ``clean``, ``flagged`` or ``error`` (the verifier
    raised), with its first violations and unknown ops in ``verifier_detail``.
    """

    id: MutantId
    what: str
    numerics: str
    numerics_detail: str
    verdict: str
    verifier_detail: str
    unknown: int = 0
    seconds: float = 0.0
    excerpt: str = ""

    @property
    def outcome(self) -> str:
        return classify(self.numerics, self.verdict)


@dataclass(frozen=True, kw_only=True, slots=True)
class Skipped:
    """A site that gives no mutant (not constructible) or a source that did not build."""

    id: MutantId
    reason: str


@dataclass(frozen=True, kw_only=True)
class MutationReport:
    """Every mutant's result, the sites that gave none, and the build time of every source."""

    results: tuple[MutantResult, ...]
    skipped: tuple[Skipped, ...] = ()
    builds: dict[str, float] = field(default_factory=dict)  # "source@mesh" -> seconds

    @property
    def mutants(self) -> tuple[MutantResult, ...]:
        return tuple(r for r in self.results if r.id.operator != "none")

    @property
    def originals(self) -> tuple[MutantResult, ...]:
        return tuple(r for r in self.results if r.id.operator == "none")

    @property
    def misses(self) -> tuple[MutantResult, ...]:
        return tuple(r for r in self.mutants if r.outcome == "MISS")

    @property
    def flagged_exact(self) -> tuple[MutantResult, ...]:
        return tuple(r for r in self.mutants if r.outcome == "flagged")

    @property
    def bad_originals(self) -> tuple[MutantResult, ...]:
        """Unmutated graphs that are not exact and clean."""
        return tuple(r for r in self.originals if r.outcome != "fine")

    @property
    def ok(self) -> bool:
        """No verifier miss and every unmutated graph exact and clean."""
        return not self.misses and not self.bad_originals

    def table(self) -> list[dict[str, Any]]:
        """One row per (source, mesh, operator): counts of the four outcomes, and not constructible."""
        rows: dict[tuple[str, tuple[int, ...], str], Counter[str]] = defaultdict(Counter)
        for r in self.results:
            rows[(r.id.source, r.id.mesh, r.id.operator)][r.outcome] += 1
        for s in self.skipped:
            rows[(s.id.source, s.id.mesh, s.id.operator)]["n/c"] += 1
        return [
            {"source": src, "mesh": "x".join(map(str, mesh)), "operator": op,
             **{k: counts.get(k, 0) for k in (*OUTCOMES.values(), "n/c")}}
            for (src, mesh, op), counts in sorted(rows.items())
        ]

    def to_json(self) -> dict[str, Any]:
        def result(r: MutantResult) -> dict[str, Any]:
            d = asdict(r)
            d["id"] = str(r.id)
            d["outcome"] = r.outcome
            return d

        return {
            "ok": self.ok,
            "totals": self.totals(),
            "table": self.table(),
            "misses": [result(r) for r in self.misses],
            "flagged_exact": [result(r) for r in self.flagged_exact],
            "bad_originals": [result(r) for r in self.bad_originals],
            "results": [result(r) for r in self.results],
            "skipped": [{"id": str(s.id), "reason": s.reason} for s in self.skipped],
            "builds": self.builds,
        }

    def totals(self) -> dict[str, int]:
        counts = Counter(r.outcome for r in self.mutants)
        return {"mutants": len(self.mutants), **{k: counts.get(k, 0) for k in OUTCOMES.values()},
                "originals": len(self.originals), "bad_originals": len(self.bad_originals),
                "not_constructible": sum(1 for s in self.skipped if s.id.operator != "none")}

    def __str__(self) -> str:
        cols = ["source", "mesh", "operator", *OUTCOMES.values(), "n/c"]
        rows = [[str(row[c]) for c in cols] for row in self.table()]
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
        t = self.totals()
        lines.append(
            f"mutants: {t['mutants']} (caught {t['caught']}, MISS {t['MISS']}, fine {t['fine']}, "
            f"flagged {t['flagged']}); not constructible {t['not_constructible']}; unmutated graphs "
            f"{t['originals']}, not exact+clean {t['bad_originals']}"
        )
        for title, items in (("unmutated graphs not exact and clean", self.bad_originals),
                             ("verifier misses (wrong numbers, clean verdict)", self.misses),
                             ("exact but flagged", self.flagged_exact)):
            if items:
                lines.append(f"{title}:")
                for r in items:
                    lines.append(f"  {r.id}: {r.what}")
                    lines.append(f"    numbers: {r.numerics} {r.numerics_detail}")
                    lines.append(f"    verifier: {r.verdict} {r.verifier_detail}")
        errors = [s for s in self.skipped if s.id.operator == "none"]
        for s in errors:
            lines.append(f"source did not build: {s.id}: {s.reason}")
        return "\n".join(lines)


Verifier = Callable[["AutoParallel", "GraphModule"], Any]


def default_verifier(autop: AutoParallel, gm: GraphModule) -> Any:
    """``apc.verify(autop, gm=gm)``."""
    from .._verify import verify

    return verify(autop, gm=gm)


def _numbers(built: Built, gm: GraphModule) -> tuple[str, str]:
    autop, saved = built.autop, built.autop.parallel_gm
    autop.parallel_gm = gm
    try:
        ref = built.reference
        run = run_parallel_graph(autop, built.placement, ref.model, ref.inputs, ref.grad_outputs)
        checks = compare(ref, run, atol=built.source.atol, rtol=built.source.rtol)
    except Exception as exc:  # noqa: BLE001 - a mutant that raises is numerically wrong
        lines = str(exc).strip().splitlines()
        return "crash", f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]
    finally:
        autop.parallel_gm = saved
    failed = [c for c in checks if not c.ok]
    if not failed:
        return "exact", ""
    worst = max(failed, key=lambda c: (c.max_abs_err if not math.isnan(c.max_abs_err) else math.inf))
    ratio = "-" if worst.ratio is None else f"{worst.ratio:.3f}"
    return "wrong", (f"{len(failed)}/{len(checks)} checks failed; worst {worst.name}: max_abs_err "
                     f"{worst.max_abs_err:.3g}, ratio {ratio}{' (' + worst.note + ')' if worst.note else ''}")


def _verdict(built: Built, gm: GraphModule, verifier: Verifier) -> tuple[str, str, int, tuple[str, ...]]:
    """``(clean | flagged | error, first violations and unknown ops, unknown count, violation nodes)``."""
    try:
        report = verifier(built.autop, gm)
    except Exception as exc:
        logger.debug("verifier raised", exc_info=True)
        return "error", f"{type(exc).__name__}: {str(exc).strip()[:300]}", 0, ()
    unknown = dict(getattr(report, "unknown", {}) or {})
    n_unknown = sum(unknown.values())
    violations = tuple(getattr(report, "violations", ()) or ())
    parts = [f"{v.kind} at {getattr(v.node, 'name', v.node)} ({v.op}): {v.reason}" for v in violations[:3]]
    if len(violations) > 3:
        parts.append(f"... {len(violations) - 3} more")
    if unknown:
        parts.append("unknown: " + ", ".join(f"{op} x{k}" for op, k in sorted(unknown.items())))
    flagged_at = tuple(str(getattr(v.node, "name", v.node)) for v in violations)
    return ("clean" if report.ok else "flagged"), "; ".join(parts)[:600], n_unknown, flagged_at


def _excerpt(gm: GraphModule, around: Sequence[str], radius: int = 4) -> str:
    """The mutant's graph around the nodes named ``around`` and its mutation nodes, as FX text
    (windows of ``radius`` nodes either side, merged; ``...`` between windows)."""
    nodes = list(gm.graph.nodes)
    names = set(around)
    marks = [i for i, n in enumerate(nodes) if n.name in names or "mutation" in n.meta]
    keep = sorted({j for i in marks for j in range(max(0, i - radius), min(len(nodes), i + radius + 1))})
    lines: list[str] = []
    for k, j in enumerate(keep):
        if k and j != keep[k - 1] + 1:
            lines.append("...")
        lines.append(nodes[j].format_node() or nodes[j].name)
    return "\n".join(lines)


class NumbersCache:
    """The numbers of mutants already run, by mutant id, checked against the mutant's code.

    LocalTensorMode runs of the larger sources take seconds each, the verifier far less: with a
    cache file the numbers of one run serve the next (e.g. after the verifier changed). An entry
    is used only if the rebuilt mutant's code hashes the same, so a build that came out different
    is run again. ``path`` None: in memory only.
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.entries: dict[str, list[str]] = {}
        if path is not None:
            with contextlib.suppress(FileNotFoundError), open(path) as f:
                self.entries = json.load(f)

    @staticmethod
    def _key(gm: GraphModule) -> str:
        import hashlib

        return hashlib.sha256(gm.code.encode()).hexdigest()[:16]

    def get(self, ident: MutantId, gm: GraphModule) -> tuple[str, str] | None:
        entry = self.entries.get(str(ident))
        if entry is None or entry[0] != self._key(gm):
            return None
        return entry[1], entry[2]

    def put(self, ident: MutantId, gm: GraphModule, numerics: str, detail: str) -> None:
        self.entries[str(ident)] = [self._key(gm), numerics, detail]

    def save(self) -> None:
        if self.path is not None:
            with open(self.path, "w") as f:
                json.dump(self.entries, f, indent=0)


def _run_one(
    built: Built, ident: MutantId, gm: GraphModule, what: str, verifier: Verifier, cache: NumbersCache | None = None
) -> MutantResult:
    start = time.perf_counter()
    cached = cache.get(ident, gm) if cache is not None else None
    if cached is None:
        numerics, ndetail = _numbers(built, gm)
        if cache is not None:
            cache.put(ident, gm, numerics, ndetail)
    else:
        numerics, ndetail = cached
    verdict, vdetail, unknown, flagged_at = _verdict(built, gm, verifier)
    result = MutantResult(id=ident, what=what, numerics=numerics, numerics_detail=ndetail, verdict=verdict,
                          verifier_detail=vdetail, unknown=unknown, seconds=time.perf_counter() - start)
    if result.outcome in ("MISS", "flagged") or (ident.operator == "none" and result.outcome != "fine"):
        result = MutantResult(**{**{f: getattr(result, f) for f in result.__slots__},
                                 "excerpt": _excerpt(gm, (ident.node, *flagged_at[:2]))})
    logger.info("%s: %s (%s / %s)", ident, result.outcome, numerics, verdict)
    return result


def mutate_built(
    built: Built,
    *,
    operators: Sequence[str] | None = None,
    verifier: Verifier = default_verifier,
    limit: int | None = None,
    seed: int = 0,
    cache: NumbersCache | None = None,
) -> tuple[list[MutantResult], list[Skipped]]:
    """The unmutated graph and every mutant of one build. ``limit`` keeps at most that many sites
    per operator (a seeded sample, the same for the same graph)."""
    src, mesh = built.source.name, built.mesh_shape
    results = [_run_one(built, MutantId(src, mesh, "none", "-"), built.gm, "unmutated", verifier, cache)]
    skipped: list[Skipped] = []
    by_op: dict[str, list[Site]] = defaultdict(list)
    for site in find_sites(built.gm, operators):
        by_op[site.operator].append(site)
    for op, sites in by_op.items():
        if limit is not None and len(sites) > limit:
            sites = sorted(random.Random(f"{seed}:{src}:{mesh}:{op}").sample(sites, limit))
        for site in sites:
            ident = MutantId(src, mesh, site.operator, site.node, site.variant)
            try:
                gm, what = make_mutant(built.gm, site)
            except NotConstructible as exc:
                skipped.append(Skipped(id=ident, reason=str(exc)))
                continue
            results.append(_run_one(built, ident, gm, what, verifier, cache))
    return results, skipped


def run_mutations(
    source_names: Sequence[str] | None = None,
    meshes: Sequence[tuple[int, ...]] | None = None,
    *,
    operators: Sequence[str] | None = None,
    verifier: Verifier = default_verifier,
    limit: int | None = None,
    seed: int = 0,
    materialize: str | None = None,
    numbers_cache: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> MutationReport:
    """Build every source on every mesh it supports (one build per pair) and run all its mutants.

    ``meshes`` None means each source's own meshes (:data:`MESHES`, or fewer); otherwise the
    intersection. ``materialize`` overrides the plugin call's ``materialize`` for every source
    (None: each source's own call). A source that fails to build is reported in ``skipped`` as
    operator ``none``. ``numbers_cache`` names a JSON file of :class:`NumbersCache`, read first
    and written after every build.
    """
    cache = NumbersCache(numbers_cache)
    table = sources()
    if materialize is not None:
        table = {n: replace(s, op_constraints={**(s.op_constraints or {}), "materialize": materialize})
                 for n, s in table.items()}
    names = list(table) if source_names is None else list(source_names)
    unknown = [n for n in names if n not in table]
    if unknown:
        raise KeyError(f"unknown sources {unknown}; there are: {', '.join(table)}")
    results: list[MutantResult] = []
    skipped: list[Skipped] = []
    builds: dict[str, float] = {}
    for name in names:
        source = table[name]
        for mesh in source.meshes:
            if meshes is not None and tuple(mesh) not in {tuple(m) for m in meshes}:
                continue
            key = f"{name}@{'x'.join(map(str, mesh))}"
            try:
                built = build_source(source, mesh)
            except Exception as exc:
                logger.debug("build failed", exc_info=True)
                skipped.append(Skipped(id=MutantId(name, tuple(mesh), "none", "-"),
                                       reason=f"{type(exc).__name__}: {str(exc).strip()[:300]}"))
                continue
            builds[key] = round(built.seconds, 1)
            start = time.perf_counter()
            cap = limit if limit is not None else source.limit
            r, s = mutate_built(built, operators=operators, verifier=verifier, limit=cap, seed=seed, cache=cache)
            cache.save()
            results += r
            skipped += s
            if progress is not None:
                counts = Counter(x.outcome for x in r[1:])
                progress(f"{key}: built in {built.seconds:.1f} s; unmutated {r[0].outcome}; {len(r) - 1} mutants "
                         f"in {time.perf_counter() - start:.1f} s ({dict(counts)}), {len(s)} not constructible")
    return MutationReport(results=tuple(results), skipped=tuple(skipped), builds=builds)


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def _mutate_cmd(args: argparse.Namespace) -> int:
    from .._cli import parse_mesh

    logging.getLogger("torch").setLevel(logging.ERROR)
    meshes = None if args.meshes is None else [parse_mesh(m) for m in args.meshes.split(",")]
    names = None if args.sources is None else args.sources.split(",")
    ops = None if args.operators is None else args.operators.split(",")
    report = run_mutations(names, meshes, operators=ops, limit=args.limit, seed=args.seed,
                           materialize=args.materialize, numbers_cache=args.numbers_cache,
                           progress=lambda line: print(line, flush=True))
    print(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_json(), f, indent=1, default=str)
        print(f"wrote {args.json}")
    return 0 if report.ok else 1


def add_subcommand(subparsers: Any) -> None:
    """Register ``mutate`` on the package CLI's subparsers."""
    p = subparsers.add_parser("mutate", help="break correct parallel graphs one thing at a time; the verifier "
                              "must agree with the numbers", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sources", default=None, help="comma list of seed, seed_swapped, llama3, falcon, fuzz, "
                   "fuzz_all (default: all)")
    p.add_argument("--meshes", default=None, help="comma list like 2,2x2,2x4,4x2 (default: each source's own)")
    p.add_argument("--operators", default=None, help=f"comma list of {', '.join(OPERATORS)} (default: all)")
    p.add_argument("--limit", type=int, default=None, help="at most this many sites per operator per build "
                   "(a seeded sample; default: all for seed, seed_swapped and fuzz, 3 for llama3 and falcon, "
                   "whose LocalTensorMode runs take seconds)")
    p.add_argument("--seed", type=int, default=0, help="seed of that sample (default 0)")
    p.add_argument("--materialize", choices=["table", "all"], default=None,
                   help="pass materialize=... to every source's add_op_constraints (default: the plugin's default)")
    p.add_argument("--json", default=None, help="also write the report as JSON to this file")
    p.add_argument("--numbers-cache", default=None, help="JSON file of mutants' LocalTensorMode numbers, reused "
                   "when a rebuilt mutant's code is the same (rerun the verifier without rerunning the numbers)")
    p.set_defaults(func=_mutate_cmd)
