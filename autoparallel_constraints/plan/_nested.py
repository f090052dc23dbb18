"""Nested uneven shards: placements DTensor cannot execute, kept out of every plan.

A tensor dim split by two or more mesh dims is a *nested* shard: the first mesh dim chunks it,
the next chunks each chunk. When the product of those mesh dims' sizes does not divide the dim,
the ranks hold different local sizes at the inner level, and DTensor (torch 2.13–2.15) refuses or
miscomputes the ops a plan then needs:

* a view that flattens or splits the dim raises in DTensor's view rule: ``[4, 6, 16]`` on
  ``(S(1), S(1), R)`` viewed as ``[4, 96]`` gives "shape '[4, 24]' is invalid for input of size
  128"; a Falcon-style fused qkv of ``heads + 2`` heads on 2×2×2 gives "Cannot shard unevenly
  distributed tensor: dimension 2 (size 5) is not evenly divisible by mesh dimension 1 (size 2)";
* autoparallel a54c252's apply gathers such a tensor on the flattened mesh as if it were chunked
  flat (``_optimize_same_nd_sharding_as_1d``): ``nn.Linear(6, 10)`` on 2×2 stores its bias
  ``(S(0), S(0))`` (rows 3, 2, 3, 2, gathered as 3, 3, 3, 1), and the output and the bias gradient
  come out wrong with no error;
* under ``compile_on_one_rank`` its redistribution guards on a data-dependent size.

A single mesh dim splitting a dim unevenly is not this case (DTensor pads it); neither is a nested
split the product divides. The family is deliberately whole: it forbids every strategy that
produces or expects a nested uneven shard anywhere, rather than the ops known to fail, because
each op that consumes such a tensor must first redistribute it, which is where two of the three
failures above happen.

Math (node n, strategy o, autoparallel's 0/1 variables x[n,0,o,j]; a spec s of shape S; mesh
sizes M_m; D_s(d) = {m : s.placements[m] shards dim d}):

    nested_uneven(s)  ⇔  ∃ d : |D_s(d)| ≥ 2  and  S[d] mod Π_{m ∈ D_s(d)} M_m ≠ 0
    U_n = {o : nested_uneven(s) for an output spec or an input spec s of strategy o}

    (N1) even:  Σ_{o ∈ U_n} Σ_j x[n,0,o,j] = 0          (one row per node with U_n ≠ ∅)

Hard in every formulation (no redistribution can make a nested uneven shard executable), built
by :func:`build_nested_constraints` (``nested.even_<idx>``) under ``add_op_constraints(sizes=True)``
(the default), checked on a plan by :func:`nested_uneven_specs` (the audit's ``nested_uneven``).
A node whose every strategy is nested uneven gets no row: the plan cannot avoid it, the row would
only make the ILP infeasible; it is logged and the audit reports it. A user pin on a nested uneven
strategy conflicts with the row: the solve is infeasible and the explanation names both. Mesh dims
of size 1 split nothing and are not counted. A ``StridedShard`` counts like a shard of its dim
(the product test); its split factor is not checked.

**The parameter memory budget.** autoparallel's ``add_parameter_memory_constraint`` budgets each
parameter at ``max(best ratio, factor)``, its best ratio taken over *all* its strategies; for a
parameter whose only fully split strategy is nested uneven (a bias of 10 on 2×2: ``(S(0), S(0))``
holds 3 of 10 rows, every executable one 5) the budget is then out of reach and the ILP turns
infeasible. :func:`rebudget_parameter_memory` recomputes the budget with the same rule over the
strategies (N1) leaves (``max(best allowed ratio, factor)``), after autoparallel rebuilds its rows
before each solve.
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any

import pulp
import torch

from ..core._placements import fmt_spec
from ..seam import autop as upstream
from ..seam.tracing import param_nodes
from ..table._model import _shard_dim
from ._sizes import _hint

if TYPE_CHECKING:
    from autoparallel.optimize_sharding import ShardingOptimizer

    from ..formulations import Additions, Namer
    from ..seam.dtensor import DTensorSpec

logger = logging.getLogger(__name__)

__all__ = ["NestedRows", "NestedUneven", "build_nested_constraints", "nested_uneven", "nested_uneven_specs", "rebudget_parameter_memory"]


@dataclass(frozen=True, slots=True)
class NestedUneven:
    """Tensor dim ``dim`` of size ``size`` split by ``mesh_dims`` (≥ 2), whose product does not divide it."""

    dim: int
    size: int
    mesh_dims: tuple[int, ...]
    ways: int

    def __str__(self) -> str:
        return f"dim {self.dim} (size {self.size}) split {self.ways} ways over mesh dims {self.mesh_dims}"


@dataclass(frozen=True, slots=True)
class NestedRows:
    """What :func:`build_nested_constraints` adds, and the strategies (N1) forbids per node (read
    again before every solve by :func:`rebudget_parameter_memory`, not recomputed)."""

    additions: Additions
    forbidden: dict[torch.fx.Node, frozenset[int]]


def _shape(spec: DTensorSpec | None, fallback: Any = None) -> tuple[int, ...] | None:
    """Concrete sizes of ``spec`` (or of ``fallback``), from hints: never a guard on a SymInt."""
    meta = getattr(spec, "tensor_meta", None)
    shape = meta.shape if meta is not None else getattr(fallback, "shape", None)
    if shape is None:
        return None
    sizes = [_hint(s) for s in shape]
    return None if None in sizes else tuple(sizes)  # an unbacked size: undecidable here


def nested_uneven(spec: Any, mesh_shape: Sequence[int], fallback: Any = None) -> NestedUneven | None:
    """The first tensor dim ``spec`` splits unevenly over two or more mesh dims, or None.

    Mesh dims of size 1 split nothing and are not counted. ``fallback``: a tensor whose shape
    stands in when ``spec`` has no tensor metadata.
    """
    placements = getattr(spec, "placements", None)
    if placements is None:
        return None
    dims = [(m, _shard_dim(p)) for m, p in enumerate(placements) if mesh_shape[m] > 1]
    dims = [(m, d) for m, d in dims if d is not None]
    if len(dims) < 2:
        return None
    shape = _shape(spec, fallback)
    if not shape:
        return None
    by_dim: dict[int, list[int]] = {}
    for m, d in dims:
        by_dim.setdefault(d % len(shape), []).append(m)
    for d, ms in sorted(by_dim.items()):
        ways = math.prod(mesh_shape[m] for m in ms)
        if len(ms) >= 2 and shape[d] % ways:
            return NestedUneven(dim=d, size=shape[d], mesh_dims=tuple(ms), ways=ways)
    return None


def _specs(specs: Any) -> Iterator[Any]:
    if isinstance(specs, (list, tuple)):
        for s in specs:
            yield from _specs(s)
    elif specs is not None:
        yield specs


def _strategy_uneven(strategy: Any, mesh_shape: Sequence[int], out_val: Any) -> tuple[str, Any, NestedUneven] | None:
    """(``"output"`` or ``"input <i>"``, the spec, what is uneven) for a strategy, or None."""
    outs = list(_specs(strategy.output_specs))
    vals = list(_specs(out_val)) if isinstance(out_val, (list, tuple)) else [out_val]
    for k, spec in enumerate(outs):
        found = nested_uneven(spec, mesh_shape, vals[k] if k < len(vals) else None)
        if found is not None:
            return "output", spec, found
    for i, spec in enumerate(_specs(strategy.input_specs or ())):
        found = nested_uneven(spec, mesh_shape)
        if found is not None:
            return f"input {i}", spec, found
    return None


def nested_uneven_specs(
    placement: dict[torch.fx.Node, Any], mesh_shape: Sequence[int]
) -> list[tuple[torch.fx.Node, str]]:
    """Every node of a plan (node -> chosen strategy) that produces or expects a nested uneven shard, with why."""
    bad = []
    for node, strategy in placement.items():
        found = _strategy_uneven(strategy, mesh_shape, node.meta.get("val"))
        if found is not None:
            where, spec, what = found
            bad.append((node, f"{where} {fmt_spec(spec)}: {what}, which DTensor cannot view or redistribute"))
    return bad


def build_nested_constraints(opt: ShardingOptimizer, namer: Namer, *, per_cluster: bool = True) -> NestedRows:
    """(N1) for every node of ``opt`` with a nested uneven strategy, one row per cluster root.

    ``per_cluster`` (the default): a node linked to a cluster root (repeated layers) takes the
    root's verdicts, as it takes the root's variables: autoparallel links nodes only when every
    strategy prints the same (placements and shapes of every spec, in order), which is all a
    verdict reads. ``False`` analyses every node (rows deduplicated by their variables). Either
    way a strategy is looked at only when one of its specs shards some tensor dim over two or more
    mesh dims of size > 1 (:func:`_may_nest`), and only then keyed and memoized.
    """
    from ..formulations import Additions
    from ..formulations._sites import cluster_layout, strategy_indicator

    out = Additions()
    forbidden: dict[torch.fx.Node, frozenset[int]] = {}
    mesh_shape = tuple(opt.mesh.shape)
    active = tuple(m for m, s in enumerate(mesh_shape) if s > 1)
    if len(active) < 2:
        return NestedRows(out, forbidden)  # nesting needs two mesh dims of size > 1
    whole = math.prod(mesh_shape[m] for m in active)
    layout = cluster_layout(opt) if per_cluster else None
    root_of = layout.root if layout is not None else (lambda idx: idx)
    seen: set[Any] = set()
    cache: dict[tuple[Any, ...], tuple[str, Any, NestedUneven] | None] = {}
    # node index (a root's) -> (forbidden strategies, an example), or None when none is forbidden
    verdicts: dict[int, tuple[list[int], tuple[str, Any, NestedUneven]] | None] = {}

    # autoparallel's placement-option cache hands out strategies whose spec objects are shared
    # (``_copy_op_strategy``): the same objects (and node shape) have the same verdict, looked
    # up by identity (the objects live in ``opt.strats`` throughout) before anything is read.
    # node shape -> (id(output_specs), id(input_specs)) -> verdict (None: none)
    by_objects: dict[Any, dict[tuple[int, int], tuple[str, Any, NestedUneven] | None]] = {}

    def analyse(node: torch.fx.Node, strategies: Sequence[Any]) -> tuple[list[int], Any] | None:
        val = node.meta.get("val")
        val_shape = _shape(None, val) if isinstance(val, torch.Tensor) else None  # once per node
        seen = by_objects.setdefault(val_shape, {})
        # every strategy's objects looked up at once (C loops): a node whose strategies were all
        # seen without a nested uneven shard (an unlinked copy of an op in another layer, most
        # nodes at depth) costs no Python step per strategy
        idents = list(zip(map(id, map(_OUTPUTS, strategies)), map(id, map(_INPUTS, strategies))))
        known = list(map(seen.get, idents, repeat(_UNSEEN)))
        if known.count(None) == len(known):
            return None
        if _splits_evenly(strategies, whole):  # a layer's parameters: every shape splits evenly
            return None
        bad: list[int] = []
        example = None
        for o, found in enumerate(known):
            if found is _UNSEEN:
                strategy = strategies[o]
                if not _may_nest(strategy, active):
                    found = None
                else:
                    key = _key(strategy, val_shape)
                    if key not in cache:
                        cache[key] = _strategy_uneven(strategy, mesh_shape, val)
                    found = cache[key]
                seen[idents[o]] = found
            if found is not None:
                bad.append(o)
                example = example or found
        return (bad, example) if bad else None

    visit: Any = opt.strats.items()
    if per_cluster:
        # analyse the roots (and the nodes of non-repeated parts); visit, in order, only the
        # nodes of the clusters with a verdict: the roots' twins are reached through the layout
        order: list[int] = []
        for idx in layout.unlinked:
            node = opt.nodes[idx]
            strategies = getattr(opt.strats[node], "strategies", None)
            found = verdicts[idx] = analyse(node, strategies) if strategies else None
            if found is not None:  # its twins: the one pass over the linked nodes, only then
                order += [idx, *layout.members.get(idx, ())]
        visit = [(opt.nodes[i], opt.strats[opt.nodes[i]]) for i in sorted(order)]
    unavoidable = []
    node_map, missing = opt.node_map, object()
    for node, op_strategy in visit:
        idx = node_map[node]
        root_idx = root_of(idx)
        found = verdicts.get(root_idx, missing)
        if found is None:  # most nodes: their root has no nested uneven strategy
            continue
        strategies = getattr(op_strategy, "strategies", None)
        if not strategies:
            continue
        if found is missing:
            anchor = opt.nodes[root_idx] if per_cluster else node
            found = verdicts[root_idx] = analyse(anchor, opt.strats[anchor].strategies)
            if found is None:
                continue
        bad, example = found
        if len(bad) == len(strategies):
            unavoidable.append(node.name)
            continue
        forbidden[node] = frozenset(bad)
        if per_cluster:
            if root_idx in seen:  # a repeated layer's node: its root's variables have their row
                continue
            seen.add(root_idx)
        terms = [v for o in bad for v in strategy_indicator(opt, idx, o)]
        if not per_cluster:
            names = tuple(sorted(v.name for v in terms))
            if names in seen:  # a repeated layer's node linked to the same variables
                continue
            seen.add(names)
        name = namer("even")
        out.constraints[name] = pulp.lpSum(terms) == 0
        where, spec, what = example
        out.notes[name] = (f"{node.name}: its {len(bad)} strategies with a nested uneven shard are forbidden "
                           f"(e.g. {where} {fmt_spec(spec)}: {what})")
    if unavoidable:
        logger.warning("apc nested: every strategy of %s splits a dim unevenly over two mesh dims; "
                       "left to the plan (the audit reports it)", ", ".join(unavoidable))
    logger.debug("apc nested: %d constraints, %d nodes analysed", len(out.constraints), len(verdicts))
    return NestedRows(out, forbidden)


def _may_nest(strategy: Any, active: Sequence[int]) -> bool:
    """Whether some spec of ``strategy`` shards one tensor dim over two or more of the mesh dims
    ``active`` (those of size > 1): the only strategies :func:`_strategy_uneven` can flag. Negative
    dims count as possibly equal to any (the exact test normalizes them)."""
    for spec in (*_specs(strategy.output_specs), *_specs(strategy.input_specs or ())):
        placements = getattr(spec, "placements", None)
        if placements is None:
            continue
        dims = []
        for m in active:
            p = placements[m]
            is_shard = _IS_SHARD.get(type(p))
            if is_shard is None:  # once per placement type: isinstance on torch's placements is slow
                is_shard = _IS_SHARD[type(p)] = _shard_dim(p) is not None
            if is_shard:
                dims.append(p.dim)
        if len(dims) >= 2 and (len(set(dims)) < len(dims) or min(dims) < 0):
            return True
    return False


_IS_SHARD: dict[type, bool] = {}
_OUTPUTS, _INPUTS = operator.attrgetter("output_specs"), operator.attrgetter("input_specs")
_OUTPUT_META, _META = operator.attrgetter("output_specs.tensor_meta"), operator.attrgetter("tensor_meta")
_UNSEEN = object()


def _splits_evenly(strategies: Sequence[Any], whole: int) -> bool:
    """Whether every spec of every strategy has tensor metadata whose every dim ``whole`` (the
    product of the mesh dims of size > 1) divides: then no product of two or more of those mesh
    dims leaves a remainder either (it divides ``whole``), and no strategy is nested uneven.

    Read in C loops, each distinct metadata object once (specs of one node share them); False
    whenever something is not a plain spec with metadata (a tuple of outputs, a missing input
    spec, no metadata), and the strategies are then looked at one by one."""
    try:
        metas = list(map(_OUTPUT_META, strategies))
        metas += map(_META, chain.from_iterable(map(_INPUTS, strategies)))
    except (AttributeError, TypeError):
        return False
    for meta in dict(zip(map(id, metas), metas)).values():
        shape = getattr(meta, "shape", None)
        if shape is None:
            return False
        for size in shape:
            size = _hint(size)
            if size is None or size % whole:
                return False
    return True


def _key(strategy: Any, val_shape: tuple[int, ...] | None) -> tuple[Any, ...]:
    """Placements and shapes of a strategy's specs (and the node's shape): what
    :func:`_strategy_uneven` reads."""
    def one(spec: Any) -> tuple[Any, ...]:
        return (tuple(spec.placements), _shape(spec))

    return (tuple(one(s) for s in _specs(strategy.output_specs)), val_shape,
            tuple(one(s) for s in _specs(strategy.input_specs or ())))


def rebudget_parameter_memory(
    opt: ShardingOptimizer, forbidden: dict[torch.fx.Node, frozenset[int]]
) -> tuple[float, float]:
    """Raise autoparallel's parameter memory rows by what (N1) takes from each parameter's best
    ratio (see the module docstring); returns what was added to the (high, low) budgets.
    ``forbidden``: the strategies (N1) forbids per node (:attr:`NestedRows.forbidden`).

    Parameters a user pinned are skipped, as autoparallel leaves them out of the rows."""
    rows = opt.prob.constraints
    factors = upstream.memory_factors(opt)
    high_row, low_row = rows.get("memory_constraint_high"), rows.get("memory_constraint_low")
    if factors is None or high_row is None or low_row is None:
        return 0.0, 0.0
    factor_low, factor_high = factors
    pinned = set(upstream.node_constraint_names(opt).values())
    add_high = add_low = 0.0
    for node in param_nodes(opt.graph):
        if node.name in pinned:
            continue
        banned = forbidden.get(node)
        if not banned:
            continue
        idx = opt.node_map[node]
        ratios = {}
        for o in range(len(opt.strats[node].strategies)):
            # LpConstraint.get, not `in`: `var in row` compares variables with ==, which builds a
            # constraint (always truthy)
            ratio = high_row.get(upstream.resolve_decision_var(opt, (idx, 0, o, 0)).var, None)
            if ratio is not None:
                ratios[o] = ratio
        allowed = [r for o, r in ratios.items() if o not in banned]
        if not allowed or len(allowed) == len(ratios):
            continue
        best, best_allowed = min(ratios.values()), min(allowed)
        add_high += max(best_allowed, factor_high) - max(best, factor_high)
        add_low += max(best_allowed, factor_low) - max(best, factor_low)
    # pulp keeps ``expr <= b`` (and ``>= b``) as ``expr - b``: a larger budget is a smaller constant
    high_row.constant -= add_high
    low_row.constant -= add_low
    if add_high or add_low:
        logger.info("apc nested: parameter memory budget raised by %.4f / %.4f (best executable ratios)", add_high, add_low)
    return add_high, add_low
