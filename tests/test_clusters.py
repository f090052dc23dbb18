"""Guards the plugin on repeated layers (autoparallel's cluster links): one decision per cluster
root binds every layer, explicit's cost enters the objective once per layer (autoparallel's own
multiplier), and every layer gets its own materialized node — exact under LocalTensorMode; and
the plugin's analysis done once per cluster root (``_plugin.PER_CLUSTER``) with its shortcuts
(verdicts memoized by spec objects, nodes whose shapes the mesh divides skipped) adds exactly what
the plain analysis of every node adds (rows, bounds, notes, variables, sites, nested verdicts,
size rows as a plain build makes them) and leads to the same objective and strategy for every node."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from _ilp import reference_size_rows

from autoparallel_constraints.lab import run_model
from autoparallel_constraints.models import SeedConfig, SeedStack
from autoparallel_constraints.plan._plugin import get_state
from autoparallel_constraints.testing import (
    explain,
    find_nodes,
    offer_strategy,
    pin_strategy,
    run_numerics,
    strategy_index,
)

INDEX_PUT = torch.ops.aten.index_put.default
R = Replicate()
SELF, VALUES, RR = (Shard(0), Shard(1)), (Shard(1), Shard(0)), (R, R)
BATCH = (Shard(0), Replicate())
CONFIG = SeedConfig(num_heads=6, head_dim=8, batch=8, seq=8)


def _model():
    return SeedStack(CONFIG, layers=2)


def _offer():
    return offer_strategy(INDEX_PUT, input_placements=[SELF, RR, VALUES], output_placements=SELF)


def _pin_root_illegal(autop):
    nodes = find_nodes(autop, INDEX_PUT)
    assert len(nodes) == 2
    opt = autop.sharding_optimizer
    linked = {k[0] for k in opt.cluster_links}
    roots = [n for n in nodes if opt.node_map[n] not in linked]
    assert len(roots) == 1, "the two layers' index_put must be cluster-linked"
    pin_strategy(autop, roots[0], strategy_index(autop, roots[0], [SELF, RR, VALUES], SELF), name="pin_illegal")


def test_strict_constrains_cluster_roots_only(make_mesh):
    """strict with the illegal index_put strategy offered in both layers: one forbid constraint
    per cluster root with rejected strategies; the linked layer's twin gets none of its own."""
    with torch.device("meta"):
        model = _model()
    added = {}

    def configure(autop):
        added["a"] = autop.add_op_constraints(formulation="strict")
        added["sites"] = get_state(autop).sites

    with _offer():
        run_model(model, model.make_input, make_mesh((2, 2)), name="stack", formulation=None, configure=configure,
                  apply=False)
    sites = added["sites"]
    twins_with_bad = [s for s in sites if not s.is_root and s.bad_indices]
    roots_with_bad = [s for s in sites if s.is_root and s.bad_indices]
    assert twins_with_bad and roots_with_bad
    table_rows = {k: v for k, v in added["a"].constraints.items() if not k.startswith(("size.", "nested."))}
    assert table_rows == {} and added["a"].bounds == {"strict.forbid": len(roots_with_bad)}


@pytest.mark.full
def test_explicit_on_linked_layers_prices_each_layer_and_materializes_each(make_mesh):
    """The pinned illegal strategy binds both layers: one redistribute variable, its cost counted
    twice in the objective, two named nodes, audit clean and every number exact."""
    with torch.device("meta"):
        model = _model()
    with _offer():
        base, _ = run_model(
            model, model.make_input, make_mesh((2, 2)), name="stack", formulation=None,
            configure=_pin_root_illegal, parameter_memory_constraint=True, apply=False,
            input_placements=[BATCH], output_placements=[BATCH],
        )
    seen: dict = {}

    def configure(autop):
        _pin_root_illegal(autop)
        # index_put only: the rest of the plan is then the baseline's, so the objectives differ by
        # exactly the plugin's priced redistributions
        seen["added"] = autop.add_op_constraints("index_put", formulation="explicit")

    def after_apply(autop):
        seen["audit"] = apc.audit(autop)
        seen["objective"] = autop.sharding_optimizer.prob.objective.value()

    with _offer():
        report = run_numerics(
            _model, lambda: torch.randn(CONFIG.batch, CONFIG.seq, CONFIG.hidden), (2, 2),
            input_placements=[BATCH], output_placements=[BATCH],
            configure=configure, after_apply=after_apply,
        )
    # two index_put nodes, one cluster root with one repairable strategy (the pinned offer): one variable
    assert seen["added"].nodes == ("index_put", "index_put_1")
    assert seen["added"].variables == {"explicit.redistribute": 1}
    assert report.ok, explain(report)
    audit = seen["audit"]
    assert audit.ok, explain(audit)
    reds = audit.redistributes
    assert [r.node for r in reds] == ["index_put", "index_put_1"]
    assert len({r.constraint for r in reds}) == 1  # one decision for the cluster
    assert {r.parallel_node for r in reds} == {"apc_explicit_redistribute_000", "apc_explicit_redistribute_000_1"}
    assert seen["objective"] == pytest.approx(base.objective + 2 * reds[0].cost, rel=1e-6)


