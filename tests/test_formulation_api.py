"""Guards the public formulation API: ``apc.Formulation`` and ``apc.register_formulation``
(validated: subclass, name, docstring math; duplicates refused unless ``override``; close-name
errors), ``add_op_constraints(formulation=<name, "pkg.mod:Class" or instance>)``, the contract a
formulation's hooks are held to (a raising, misnamed or problem-writing ``build`` becomes a
``FormulationError`` and leaves the problem unchanged), bounds as additions, and the lab's
resolution of ``--formulations pkg.mod:Class``."""

from __future__ import annotations

import sys
from pathlib import Path

import pulp
import pytest
import torch
from autoparallel.api import AutoParallel

import autoparallel_constraints as apc
from autoparallel_constraints import formulations as F
from autoparallel_constraints.models import AddMul

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MATH = """Sets: T. Variables: none. Objective: unchanged. Constraints: (X1) none → Implemented in: build()."""


@pytest.fixture
def registry():
    """The process-wide registry, restored after the test."""
    saved = dict(F.FORMULATIONS)
    yield F.FORMULATIONS
    F.FORMULATIONS.clear()
    F.FORMULATIONS.update(saved)


def _cls(name="mine", doc=MATH, build=True, base=F.Formulation):
    body = {"name": name, "__doc__": doc}
    if build:
        body["build"] = lambda self, opt, sites, namer: F.Additions()
    return type("Mine", (base,), body)


def test_public_names_are_exported():
    """What a formulation author needs is public, and ``__all__`` is sorted and resolvable."""
    assert apc.Formulation is F.Formulation and apc.register_formulation is F.register_formulation
    assert issubclass(apc.FormulationError, apc.ConstraintsError)
    for name in ("Additions", "Bound", "Namer", "Repair", "Site", "strategy_indicator", "twin_count",
                 "refuse_conflicting_pins", "make_formulation", "load_formulation"):
        assert name in F.__all__ and hasattr(F, name), name
    assert F.__all__ == sorted(F.__all__, key=lambda n: (not n.isupper(), n[0].islower(), n))
    assert {"Formulation", "FormulationError", "register_formulation"} <= set(apc.__all__)


def test_builtins_come_in_through_the_same_door():
    """The four built-ins are registered and pass the same validation a user class does."""
    assert {n: c.__name__ for n, c in F.FORMULATIONS.items()}.items() >= {
        "strict": "Strict", "explicit": "Explicit", "soft": "Soft", "lazy": "Lazy"}.items()
    for cls in F.FORMULATIONS.values():
        assert F.validate_formulation(cls) is cls


@pytest.mark.parametrize(
    ("cls", "match"),
    [
        (int, "subclass of autoparallel_constraints.Formulation"),
        (lambda: _cls(name=None), "needs a class attribute `name`"),
        (lambda: _cls(name="My-Form"), "needs a class attribute `name`"),
        (lambda: _cls(name="size"), "is reserved"),
        (lambda: _cls(build=False), "does not implement build"),
        (lambda: _cls(doc=None), r"docstring must state its math.*missing: Sets:, Variables:"),
        (lambda: _cls(doc="Sets: T. Variables: none."), "missing: Objective, Constraints:"),
    ],
)
def test_register_refuses_invalid_classes(registry, cls, match):
    """Each refusal names what is wrong and leaves the registry as it was."""
    before = dict(registry)
    with pytest.raises(apc.InvalidOptionError, match=match):
        apc.register_formulation(cls() if cls is not int else cls)
    assert registry == before


def test_register_duplicates_need_override(registry):
    """Same class again: no-op; another class under a taken name: refused naming both, unless override."""
    mine = _cls()
    assert apc.register_formulation(mine) is mine
    assert apc.register_formulation(mine) is mine
    other = _cls()
    with pytest.raises(apc.InvalidOptionError, match=r"'mine' is already registered by .*override=True"):
        apc.register_formulation(other)
    assert registry["mine"] is mine
    with pytest.raises(apc.InvalidOptionError, match="already registered"):
        apc.register_formulation(_cls(name="strict"))
    apc.register_formulation(other, override=True)
    assert registry["mine"] is other


def test_make_formulation_resolves_names_paths_classes_and_instances(registry):
    """A registered name, 'pkg.mod:Class', a class or an instance; errors with close names or the
    package to install; options with an instance are refused."""
    from examples.prune import Prune

    assert type(F.make_formulation("examples.prune:Prune")) is Prune
    assert type(F.make_formulation(Prune)) is Prune
    inst = Prune()
    assert F.make_formulation(inst) is inst
    apc.register_formulation(Prune)
    assert type(F.make_formulation("prune")) is Prune
    with pytest.raises(apc.InvalidOptionError, match=r"unknown formulation 'prnue'.*Did you mean 'prune'"):
        F.make_formulation("prnue")
    with pytest.raises(apc.InvalidOptionError, match=r"cannot import module 'mypkg.mymod'.*Install the package"):
        F.make_formulation("mypkg.mymod:MyFormulation")
    with pytest.raises(apc.InvalidOptionError, match=r"has no 'Prnue'; formulations in it: Prune\. Did you mean 'Prune'"):
        F.make_formulation("examples.prune:Prnue")
    with pytest.raises(apc.InvalidOptionError, match="give them to its constructor"):
        F.make_formulation(inst, penalty=1)


