"""Guards the public call ``autop.add_op_constraints``: it exists after import, returns what it
added by family with ``<formulation>.<family>_<idx>`` names, refuses bad input with package errors
that name the fix, and leaves the optimizer's problem untouched when it fails."""

from __future__ import annotations

import pytest
import torch
from autoparallel.api import AutoParallel
from torch.distributed.tensor.placement_types import Shard

import autoparallel_constraints as apc
from autoparallel_constraints.models import AddMul


def _autop(mesh):
    with torch.device("meta"):
        model = AddMul()
    return AutoParallel(model, lambda: torch.randn(8, 4, 16), mesh)


def _problem_fingerprint(opt):
    prob = opt.prob
    return (tuple(prob.constraints), len(prob.variables()), str(prob.objective))


@pytest.mark.parametrize("forbid", ["bounds", "row"])
def test_add_op_constraints_is_installed_and_reports_families(make_mesh, forbid):
    """After import, AutoParallel has add_op_constraints; names are <formulation>.<family>_<idx>
    (a swapped add strategy, self (S0,S1) with other (S1,S0), is offered so strict has something
    to forbid; square batch x seq keeps the local shapes equal, as autoparallel's cost model needs).
    strict forbids by upper bounds by default (no row) and by one row with ``forbid="row"``.
    The solver avoids the offered strategy, and picks it again once the forbid is lifted (the rows
    removed, the bounds put back): input (S1,S0), output (S0,S1) and a 512x512 batch x seq make it
    the cheapest plan."""
    from autoparallel_constraints.formulations import Strict
    from autoparallel_constraints.testing import chosen_strategy, find_nodes, offer_strategy

    assert AutoParallel.add_op_constraints is apc.add_op_constraints
    s01, s10 = (Shard(0), Shard(1)), (Shard(1), Shard(0))
    bad_add = offer_strategy(torch.ops.aten.add.Tensor, input_placements=[s01, s10], output_placements=s01)
    with torch.device("meta"):
        model = AddMul()
    with bad_add as offered, AutoParallel(model, lambda: torch.randn(512, 512, 16), make_mesh((2, 2))) as autop:
        autop.add_input_constraints([s10])
        autop.add_output_constraints([s01])
        form = "strict" if forbid == "bounds" else Strict(forbid=forbid)
        n_rows = len(autop.sharding_optimizer.prob.constraints)
        # CBC: the offered strategy ties another of equal cost, and CBC's search is the one that
        # picks the offered one once the forbid is lifted (HiGHS's vertex is the other)
        added = autop.add_op_constraints(["add", torch.ops.aten.mul.Tensor], formulation=form, solver="cbc")
        assert set(added.rows) == {"aten.add.Tensor", "aten.mul.Tensor"}
        assert added.nodes and set(added.constrained_nodes) <= set(added.nodes)
        names = added.bound_names if forbid == "bounds" else added.constraint_names
        assert names and all(n.startswith("strict.forbid_") for n in names)
        assert {**added.constraints, **added.bounds} == {"strict.forbid": len(names)}
        opt = autop.sharding_optimizer
        if forbid == "bounds":
            assert len(opt.prob.constraints) == n_rows and not added.constraint_names
        else:
            assert set(added.constraint_names) <= set(opt.prob.constraints)
        autop.optimize_placement()
        (offer,) = offered  # the one add node got the swapped strategy
        (add,) = [n for n in find_nodes(autop, torch.ops.aten.add.Tensor) if n.name == offer.node_name]
        bad = opt.strats[add].strategies[offer.strategy_index]
        assert chosen_strategy(autop, add) is not bad, f"strict let the solver choose {bad}"
        if forbid == "bounds":
            for name in added.bound_names:
                for var, low, up in autop._apc_state.prior_bounds[name]:
                    var.lowBound, var.upBound = low, up
        else:
            opt.remove_constraints(added.constraint_names)
        assert chosen_strategy(autop, add, opt.resolve()) is bad  # what strict kept out


