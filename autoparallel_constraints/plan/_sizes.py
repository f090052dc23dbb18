"""Size couplings: shape arguments that autoparallel's apply localizes by rule, not by DTensor.

A shape argument of a factory op (``full``, ``empty``, ``zeros``, …: ``args[0]``) and, with
``AutoParallel(..., dynamic=True)``, of a view op (``view``, ``_unsafe_view``, ``expand``:
``args[1]``) is made local by autoparallel's apply (``_localize_shape_arg``) in two ways:

* a **SymInt** computed from another tensor, ``sym_size(x, d)`` (possibly through ``*``, ``+``,
  ``-``, ``//``), is kept as it is, because the apply evaluates ``sym_size`` on ``x``'s *local*
  tensor. That is the consumer's local size only if ``x``'s dim ``d`` is sharded exactly like the
  consumer's output dim. Otherwise the graph builds a tensor of the wrong local size, e.g. the
  ``full`` of a slice's backward sized from a batch-sharded input while the gradient it receives
  is replicated (found by the fuzzer: "expected src to have a size equal to the slice of self
  ([4, 4, 4] vs [2, 4, 4])"; on a 2-D mesh autoparallel's apply itself fails with "narrow
  unexpectedly changed concrete size").
* a **concrete size** ``s`` split ``w`` ways is replaced by ``ceil(s / w)`` on every rank, which is
  wrong on the ranks torch.chunk gives a smaller shard unless ``w`` divides ``s``.

This is the size analogue of co-sharding: the tensor a size is read from and the tensor it is
used for must agree. :func:`find_size_couplings` finds every such use in a graph,
:func:`build_size_constraints` adds the ILP rows that make every plan agree, and
:func:`size_mismatches` checks a plan (the audit's ``size_mismatch``).

Math (mesh dims m with sizes M_m; a coupling c: consumer u, output dim i, size expression e):

    e = k · Π_{(x,d) ∈ L_c} size(x, d) + b       (parsed; anything else is "not a monomial")
    y[n,d,m] = Σ_{o : placements_o[m] shards dim d of n} Σ_j x[n,0,o,j]     (0/1, autoparallel's x)
    U_u,i    = {o : Π_{m : placements_o[m] shards dim i} M_m does not divide the size of dim i}

    (Z1) match:   e a monomial, b = 0:   ∀m:  Σ_{(x,d)∈L_c} y[x,d,m] − y[u,i,m] = 0
    (Z2) global:  e symbolic, otherwise: ∀m:  Σ_{(x,d)∈L_c} y[x,d,m] + y[u,i,m] = 0
    (Z3) even:    e a concrete int:           Σ_{o∈U_u,i} Σ_j x[u,0,o,j] = 0

(Z1) makes the local product equal the local output size (each mesh dim splits the output dim
exactly when it splits one factor); (Z2) keeps sizes with an offset, or of unknown form, global on
both sides; (Z3) lets a concrete size be split only evenly. All are hard in every formulation: no
redistribution can repair a size. Implemented in :func:`build_size_constraints` (named
``size.match_<idx>``, ``size.global_<idx>``, ``size.even_<idx>``).

**Sizes the apply does not localize.** A size expression passed to any *other* planned op (the
length of ``prims.iota``, what ``torch.arange(x.shape[0])`` traces to; the end of a ``slice``; …)
is also evaluated by the apply on the local tensors it reads, even when tracing specialized it to a
number, and reaches the op unchanged. The op runs with DTensor's semantics, i.e. expects the
global value, so the coupling is (Z2) without an output dim: every leaf it reads stays unsharded.
``iota`` and ``arange`` make positions, so their output dim is kept unsharded too (Z2 with the
output dim). Found by the zoo: transformers' ``sdpa_mask`` builds ``torch.arange(batch_size)`` from
the input ids' batch; with the ids batch-sharded the iota was half as long as its replicated plan,
and apply failed with "expand: attempting to expand a dimension of length 2 -> 4!".

Limits: (Z1) equates local sizes exactly when each split factor divides evenly; a product over an
unevenly split symbolic size (``2 · s`` with ``s`` odd and split) cannot be decided at plan time.
A size that tracing specialized to a number is taken as concrete (the apply then sees an int); if
autoparallel later makes that dim dynamic (an uneven input split), the apply keeps the leaf's
local size and only (Z3) on the consumer guards it.
"""

from __future__ import annotations

import collections
import logging
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pulp
import torch

