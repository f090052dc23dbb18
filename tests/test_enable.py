"""Guards switching the plugin on without editing the code that builds AutoParallel:
``apc.enable`` / ``apc.disable`` / ``apc.enabled`` and ``$APC_OPTIONS``. While enabled, every
AutoParallel gets ``add_op_constraints(**options)`` at its first ``optimize_placement`` unless its
user called it; autoparallel's one-call ``auto_parallel`` gets it too; options are checked when
enabling. (torchtitan's class and its ``--module`` loader: tests/test_torchtitan.py.)"""

from __future__ import annotations

import pytest
import torch
from autoparallel.api import AutoParallel, auto_parallel
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.models import AddMul
from autoparallel_constraints.plan._state import get_state


@pytest.fixture(autouse=True)
def _disabled_after():
    yield
    apc.disable()


def _solve(mesh, *, call: dict | None = None):
    with torch.device("meta"):
        model = AddMul()
    with AutoParallel(model, lambda: torch.randn(8, 4, 16), mesh) as autop:
        autop.add_input_constraints([(Shard(0),)])
        if call is not None:
            autop.add_op_constraints(**call)
        autop.optimize_placement()
    return autop


def test_enabled_adds_the_call_before_the_first_solve(make_mesh):
    """enable(formulation=...): the AutoParallel solves with the plugin's state, those options."""
    apc.enable(formulation="strict")
    state = get_state(_solve(make_mesh((2,))))
    assert state is not None and state.formulation.name == "strict"
    assert apc.enabled_options() == {"formulation": "strict"}


def test_a_users_own_call_is_kept(make_mesh):
    """A user who called add_op_constraints keeps that call; the enabled one is not added twice."""
    apc.enable(formulation="strict")
    state = get_state(_solve(make_mesh((2,)), call={"formulation": "soft"}))
    assert state.formulation.name == "soft"


def test_disable_and_the_context_manager_restore(make_mesh):
    """disable(): new solves run without the plugin; enabled(): only inside the block."""
    apc.enable()
    apc.disable()
    assert apc.enabled_options() is None and get_state(_solve(make_mesh((2,)))) is None
    with apc.enabled(formulation="lazy"):
        assert get_state(_solve(make_mesh((2,)))).formulation.name == "lazy"
    assert apc.enabled_options() is None and get_state(_solve(make_mesh((2,)))) is None


def test_bad_options_fail_at_enable_and_change_nothing():
    """An option add_op_constraints and the formulation refuse fails here, naming it; the options
    in force stay as they were."""
    apc.enable(formulation="soft")
    with pytest.raises(apc.InvalidOptionError, match="bogus"):
        apc.enable(bogus=1)
    assert apc.enabled_options() == {"formulation": "soft"}
    apc.enable(formulation="soft", penalty=5.0)  # a formulation's own option passes


def test_options_from_the_environment():
    """$APC_OPTIONS: a JSON object of options; anything else is refused with what to give."""
    assert apc.enable_from_env({"APC_OPTIONS": '{"formulation": "strict"}'}) == {"formulation": "strict"}
    assert apc.enabled_options() == {"formulation": "strict"}
    assert apc.enable_from_env({}) == {} and apc.enabled_options() == {}
    with pytest.raises(apc.InvalidOptionError, match="JSON"):
        apc.enable_from_env({"APC_OPTIONS": "formulation=strict"})
    with pytest.raises(apc.InvalidOptionError, match="object"):
        apc.enable_from_env({"APC_OPTIONS": '["strict"]'})


def test_auto_parallel_one_call_gets_it(make_mesh):
    """autoparallel's auto_parallel(...) builds, solves and applies in one call: enabled, its graph
    is the plugin's (materialized redistributions carry the plugin's names, verified on apply)."""
    seen: list = []
    original = AutoParallel.optimize_placement

    def spy(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        seen.append(get_state(self))
        return out

    with torch.device("meta"):
        model = AddMul()
    AutoParallel.optimize_placement = spy
    try:
        with apc.enabled():
            auto_parallel(model, make_mesh((2,)), lambda: torch.randn(8, 4, 16), (Replicate(),))
    finally:
        AutoParallel.optimize_placement = original
    assert len(seen) == 1 and seen[0] is not None and seen[0].formulation.name == "explicit"