def test_plugin_rows_stay_behind_autoparallels_at_every_solve(make_mesh):
    """CBC's search depends on row order (one strict row before autoparallel's memory rows made
    its llama3 32-layer solve 3x longer): the plugin's rows stay behind every row of autoparallel's
    (its memory rows, rebuilt at the end before each solve, and pins added after the call), so the
    problem autoparallel alone would solve is an exact prefix of the plugin's, solve after solve."""
    from autoparallel_constraints.testing import offer_strategy

    s01, s10 = (Shard(0), Shard(1)), (Shard(1), Shard(0))
    bad_add = offer_strategy(torch.ops.aten.add.Tensor, input_placements=[s01, s10], output_placements=s01)
    with torch.device("meta"):
        model = AddMul()
    with bad_add, AutoParallel(model, lambda: torch.randn(512, 512, 16), make_mesh((2, 2))) as autop:
        autop.add_parameter_memory_constraint()
        added = autop.add_op_constraints(["add"], formulation="strict", forbid="row")
        autop.add_input_constraints([s10])  # a pin after the call
        opt = autop.sharding_optimizer
        ours = list(added.constraint_names)
        assert ours
        for solve in (autop.optimize_placement, opt.resolve):
            solve()
            names = list(opt.prob.constraints)
            assert names[-len(ours):] == ours, names[-len(ours) - 3:]
            theirs = names[: -len(ours)]
            assert {"memory_constraint_high", "memory_constraint_low"} <= set(theirs)
            assert any(n.startswith("input_constraint") for n in theirs), theirs[-5:]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"ops": "index_putt"}, apc.UnknownOpError, "Close names: index_put"),
        ({"ops": 3}, apc.InvalidOptionError, "ops must be None, a name"),
        ({"ops": ["add", 3.5]}, apc.InvalidOptionError, "item of type float"),
        ({"ops": []}, apc.InvalidOptionError, "ops is empty"),
        ({"formulation": "strictt"}, apc.InvalidOptionError, "Did you mean 'strict'"),
        ({"formulation": "strict", "penalty": 3}, apc.InvalidOptionError, "has no option"),
        ({"materialize": "some"}, apc.InvalidOptionError, "materialize must be one of"),
        ({"table": {"add": 1}}, apc.InvalidOptionError, "table must be"),
        ({"sizes": "yes"}, apc.InvalidOptionError, "sizes must be True or False"),
    ],
)
def test_bad_input_raises_and_leaves_problem_unchanged(make_mesh, kwargs, error, match):
    """Each bad argument raises a package error naming the fix; the ILP is exactly as before."""
    with _autop(make_mesh((2,))) as autop:
        before = _problem_fingerprint(autop.sharding_optimizer)
        with pytest.raises(error, match=match):
            autop.add_op_constraints(**kwargs)
        assert _problem_fingerprint(autop.sharding_optimizer) == before
        assert getattr(autop, "_apc_state", None) is None


def test_call_timing_errors(make_mesh):
    """Outside the with block, twice, or after optimize_placement: PluginStateError with the fix."""
    autop = _autop(make_mesh((2,)))
    with pytest.raises(apc.PluginStateError, match="inside the AutoParallel context"):
        autop.add_op_constraints()
    with autop:
        autop.add_op_constraints(formulation="strict")
        with pytest.raises(apc.PluginStateError, match="already called"):
            autop.add_op_constraints()
    with _autop(make_mesh((2,))) as autop2:
        autop2.optimize_placement()
        with pytest.raises(apc.PluginStateError, match="after optimize_placement"):
            autop2.add_op_constraints()
    with pytest.raises(apc.PluginStateError, match="already exited"):
        autop2.add_op_constraints()


def test_op_absent_from_graph_warns_with_what_is_there(make_mesh):
    """Asking only for an op the graph lacks warns and lists the graph's ops."""
    with _autop(make_mesh((2,))) as autop:
        with pytest.warns(apc.NoMatchingNodesWarning, match="aten.mm|aten.add"):
            added = autop.add_op_constraints("where", formulation="strict")
        assert added.nodes == ()


def test_audit_before_apply_raises(make_mesh):
    """audit() before apply_placement says to apply first."""
    with _autop(make_mesh((2,))) as autop:
        with pytest.raises(apc.AuditError, match="apply_placement"):
            apc.audit(autop)


def test_a_failed_add_forgets_the_variables_it_registered():
    """A row that fails after rows with new variables: the problem's variable list, its id index,
    the rows and the bounds are as before, and a forgotten variable can be added again later
    (PuLP skips registering a variable whose hash it still indexes)."""
    import pulp

    from autoparallel_constraints.formulations import Additions
    from autoparallel_constraints.formulations._base import Bound
    from autoparallel_constraints.plan._plugin import _add_atomically

    prob = pulp.LpProblem("p", pulp.LpMinimize)
    old = pulp.LpVariable("old", 0, 1, cat="Binary")
    prob += old >= 0, "theirs"
    before = (list(prob._variables), dict(prob._variable_ids), list(prob.constraints), (old.lowBound, old.upBound))
    new = pulp.LpVariable("new", 0, 1, cat="Binary")
    additions = Additions(
        constraints={"ours_0": new + old <= 1, "ours_1": "not a constraint"},  # type: ignore[dict-item]
        bounds={"fix": Bound(variables=(old,), up=0)},
    )
    with pytest.raises(Exception):
        _add_atomically(prob, additions)
    after = (list(prob._variables), dict(prob._variable_ids), list(prob.constraints), (old.lowBound, old.upBound))
    assert after == before
    _add_atomically(prob, Additions(constraints={"ours_0": new + old <= 1}))
    assert new in prob.variables()