from ..core._placements import fmt_spec
from ..seam import autop as upstream
from ..seam.tracing import tree_flatten
from ..table._model import _shard_dim

if TYPE_CHECKING:
    from autoparallel.optimize_sharding import ShardingOptimizer

    from ..formulations import Additions, Namer
    from ..seam.dtensor import DTensorSpec

logger = logging.getLogger(__name__)

__all__ = ["KINDS", "SizeCoupling", "build_size_constraints", "find_size_couplings", "is_dynamic", "not_tensor_nodes", "size_mismatches"]

Leaf = tuple[torch.fx.Node, int]  # (tensor node, dim) of a sym_size


@dataclass(frozen=True, slots=True)
class _Monomial:
    """``k · Π leaves + b``; the parse of a size expression."""

    k: int
    leaves: tuple[Leaf, ...]
    b: int


KINDS = ("match", "global", "even")


@dataclass(frozen=True, slots=True)
class SizeCoupling:
    """Output dim ``out_dim`` of ``consumer`` gets its size from ``expr`` (``out_dim`` None: a
    size argument of an op the apply does not localize, which constrains only the leaves).

    ``kind``: ``"match"`` (a monomial over ``leaves`` without offset: shard ``out_dim`` on exactly
    the mesh dims that shard the leaves, Z1), ``"global"`` (another symbolic form: both sides
    unsharded, Z2) or ``"even"`` (the concrete ``size``: split only by a divisor, Z3).
    """

    consumer: torch.fx.Node
    out_dim: int | None
    kind: str
    expr: str
    leaves: tuple[Leaf, ...] = ()
    size: int | None = None

    def describe(self) -> str:
        if self.out_dim is None:
            return f"{self.consumer.name} size argument {self.expr}"
        return f"{self.consumer.name} dim {self.out_dim} = {self.expr}"


def _size_ops() -> tuple[frozenset[Any], frozenset[Any]]:
    """(factory ops with the shape in args[0], view ops with it in args[1]): autoparallel's own sets."""
    from autoparallel.shardings.propagation_rules import TENSOR_FACTORY_OPS

    factories = frozenset(t for t in TENSOR_FACTORY_OPS if t != torch.ops.aten.scalar_tensor.default)
    return factories, upstream.view_ops()


_TEXT_DEPTH = 6  # a size expression deeper than this is named by its node (ProphetNet's are hundreds deep)


def _text(value: Any, depth: int = 0) -> str:
    if not isinstance(value, torch.fx.Node):
        if isinstance(value, (list, tuple)):
            return f"[{', '.join(_text(v, depth + 1) for v in value)}]"
        return repr(value)
    if value.target == torch.ops.aten.sym_size.int:
        return f"size({value.args[0].name}, {value.args[1]})"
    if depth >= _TEXT_DEPTH:
        return value.name
    symbol = {operator.mul: "*", operator.add: "+", operator.sub: "-", operator.floordiv: "//"}.get(value.target)
    if symbol is not None and len(value.args) == 2:
        return f"({_text(value.args[0], depth + 1)} {symbol} {_text(value.args[1], depth + 1)})"
    name = getattr(value.target, "__name__", str(value.target))
    return f"{name}({', '.join(_text(a, depth + 1) for a in value.args)})"


