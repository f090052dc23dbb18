"""A read-only view of autoparallel's ILP for the formulations: table sites and their variables.

autoparallel's optimizer (``ShardingOptimizer``) works on a concretized copy of the joint graph.
Its decision variable ``x[i, a, o, j]`` says node ``i`` runs strategy ``o`` and its argument ``a``
comes from the producer's strategy ``j``; repeated layers share variables through
``cluster_links`` (linked key -> root key). A *site* is one node of that graph whose op has a table
row, with the co-sharding verdict of each of its strategies.
"""

from __future__ import annotations

import collections
import logging
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..seam import autop as upstream
from ..table import Binding, CheckMemo, Mismatch, OpRule, bind

if TYPE_CHECKING:
    import pulp
    from autoparallel.optimize_sharding import ShardingOptimizer

logger = logging.getLogger(__name__)

_INPUTS, _OUTPUTS = operator.attrgetter("input_specs"), operator.attrgetter("output_specs")

__all__ = ["ClusterLayout", "Site", "cluster_layout", "find_sites", "node_roots", "root_of", "strategy_indicator", "twin_count"]


@dataclass(frozen=True, slots=True)
class Site:
    """A table op in the optimizer's graph and the verdict on each of its strategies."""

    node: torch.fx.Node  # node of the optimizer's (concrete) graph
    orig: torch.fx.Node  # the same node in autop.gm, which apply_placement lowers
    node_idx: int
    root_idx: int  # the cluster root whose variables this node shares (itself if not linked)
    rule: OpRule
    binding: Binding
    verdicts: tuple[tuple[Mismatch, ...], ...]  # per strategy index; empty = co-sharded

    @property
    def is_root(self) -> bool:
        return self.node_idx == self.root_idx

    @property
    def bad_indices(self) -> tuple[int, ...]:
        return tuple(i for i, v in enumerate(self.verdicts) if v)

    @property
    def num_strategies(self) -> int:
        return len(self.verdicts)


def find_sites(
    opt: ShardingOptimizer, rules: Sequence[OpRule], memo: CheckMemo | None = None, *, per_cluster: bool = True
) -> tuple[list[Site], float]:
    """Sites of ``rules`` in the optimizer's graph, in graph order, and the seconds it took.

    ``per_cluster`` (the default): a node autoparallel links to a cluster root (repeated layers,
    ``cluster_links``) takes its root's binding and verdicts, as it takes its root's variables;
    only roots (and every node of a graph without repeated layers) are bound and checked. This is
    exact: autoparallel links two nodes only when their op, arguments (values and tensor
    metadata) and the printed strategies of the node and of its inputs (placements, shapes, dtypes
    of every spec, in order) are equal (``graph_clustering._hash_node``), and a binding and a
    verdict read nothing else. ``per_cluster=False`` binds and checks every node (the proof that
    both agree is ``tests/test_clusters.py``).

    Verdicts go through ``memo`` (a fresh :class:`CheckMemo` by default): a strategy whose
    (binding, input specs, output specs) was checked before — on this node or on a twin in
    another layer — reuses that verdict, so the checks grow with distinct layers, not depth.
    """
    t0 = time.perf_counter()
    memo = CheckMemo() if memo is None else memo
    by_op = {r.op: r for r in rules}
    root_of_idx = root_of(opt)  # one lookup per linked site, none for the others
    # root node index -> (binding, verdicts), or None when the root binds to nothing
    by_root: dict[int, tuple[Binding, tuple[tuple[Mismatch, ...], ...]] | None] = {}

    def analyse(node: torch.fx.Node, rule: OpRule) -> tuple[Binding, tuple[tuple[Mismatch, ...], ...]] | None:
        binding = bind(rule, node, is_input=lambda n: n in opt.strats)
        if binding is None:
            return None
        strategies = opt.strats[node].strategies
        return binding, memo.verdicts(binding, list(zip(map(_INPUTS, strategies), map(_OUTPUTS, strategies))))

    sites: list[Site] = []
    # the rows' nodes from FX's index by (op, target), in graph order: no pass over every node
    rule_of = {n: rule for op, rule in by_op.items() for n in opt.graph.find_nodes(op="call_function", target=op, sort=False)}
    strats, node_map, to_orig = opt.strats, opt.node_map, upstream.concrete_to_orig(opt)
    for node in sorted(rule_of):
        rule = rule_of[node]
        if node not in strats:
            continue
        idx = node_map[node]
        root_idx = root_of_idx(idx)
        if not per_cluster:
            found = analyse(node, rule)
        elif root_idx in by_root:
            found = by_root[root_idx]
        else:
            found = by_root[root_idx] = analyse(opt.nodes[root_idx], rule)
        if found is None:
            continue
        binding, verdicts = found
        sites.append(
            Site(
                node=node,
                orig=to_orig.get(node, node),
                node_idx=idx,
                root_idx=root_idx,
                rule=rule,
                binding=binding,
                verdicts=verdicts,
            )
        )
    logger.debug("apc: find_sites: %d sites, %d roots analysed, %d checks, %d reused", len(sites), len(by_root),
                  memo.misses, memo.hits)
    return sites, time.perf_counter() - t0


