"""Guards the plugin's work at depth: rule verdicts memoized by (binding, input specs, output spec)
(``CheckMemo``) are exactly the unmemoized ``check`` verdicts, twins of a repeated layer reuse
their root's verdicts (and per cluster are not checked at all), a second identical query hits the
memo, and ``add_op_constraints`` adds the same rows with and without the memo (strict's build
from either set of sites). Size rows of twins: tests/test_depth_sizes.py."""

from __future__ import annotations

import pytest
import torch
from autoparallel.api import AutoParallel
from torch.distributed.tensor.placement_types import Shard

import autoparallel_constraints  # noqa: F401  (installs add_op_constraints)
from autoparallel_constraints.formulations import Namer, _sites, make_formulation
from autoparallel_constraints.models import llama3_small
from autoparallel_constraints.table import CheckMemo, bind, check, default_table


class _NoMemo(CheckMemo):
    """The unmemoized path: every strategy checked afresh."""

    def verdicts(self, binding, strategies):  # type: ignore[override]
        return tuple(tuple(check(binding, i, o)) for i, o in strategies)


def _autop(mesh):
    model_fn, input_fn = llama3_small(n_layers=2)
    with torch.device("meta"):
        model = model_fn()
    return AutoParallel(model, input_fn, mesh)


@pytest.fixture(scope="module")
def llama3_sites():
    """llama3_small with 2 layers on a 1-D mesh of 2 (6 s to build; 2x2 takes 47 s): the sites found with a memo and without one."""
    from autoparallel_constraints.testing import cpu_mesh

    with _autop(cpu_mesh((2,))) as autop:
        autop.add_input_constraints([(Shard(0),)])
        opt = autop.sharding_optimizer
        rules = default_table().select(None)
        memo = CheckMemo()
        memoized, _ = _sites.find_sites(opt, rules, memo, per_cluster=False)
        plain, _ = _sites.find_sites(opt, rules, _NoMemo(), per_cluster=False)
        yield opt, rules, memo, memoized, plain


def test_memoized_verdicts_equal_unmemoized(llama3_sites):
    """Same sites, same per-strategy verdicts (mismatch objects compare equal), memo or not."""
    _, _, memo, memoized, plain = llama3_sites
    assert [s.node for s in memoized] == [s.node for s in plain]
    assert [s.verdicts for s in memoized] == [s.verdicts for s in plain]
    assert any(s.bad_indices for s in memoized), "the model must have strategies the table forbids"
    assert memo.misses == len(memo) and memo.misses + memo.hits == sum(s.num_strategies for s in memoized)


def test_twins_reuse_the_roots_verdicts(llama3_sites):
    """With 2 cluster-linked layers, most lookups are hits: at least the twin's strategies. Per
    cluster (the plugin's path), the twins are not looked up at all: the memo sees exactly the
    roots' strategies, and the sites are the per-node ones (bindings and verdicts equal)."""
    opt, rules, memo, memoized, _ = llama3_sites
    twins = [s for s in memoized if not s.is_root]
    assert twins, "llama3's layers must be cluster-linked"
    assert memo.hits >= sum(s.num_strategies for s in twins)
    per_root = CheckMemo()
    clustered, _ = _sites.find_sites(opt, rules, per_root)
    assert per_root.hits + per_root.misses == sum(s.num_strategies for s in clustered if s.is_root)

    def fields(sites):
        return [(s.node, s.orig, s.node_idx, s.root_idx, s.rule, s.binding, s.verdicts) for s in sites]

    assert fields(clustered) == fields(memoized)


def test_second_identical_query_hits(llama3_sites):
    """Asking again for a (binding, specs) already checked returns the stored verdict, counted a hit."""
    opt, _, memo, memoized, _ = llama3_sites
    site = next(s for s in memoized if s.bad_indices)
    strategy = opt.strats[site.node].strategies[site.bad_indices[0]]
    binding = bind(site.rule, site.node, is_input=lambda n: n in opt.strats)
    hits, misses = memo.hits, memo.misses
    verdict = memo.verdict(binding, strategy.input_specs, strategy.output_specs)
    assert (memo.hits, memo.misses) == (hits + 1, misses)
    assert verdict == site.verdicts[site.bad_indices[0]] == tuple(check(binding, strategy.input_specs, strategy.output_specs))


def test_strict_rows_same_with_and_without_memo(llama3_sites):
    """strict's build from memoized sites equals its build from unmemoized ones, row for row."""
    opt, _, _, memoized, plain = llama3_sites

    def rows(sites):
        additions = make_formulation("strict").build(opt, sites, Namer("strict", taken=opt.prob.constraints))
        return {name: str(c) for name, c in additions.constraints.items()} | {
            name: sorted(v.name for v in b.variables) for name, b in additions.bounds.items()
        }

    memo_rows = rows(memoized)
    assert memo_rows, "strict must constrain something here for the comparison to mean anything"
    assert memo_rows == rows(plain)


