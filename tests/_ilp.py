"""The whole ILP of one fresh autoparallel build, in a comparable form: the tests that hold a
build-time patch of this package (the build memo, the view skip) to leaving autoparallel's ILP
unchanged compare two of these."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from autoparallel.api import AutoParallel

from autoparallel_constraints.testing import reset_strategy_cache


def build_ilp(model_fn: Callable[[], torch.nn.Module], input_fn: Callable[[], Any], mesh: Any) -> tuple[list, list]:
    """Every decision variable (key, costs, specs) and every constraint of a fresh build (the
    strategy cache emptied first, else a second build reuses the first one's strategies)."""
    reset_strategy_cache()
    with torch.device("meta"):
        model = model_fn()
    with AutoParallel(model, input_fn, mesh, dynamic=True) as autop:
        opt = autop.sharding_optimizer
        variables = sorted(
            (key, dv.var.name, dv.cost, dv.comm_cost, dv.compute_cost, dv.sharding_transition_cost,
             str(dv.input_spec), str(dv.output_spec))
            for key, dv in opt.decision_vars.items()
        )
        rows = sorted(str(c) for c in opt.prob.constraints.values())
    return variables, rows
