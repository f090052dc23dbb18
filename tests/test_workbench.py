"""Guards the workbench (``apc.Workbench``): one ``AutoParallel`` build, many formulations.

* the snapshot puts back everything a row changes (rows and their order, variables, bounds,
  values, objective, status, the methods the plugin shadows, the AutoParallel's plan and state),
  and the fingerprint that checks it sees each of those changes;
* on the forced #348 case (seed block, 2x4, index_put's inputs pinned apart) rows that differ —
  autoparallel alone refused by the audit, ``explicit`` and ``strict`` clean — leave the problem
  as built, so a row repeated after others gives the same plan; a row that fails (an infeasible
  or a broken formulation) leaves it as built too;
* every row's objective and chosen strategy of every node equal an independent build's with the
  same formulation and solver (full tier: autoparallel alone and ``explicit`` on the forced case,
  five rows on the seed block, three rows on each of three fuzz draws, one per mesh; on demand:
  llama3 and HF Falcon);
* bad use fails before anything changes. (``compare --one-build``: tests/test_lab.py.)
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import pulp
import pytest
import torch
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints import Formulation, FormulationError, PluginStateError
from autoparallel_constraints.harness import cpu_mesh, device_name, fresh_strategy_cache
from autoparallel_constraints.harness._inject import find_nodes, offer_strategy
from autoparallel_constraints.lab import lab_model
from autoparallel_constraints.workbench import ProblemSnapshot, Workbench, plan_choices, problem_fingerprint

INDEX_PUT = torch.ops.aten.index_put.default
RS0, RS1, RR = (Replicate(), Shard(0)), (Replicate(), Shard(1)), (Replicate(), Replicate())


# ---------------------------------------------------------------------------------------------
# The snapshot on a bare PuLP problem (no build)


def _fake_autop() -> Any:
    prob = pulp.LpProblem("p", pulp.LpMinimize)
    x, y = pulp.LpVariable("x", 0, 1, cat="Binary"), pulp.LpVariable("y", 0, 1, cat="Binary")
    prob += x + y >= 1, "one"
    prob += x + 2 * y
    opt = types.SimpleNamespace(prob=prob, _constraint_log=[], _node_constraint_names={})
    return types.SimpleNamespace(sharding_optimizer=opt, sharding_placement=None)


def _changes() -> dict[str, Any]:
    """Each a change one row could make to the problem or the AutoParallel."""

    def new_row(a: Any) -> None:
        p = a.sharding_optimizer.prob
        p += pulp.LpVariable("z", 0, 1) + p._variables[0] <= 1, "plugin.row_000"

    def bound(a: Any) -> None:
        a.sharding_optimizer.prob._variables[0].upBound = 0

    def value(a: Any) -> None:
        a.sharding_optimizer.prob._variables[1].varValue = 1.0

    def row_order(a: Any) -> None:
        p = a.sharding_optimizer.prob
        p += p._variables[0] <= 1, "two"
        p.constraints["one"] = p.constraints.pop("one")

    def shadow_solve(a: Any) -> None:
        a.sharding_optimizer.prob.solve = lambda *args, **kw: None

    def hook(a: Any) -> None:
        a.sharding_optimizer._solve = lambda *args: None

    def objective(a: Any) -> None:
        p = a.sharding_optimizer.prob
        p.objective = p.objective + 3 * p._variables[0]

    def log(a: Any) -> None:
        a.sharding_optimizer._constraint_log.append(("apc_add_op_constraints", {}))

    return {
        "new_row": new_row, "bound": bound, "value": value, "row_order": row_order,
        "shadow_solve": shadow_solve, "hook": hook, "objective": objective, "log": log,
    }


@pytest.mark.parametrize("change", sorted(_changes()))
def test_the_snapshot_restores_and_the_fingerprint_sees_each_change(change):
    """The fingerprint differs after the change (the check can fail) and equals the build's after
    the restore; the AutoParallel's plugin state and plan are put back with it."""
    autop = _fake_autop()
    opt = autop.sharding_optimizer
    before = problem_fingerprint(opt)
    snap = ProblemSnapshot.take(autop)
    _changes()[change](autop)
    autop._apc_state, autop.sharding_placement = object(), {}
    assert problem_fingerprint(opt) != before, change
    snap.restore()
    assert problem_fingerprint(opt) == before
    assert not hasattr(autop, "_apc_state") and autop.sharding_placement is None
    snap.restore()  # a snapshot serves every row
    assert problem_fingerprint(opt) == before


# ---------------------------------------------------------------------------------------------
# The forced #348 case on one build


