"""Guards the plugin together with autoparallel's own features: repeated-subgraph clusters,
input/output/node constraints and the parameter-memory constraint (each with strict and explicit:
audit clean, numbers exact under LocalTensorMode), resolve() and remove_constraints by the
plugin's names, and save/load (refused clearly: the plugin's constraints cannot be replayed)."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.lab import run_model
from autoparallel_constraints.models import SeedBlock, SeedConfig, SeedStack
from autoparallel_constraints.testing import (
    explain,
    find_nodes,
    offer_strategy,
    pin_strategy,
    run_numerics,
    strategy_index,
)

SMALL = SeedConfig(num_heads=6, head_dim=8, batch=8, seq=8)
INDEX_PUT = torch.ops.aten.index_put.default
R = Replicate()
S01 = (Shard(0), Shard(1))


def _pin_full(autop):
    (node,) = find_nodes(autop, INDEX_PUT)
    autop.sharding_optimizer.add_node_constraint(node.args[0], (R, Shard(0)), constraint_name="pin_full")


FEATURES = {
    # name: (model_fn, io placements, memory constraint, extra configure)
    "clusters": (lambda: SeedStack(SMALL, layers=2), [(Shard(0), R)], False, None),
    "io_constraints": (lambda: SeedBlock(SMALL), [S01], False, None),
    "node_constraint": (lambda: SeedBlock(SMALL), [(Shard(0), R)], False, _pin_full),
    "memory_constraint": (lambda: SeedBlock(SMALL), [(Shard(0), R)], True, None),
}


# The default tier runs one cell per formulation; the full tier the whole matrix.
DEFAULT_CELLS = {("io_constraints", "explicit"), ("memory_constraint", "strict")}
CELLS = [
    pytest.param(feature, formulation, marks=() if (feature, formulation) in DEFAULT_CELLS else pytest.mark.full)
    for feature in sorted(FEATURES)
    for formulation in ("strict", "explicit")
]


@pytest.mark.parametrize(("feature", "formulation"), CELLS)
def test_interop_matrix(feature, formulation):
    """Each autoparallel feature with each formulation (materialize="all"): audit clean, exact."""
    model_fn, io, memory, extra = FEATURES[feature]
    audits: list = []

    def configure(autop):
        if extra is not None:
            extra(autop)
        autop.add_op_constraints(formulation=formulation, materialize="all")

    report = run_numerics(
        model_fn,
        lambda: torch.randn(SMALL.batch, SMALL.seq, SMALL.hidden),
        (2, 2),
        input_placements=io,
        output_placements=io,
        parameter_memory_constraint=memory,
        configure=configure,
        after_apply=lambda autop: audits.append(apc.audit(autop)),
        atol=1e-4,
        rtol=1e-4,
    )
    assert report.ok, explain(report)
    assert audits[0].ok, explain(audits[0])


def test_resolve_and_remove_constraints_by_plugin_names(make_mesh):
    """strict with the producers of index_put pinned (self RS(0), values RS(1)) and the pre-fix
    strategy offered: the plan avoids it; autoparallel's remove_constraints(<plugin names>) then
    resolve() brings it back — the plugin's constraints are ordinary named ILP rows. Pinning the
    illegal strategy too raises; removing that pin and solving again works."""
    with torch.device("meta"):
        model = SeedBlock(SMALL)
    self_p, values_p = (R, Shard(0)), (R, Shard(1))
    illegal = [self_p, (R, R), values_p]

    def runs_illegal(placement) -> bool:
        spec = next(s for n, s in placement.items() if n.name == "index_put")
        return spec.input_specs[0].placements == self_p and spec.input_specs[2].placements == values_p

    def configure(autop):
        (node,) = find_nodes(autop, INDEX_PUT)
        opt = autop.sharding_optimizer
        opt.add_node_constraint(node.args[0], self_p, constraint_name="pin_self")
        opt.add_node_constraint(node.args[2], values_p, constraint_name="pin_values")
        added = autop.add_op_constraints(formulation="strict", forbid="row")  # rows: removable by name
        pin = pin_strategy(autop, node, strategy_index(autop, node, illegal, self_p), name="pin_bad")
        with pytest.raises(apc.StrictConflictError, match="pin_bad"):
            autop.optimize_placement()
        opt.remove_constraints(pin)
        assert not runs_illegal(autop.optimize_placement())
        opt.remove_constraints(list(added.constraint_names))
        assert runs_illegal(opt.resolve())

    with offer_strategy(INDEX_PUT, input_placements=illegal, output_placements=self_p):
        run_model(model, model.make_input, make_mesh((2, 2)), name="seed", formulation=None, configure=configure,
                  apply=False, input_placements=[(Shard(0), R)])


def test_save_load_refuses_clearly(make_mesh):
    """save()/load() replays autoparallel's constraint log by method name; the plugin's call is in
    that log, and replaying it (what load() does) raises PluginStateError naming the formulation
    and what to do, instead of silently dropping the plugin's constraints. (At the pin,
    ShardingOptimizer.save itself fails on these CPU graphs with "cannot pickle 'module' object",
    with or without the plugin, so the replay is exercised directly.)"""
    with torch.device("meta"):
        model = SeedBlock(SMALL)
    seen: dict = {}

    def configure(autop):
        autop.add_op_constraints(formulation="strict")
        seen["log"] = list(autop.sharding_optimizer._constraint_log)
        seen["opt"] = autop.sharding_optimizer

    run_model(model, model.make_input, make_mesh((2, 2)), name="seed", formulation=None, configure=configure, apply=False)
    (entry,) = [e for e in seen["log"] if e[0] == "apc_add_op_constraints"]
    method_name, kwargs = entry
    with pytest.raises(apc.PluginStateError, match="saved with autoparallel_constraints \\(strict.*add_op_constraints again"):
        getattr(seen["opt"], method_name)(**kwargs)