def _parse(value: Any) -> _Monomial | None:
    """``value`` as ``k · Π leaves + b``, or None when it has another form."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _Monomial(0, (), value)
    if not isinstance(value, torch.fx.Node) or value.op != "call_function":
        return None
    if value.target == torch.ops.aten.sym_size.int:
        x, d = value.args
        val = x.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return None
        return _Monomial(1, ((x, d % val.dim() if val.dim() else d),), 0)
    if value.target == torch.ops.aten.sym_numel.default:  # Π of every local size
        x = value.args[0]
        val = x.meta.get("val")
        return _Monomial(1, tuple((x, d) for d in range(val.dim())), 0) if isinstance(val, torch.Tensor) else None
    # only size arithmetic is followed: never recurse into tensor ops
    if value.target not in (operator.add, operator.sub, operator.mul, operator.floordiv) or len(value.args) != 2:
        return None
    a, b = (_parse(v) for v in value.args)
    if a is None or b is None:
        return None
    if value.target in (operator.add, operator.sub):
        sign = 1 if value.target == operator.add else -1
        if not b.leaves:  # (k·Π + b1) ± c
            return _Monomial(a.k, a.leaves, a.b + sign * b.b)
        if not a.leaves and sign == 1:  # c + (k·Π + b2)
            return _Monomial(b.k, b.leaves, a.b + b.b)
        return None  # a sum of two sizes, or c − size: not a monomial
    if value.target == operator.mul:
        if not a.leaves or not b.leaves:  # a constant factor scales everything
            const, mono = (a, b) if not a.leaves else (b, a)
            return _Monomial(mono.k * const.b, mono.leaves, mono.b * const.b)
        if a.b == 0 and b.b == 0:
            return _Monomial(a.k * b.k, a.leaves + b.leaves, 0)
        return None
    if value.target == operator.floordiv and not b.leaves:
        if not a.leaves and b.b:
            return _Monomial(0, (), a.b // b.b)
        if b.b == 1:
            return a
    return None


def find_size_couplings(
    graph: torch.fx.Graph,
    has_strategy: Callable[[torch.fx.Node], bool],
    mesh_shape: Sequence[int],
    *,
    dynamic: bool,
    not_tensors: Iterable[torch.fx.Node] | None = None,
) -> list[SizeCoupling]:
    """Every shape argument autoparallel's apply localizes by rule, in graph order.

    ``graph`` is the traced graph with its symbolic metadata (``autop.gm``, not the optimizer's
    concretized copy): a size node that tracing specialized to a number reaches the apply as an
    int and is localized like a concrete size. ``has_strategy(node)`` says whether a node is part
    of the plan (others are not localized). View ops count only when ``dynamic`` (static views
    are localized by DTensor). A concrete size counts only if some split of the mesh would not
    divide it. ``not_tensors``: the nodes of ``graph`` whose value is not a tensor, if known
    (:func:`not_tensor_nodes`); None looks at every node.
    """
    factories, views = _size_ops()
    total = math.prod(mesh_shape)
    out: list[SizeCoupling] = []
    read: dict[torch.fx.Node, tuple[tuple[Leaf, ...], str]] = {}
    # The nodes that can couple, in graph order, without looking at every node's target: the
    # factories (and with ``dynamic`` the views) from FX's index by target, and the users of a
    # node whose value is a size (not a tensor, nor a tuple of them): only those read a size (_unlocalized).
    shaped = factories | views if dynamic else factories
    candidates = {n for t in shaped for n in graph.find_nodes(op="call_function", target=t, sort=False)}
    if not_tensors is None:
        not_tensors = (n for n in graph.nodes if not isinstance(n.meta.get("val"), torch.Tensor))
    for node in not_tensors:
        # a tuple of tensors (a multi-output op's) is data: a reader couples only through another
        # argument that is a size, whose users these are too (llama3: CPU SDPA's, 2 a layer)
        if not _holds_tensors(node):
            candidates.update(u for u in node.users if u.op == "call_function" and u.target not in views)
    for node in sorted(candidates):
        if not has_strategy(node):
            continue
        if node.target in factories:
            position = 0
        elif node.target in views:  # only with ``dynamic``: DTensor localizes static views' sizes
            position = 1
        else:
            out.extend(_unlocalized(node, has_strategy, read))
            continue
        val = node.meta.get("val")
        if len(node.args) <= position or not isinstance(node.args[position], (list, tuple)):
            continue
        if not isinstance(val, torch.Tensor) or val.dim() != len(node.args[position]):
            continue
        for out_dim, value in enumerate(node.args[position]):
            if not isinstance(value, torch.fx.Node) or _specialized(value):
                size = _hint(val.shape[out_dim])
                if size is not None and size % total:
                    out.append(SizeCoupling(consumer=node, out_dim=out_dim, kind="even", expr=str(size), size=size))
                continue
            mono = _parse(value)
            leaves = mono.leaves if mono is not None else tuple(_leaves(value))
            leaves = tuple((x, d) for x, d in leaves if has_strategy(x))
            kind = "match" if mono is not None and mono.b == 0 and mono.leaves else "global"
            out.append(SizeCoupling(consumer=node, out_dim=out_dim, kind=kind, expr=_text(value), leaves=leaves))
    return out


def not_tensor_nodes(graph: torch.fx.Graph, opt: ShardingOptimizer) -> list[torch.fx.Node] | None:
    """The nodes of ``graph`` whose value is not a tensor (a size, a tuple), in graph order,
    without a pass over every node: the nodes no cluster root stands for are read, and a linked
    node only when its target is that of a root whose value is not a tensor. None where that
    cannot be told (``graph`` is neither the optimizer's graph nor the graph it copied, or has
    nodes the optimizer has no strategy for, e.g. the size arithmetic of a dynamic graph): then
    every node is read.

    Exact because autoparallel links a node to a root only when their targets and the values of
    all their arguments are equal (``graph_clustering._hash_node``): the same op on equal inputs
    gives a value of the same kind, so a linked node's value is a tensor whenever its root's is.
    ``tests/test_clusters.py`` compares the couplings found either way.
    """
    from ..formulations._sites import cluster_layout

    # the optimizer's graph is a node-for-node copy of the traced one (``_concrete_to_orig``)
    to_graph = {} if graph is opt.graph else upstream.concrete_to_orig(opt)
    if to_graph is None or len(graph.nodes) != len(opt.nodes):
        return None
    nodes = opt.nodes
    if nodes and to_graph.get(nodes[0], nodes[0]).graph is not graph:
        return None
    found: set[torch.fx.Node] = set()
    targets: set[tuple[str, Any]] = set()
    for idx in cluster_layout(opt).unlinked:
        node = to_graph.get(nodes[idx], nodes[idx])
        if not isinstance(node.meta.get("val"), torch.Tensor):  # the traced value: its kind is the copy's
            found.add(node)
            targets.add((node.op, node.target))
    for op, target in targets:
        for node in graph.find_nodes(op=op, target=target, sort=False):
            if node not in found and not isinstance(node.meta.get("val"), torch.Tensor):
                found.add(node)
    return sorted(found)


def _position_ops() -> frozenset[Any]:
    """Factories whose values are positions (the apply does not localize them)."""
    aten = torch.ops.aten
    return frozenset({torch.ops.prims.iota.default, aten.arange.default, aten.arange.start, aten.arange.start_step})


def _unlocalized(
    node: torch.fx.Node,
    has_strategy: Callable[[torch.fx.Node], bool],
    read: dict[torch.fx.Node, tuple[tuple[Leaf, ...], str]] | None = None,
) -> list[SizeCoupling]:
    """(Z2) for the size arguments of ``node``, an op the apply does not localize: every size node
    among its arguments that reads a planned tensor's dims (see the module docstring). ``read``
    keeps each size node's planned leaves and text for the next consumer of the same node (a
    multi-output op's results are read by one ``getitem`` each)."""
    read = {} if read is None else read
    # only a size node among the inputs can couple: most nodes have none (no flattening then)
    if all(isinstance(x.meta.get("val"), torch.Tensor) for x in node.all_input_nodes):
        return []
    produced = tree_flatten(node.meta.get("val"))[0]
    if not any(isinstance(v, torch.Tensor) for v in produced):  # size arithmetic itself, not a consumer
        return []
    flat = tree_flatten((node.args, node.kwargs))[0]
    position_op = node.target in _position_ops()
    out = []
    for value in flat:
        if not isinstance(value, torch.fx.Node) or _holds_tensors(value):
            continue
        if value not in read:
            leaves = tuple((x, d) for x, d in _leaves(value) if has_strategy(x))
            read[value] = (leaves, _text(value) if leaves else "")
        leaves, text = read[value]
        if leaves:
            out.append(SizeCoupling(consumer=node, out_dim=0 if position_op else None, kind="global",
                                    expr=text, leaves=leaves))
    return out