@contextlib.contextmanager
def _forced_seed() -> Iterator[Any]:
    """The seed block (tests' size) on 2x4 with DTensor's old index_put strategy offered and
    index_put's self and values pinned apart (RS0 / RS1): autoparallel alone lowers it wrong."""
    spec = lab_model("seed", (2, 4), size="tiny")
    offer = offer_strategy(INDEX_PUT, input_placements=[RS0, RR, RS1], output_placements=RS0)
    with device_name(), offer, fresh_strategy_cache():
        from autoparallel.api import AutoParallel

        with AutoParallel(spec.model, spec.input_fn, cpu_mesh((2, 4), spec.mesh_dim_names), spec.mp_policy) as autop:
            autop.add_input_constraints(list(spec.input_placements))
            (node,) = find_nodes(autop, INDEX_PUT)
            autop.sharding_optimizer.add_node_constraint(node.args[0], RS0, constraint_name="pin_self")
            autop.sharding_optimizer.add_node_constraint(node.args[2], RS1, constraint_name="pin_values")
            yield autop


class _Broken(Formulation):
    """A formulation whose build fails after reading the problem.

    Sets: none. Variables: none. Objective: unchanged. Constraints: none (build raises).
    """

    name = "broken"

    def build(self, opt: Any, sites: Any, namer: Any) -> Any:
        raise ValueError("broken on purpose")


def _independent(formulation: str) -> tuple[float, dict[str, str]]:
    """An independent build: autoparallel alone on its CBC, or the formulation on the default solver."""
    with _forced_seed() as autop:
        if formulation != "none":
            autop.add_op_constraints(formulation=formulation, verify="off")
        placement = autop.optimize_placement()
        return float(autop.sharding_optimizer.prob.objective.value()), plan_choices(placement)


@pytest.fixture(scope="module")
def forced() -> dict[str, Any]:
    """explicit, none, a broken formulation, strict, explicit again: all on one build, the problem
    fingerprinted before the first row and after every restore (check_restore)."""
    out: dict[str, Any] = {}
    with _forced_seed() as autop:
        built = problem_fingerprint(autop.sharding_optimizer)
        bench = Workbench(autop, check_restore=True)
        out["explicit"] = bench.run("explicit")
        out["none"] = bench.run("none", "cbc")  # autoparallel alone, as a user runs it
        with pytest.raises(FormulationError, match="broken on purpose") as info:
            bench.run(_Broken())
        out["broken"] = info.value
        out["after_broken"] = problem_fingerprint(autop.sharding_optimizer)
        out["strict"] = bench.run("strict")
        out["explicit_again"] = bench.run("explicit")
        out["built"] = built
        out["end"] = problem_fingerprint(autop.sharding_optimizer)
        out["state"] = tuple(getattr(autop, k, None) for k in ("_apc_state", "sharding_placement", "parallel_gm"))
    return out


def test_rows_on_one_build_differ_as_their_formulations_do(forced):
    """autoparallel alone runs the forced strategy (the audit refuses it); explicit and strict avoid
    it (clean, proven): the rows really are different problems solved on one build."""
    none, explicit, strict = forced["none"], forced["explicit"], forced["strict"]
    assert "not_cosharded" in none.audit and not none.audit_ok
    assert explicit.audit == strict.audit == "clean" and explicit.verify == "clean"
    assert explicit.unknown == 0 and explicit.unproven_outputs == 0
    assert none.objective < explicit.objective
    assert explicit.table_choices and set(explicit.table_choices) <= set(explicit.choices)


def test_the_problem_is_as_built_after_every_row_even_a_failed_one(forced):
    """check_restore raised on no row; the fingerprint after the failed row and at the end is the
    build's; a row repeated after the others gives the same plan; the AutoParallel has no plugin
    state, plan or parallel graph left."""
    assert forced["after_broken"] == forced["built"] == forced["end"]
    first, again = forced["explicit"], forced["explicit_again"]
    assert again.choices == first.choices and again.objective == first.objective
    assert forced["state"] == (None, None, None)


@pytest.mark.full
def test_rows_equal_independent_builds_on_the_forced_case(forced):
    """autoparallel alone and explicit: objective and every node's strategy as an independent build."""
    for name in ("none", "explicit"):
        objective, choices = _independent(name)
        row = forced[name]
        assert row.objective == pytest.approx(objective, rel=1e-9, abs=1e-9), name
        assert row.choices == choices, name


def test_bad_use_fails_before_anything_changes():
    """Outside the with block, after add_op_constraints, after optimize_placement, or a bad solver:
    a package exception that says what to do, and the problem untouched."""
    with pytest.raises(PluginStateError, match="entered AutoParallel"):
        Workbench(types.SimpleNamespace(active=False))
    spec = lab_model("seed", (2,), size="tiny")
    from autoparallel.api import AutoParallel

    with device_name(), fresh_strategy_cache():
        with AutoParallel(spec.model, spec.input_fn, cpu_mesh((2,)), spec.mp_policy) as autop:
            autop.add_input_constraints([(Shard(0),)])
            bench = Workbench(autop, apply=False)
            before = problem_fingerprint(autop.sharding_optimizer)
            with pytest.raises(apc.InvalidOptionError):
                bench.run("explicit", solver="gurobi")
            with pytest.raises(apc.UnknownOpError):
                bench.run("explicit", ops=["no_such_op"])
            assert problem_fingerprint(autop.sharding_optimizer) == before
            autop.add_op_constraints()
            with pytest.raises(PluginStateError, match="before add_op_constraints"):
                Workbench(autop)