# ---------------------------------------------------------------------------------------------
# The plugin's work once per cluster root (``_plugin.PER_CLUSTER``) against every node


class _PlainMemo:
    """No memo: every strategy of every node checked afresh (the reference path's verdicts)."""

    hits = misses = 0

    def verdicts(self, binding, strategies):
        from autoparallel_constraints.table import check

        return tuple(tuple(check(binding, i, o)) for i, o in strategies)


def _plain_reference(patch):
    """The reference path's shortcuts off: no verdict memo (``CheckMemo``), every strategy of
    every node analysed for nested shards (no ``_splits_evenly`` skip, no ``_may_nest`` filter)."""
    from autoparallel_constraints.formulations import _sites
    from autoparallel_constraints.plan import _nested

    patch.setattr(_sites, "CheckMemo", _PlainMemo)
    patch.setattr(_nested, "_splits_evenly", lambda strategies, whole: False)
    patch.setattr(_nested, "_may_nest", lambda strategy, active: True)


def _build_both_ways(model_fn, input_fn, mesh_shape, input_placements, formulation="strict"):
    """Build and solve one model twice, matching, binding, sizing and nested analysis per cluster
    root with every shortcut, and then on every node the plain way (:func:`_plain_reference`);
    what each added (names, coefficients, right-hand sides, bounds, notes, variables), its sites
    and nested verdicts, and its plan (objective, every node's strategy)."""
    from autoparallel.api import AutoParallel

    from autoparallel_constraints.plan import _plugin
    from autoparallel_constraints.testing import cpu_mesh

    out = {}
    for per_cluster in (True, False):
        with torch.device("meta"):
            model = model_fn()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_plugin, "PER_CLUSTER", per_cluster)
            if not per_cluster:
                _plain_reference(patch)
            with AutoParallel(model, input_fn, cpu_mesh(mesh_shape)) as autop:
                autop.add_input_constraints(input_placements)
                added = autop.add_op_constraints(formulation=formulation, solver="highs")
                state = get_state(autop)
                a = state.additions
                record = {
                    "rows": {n: (sorted((v.name, k) for v, k in c.items()), c.constant, c.sense)
                             for n, c in a.constraints.items()},
                    "bounds": {n: (sorted(v.name for v in b.variables), b.low, b.up)
                               for n, b in a.bounds.items()},
                    "notes": dict(a.notes),
                    "variables": sorted(a.variables),
                    "objective_terms": sorted((v.name, c) for v, c in a.objective),
                    "sites": [(s.orig.name, s.node_idx, s.root_idx, s.rule.name, s.binding, s.verdicts)
                              for s in state.sites],
                    "nested_forbidden": {n.name: sorted(o) for n, o in state.nested_forbidden.items()},
                    "size_couplings": added.size_couplings,
                    "nodes": (added.nodes, added.constrained_nodes),
                }
                if not per_cluster:  # the size rows built the plain way, every coupling summed in full
                    from autoparallel_constraints.plan._sizes import find_size_couplings, is_dynamic

                    opt = autop.sharding_optimizer
                    to_opt = getattr(opt, "_orig_to_concrete", None) or {}
                    couplings = find_size_couplings(autop.gm.graph, lambda n: to_opt.get(n, n) in opt.strats,
                                                    mesh_shape, dynamic=is_dynamic(autop.gm))
                    record["size_rows"] = [(str(a.constraints[n]), a.notes[n]) for n in a.constraints
                                           if n.startswith("size.")]
                    record["reference_size_rows"] = reference_size_rows(opt, [
                        replace(c, consumer=to_opt.get(c.consumer, c.consumer),
                                leaves=tuple((to_opt.get(x, x), d) for x, d in c.leaves)) for c in couplings])
                placement = autop.optimize_placement()
                record["objective"] = autop.sharding_optimizer.prob.objective.value()
                record["plan"] = {n.name: str(s) for n, s in placement.items()}
        out[per_cluster] = record
    return out


