"""What autoparallel's ILP holds in memory per variable: resident memory just before it creates
its variables (``_create_pulp_variables``, after the strategy enumeration) and after its build
returns (variables, cost records, objective, rows), both after a garbage collection, divided by
the variables created. The figure behind the build size guard's ``BYTES_PER_VARIABLE``.

    python benchmarks/ilp_memory.py --model seed --mesh 2x2x2

Models are ``numerics_3d.py``'s. One process per call (resident memory is the process's).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status (Linux only)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="seed")
    p.add_argument("--mesh", default="2x2x2")
    args = p.parse_args()

    import torch
    from autoparallel import optimize_sharding
    from autoparallel.api import AutoParallel

    import autoparallel_constraints  # noqa: F401  (the build memo and size guard, as users get them)
    from autoparallel_constraints.testing import cpu_mesh, device_name

    sys.path.insert(0, str(HERE))
    from numerics_3d import _builders

    before: list[int] = []
    create = optimize_sharding.ShardingOptimizer._create_pulp_variables

    def measured(self):
        gc.collect()
        before.append(_rss())
        return create(self)

    optimize_sharding.ShardingOptimizer._create_pulp_variables = measured
    mesh = tuple(int(x) for x in args.mesh.split("x"))
    model_fn, input_fn = _builders(args.model)
    with torch.device("meta"):
        model = model_fn()
    with device_name("H100"), AutoParallel(model, lambda: input_fn(), cpu_mesh(mesh), dynamic=True) as autop:
        gc.collect()
        after = _rss()
        variables = len(autop.sharding_optimizer.pulp_variables)
    print(json.dumps({
        "model": args.model, "mesh": list(mesh), "variables": variables,
        "rss_before_gib": round(before[0] / 2**30, 3), "rss_after_gib": round(after / 2**30, 3),
        "bytes_per_variable": round((after - before[0]) / variables),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