def strategy_indicator(opt: ShardingOptimizer, node_idx: int, out_idx: int) -> list[pulp.LpVariable]:
    """Variables whose sum is 1 exactly when node ``node_idx`` runs strategy ``out_idx``.

    Uses argument 0 (autoparallel's consistency constraints make every argument agree) and
    resolves cluster links, so a linked node yields its root's variables.
    """
    node = opt.nodes[node_idx]
    strategy = opt.strats[node].strategies[out_idx]
    n_inputs = len(strategy.redistribute_cost[0])
    return [upstream.pulp_variable(opt, (node_idx, 0, out_idx, j)) for j in range(n_inputs)]


def node_roots(opt: ShardingOptimizer) -> dict[int, int]:
    """Linked node index -> its cluster root's node index, for every linked node (one lookup per
    linked node: :attr:`ClusterLayout.roots`). The plugin's own passes ask :func:`root_of` for the
    nodes they meet instead."""
    return cluster_layout(opt).roots


def root_of(opt: ShardingOptimizer) -> Callable[[int], int]:
    """``idx -> the index of idx's cluster root`` (``idx`` itself when not linked), looked up on
    demand (:meth:`ClusterLayout.root`)."""
    return cluster_layout(opt).root


class ClusterLayout:
    """autoparallel's repeated-layer links, read per node and only for the nodes asked about.

    autoparallel links *every* key ``(i, a, o, j)`` of a linked node to the same root node
    (``create_cluster_links``), so the key ``(i, 0, 0, 0)`` names a linked node's root: one lookup
    in ``cluster_links`` (one entry per linked variable: 8·10^6 on llama3 32 layers 8x8, about a
    microsecond a lookup there), never a pass over it. Which nodes are linked at all comes from
    autoparallel's own set of them (``_cluster_linked_node_idxs``, built from the same links when
    it builds its variables; computed here from the ``(i, 0, 0, 0)`` keys where it is missing).
    A node has a link key exactly when it has ``(i, 0, 0, 0)``: autoparallel's walk over a
    node's options starts at argument 0, strategy 0, producer strategy 0 whenever it yields
    anything (``tests/test_depth.py`` compares both with a full scan of the links).

    So a pass that visits the unlinked nodes (the roots and every node of a non-repeated part,
    :attr:`unlinked`) and asks :meth:`root` for the linked nodes it meets costs O(1) per node it
    touches; the full maps (:attr:`roots`, :attr:`members`) cost one lookup per linked node and
    are built only when asked for.
    """

    __slots__ = ("_links", "_linked", "_n", "_root", "_roots", "_members", "_unlinked")

    def __init__(self, opt: ShardingOptimizer) -> None:
        self._links = opt.cluster_links
        self._n = len(opt.nodes)
        linked = upstream.cluster_linked_node_idxs(opt)
        if not isinstance(linked, (set, frozenset)):
            get = self._links.get
            linked = {i for i in range(self._n) if get((i, 0, 0, 0)) is not None} if self._links else set()
        self._linked: set[int] | frozenset[int] = linked
        self._root: dict[int, int] = {}  # linked node -> root, as looked up
        self._roots: dict[int, int] | None = None
        self._members: dict[int, list[int]] | None = None
        self._unlinked: tuple[int, ...] | None = None

    def root(self, idx: int) -> int:
        """The node index whose variables node ``idx`` shares: its cluster root, or itself."""
        if idx not in self._linked:
            return idx
        found = self._root.get(idx)
        if found is None:
            key = self._links.get((idx, 0, 0, 0))
            found = self._root[idx] = idx if key is None else key[0]
        return found

    def is_linked(self, idx: int) -> bool:
        return idx in self._linked

    @property
    def unlinked(self) -> tuple[int, ...]:
        """The node indices linked to no root — the roots and every node of a non-repeated part — in order."""
        if self._unlinked is None:
            linked = self._linked
            self._unlinked = tuple(i for i in range(self._n) if i not in linked)
        return self._unlinked

    @property
    def roots(self) -> dict[int, int]:
        """Linked node index -> its root's, for every linked node, in node order."""
        if self._roots is None:
            root = self.root
            self._roots = {i: root(i) for i in sorted(self._linked)}
        return self._roots

    @property
    def members(self) -> dict[int, list[int]]:
        """Root index -> its linked nodes' indices, in order."""
        if self._members is None:
            members: dict[int, list[int]] = {}
            for idx, root in self.roots.items():
                members.setdefault(root, []).append(idx)
            self._members = members
        return self._members


def cluster_layout(opt: ShardingOptimizer) -> ClusterLayout:
    """The optimizer's :class:`ClusterLayout`, cached on it while ``cluster_links`` keeps its size."""
    links = opt.cluster_links
    cached = upstream.get(opt, "node_roots")
    if cached is not None and cached[0] == len(links):
        return cached[1]
    layout = ClusterLayout(opt)
    upstream.put(opt, "node_roots", (len(links), layout))
    return layout


def twin_count(opt: ShardingOptimizer, root_idx: int) -> int:
    """How many linked nodes share ``root_idx``'s variables (repeated layers)."""
    roots = node_roots(opt)
    counts = upstream.get(opt, "twin_counts")
    if counts is None or counts[0] is not roots:
        counts = (roots, collections.Counter(roots.values()))
        upstream.put(opt, "twin_counts", counts)
    return counts[1][root_idx]


def strategy_index(opt: ShardingOptimizer, node: torch.fx.Node, chosen: Any) -> int | None:
    """Index of the OpSpec object ``chosen`` among ``node``'s strategies (identity)."""
    for i, s in enumerate(opt.strats[node].strategies):
        if s is chosen:
            return i
    return None