# ---------------------------------------------------------------------------------------------
# Independent builds on the lab's models


@pytest.mark.full
@pytest.mark.parametrize(
    "model",
    # llama3 and HF Falcon: 25-30 s per CBC solve at the tests' size, ~10 min each: on demand
    ["seed", pytest.param("llama3", marks=pytest.mark.ondemand), pytest.param("falcon", marks=pytest.mark.ondemand)],
)
def test_every_formulation_equals_an_independent_build(model):
    """none, strict, explicit, lazy on CBC and explicit on highs-lp, on one build: each row's
    objective and every node's strategy equal an independent build's; a highs-lp row records its
    LP relaxation's verdict (CBC rows none)."""
    rows = [("none", "cbc"), ("strict", "cbc"), ("explicit", "cbc"), ("lazy", "cbc"), ("explicit", "highs-lp")]
    spec = lab_model(model, (2, 2), size="tiny")
    mesh = cpu_mesh((2, 2), spec.mesh_dim_names)
    with device_name():
        with fresh_strategy_cache(), spec.enter(mesh) as autop:
            spec.constrain(autop)
            bench = Workbench(autop, apply=False, check_restore=True)
            shared = [bench.run(f, s) for f, s in rows]
        for (f, s), row in zip(rows, shared):
            with fresh_strategy_cache(), spec.enter(mesh) as autop:
                spec.constrain(autop)
                if f == "none":
                    apc.use_solver(autop, s) if s != "cbc" else None
                else:
                    autop.add_op_constraints(formulation=f, solver=s, verify="off")
                placement = autop.optimize_placement()
                objective = float(autop.sharding_optimizer.prob.objective.value())
                variables = len(autop.sharding_optimizer.prob.variables())
            assert row.objective == pytest.approx(objective, rel=1e-9, abs=1e-9), (f, s)
            assert row.variables == variables, (f, s)
            assert row.choices == plan_choices(placement), (f, s)
            assert (row.relaxation is not None) is (s == "highs-lp"), (f, s, row.relaxation)


# ---------------------------------------------------------------------------------------------
# Independent builds on the fuzz generator's models

# autoparallel alone on its CBC, and the default call's and strict's solver rows
FUZZ_ROWS = (("none", "cbc"), ("explicit", "highs-lp"), ("strict", "cbc"))


def _fuzz_draws() -> list[Any]:
    """The fuzz generator's first derandomized draw on each mesh (tests/test_fuzz.py's strategy)."""
    from hypothesis import given, settings
    from test_fuzz import MESHES, model_specs

    found: dict[tuple[int, ...], Any] = {}

    @settings(max_examples=60, derandomize=True, database=None, deadline=None)
    @given(model_specs())
    def draw(spec: Any) -> None:
        found.setdefault(spec.mesh, spec)

    draw()
    assert set(found) == set(MESHES), found
    return [found[m] for m in MESHES]


@contextlib.contextmanager
def _fuzz_entered(spec: Any) -> Iterator[Any]:
    from autoparallel.api import AutoParallel
    from test_fuzz import _placement

    from autoparallel_constraints.harness._fuzz import FuzzModel

    pins = [tuple(_placement(p) for p in spec.input_placements)]
    with torch.device("meta"):
        model = FuzzModel(spec)
    with fresh_strategy_cache(), AutoParallel(
        model, lambda: torch.empty(spec.batch, spec.seq, spec.hidden), cpu_mesh(spec.mesh), dynamic=True
    ) as autop:
        autop.add_input_constraints(pins)
        autop.add_output_constraints(pins if spec.pin_output else [None])
        yield autop


# on demand (24 s): the seed block and the forced case hold the comparison in the full tier
@pytest.mark.ondemand
def test_rows_equal_independent_builds_on_the_fuzz_sample():
    """On a fuzz draw per mesh ((2,), (2, 2), (2, 4)): autoparallel alone on CBC, explicit on
    highs-lp and strict on CBC, on one build, each equal to an independent build in objective and
    every node's strategy, the problem fingerprinted after every row (check_restore)."""
    with device_name():
        for spec in _fuzz_draws():
            with _fuzz_entered(spec) as autop:
                bench = Workbench(autop, apply=False, check_restore=True)
                shared = [bench.run(f, s) for f, s in FUZZ_ROWS]
            for (f, s), row in zip(FUZZ_ROWS, shared):
                with _fuzz_entered(spec) as autop:
                    if f != "none":
                        autop.add_op_constraints(formulation=f, solver=s, verify="off")
                    placement = autop.optimize_placement()
                    objective = float(autop.sharding_optimizer.prob.objective.value())
                assert row.objective == pytest.approx(objective, rel=1e-9, abs=1e-9), (spec, f, s)
                assert row.choices == plan_choices(placement), (spec, f, s)