def _fingerprint(opt):
    prob = opt.prob
    return (tuple(prob.constraints), {v.name: (v.lowBound, v.upBound) for v in prob.variables()}, str(prob.objective))


def _raising(self, opt, sites, namer):
    raise ValueError("boom")


def _misnamed(self, opt, sites, namer):
    return F.Additions(constraints={"wrong_000": pulp.LpVariable("q", 0, 1) >= 0})


def _writes(self, opt, sites, namer):
    opt.prob.addConstraint(pulp.LpVariable("w", 0, 1) >= 0, "mine.sneaky_000")
    return F.Additions()


def _not_additions(self, opt, sites, namer):
    return {"mine.x_000": 1}


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (_raising, r"formulation 'mine' \(.*\)\.build\(\) raised ValueError: boom"),
        (_misnamed, r"named additions outside 'mine\.<family>_<idx>': wrong_000"),
        (_writes, r"changed the optimizer's problem itself"),
        (_not_additions, "must return an Additions, got dict"),
    ],
)
def test_broken_formulations_raise_formulation_error(make_mesh, build, match):
    """A formulation that breaks the contract gets a FormulationError naming it and the hook; the
    problem is unchanged (except what a problem-writing build wrote itself, which is named)."""
    mine = type("Mine", (F.Formulation,), {"name": "mine", "__doc__": MATH, "build": build})
    with torch.device("meta"):
        model = AddMul()
    with AutoParallel(model, lambda: torch.randn(8, 4, 16), make_mesh((2, 2))) as autop:
        opt = autop.sharding_optimizer
        before = _fingerprint(opt)
        with pytest.raises(apc.FormulationError, match=match):
            autop.add_op_constraints(formulation=mine())
        after = _fingerprint(opt)
        if build is _writes:
            assert set(after[0]) - set(before[0]) == {"mine.sneaky_000"}
        else:
            assert after == before
        assert getattr(autop, "_apc_state", None) is None


def test_instance_and_bounds_reach_the_problem(make_mesh):
    """An instance of examples/prune's Prune goes in by ``formulation=``: its bounds fix the bad
    strategies' variables to 0 (no row added), reported by family, and the solve respects them."""
    from torch.distributed.tensor.placement_types import Shard

    from autoparallel_constraints.testing import offer_strategy
    from examples.prune import Prune

    s01, s10 = (Shard(0), Shard(1)), (Shard(1), Shard(0))
    with torch.device("meta"):
        model = AddMul()
    bad_add = offer_strategy(torch.ops.aten.add.Tensor, input_placements=[s01, s10], output_placements=s01)
    with bad_add, AutoParallel(model, lambda: torch.randn(512, 512, 16), make_mesh((2, 2))) as autop:
        autop.add_input_constraints([s10])
        autop.add_output_constraints([s01])
        rows_before = set(autop.sharding_optimizer.prob.constraints)
        added = autop.add_op_constraints(["add"], formulation=Prune(), sizes=False)
        assert added.formulation == "prune" and added.bounds == {"prune.fix": len(added.bound_names)} and added.bound_names
        assert set(autop.sharding_optimizer.prob.constraints) == rows_before
        assert "prune.fix=" in str(added)
        state = autop._apc_state
        fixed = [v for b in state.additions.bounds.values() for v in b.variables]
        assert fixed and all(v.upBound == 0 for v in fixed)
        placement = autop.optimize_placement()
        assert all((v.varValue or 0) < 0.5 for v in fixed)
        autop.apply_placement(placement)
        report = apc.audit(autop)
    assert report.ok, report


def test_lab_resolves_import_paths_and_says_which_package_is_missing():
    """``compare --formulations strict,mypkg.mymod:MyFormulation``: the path is imported before
    anything runs, and a missing package is named."""
    from autoparallel_constraints.lab import compare

    with pytest.raises(apc.InvalidOptionError, match=r"cannot import module 'mypkg.mymod'"):
        compare("seed", (2, 4), ["strict", "mypkg.mymod:MyFormulation"], ["cbc"])
    with pytest.raises(apc.InvalidOptionError, match=r"unknown formulation 'strct'.*Did you mean 'strict'"):
        compare("seed", (2, 4), ["none", "strct"], ["cbc"])


def test_lab_command_line_names_the_missing_package(capsys):
    """``python -m autoparallel_constraints compare --formulations strict,mypkg.mymod:MyFormulation``
    exits 2 with the package error on stderr, no traceback, before running anything."""
    from autoparallel_constraints.__main__ import main

    assert main(["compare", "--formulations", "strict,mypkg.mymod:MyFormulation"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot import module 'mypkg.mymod'") and "Traceback" not in err
