"""The #348 fix end to end: the forced case without the plugin, then with it.

Upstream autoparallel issue #348: index_put got ``self`` sharded ``(R, S(0))`` and ``values``
``(R, S(1))`` and Inductor crashed with "Broadcast failed in ExpandView". At the pinned commit
autoparallel's own plan is legal, so the case is forced: the pre-fix DTensor strategy is offered
and the producers of self and values are pinned to RS(0) and RS(1). Without the plugin the solver
picks the illegal strategy, the audit flags index_put and Inductor fails; with
``add_op_constraints()`` the audit is clean and Inductor compiles. Seed block at the issue's sizes
on a 2x4 CPU mesh (fake ranks). Prints one line per run and ``VERDICT: ok`` when both behave.

    python examples/fix_issue_348.py
"""

import torch
from autoparallel.api import AutoParallel
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.models import SeedBlock
from autoparallel_constraints.testing import (
    cpu_mesh,
    device_name,
    find_nodes,
    init_fake_process_group,
    lower_with_inductor,
    offer_strategy,
)

INDEX_PUT = torch.ops.aten.index_put.default
RR, RS0, RS1 = (Replicate(), Replicate()), (Replicate(), Shard(0)), (Replicate(), Shard(1))


def run(with_plugin: bool) -> tuple[bool, str]:
    """(audit ok, Inductor's verdict) for the forced case."""
    with torch.device("meta"):
        model = SeedBlock()
    with offer_strategy(INDEX_PUT, input_placements=[RS0, RR, RS1], output_placements=RS0), \
            AutoParallel(model, model.make_input, cpu_mesh((2, 4))) as autop:
        autop.add_input_constraints([(Shard(0), Replicate())])
        (node,) = find_nodes(autop, INDEX_PUT)
        autop.sharding_optimizer.add_node_constraint(node.args[0], RS0, constraint_name="pin_self")
        autop.sharding_optimizer.add_node_constraint(node.args[2], RS1, constraint_name="pin_values")
        if with_plugin:
            print(autop.add_op_constraints())
        autop.apply_placement(autop.optimize_placement())
        report = apc.audit(autop)
        try:
            lower_with_inductor(autop)
            lowered = "compiles"
        except Exception as exc:  # noqa: BLE001 - Inductor's error is the point
            lowered = f"fails: {str(exc).splitlines()[0][:120]}"
    print(f"{'with' if with_plugin else 'without'} the plugin: audit {report.verdict}; Inductor {lowered}")
    return report.ok, lowered


if __name__ == "__main__":
    with device_name("H100"):  # the cost model's GPU limits on a CPU machine
        init_fake_process_group()
        base_ok, base_lowered = run(with_plugin=False)
        fixed_ok, fixed_lowered = run(with_plugin=True)
    ok = not base_ok and "Broadcast failed in ExpandView" in base_lowered and fixed_ok and fixed_lowered == "compiles"
    print(f"VERDICT: {'ok' if ok else 'unexpected'}")
