"""Guards infeasibility explained: when the table and the user's pins cannot hold together, the
plugin raises InfeasibleConstraintsError naming the table rule (constraint, node, rule) and the
pins that conflict — found by elastic re-solves, not only autoparallel's violated-constraint list —
and leaves the optimizer's problem as it was; a conflict among the pins alone is said to be not
the table's; soft is never infeasible on the table's account.

The conflict is indirect on purpose: two pins on index_put (small seed block, 2x4, pre-fix
strategy offered), each allowing a co-sharded strategy — output RS(0), and values RS(1) — whose
only common strategy is the illegal one. The pre-solve pin check cannot see it; the solver can."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.harness._inject import find_nodes, offer_strategy
from autoparallel_constraints.lab import run_seed
from autoparallel_constraints.models import SeedConfig

SMALL = SeedConfig(num_heads=10, head_dim=16, batch=8, seq=16)
INDEX_PUT = torch.ops.aten.index_put.default
RS0 = (Replicate(), Shard(0))
RS1 = (Replicate(), Shard(1))
RR = (Replicate(), Replicate())


def offer_pre_fix():
    return offer_strategy(INDEX_PUT, input_placements=[RS0, RR, RS1], output_placements=RS0)


class TwoPins:
    """configure(): pin index_put's output to RS(0) and (a user pin over strategies) its values to
    RS(1); keeps the optimizer so the test can look at its problem afterwards."""

    def __init__(self, *, conflicting_outputs: bool = False) -> None:
        self.conflicting_outputs = conflicting_outputs
        self.opt: Any = None
        self.autop: Any = None

    def __call__(self, autop: Any) -> None:
        self.autop = autop
        (node,) = find_nodes(autop, INDEX_PUT)
        opt = self.opt = autop.sharding_optimizer
        opt.add_node_constraint(node, RS0, constraint_name="pin_out_rs0")
        if self.conflicting_outputs:  # no strategy has both outputs: infeasible without any table
            opt.add_node_constraint(node, RR, constraint_name="pin_out_rr")
            return
        strategies = opt.strats[node].strategies
        rs1 = [o for o, s in enumerate(strategies) if s.input_specs[2].placements == RS1]
        opt._add_node_constraint(node, rs1, constraint_name="pin_values_rs1")


@pytest.fixture
def mesh(make_mesh):
    return make_mesh((2, 4))


@pytest.mark.parametrize(
    ("formulation", "rule_constraint", "solver"),
    [("strict", "strict.forbid_", "cbc"), ("strict", "strict.forbid_", "highs-lp"), ("strict", "strict.forbid_", "highs"),
     ("lazy", "lazy.cut_000", "highs")],
)
def test_conflict_names_the_rule_and_the_pins(mesh, formulation, rule_constraint, solver):
    """strict with CBC (forbidden up front) and lazy with HiGHS (cut after round 0): the error names
    the table constraint that had to give, at index_put with its rule, and both pins; it is a
    package error chained to autoparallel's own infeasibility error; the problem keeps exactly its
    constraints, and strict's forbid bounds (relaxed in the elastic copy) are set again."""
    pins = TwoPins()
    names_after: list[tuple[str, ...]] = []
    variables_after: list[list[str]] = []
    bounds_after: list[set[float | None]] = []
    with offer_pre_fix(), pytest.raises(apc.InfeasibleConstraintsError) as info:
        try:
            run_seed(formulation, mesh, config=SMALL, configure=pins, apply=False, solver=solver)
        finally:
            names_after.append(tuple(pins.opt.prob.constraints))
            variables_after.append([v.name for v in pins.opt.prob.variables() if "diag" in v.name])
            state = pins.autop._apc_state
            bounds_after.append({v.upBound for b in state.additions.bounds.values() for v in b.variables})
    text = str(info.value)
    assert isinstance(info.value, apc.ConstraintsError)
    assert isinstance(info.value.__cause__, RuntimeError)  # autoparallel's infeasibility
    assert "no plan satisfies the compatibility table" in text
    assert rule_constraint in text and "at index_put: rule aten.index_put.default [index_put]" in text
    assert "'pin_out_rs0_000'" in text and "'pin_values_rs1_000'" in text
    assert "formulation='explicit'" in text and "formulation='soft'" in text
    (names,) = names_after
    assert not [n for n in names if "diag" in n]  # the elastic re-solves ran on copies
    assert variables_after == [[]]
    assert bounds_after == [{0}], "the diagnosis must put the plugin's bounds back"


def test_conflict_among_pins_alone_is_not_the_tables(mesh):
    """Two output pins no strategy meets together: the error says the problem is infeasible even
    with every table rule relaxed, i.e. the user's constraints conflict, not the table."""
    with offer_pre_fix(), pytest.raises(apc.InfeasibleConstraintsError, match="even with every table rule of strict relaxed"):
        run_seed("strict", mesh, config=SMALL, configure=TwoPins(conflicting_outputs=True), apply=False)


def test_soft_gives_way_instead(mesh):
    """soft on the same conflict: a plan, with index_put's rule reported as given way at the penalty."""
    with offer_pre_fix():
        summary, _ = run_seed("soft", mesh, config=SMALL, configure=TwoPins(), apply=False)
    assert summary.gave_way == 1
    assert summary.objective > 1e6  # the penalty is in the objective


def test_explicit_repairs_instead(mesh):
    """explicit on the same conflict: the illegal strategy runs with a planned redistribution."""
    with offer_pre_fix():
        summary, report = run_seed("explicit", mesh, config=SMALL, configure=TwoPins())
    assert report.ok, report
    (red,) = report.redistributes
    assert red.node == "index_put" and red.arg == "values" and red.constraint.startswith("explicit.redistribute_")


def test_advice_fits_the_call_that_was_made():
    """The fix names formulations other than the one in use, and for size couplings (hard in every
    formulation) says sizes=False instead of a formulation that would not help."""
    from autoparallel_constraints.plan._explain import _give_way

    explicit = _give_way("explicit", ["explicit.redistribute_000"])
    assert "formulation='explicit'" not in explicit and "formulation='soft'" in explicit
    strict = _give_way("strict", ["strict.forbid_003"])
    assert "formulation='explicit'" in strict and "formulation='soft'" in strict
    sizes = _give_way("explicit", ["size.global_001"])
    assert "sizes=False" in sizes and "formulation=" not in sizes
