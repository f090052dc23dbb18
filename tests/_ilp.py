"""The whole ILP of one fresh autoparallel build, in a comparable form: the tests that hold a
build-time patch of this package (the build memo, the view skip) to leaving autoparallel's ILP
unchanged compare two of these. And the plugin's size rows built the plain way, which the
per-cluster build must reproduce."""

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


def reference_size_rows(opt: Any, couplings: Any) -> list[tuple[str, str]]:
    """(Z1)-(Z3) built the plain way, every coupling and mesh dim summed in full and deduplicated
    by the row's terms only (no skip before building): what ``build_size_constraints`` must add,
    as (row, note) in the order added."""
    import pulp

    from autoparallel_constraints.formulations import _sites
    from autoparallel_constraints.plan import _sizes

    mesh_shape = tuple(opt.mesh.shape)

    def y(node, keep):
        return [v for o, st in enumerate(opt.strats[node].strategies)
                if (spec := _sizes._single_spec(st.output_specs)) is not None and keep(spec)
                for v in _sites.strategy_indicator(opt, opt.node_map[node], o)]

    rows, seen = [], set()

    def add(kind, expr, note):
        key = (kind, tuple(sorted((v.name, c) for v, c in expr.items())))
        if expr and key not in seen:
            seen.add(key)
            rows.append((str(expr == 0), note))

    for c in couplings:
        if c.kind == "even":
            uneven = y(c.consumer, lambda s: c.size % _sizes._ways(s, c.out_dim, mesh_shape) != 0)
            add("even", pulp.lpSum(uneven), f"{c.describe()} is split only evenly")
            continue
        for m in range(len(mesh_shape)):
            leaves = [v for x, d in c.leaves for v in y(x, lambda s: _sizes._shards(s, m, d))]
            outs = y(c.consumer, lambda s: _sizes._shards(s, m, c.out_dim)) if c.out_dim is not None else []
            add(c.kind, pulp.lpSum(leaves) + (-1 if c.kind == "match" else 1) * pulp.lpSum(outs),
                f"{c.describe()} (mesh dim {m})")
    return rows