def test_node_roots_match_a_full_scan_of_cluster_links(llama3_sites):
    """The cluster layout (a lookup per linked node asked about, autoparallel's set of linked
    nodes) equals what a pass over every linked key gives: every linked node's root, each node's
    root one at a time, the unlinked nodes, each root's twins, and twin_count."""
    opt = llama3_sites[0]
    scan: dict[int, int] = {}
    for linked_key, root_key in opt.cluster_links.items():
        assert scan.setdefault(linked_key[0], root_key[0]) == root_key[0]
    opt.__dict__.pop("_apc_node_roots", None)  # a fresh layout: nothing looked up yet
    layout = _sites.cluster_layout(opt)
    assert scan and [layout.root(i) for i in range(len(opt.nodes))] == [scan.get(i, i) for i in range(len(opt.nodes))]
    assert _sites.node_roots(opt) == scan
    assert layout.unlinked == tuple(i for i in range(len(opt.nodes)) if i not in scan)
    assert layout.members == {r: sorted(i for i, q in scan.items() if q == r) for r in set(scan.values())}
    for root in set(scan.values()):
        assert _sites.twin_count(opt, root) == len({k for k, r in scan.items() if r == root})


def test_values_that_are_not_tensors_are_found_per_cluster(llama3_sites):
    """The size couplings' pass for values that are not tensors reads the unlinked nodes and the
    linked nodes that share a target with one of them (``not_tensor_nodes``): on the optimizer's
    graph and on the traced graph it copies, it finds what a pass over every node finds (CPU
    SDPA's tuples, forward and backward, in both layers)."""
    from autoparallel_constraints.plan import _sizes

    opt = llama3_sites[0]
    layout = _sites.cluster_layout(opt)
    traced = next(iter(opt._concrete_to_orig.values())).graph
    for graph in (opt.graph, traced):
        every = [n for n in graph.nodes if not isinstance(n.meta.get("val"), torch.Tensor)]
        assert _sizes.not_tensor_nodes(graph, opt) == every
    found = _sizes.not_tensor_nodes(opt.graph, opt)
    assert any(layout.is_linked(opt.node_map[n]) for n in found if n in opt.node_map), "needs linked tuple outputs"


def test_pin_checks_read_only_the_pins_variables(llama3_sites, monkeypatch):
    """strict and lazy check the user's pins before every solve. The check reads the pins' own
    variables (their keys from their names, confirmed against ``pulp_variables``) and never walks
    every strategy of every site (at 32 layers that walk was most of the plugin's time around a
    solve); it finds the owners the walk finds, and the conflict."""
    import pulp

    from autoparallel_constraints.formulations import _pins, strategy_indicator

    opt, _, _, memoized, _ = llama3_sites
    site = next(s for s in memoized if s.is_root and s.bad_indices)
    bad = site.bad_indices[0]
    pin = pulp.lpSum(strategy_indicator(opt, site.node_idx, bad)) == 1
    names = {v.name for v in pin.keys()}
    walked = {n: owner for n, owner in _pins.site_variables(opt, memoized).items() if n in names}
    assert walked and _pins._pin_owners(opt, memoized, [pin]) == walked

    opt.prob.addConstraint(pin, "pin_bad")
    try:
        monkeypatch.setattr(_pins, "site_variables", lambda *a: pytest.fail("the pin check walked every site"))
        conflicts = _pins.find_pin_conflicts(opt, memoized, forbidden=lambda s: set(s.bad_indices))
    finally:
        del opt.prob.constraints["pin_bad"]
    assert [(c[0] is site, c[1], c[2]) for c in conflicts] == [(True, "pin_bad", {bad})]




def test_highs_routes_build_autoparallels_objective_in_bulk(llama3_sites, monkeypatch):
    """``objective_in_bulk`` is autoparallel's ``_set_objective`` term for term (same variables,
    coefficients — twins' multipliers included — and order); an installed hook uses it on the
    HiGHS routes and leaves CBC's route on autoparallel's own step."""
    from autoparallel_constraints.plan import _solvers

    opt = llama3_sites[0]
    assert opt._root_to_linked, "the model must have linked layers (multipliers > 1)"
    type(opt)._set_objective(opt)
    expected = (list(opt.prob.objective.items()), opt.prob.objective.constant)
    bulk = _solvers.objective_in_bulk(opt)
    assert (list(bulk.items()), bulk.constant) == expected
    calls = []
    monkeypatch.setattr(_solvers, "objective_in_bulk", lambda o: calls.append(o) or bulk)
    try:
        hook = _solvers.install(opt, _solvers.solver_config("highs-lp"))
        opt._set_objective()
        assert calls == [opt] and opt.prob.objective is bulk
        hook.config = _solvers.solver_config("cbc")
        opt._set_objective()
        assert calls == [opt] and (list(opt.prob.objective.items()), opt.prob.objective.constant) == expected
    finally:  # the module's optimizer is shared: leave it as autoparallel made it
        for attr in ("_set_objective", "_apc_solver"):
            opt.__dict__.pop(attr, None)
        opt.prob.__dict__.pop("solve", None)
