"""The mutation operators: each finds the sites of a correct parallel graph where it applies and,
per site, returns a copy with exactly one thing broken (:data:`OPERATORS`, :func:`make_mutant`).

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
* ``plugin_wrong_target``: the same group delivering the target with its mesh dims permuted
  (on 2-D: swapped): what makes the target's shards (rank coordinates, reduce_scatter,
  all_to_all) reads the next mesh dim, cyclically; what undoes the source's (all_gather,
  all_reduce) is kept.
* ``drop_rank_slice``: a rank slice (the slice/narrow/split whose bounds come from a rank
  coordinate) takes chunk 0 on every rank (the coordinate replaced by 0 in its bounds).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import operator
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..seam.tracing import OpOverload, copy_codegen

if TYPE_CHECKING:
    from torch.fx import Graph, GraphModule, Node


logger = logging.getLogger(__name__)

__all__ = ["NotConstructible", "OPERATORS", "Operator", "Site", "copy_graph_module", "find_sites", "make_mutant"]

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
        and isinstance(node.target, OpOverload)
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
    copy_codegen(gm.graph, graph)
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
    ed = _Editor(gm, f"plugin redistribute {site.variant} with its target on the next mesh dim")
    changed = []
    for node in nodes:
        # what makes the target's shards (rank slices, reduce_scatter, all_to_all) moves to the next
        # mesh dim (on 2-D: the other one); what undoes the source's (all_gather, all_reduce) stays:
        # moving both would permute the block grid twice and give the right target
        if _collective_kind(node) in ("all_gather", "all_reduce"):
            continue
        if _collective_kind(node):
            found = _group(gm, node)
            if found is None or found[1].ndim < 2:
                continue
            changed.append(_regroup(gm, node, (found[2] + 1) % found[1].ndim, ed))
        elif _is_coordinate(node):
            dim, dims = _coordinate_dims(node)
            if len(dims) < 2:
                continue
            view = _val(node.args[0])
            swapped = dims[(dims.index(dim) + 1) % len(dims)]
            if view.shape[1 + dim] != view.shape[1 + swapped]:
                raise NotConstructible(f"{node.name}: mesh dims {dim} and {swapped} differ in size {tuple(view.shape)[1:]}")
            node.args = (node.args[0], swapped, *node.args[2:])
            changed.append(f"coordinate {node.name} on mesh dim {swapped} instead of {dim}")
    if not changed:
        raise NotConstructible(f"plugin redistribute {site.variant} has nothing on a mesh of 2 or more dims to move")
    return f"plugin redistribute {site.variant} with its target on the next mesh dim: " + "; ".join(changed)


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
    "plugin_wrong_target": Operator("a plugin redistribute with its mesh dims permuted (2-D: swapped)", _sites_plugin_target,
                                    _apply_plugin_target),
    "drop_rank_slice": Operator("a rank slice takes chunk 0 on every rank", _sites_rank_slice, _apply_rank_slice),
}
"""The mutation operators by name: what each breaks in a correct parallel graph (docs/mutation.md)."""


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
