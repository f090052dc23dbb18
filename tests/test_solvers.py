"""Guards the solver choice: CBC and HiGHS per call (``add_op_constraints(solver=...)`` and
``use_solver`` for a plain AutoParallel) give the same plan and objective; HiGHS's values reach
autoparallel as exact binaries; bad choices and a missing ``highspy`` raise package errors that
say the fix and leave the problem untouched; a time limit has a clear outcome — no plan: an error,
a plan not proven optimal: kept, with a warning and the outcome recorded."""

from __future__ import annotations

import random
import types
import warnings

import pulp
import pytest
import torch
from autoparallel.api import AutoParallel
from torch.distributed.tensor.placement_types import Shard

import autoparallel_constraints as apc
from autoparallel_constraints.lab import run_seed
from autoparallel_constraints.models import AddMul, SeedConfig
from autoparallel_constraints.plan import _solvers
from autoparallel_constraints.plan._report import constraint_report
from autoparallel_constraints.plan._solvers import SolverConfig, SolverTimeLimitWarning, install, use_solver
from autoparallel_constraints.testing import explain

SMALL = SeedConfig(num_heads=10, head_dim=16, batch=8, seq=16)


def _autop(mesh):
    with torch.device("meta"):
        model = AddMul()
    return AutoParallel(model, lambda: torch.randn(8, 4, 16), mesh)


def _fingerprint(opt):
    return (tuple(opt.prob.constraints), len(opt.prob.variables()), str(opt.prob.objective))


@pytest.mark.full
def test_highs_and_cbc_give_the_same_plan(make_mesh):
    """Seed block (small), 2x4: autoparallel alone with CBC, alone with HiGHS (use_solver) and lazy
    with HiGHS reach the same objective and a clean audit; HiGHS's variable values are exact 0/1,
    and the report names the solver that ran."""
    mesh = make_mesh((2, 4))
    cbc, _ = run_seed(None, mesh, config=SMALL)
    seen = {}

    def check_values(autop):
        values = {v.varValue for v in autop.sharding_optimizer.pulp_variables.values()}
        seen["values"] = values
        seen["report"] = constraint_report(autop)
        seen["hook"] = getattr(autop.sharding_optimizer, "_apc_solver", None)

    alone, report = run_seed(None, mesh, config=SMALL, solver="highs", after_apply=check_values)
    assert report.ok and alone.objective == pytest.approx(cbc.objective, rel=1e-9), explain(report)
    assert seen["values"] <= {0.0, 1.0}
    (outcome,) = seen["hook"].outcomes
    assert outcome.solver == "highs" and outcome.optimal and outcome.status == "Optimal"
    lazy, report = run_seed("lazy", mesh, config=SMALL, solver="highs", after_apply=check_values)
    assert report.ok and lazy.objective == pytest.approx(cbc.objective, rel=1e-9), explain(report)
    assert seen["report"].solver == "highs" and seen["report"].solves[0].solver == "highs"
    assert alone.solver == lazy.solver == "highs" and cbc.solver == "cbc"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"solver": "higs"}, apc.InvalidOptionError, "Did you mean 'highs'"),
        ({"solver": 3}, apc.InvalidOptionError, "solver must be one of"),
        ({"time_limit": 0}, apc.InvalidOptionError, "time_limit must be a positive number"),
        ({"time_limit": "10"}, apc.InvalidOptionError, "time_limit must be a positive number"),
    ],
)
def test_bad_solver_choices_raise_and_leave_problem_unchanged(make_mesh, kwargs, error, match):
    """A wrong solver or time limit raises a package error naming the fix; the ILP is as before."""
    with _autop(make_mesh((2,))) as autop:
        before = _fingerprint(autop.sharding_optimizer)
        with pytest.raises(error, match=match):
            autop.add_op_constraints(formulation="strict", **kwargs)
        assert _fingerprint(autop.sharding_optimizer) == before
        assert getattr(autop, "_apc_state", None) is None


