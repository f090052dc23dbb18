"""Many formulations on one build: the workbench on the forced #348 case.

The seed block at tiny size on a 2x4 CPU mesh, with DTensor's old index_put strategy offered and
index_put's ``self`` and ``values`` pinned apart (RS0 / RS1), is built once. The workbench then
solves autoparallel alone, ``strict``, ``explicit`` and this folder's ``prune`` on that build,
applies, audits and verifies each, and restores the problem after every row (checked:
``check_restore=True``). Prints one line per row and ``VERDICT: ok`` when autoparallel alone is
refused by the audit, every formulation is clean and proven, and ``strict`` and ``prune`` (the
same feasible set) reach the same objective.

    python examples/workbench.py
"""

import time

import torch
from autoparallel.api import AutoParallel
from prune import Prune
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.models import SeedBlock, SeedConfig
from autoparallel_constraints.testing import (
    cpu_mesh,
    device_name,
    find_nodes,
    init_fake_process_group,
    offer_strategy,
)

INDEX_PUT = torch.ops.aten.index_put.default
RR, RS0, RS1 = (Replicate(), Replicate()), (Replicate(), Shard(0)), (Replicate(), Shard(1))


def main() -> bool:
    with torch.device("meta"):
        model = SeedBlock(SeedConfig(num_heads=10, head_dim=16, batch=8, seq=16))
    t0 = time.perf_counter()
    with offer_strategy(INDEX_PUT, input_placements=[RS0, RR, RS1], output_placements=RS0), \
            AutoParallel(model, model.make_input, cpu_mesh((2, 4))) as autop:
        autop.add_input_constraints([(Shard(0), Replicate())])
        (node,) = find_nodes(autop, INDEX_PUT)
        autop.sharding_optimizer.add_node_constraint(node.args[0], RS0, constraint_name="pin_self")
        autop.sharding_optimizer.add_node_constraint(node.args[2], RS1, constraint_name="pin_values")
        print(f"one build: {time.perf_counter() - t0:.1f} s")
        bench = apc.Workbench(autop, check_restore=True)
        rows = {name: bench.run(form) for name, form in
                [("none", None), ("strict", "strict"), ("explicit", "explicit"), ("prune", Prune())]}
    for name, row in rows.items():
        print(f"{name:9s} objective {row.objective:8.3f}  plugin+solve {row.plugin_solve_s:5.2f} s  "
              f"audit {row.audit}; verify {row.verify}")
    return (
        not rows["none"].audit_ok
        and all(rows[n].audit == "clean" and rows[n].verify_ok for n in ("strict", "explicit", "prune"))
        and abs(rows["strict"].objective - rows["prune"].objective) <= 1e-6 * abs(rows["strict"].objective)
    )


if __name__ == "__main__":
    init_fake_process_group()
    with device_name():
        ok = main()
    print("VERDICT: ok" if ok else "VERDICT: FAILED")
