"""Guards the plugin on repeated layers (autoparallel's cluster links): one decision per cluster
root binds every layer, explicit's cost enters the objective once per layer (autoparallel's own
multiplier), and every layer gets its own materialized node — exact under LocalTensorMode."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.lab import run_model
from autoparallel_constraints.models import SeedConfig, SeedStack
from autoparallel_constraints.plan._plugin import get_state
from autoparallel_constraints.testing import (
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
    assert report.ok, report
    audit = seen["audit"]
    assert audit.ok, audit
    reds = audit.redistributes
    assert [r.node for r in reds] == ["index_put", "index_put_1"]
    assert len({r.constraint for r in reds}) == 1  # one decision for the cluster
    assert {r.parallel_node for r in reds} == {"apc_explicit_redistribute_000", "apc_explicit_redistribute_000_1"}
    assert seen["objective"] == pytest.approx(base.objective + 2 * reds[0].cost, rel=1e-6)