def test_missing_highspy_says_how_to_install(make_mesh, monkeypatch):
    """Without highspy, solver='highs' raises SolverUnavailableError with the extra's install line."""
    monkeypatch.setattr(_solvers, "highs_available", lambda: False)
    with _autop(make_mesh((2,))) as autop:
        before = _fingerprint(autop.sharding_optimizer)
        with pytest.raises(apc.ConstraintsError, match=r"autoparallel-constraints\[highs\]") as info:
            autop.add_op_constraints(formulation="lazy", solver="highs")
        assert isinstance(info.value, apc.errors.SolverUnavailableError)
        assert _fingerprint(autop.sharding_optimizer) == before


def test_use_solver_outside_the_context_says_where_to_call_it(make_mesh):
    """use_solver on an AutoParallel that was not entered raises PluginStateError with the fix."""
    with pytest.raises(apc.PluginStateError, match="inside `with AutoParallel"):
        use_solver(_autop(make_mesh((2,))), "highs")


def market_split(m: int = 5, n: int = 40, seed: int = 7, elastic: bool = False) -> tuple[pulp.LpProblem, dict]:
    """A market-split instance (Cornuéjols–Dawande): Σ_j a_ij x_j = ⌊Σ_j a_ij / 2⌋, x binary.

    Notoriously hard: no solver proves anything about it in a fraction of a second. ``elastic``
    adds slack so the zero plan is feasible and the objective is the total slack.
    """
    rng = random.Random(seed)
    prob = pulp.LpProblem("market_split", pulp.LpMinimize)
    x = {j: pulp.LpVariable(f"x_{j}", cat=pulp.LpBinary) for j in range(n)}
    slack = []
    for i in range(m):
        a = [rng.randint(0, 99) for _ in range(n)]
        expr = pulp.lpSum(a[j] * x[j] for j in range(n))
        if elastic:
            up, down = pulp.LpVariable(f"up_{i}", lowBound=0), pulp.LpVariable(f"down_{i}", lowBound=0)
            expr = expr + up - down
            slack += [up, down]
        prob += (expr == sum(a) // 2, f"split_{i}")
    prob += pulp.lpSum(slack) if slack else pulp.lpSum(x.values()) * 0
    return prob, x


@pytest.mark.parametrize("solver", ["cbc", "highs", "highs-lp"])
def test_time_limit_without_a_plan_raises(solver):
    """The solver stops at the limit with no feasible plan: SolverTimeLimitError names the solver,
    the limit and what to do; the outcome is recorded as 'time limit hit: no feasible plan'."""
    prob, x = market_split()
    opt = types.SimpleNamespace(prob=prob, pulp_variables={j: v for j, v in x.items()})
    hook = install(opt, SolverConfig(name=solver, time_limit=0.5))
    with pytest.raises(apc.errors.SolverTimeLimitError, match=rf"{solver} found no feasible plan within the time limit of 0.5s"):
        prob.solve(pulp.PULP_CBC_CMD(msg=False))  # autoparallel's call: the hook swaps the solver
    (outcome,) = hook.outcomes
    assert outcome.hit_time_limit and not outcome.feasible and outcome.solver == solver
    assert "time limit hit: no feasible plan" in outcome.describe()


@pytest.mark.parametrize("solver", ["cbc", "highs", "highs-lp"])
def test_time_limit_with_a_plan_keeps_it_and_warns(solver):
    """The solver stops at the limit holding a feasible, unproven plan: it is kept (values set, a
    status autoparallel accepts), SolverTimeLimitWarning says so, and the outcome records it."""
    prob, x = market_split(elastic=True)
    opt = types.SimpleNamespace(prob=prob, pulp_variables={j: v for j, v in x.items()})
    hook = install(opt, SolverConfig(name=solver, time_limit=0.5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status = prob.solve()
    (outcome,) = hook.outcomes
    assert outcome.hit_time_limit and outcome.feasible and not outcome.optimal
    assert status == pulp.LpStatusOptimal  # what autoparallel checks (not -1): the plan is used
    assert all(v.varValue in (0.0, 1.0) for v in x.values())
    assert any(issubclass(w.category, SolverTimeLimitWarning) and "not proven optimal" in str(w.message) for w in caught)


def odd_cycle() -> tuple[pulp.LpProblem, dict]:
    """max x0 + x1 + x2 with x_i + x_j <= 1 on a triangle, x binary: the relaxation's optimum is
    x = 1/2 everywhere (3/2), the ILP's is one x = 1 (1): the relaxation is never integral."""
    prob = pulp.LpProblem("odd_cycle", pulp.LpMaximize)
    x = {i: pulp.LpVariable(f"x_{i}", cat=pulp.LpBinary) for i in range(3)}
    for i, j in ((0, 1), (1, 2), (0, 2)):
        prob += (x[i] + x[j] <= 1, f"edge_{i}{j}")
    prob += pulp.lpSum(x.values())
    return prob, x


def test_highs_lp_falls_back_to_the_mip_when_the_relaxation_is_fractional():
    """highs-lp on a problem whose relaxation is fractional: the outcome says so, and the MIP's
    optimum (1, binary values) is what autoparallel gets — not the relaxation's 3/2."""
    prob, x = odd_cycle()
    opt = types.SimpleNamespace(prob=prob, pulp_variables=x)
    hook = install(opt, SolverConfig(name="highs-lp"))
    assert prob.solve(pulp.PULP_CBC_CMD(msg=False)) == pulp.LpStatusOptimal
    (outcome,) = hook.outcomes
    assert outcome.relaxation == "fractional (3 columns)" and outcome.optimal
    assert outcome.objective == pytest.approx(1.0) and sorted(v.varValue for v in x.values()) == [0.0, 0.0, 1.0]
    assert "LP relaxation fractional (3 columns)" in outcome.describe()


def test_highs_lp_accepts_an_integral_relaxation_as_optimal():
    """A relaxation whose optimum is integral (x_i + x_j <= 1 on a path: a bipartite graph) is
    accepted without the MIP: optimal, exact 0/1 values, the objective CBC proves."""
    prob = pulp.LpProblem("path", pulp.LpMaximize)
    x = {i: pulp.LpVariable(f"x_{i}", cat=pulp.LpBinary) for i in range(4)}
    for i in range(3):
        prob += (x[i] + x[i + 1] <= 1, f"edge_{i}")
    prob += pulp.lpSum((1 + 0.1 * i) * x[i] for i in range(4))
    hook = install(types.SimpleNamespace(prob=prob, pulp_variables=x), SolverConfig(name="highs-lp"))
    prob.solve()
    (outcome,) = hook.outcomes
    lp_values = {i: v.varValue for i, v in x.items()}
    assert outcome.relaxation == "integral" and outcome.optimal
    assert set(lp_values.values()) <= {0.0, 1.0}
    cbc = prob.deepcopy()
    cbc.solve(pulp.PULP_CBC_CMD(msg=False))
    assert outcome.objective == pytest.approx(pulp.value(cbc.objective), rel=1e-9)


def test_the_default_solver_is_highs_lp_and_quiet():
    """add_op_constraints' default is highs-lp; in a fresh process (HiGHS's banner comes once per
    process, from highspy's constructor, before any option), a highs-lp solve with msg off prints
    nothing to stdout, and with msg on HiGHS's log reaches it (the check can fail)."""
    import inspect
    import subprocess
    import sys

    assert inspect.signature(apc.add_op_constraints).parameters["solver"].default == "highs-lp"
    assert _solvers.DEFAULT_SOLVER == "highs-lp" and SolverConfig().name == "highs-lp"
    code = (
        "import types, pulp\n"
        "from autoparallel_constraints.plan._solvers import SolverConfig, install\n"
        "prob = pulp.LpProblem('p', pulp.LpMinimize)\n"
        "x = {i: pulp.LpVariable(f'x_{i}', cat=pulp.LpBinary) for i in range(2)}\n"
        "prob += x[0] + x[1] >= 1, 'one'\n"
        "prob += x[0] + 2 * x[1]\n"
        "install(types.SimpleNamespace(prob=prob, pulp_variables=x), SolverConfig(name='highs-lp', msg=MSG))\n"
        "prob.solve()\n"
        "print('objective', pulp.value(prob.objective))\n"
    )
    for msg in (False, True):
        out = subprocess.run([sys.executable, "-c", code.replace("MSG", str(msg))], capture_output=True, text=True,
                             check=True).stdout
        assert out.endswith("objective 1.0\n"), out
        assert ("HiGHS" in out) is msg, out


@pytest.mark.full
def test_highs_lp_gives_cbcs_objective_on_the_seed_block_and_llama3(make_mesh):
    """highs-lp against CBC: the seed block (small, 2x4) alone and with strict, and llama3_small
    (2 layers, mesh 2) alone and with lazy: the same objective, exact binaries, a clean audit on
    the seed block; each outcome names the relaxation's verdict."""
    from autoparallel_constraints.lab import run_model
    from autoparallel_constraints.models import llama3_small

    mesh = make_mesh((2, 4))
    cbc, _ = run_seed(None, mesh, config=SMALL)
    seen = []

    def grab(autop):
        opt = autop.sharding_optimizer
        seen.append(({v.varValue for v in opt.pulp_variables.values()}, opt._apc_solver.outcomes[-1]))

    for form in (None, "strict"):
        run, report = run_seed(form, mesh, config=SMALL, solver="highs-lp", after_apply=grab)
        assert report.ok and run.objective == pytest.approx(cbc.objective, rel=1e-9), explain(report)
    model_fn, input_fn = llama3_small(n_layers=2)
    with torch.device("meta"):
        model = model_fn()
    kwargs = {"name": "llama3", "input_placements": [(Shard(0),)], "apply": False}
    base, _ = run_model(model, input_fn, make_mesh((2,)), formulation=None, **kwargs)
    for form in (None, "lazy"):
        run, _ = run_model(model, input_fn, make_mesh((2,)), formulation=form, solver="highs-lp", **kwargs)
        assert run.objective == pytest.approx(base.objective, rel=1e-9), form
    for values, outcome in seen:
        assert values <= {0.0, 1.0} and outcome.solver == "highs-lp" and outcome.relaxation is not None


def _mixed_problem(seed: int) -> pulp.LpProblem:
    """A small feasible MILP with everything the bulk conversion handles: binaries and continuous
    columns (free, one-sided, boxed), LE/GE/EQ rows, singleton rows of either sign that fix or
    bound a column, a zero-coefficient singleton, a binary its own bounds fix at 0 (how the
    plugin forbids), columns only the objective or only a singleton names, an objective constant,
    minimize or maximize. Rows hold at a random integral point, so it
    is feasible; only boxed columns carry cost, so it is bounded."""
    rng = random.Random(seed)
    prob = pulp.LpProblem(f"mixed_{seed}", pulp.LpMaximize if seed % 3 == 0 else pulp.LpMinimize)
    xs = [pulp.LpVariable(f"x{i}", cat=pulp.LpBinary) for i in range(12)]
    ys = [pulp.LpVariable(f"y{i}", lowBound=None if i % 2 else -3, upBound=5 if i % 3 else None) for i in range(4)]
    point = {v.name: rng.randint(0, 1) for v in xs} | {v.name: rng.randint(-2, 4) for v in ys}
    only_objective = pulp.LpVariable("z", lowBound=0, upBound=2)
    only_singleton = pulp.LpVariable("w", lowBound=-1, upBound=4)
    forbidden = pulp.LpVariable("f", cat=pulp.LpBinary)
    forbidden.upBound = 0
    point[forbidden.name] = 0
    boxed = [y for y in ys if y.lowBound is not None and y.upBound is not None]
    # f's cost would take it to 1 in either sense, were it not fixed
    prob += pulp.lpSum(rng.uniform(-3, 3) * v for v in [*xs, *boxed, only_objective]) + 2.5 + (
        (5 if prob.sense == pulp.LpMaximize else -5) * forbidden)
    prob += xs[0] + forbidden <= 1 + point[xs[0].name]
    for k in range(8):
        terms = [(rng.choice([-2, -1, 1, 3]), v) for v in rng.sample([*xs, *ys, forbidden], rng.randint(2, 6))]
        expr = pulp.lpSum(a * v for a, v in terms)
        at = sum(a * point[v.name] for a, v in terms)
        prob += [expr <= at + rng.randint(0, 2), expr >= at - rng.randint(0, 2), expr == at][k % 3]
    zeros = [v for v in xs if point[v.name] == 0]
    for v in zeros[:3]:
        prob += v == 0
    prob += 2 * zeros[-1] <= 1
    prob += -1 * ys[0] <= 2
    prob += 0 * xs[0] <= 1
    prob += only_singleton >= 1
    return prob


def test_highs_model_leaves_out_columns_fixed_at_zero_by_rows_or_their_own_bounds():
    """Columns whose bounds are both 0, whether from singleton rows (autoparallel's ``x == 0``) or
    set on the variable (strict's bounds), are not passed to HiGHS: presolve need not remove them."""
    import highspy

    prob = _mixed_problem(1)
    model = _solvers._highs_model(prob, highspy.kHighsInf)
    passed = {v.name for v in model.columns}
    left_out = {v.name for v in model.left_out}
    fixed_by_rows = {next(iter(c.expr)).name for c in prob.constraints.values()
                     if len(c.expr) == 1 and c.sense == pulp.LpConstraintEQ and c.constant == 0}
    assert "f" in left_out and fixed_by_rows and fixed_by_rows <= left_out
    assert not passed & left_out
    assert passed | left_out == {v.name for v in prob.variables()}
    assert len(model.cost) == len(model.lower) == len(model.integrality) == len(passed)
    assert model.a_index.max() < len(passed) and len(model.a_index) == model.starts[-1]


def test_highs_run_reports_the_simplex_iterations_it_took():
    """``HighsRun.simplex_iterations`` is HiGHS's own count (the path the benchmarks compare):
    a problem presolve cannot finish takes some, the same problem again takes as many."""
    runs = [_solvers.solve_with_highs(_mixed_problem(0), relax_first=True) for _ in range(2)]
    assert runs[0].simplex_iterations > 0
    assert runs[0].simplex_iterations == runs[1].simplex_iterations


@pytest.mark.parametrize("seed", range(24))
def test_highs_bulk_conversion_solves_what_cbc_solves(seed):
    """HiGHS receives ``prob`` as arrays built in bulk (singleton rows as bounds, fixed columns left
    out, columns numbered by first appearance): on mixed problems it reaches CBC's status and
    objective, and its values satisfy every PuLP constraint and bound."""
    prob = _mixed_problem(seed)
    reference = prob.deepcopy()
    reference.solve(pulp.PULP_CBC_CMD(msg=False))
    _solvers.solve_with_highs(prob)
    assert prob.status == reference.status == pulp.LpStatusOptimal
    assert pulp.value(prob.objective) == pytest.approx(pulp.value(reference.objective), abs=1e-6)
    for name, constraint in prob.constraints.items():
        value = constraint.value()
        assert value is not None, name
        assert {pulp.LpConstraintEQ: abs(value) <= 1e-6, pulp.LpConstraintLE: value <= 1e-6,
                pulp.LpConstraintGE: value >= -1e-6}[constraint.sense], (name, value)
    for var in prob.variables():
        assert var.varValue is not None and (var.lowBound is None or var.varValue >= var.lowBound - 1e-6)
        assert var.upBound is None or var.varValue <= var.upBound + 1e-6, var.name


def _held_back(prob: pulp.LpProblem, seed: int) -> _solvers.HeldBack:
    """A part of ``prob`` to stage: every third multi-term row and one singleton row by name, and
    the forbidden binary ``f`` as if its bound 0 had been set on a free binary (prior bounds 0..1:
    the first stage's cost takes it to 1, the second stage must move it back)."""
    rng = random.Random(seed)
    names = [n for n, c in prob.constraints.items() if len(c.expr) > 1]
    singletons = [n for n, c in prob.constraints.items() if len(c.expr) == 1]
    rows = frozenset(names[seed % 3 :: 3]) | {rng.choice(singletons)}
    f = next(v for v in prob.variables() if v.name == "f")
    return _solvers.HeldBack(rows=rows, prior={id(f): (f, 0, 1)})


@pytest.mark.parametrize("seed", range(12))
def test_staged_relaxation_solves_what_cbc_solves(seed):
    """highs-lp with a held-back part (the plugin's rows and bounds added to a solved LP, then
    re-solved from its basis): CBC's status and objective, every constraint and bound held — the
    second stage is the whole problem, not the first stage's plan."""
    prob = _mixed_problem(seed)
    reference = prob.deepcopy()
    reference.solve(pulp.PULP_CBC_CMD(msg=False))
    run = _solvers.solve_with_highs(prob, relax_first=True, held_back=_held_back(prob, seed))
    assert run.staged
    assert prob.status == reference.status == pulp.LpStatusOptimal
    assert pulp.value(prob.objective) == pytest.approx(pulp.value(reference.objective), abs=1e-6)
    for name, constraint in prob.constraints.items():
        value = constraint.value()
        assert {pulp.LpConstraintEQ: abs(value) <= 1e-6, pulp.LpConstraintLE: value <= 1e-6,
                pulp.LpConstraintGE: value >= -1e-6}[constraint.sense], (name, value)
    for var in prob.variables():
        assert var.lowBound is None or var.varValue >= var.lowBound - 1e-6, var.name
        assert var.upBound is None or var.varValue <= var.upBound + 1e-6, var.name


def test_staged_model_is_the_problem_without_its_held_back_part_first():
    """The staged arrays: the held-back rows last, the first stage's bounds the prior ones (``f``
    free there, so passed, not left out), and ``changed`` exactly the columns the part tightens."""
    import highspy

    prob = _mixed_problem(1)
    held = _held_back(prob, 1)
    model = _solvers._highs_model(prob, highspy.kHighsInf, held)
    names = [v.name for v in model.columns]
    assert "f" in names and "f" not in {v.name for v in model.left_out}
    f = names.index("f")
    assert (model.first_lower[f], model.first_upper[f], model.upper[f]) == (0, 1, 0)
    assert model.changed.tolist() == [f]
    unstaged = _solvers._highs_model(prob, highspy.kHighsInf)
    as_rows = {n for n, c in prob.constraints.items() if len(c.expr) != 1 or 0 in c.expr.values()}  # not bounds
    assert model.first_rows == len(unstaged.row_lower) - len(as_rows & held.rows)
    assert len(model.row_lower) == model.first_rows + len(held.rows)
    assert model.staged and not unstaged.staged and "f" in {v.name for v in unstaged.left_out}


def test_the_plugin_stages_its_rows_and_bounds_on_highs_lp(make_mesh):
    """add_op_constraints on highs-lp hands HiGHS autoparallel's problem first and the plugin's
    part second (``SolveOutcome.staged``), with a clean audit; ``SolverConfig(staged=False)``
    solves the whole problem at once, to the same objective (CBC's: the full tier's
    ``test_highs_lp_gives_cbcs_objective_on_the_seed_block_and_llama3``)."""
    mesh = make_mesh((2, 4))
    outcomes, objectives = [], []

    def grab(autop):
        outcomes.append(autop.sharding_optimizer._apc_solver.outcomes[-1])

    for config in (SolverConfig(name="highs-lp"), SolverConfig(name="highs-lp", staged=False)):
        run, report = run_seed("strict", mesh, config=SMALL, solver=config, after_apply=grab)
        assert report.ok, explain(report)
        objectives.append(run.objective)
    assert objectives[0] == pytest.approx(objectives[1], rel=1e-9)
    assert [o.staged for o in outcomes] == [True, False]
    assert "(staged)" in outcomes[0].describe()
