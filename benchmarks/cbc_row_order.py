"""Does CBC care where the plugin's rows sit? One build, the same ILP solved four ways.

Run on demand (not part of the test suite)::

    python benchmarks/cbc_row_order.py --layers 2            # ~10 minutes here
    python benchmarks/cbc_row_order.py --layers 32 --repeat 2  # Llama3-8B shapes, ~1 hour

It builds autoparallel's llama3 (dim 4096, 8x8, the lab's configuration) once, sets
autoparallel's objective and memory rows as its ``_solve`` does, and computes strict's additions
for the whole table. Then CBC (PuLP's, as autoparallel calls it) solves, interleaved after one
warm-up round, the order reversed every other round:

* ``none``: autoparallel's problem alone;
* ``row_last``: strict's rows appended after every row of autoparallel's (what the plugin does
  now: ``plan._plugin._rows_last``);
* ``row_before_memory``: strict's rows before autoparallel's memory rows (where
  ``add_op_constraints`` used to leave them: autoparallel rebuilds the memory rows at the end
  before each solve);
* ``bounds``: no row, the forbidden columns fixed at 0 by their upper bounds (presolve removes them).

Printed per variant: CPU seconds of the CBC child (median [min-max]) and of this process's PuLP
work (writing the MPS file, reading the solution), and the objective, which must be equal.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
from typing import Any

VARIANTS = ("none", "row_last", "row_before_memory", "bounds")
MEMORY_ROWS = ("memory_constraint_high", "memory_constraint_low")


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=4096)
    parser.add_argument("--mesh", default="8x8")
    parser.add_argument("--repeat", type=int, default=3, help="measured rounds after one warm-up round")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    variants = args.variants.split(",")

    import pulp
    from _one_build import llama3_up_to_the_solve

    from autoparallel_constraints.formulations import Namer, make_formulation

    results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    with llama3_up_to_the_solve(mesh=args.mesh, layers=args.layers, dim=args.dim) as build:
        spec, opt, sites = build.spec, build.opt, build.sites
        strict = make_formulation("strict", forbid="row").build(opt, sites, Namer("strict"))  # its row, not its bounds
        columns = [v for c in strict.constraints.values() for v in c.keys()]
        print(f"{spec.description}, {args.mesh}: built in {build.seconds:.0f} s; "
              f"{len(opt.prob.constraints):,} rows; strict adds {len(strict.constraints)} row(s) "
              f"over {len(columns)} columns", flush=True)

        def arrange(variant: str) -> Any:
            """Put the problem in ``variant``'s form; return what undoes it."""
            prob = opt.prob
            if variant in ("row_last", "row_before_memory"):
                memory = {n: prob.constraints.pop(n) for n in MEMORY_ROWS} if variant == "row_before_memory" else {}
                for name, constraint in strict.constraints.items():
                    prob.addConstraint(constraint, name)
                for name, constraint in memory.items():
                    prob.constraints[name] = constraint
                return lambda: [prob.constraints.pop(n) for n in strict.constraints]
            if variant == "bounds":
                old = [(v, v.upBound) for v in columns]
                for v in columns:
                    v.upBound = 0
                return lambda: [setattr(v, "upBound", up) for v, up in old]
            return lambda: None

        for round_index in range(args.repeat + 1):
            order = variants if round_index % 2 == 0 else variants[::-1]
            for variant in order:
                undo = arrange(variant)
                child, own = _cpu(resource.RUSAGE_CHILDREN), _cpu(resource.RUSAGE_SELF)
                with tempfile.TemporaryDirectory() as tmpdir:
                    solver = pulp.PULP_CBC_CMD(msg=False)
                    solver.tmpDir = tmpdir
                    opt.prob.solve(solver)
                run = {
                    "cbc_cpu_s": _cpu(resource.RUSAGE_CHILDREN) - child,
                    "pulp_cpu_s": _cpu(resource.RUSAGE_SELF) - own,
                    "objective": float(pulp.value(opt.prob.objective)),
                }
                undo()
                tag = "warm-up" if round_index == 0 else f"round {round_index}"
                print(f"  {tag:8} {variant:18} CBC {run['cbc_cpu_s']:7.1f} s  PuLP {run['pulp_cpu_s']:6.1f} s  "
                      f"objective {run['objective']:.4f}", flush=True)
                if round_index:
                    results[variant].append(run)

    print(f"\nCBC CPU seconds, median [min-max] of {args.repeat} rounds after a warm-up:")
    base = results.get("none")
    for variant in variants:
        cbc = [r["cbc_cpu_s"] for r in results[variant]]
        line = f"  {variant:18} {statistics.median(cbc):7.1f} [{min(cbc):.1f}-{max(cbc):.1f}]"
        if base and variant != "none":
            ratios = [r["cbc_cpu_s"] / b["cbc_cpu_s"] for r, b in zip(results[variant], base)]
            line += f"   / none: {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
        objectives = {round(r["objective"], 6) for r in results[variant]}
        print(line + f"   objective {', '.join(map(str, sorted(objectives)))}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"layers": args.layers, "dim": args.dim, "mesh": args.mesh, "runs": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