def _assert_same(both, families=("nested.even", "strict.forbid"), linked=True):
    clustered, every = both[True], both[False]
    for key in clustered:
        assert clustered[key] == every[key], key
    assert every["size_rows"] == every["reference_size_rows"]
    # the comparison means something only with repeated layers and rows of each family
    if linked:
        assert any(site[1] != site[2] for site in every["sites"]), "the model needs cluster-linked table nodes"
    found = {n.rsplit("_", 1)[0] for n in [*every["rows"], *every["bounds"]]}
    assert set(families) <= found, found


@pytest.fixture(scope="module")
def seed_stack_both_ways():
    with _offer():  # index_put's illegal strategy in both layers: strict forbids it on the root
        return _build_both_ways(_model, lambda: _model().make_input(), (2, 2), [BATCH])


def test_per_cluster_adds_what_every_node_adds_on_the_seed_stack(seed_stack_both_ways):
    """The seed block stacked twice on 2x2 (cluster-linked layers, heads 6 nested uneven over
    both mesh dims, the illegal index_put strategy offered): rows, bounds, notes, variables, sites
    (bindings and verdicts) and the nested verdicts are equal, name for name and coefficient for
    coefficient, and so are the objective and every node's strategy."""
    _assert_same(seed_stack_both_ways, ("nested.even", "strict.forbid", "size.even"))


# on demand (2 layers: 45-55 s, 8 layers: 130 s on 2 cores); the seed stack (default tier) and the fuzz
# draws (full tier) compare the same paths in the tiers
@pytest.mark.parametrize("layers", [pytest.param(2, marks=pytest.mark.ondemand),
                                    pytest.param(8, marks=pytest.mark.ondemand)])
def test_per_cluster_adds_what_every_node_adds_on_llama3(layers):
    """autoparallel's llama3 (small shapes, 6 heads: nested uneven on 2x2) at 2 and 8 layers: its
    table ops have forbidden strategies and its heads nested-shard rows."""
    from autoparallel_constraints.models import llama3_small

    model_fn, input_fn = llama3_small(n_layers=layers, dim=96, n_heads=6, n_kv_heads=2)
    # no size family: its only couplings were CPU SDPA's tuple outputs read as sizes (a bug since
    # fixed); the seed stack above covers size rows
    _assert_same(_build_both_ways(model_fn, input_fn, (2, 2), [(Shard(0), R)]),
                 ("nested.even", "strict.forbid"))


@st.composite
def _repeated_fuzz_models(draw: st.DrawFn):
    """A fuzz model (``harness._fuzz``) on 2x2 whose steps run twice: autoparallel links the copies."""
    from autoparallel_constraints.harness._fuzz import MENU, ModelSpec, Step

    heads = draw(st.sampled_from([3, 6]))  # 3 or 6 heads over 2x2: nested uneven views
    kinds = draw(st.lists(st.sampled_from(MENU), min_size=1, max_size=3))
    steps = tuple(Step(k, draw(st.integers(0 if k == "index_put" else 1, heads - 1))) for k in kinds)
    return ModelSpec(batch=4, seq=4, heads=heads, head_dim=2, steps=steps + steps, mesh=(2, 2),
                     input_placements=("S0", "R"))


@pytest.mark.full
@settings(max_examples=3, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(_repeated_fuzz_models())
def test_per_cluster_adds_what_every_node_adds_on_fuzz_draws(spec):
    """Fuzz draws of a repeated block: the same additions, sites and plan either way."""
    from autoparallel_constraints.harness._fuzz import FuzzModel

    both = _build_both_ways(lambda: FuzzModel(spec), lambda: torch.randn(spec.batch, spec.seq, spec.hidden),
                            spec.mesh, [BATCH])
    _assert_same(both, families=(), linked=False)
