"""The 3-D solve: one build of the seed block on 2x2x2, then autoparallel alone and the plugin's
formulations solved on it with CBC and ``highs-lp``, interleaved (``apc.Workbench``).

    python benchmarks/solvers_3d.py --repeat 3 --warmup 1 --json out.json

Printed: the build's seconds and autoparallel's ILP size; per row (formulation x solver) the median
[min-max] of the plugin's add and of the solve, the objective, and ``highs-lp``'s LP relaxation
verdict (integral, or fractional and the MIP ran); then, per formulation, (build + plugin + solve)
/ (build + autoparallel alone's solve) with the same solver, and plugin / build. The build is
shared, so those two are computed from the measured parts (medians), not timed end to end.

The seed block at 6 heads x 8, batch = seq = 8 (as ``numerics_3d.py``'s ``seed``): input and output
pinned ``(S(0), R, R)``, the parameter memory constraint on. No apply. ``--model llama3_8b``:
autoparallel's llama3 at Llama3-8B shapes as the lab builds it (``--layers``, default 2; mesh dims
named dp/tp/cp on 3-D meshes; its input/output pins and mixed precision). The process's peak
resident memory is printed after the build and at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mesh", default="2x2x2")
    p.add_argument("--rows", default="none,strict,explicit")
    p.add_argument("--solvers", default="cbc,highs-lp")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--json", default=None)
    p.add_argument("--model", default="seed", choices=("seed", "llama3_8b"))
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--no-size-guard", action="store_true",
                   help="build even when the plugin's build size guard estimates it cannot be built and solved "
                        "in the memory available (apc.set_build_budget(None)): to reproduce what happens then")
    args = p.parse_args()

    import torch
    from autoparallel.api import AutoParallel
    from torch.distributed.tensor.placement_types import Replicate, Shard

    import autoparallel_constraints as apc
    from autoparallel_constraints.models import SeedBlock, SeedConfig
    from autoparallel_constraints.testing import cpu_mesh, device_name
    from autoparallel_constraints.workbench._bench import _count_variables

    if args.no_size_guard:
        apc.set_build_budget(None)
    shape = tuple(int(x) for x in args.mesh.split("x"))
    rows = args.rows.split(",")
    if args.model == "llama3_8b":
        from autoparallel_constraints.lab._models import _llama3_model

        lab = _llama3_model(shape, size="full", layers=args.layers, dim=None)
        mesh = cpu_mesh(shape, ("dp", "tp", "cp")[: len(shape)] if len(shape) == 3 else lab.mesh_dim_names)
        enter, constrain, label = (lambda: lab.enter(mesh)), lab.constrain, lab.description
    else:
        cfg = SeedConfig(num_heads=6, head_dim=8, batch=8, seq=8)
        mesh = cpu_mesh(shape)
        pins = (Shard(0),) + (Replicate(),) * (len(shape) - 1)
        with torch.device("meta"):
            model = SeedBlock(cfg)
        label = "seed 6x8 b8 s8"

        def enter():
            return AutoParallel(model, lambda: torch.randn(cfg.batch, cfg.seq, cfg.hidden), mesh, dynamic=True)

        def constrain(autop):
            autop.add_input_constraints([pins])
            autop.add_output_constraints([pins])
            autop.add_parameter_memory_constraint()
    with device_name("H100"):
        t0 = time.perf_counter()
        with enter() as autop:
            constrain(autop)
            build_s = time.perf_counter() - t0
            build_rss = _peak_rss_gib()
            opt = autop.sharding_optimizer
            # the workbench's count: prob.variables() would sort the problem's variables in place
            size = {"variables": _count_variables(opt.prob), "constraints": len(opt.prob.constraints)}
            print(f"build {build_s:.1f} s; autoparallel's ILP {size['variables']:,} variables, "
                  f"{size['constraints']:,} rows; peak RSS {build_rss:.2f} GiB", flush=True)
            bench = apc.Workbench(autop, apply=False, check_restore=False)
            results = bench.compare(rows, solvers=args.solvers.split(","), repeat=args.repeat, warmup=args.warmup)

    def med(xs):
        return statistics.median(xs), min(xs), max(xs)

    out = {"mesh": list(shape), "model": label, "build_s": build_s, **size, "build_peak_rss_gib": build_rss,
           "rows": []}
    alone: dict[str, float] = {}
    for r in results:
        plugin, solve = med([x.plugin_s for x in r.runs]), med([x.solve_s for x in r.runs])
        objectives = sorted({round(x.objective, 4) for x in r.runs})
        relax = sorted({x.relaxation for x in r.runs if x.relaxation})
        row = {"formulation": r.formulation, "solver": r.solver, "plugin_s": plugin, "solve_s": solve,
               "objectives": objectives, "relaxation": relax, "status": sorted({x.solver_status for x in r.runs}),
               "solves": [x.solve_s for x in r.runs]}
        out["rows"].append(row)
        if r.formulation == "none":
            alone[r.solver] = solve[0]
        print(f"{r.formulation:<9} {r.solver:<9} plugin {plugin[0]:6.2f} s [{plugin[1]:.2f}-{plugin[2]:.2f}]  "
              f"solve {solve[0]:7.2f} s [{solve[1]:.2f}-{solve[2]:.2f}]  objective {objectives}  "
              f"relaxation {relax or '-'}", flush=True)
    for row in out["rows"]:
        if row["formulation"] != "none" and row["solver"] in alone:
            total = build_s + row["plugin_s"][0] + row["solve_s"][0]
            row["build_solve_over_alone"] = total / (build_s + alone[row["solver"]])
            row["plugin_over_build"] = row["plugin_s"][0] / build_s
            print(f"{row['formulation']:<9} {row['solver']:<9} (build + plugin + solve) / (build + alone's solve) "
                  f"{row['build_solve_over_alone']:.4f}; plugin / build {row['plugin_over_build']:.5f}")
    out["peak_rss_gib"] = _peak_rss_gib()
    print(f"peak RSS {out['peak_rss_gib']:.2f} GiB (this process; CBC runs as a child)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


def _peak_rss_gib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


if __name__ == "__main__":
    raise SystemExit(main())