def _holds_tensors(node: torch.fx.Node) -> bool:
    """A tensor, or a tuple of them (a ``local_map`` region's outputs, read through ``getitem``):
    data, not a size expression; size analysis neither couples nor walks through it."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor) or (isinstance(val, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in val)):
        return True  # a tensor item is a leaf: no flattening needed to tell
    return any(isinstance(v, torch.Tensor) for v in tree_flatten(val)[0])


def _specialized(value: torch.fx.Node) -> bool:
    """A size node whose value tracing fixed to a number: the apply sees an int, not a SymInt."""
    val = value.meta.get("val")
    if isinstance(val, int):
        return True
    expr = getattr(getattr(val, "node", None), "expr", None)
    return expr is not None and not getattr(expr, "free_symbols", True)


def _hint(size: Any) -> int | None:
    if isinstance(size, int):
        return size
    hint = getattr(getattr(size, "node", None), "hint", None)
    return int(hint) if hint is not None else None


def is_dynamic(gm: torch.fx.GraphModule) -> bool:
    """Whether a traced graph has symbolic input sizes (``AutoParallel(..., dynamic=True)``)."""
    return any(
        isinstance(s, torch.SymInt)
        for n in gm.graph.find_nodes(op="placeholder")
        if isinstance(n.meta.get("val"), torch.Tensor)
        for s in n.meta["val"].shape
    )


def _leaves(value: Any) -> list[Leaf]:
    """Every tensor dim an expression reads (for expressions that are not monomials).

    ``sym_size(x, d)`` reads dim d; any other size op on a tensor (``sym_numel``,
    ``sym_stride``, ...) is taken to read every dim of it. Tensor nodes are never walked through.
    """
    found: list[Leaf] = []
    stack = [value]
    seen: set[torch.fx.Node] = set()
    while stack:
        v = stack.pop()
        if not isinstance(v, torch.fx.Node) or v in seen:
            continue
        seen.add(v)
        if v.target == torch.ops.aten.sym_size.int:
            x, d = v.args
            val = x.meta.get("val")
            found.append((x, d % val.dim() if isinstance(val, torch.Tensor) and val.dim() else d))
        elif not _holds_tensors(v):
            for a in v.args:
                val = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
                if isinstance(val, torch.Tensor):
                    found.extend((a, d) for d in range(val.dim()))
                elif isinstance(a, torch.fx.Node):
                    stack.append(a)
    return found


def _shards(spec: DTensorSpec, mesh_dim: int, dim: int) -> bool:
    return _shard_dim(spec.placements[mesh_dim]) == dim


def _single_spec(specs: Any) -> DTensorSpec | None:
    if isinstance(specs, (list, tuple)):
        return None
    return specs


def _ways(spec: DTensorSpec, dim: int, mesh_shape: Sequence[int]) -> int:
    return math.prod(size for m, size in enumerate(mesh_shape) if _shards(spec, m, dim))


def size_mismatches(
    couplings: Sequence[SizeCoupling], spec_of: Callable[[torch.fx.Node], DTensorSpec | None], mesh_shape: Sequence[int]
) -> list[tuple[SizeCoupling, str]]:
    """The couplings a plan breaks, each with why (``spec_of(node)``: the node's planned output spec)."""
    bad: list[tuple[SizeCoupling, str]] = []
    for c in couplings:
        out_spec = _single_spec(spec_of(c.consumer))
        leaf_specs = [(x, d, _single_spec(spec_of(x))) for x, d in c.leaves]
        if out_spec is None or any(s is None for _, _, s in leaf_specs):
            continue
        where = f"{c.consumer.name} {fmt_spec(out_spec)}"
        if c.kind == "even":
            ways = _ways(out_spec, c.out_dim, mesh_shape)
            if c.size % ways:
                bad.append((c, f"{c.describe()}: split {ways} ways, which autoparallel localizes as "
                               f"ceil({c.size}/{ways}) on every rank ({where})"))
            continue
        sides = "; ".join(f"{x.name} {fmt_spec(s)}" for x, _, s in leaf_specs) or "no planned leaf"
        for m in range(len(mesh_shape)):
            n_leaves = sum(_shards(s, m, d) for _, d, s in leaf_specs)
            n_out = int(c.out_dim is not None and _shards(out_spec, m, c.out_dim))
            if c.kind == "match" and n_leaves != n_out:
                what = "the output dim, not the size it is read from" if n_out > n_leaves else "the size it is read from, not the output dim"
            elif c.kind == "global" and n_leaves + n_out:
                what = "a size that must stay global"
            else:
                continue
            bad.append((c, f"{c.describe()}: mesh dim {m} splits {what} ({where}; {sides})"))
            break
    return bad


def build_size_constraints(
    opt: ShardingOptimizer,
    couplings: Sequence[SizeCoupling],
    namer: Namer,
    to_opt: Mapping[torch.fx.Node, torch.fx.Node] | None = None,
    *,
    per_cluster: bool = True,
) -> Additions:
    """(Z1)–(Z3) for every coupling (and mesh dim), deduplicated across repeated layers.

    ``to_opt`` maps the couplings' nodes to the optimizer's graph (``opt._orig_to_concrete``).
    A coupling whose nodes resolve to the cluster roots of one built before builds nothing:
    ``per_cluster`` (the default) takes a node's root for the node, as autoparallel does (it
    links nodes whose strategies print the same, placements included); ``False`` also compares
    the placements of every strategy of each node.
    """
    from ..formulations import Additions, _sites
    from ..formulations._sites import strategy_indicator

    out = Additions()
    seen: set[tuple] = set()
    mesh_shape = tuple(opt.mesh.shape)

    def strategies(node: torch.fx.Node, keep: Callable[[DTensorSpec], bool]) -> list[pulp.LpVariable]:
        node = to_opt.get(node, node) if to_opt is not None else node
        idx = opt.node_map[node]
        terms = []
        for o, strategy in enumerate(opt.strats[node].strategies):
            spec = _single_spec(strategy.output_specs)
            if spec is not None and keep(spec):
                terms.extend(strategy_indicator(opt, idx, o))
        return terms

    def add(kind: str, expr: pulp.LpAffineExpression, note: str) -> None:
        key = (kind, tuple(sorted((v.name, coef) for v, coef in expr.items())))
        if not expr or key in seen:
            return
        seen.add(key)
        name = namer(kind)
        out.constraints[name] = expr == 0
        out.notes[name] = note

    # A repeated layer's coupling over nodes linked to the same roots, whose strategies hold the
    # same placements, builds the root's rows again (its variables resolve to the root's): skip
    # it before building (on llama3 8 layers 8x8 the sums had 184,018 terms, most of them twins').
    root_of = _sites.root_of(opt)  # looked up for the coupled nodes only
    fingerprints: dict[int, tuple[Any, ...]] = {}

    idents: dict[torch.fx.Node, Any] = {}

    def ident(node: torch.fx.Node) -> tuple[int, tuple[Any, ...]] | int:
        found = idents.get(node)
        if found is None:
            found = idents[node] = _ident(node)
        return found

    def _ident(node: torch.fx.Node) -> tuple[int, tuple[Any, ...]] | int:
        node = to_opt.get(node, node) if to_opt is not None else node
        idx = opt.node_map[node]
        if per_cluster:
            return root_of(idx)
        fp = fingerprints.get(idx)
        if fp is None:
            fp = fingerprints[idx] = tuple(
                None if (spec := _single_spec(s.output_specs)) is None else tuple(spec.placements)
                for s in opt.strats[node].strategies
            )
        return root_of(idx), fp

    by_dim: dict[tuple[Any, int, int], list[pulp.LpVariable]] = {}

    def dim_terms(node: torch.fx.Node, dim: int, m: int, node_ident: Any = None) -> list[pulp.LpVariable]:
        """y[node, dim, m]'s variables (strategies whose output spec shards ``dim`` on mesh dim
        ``m``), built once per node identity (a linked node has its root's)."""
        key = (ident(node) if node_ident is None else node_ident, dim, m)
        terms = by_dim.get(key)
        if terms is None:
            terms = by_dim[key] = strategies(node, lambda spec: _shards(spec, m, dim))
        return terms

    built: set[tuple[Any, ...]] = set()
    built_rows: set[tuple[Any, ...]] = set()
    for c in couplings:
        consumer = ident(c.consumer)
        leaves = [(ident(x), x, d) for x, d in c.leaves]
        key = (c.kind, c.out_dim, c.size, consumer, tuple((i, d) for i, _, d in leaves))
        if key in built:
            continue
        built.add(key)
        if c.kind == "even":
            uneven = strategies(c.consumer, lambda spec, c=c: c.size % _ways(spec, c.out_dim, mesh_shape) != 0)
            add("even", pulp.lpSum(uneven), f"{c.describe()} is split only evenly")
            continue
        sign = -1 if c.kind == "match" else 1
        for m in range(len(mesh_shape)):
            # The row is Σ over its parts' sums; parts equal to a row built before (the same
            # nodes' roots, dims and signs, with multiplicity) give the same expression, which
            # ``add`` would drop: skip building it (llama3 32 layers 8x8: each layer's unlinked
            # attention backward couples to the linked forward's q, k, v, 260 sums of ~2,400
            # terms for 4 rows).
            parts = [(i, d, 1) for i, x, d in leaves if dim_terms(x, d, m, i)]
            if c.out_dim is not None and dim_terms(c.consumer, c.out_dim, m, consumer):
                parts.append((consumer, c.out_dim, sign))
            row_key = (c.kind, m, frozenset(collections.Counter(parts).items()))
            if row_key in built_rows:
                continue
            built_rows.add(row_key)
            leaf_terms = [v for x, d in c.leaves for v in dim_terms(x, d, m)]
            out_terms = dim_terms(c.consumer, c.out_dim, m) if c.out_dim is not None else []
            add(c.kind, pulp.lpSum(leaf_terms) + sign * pulp.lpSum(out_terms), f"{c.describe()} (mesh dim {m})")
    logger.debug("apc sizes: %d couplings, %d constraints", len(couplings), len(out.constraints))
    return out
