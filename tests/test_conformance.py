"""Guards the conformance kit (``autoparallel_constraints.testing.conformance``) and that every
formulation passes it: the four built-ins (full tier: about a minute each) and ``examples/prune.py``,
the formulation written only with the public API (default tier). Also guards that the kit fails
when it should: a formulation that adds nothing is caught by the forced #348 check."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import autoparallel_constraints as apc
from autoparallel_constraints.formulations import Additions, Formulation
from autoparallel_constraints.testing import explain
from autoparallel_constraints.testing.conformance import FormulationConformance, run_scenario

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # examples/ is a top-level folder, imported as examples.prune
    sys.path.insert(0, str(ROOT))


class TestPruneConformance(FormulationConformance):
    formulation = "examples.prune:Prune"


@pytest.mark.full
class TestStrictConformance(FormulationConformance):
    formulation = "strict"


@pytest.mark.full
class TestExplicitConformance(FormulationConformance):
    formulation = "explicit"


@pytest.mark.full
class TestSoftConformance(FormulationConformance):
    formulation = "soft"


@pytest.mark.full
class TestLazyConformance(FormulationConformance):
    formulation = "lazy"


class Nothing(Formulation):
    """Adds nothing: the kit must not pass it.

    Sets: none. Variables: none. Objective: unchanged. Constraints: none.
    """

    name = "nothing"

    def build(self, opt, sites, namer):
        return Additions()


def test_the_kit_fails_a_formulation_that_does_nothing():
    """On the forced #348 case a do-nothing formulation keeps the illegal plan; the default call's
    verifier refuses the graph it builds (index_put's inputs are not co-sharded, which shows
    where the graph gathers them), so the kit's forced check (no error, audit clean) fails."""
    run = run_scenario("forced", Nothing, lower=True)
    assert isinstance(run.error, apc.VerificationError), explain(run.error)
    assert not run.error.report.ok and run.error.report.violations


@pytest.mark.parametrize("forbid, trace", [("bounds", "bounds"), ("row", "rows")])
def test_the_kit_catches_a_leaky_rollback(monkeypatch, forbid, trace):
    """If adding were not atomic (bounds or rows kept after a failure), the kit's failed-call
    check says which: strict's default forbids by bounds, ``forbid="row"`` by rows."""
    from autoparallel_constraints.formulations import Strict
    from autoparallel_constraints.plan import _plugin
    from autoparallel_constraints.testing.conformance import failed_call_leaves_problem

    def leaky(prob, additions):
        for bound in additions.bounds.values():
            for var in bound.variables:
                var.upBound = bound.up  # kept: no rollback
        for name, constraint in additions.constraints.items():
            prob.addConstraint(constraint, name)  # the kit's injected row fails last; no rollback

    monkeypatch.setattr(_plugin, "_add_atomically", leaky)
    error, unchanged, changed = failed_call_leaves_problem(lambda: Strict(forbid=forbid))
    assert error is not None and not unchanged and trace in changed, changed
