"""CBC or the fast exact route, on one build: autoparallel's objective and solve, route by route.

Run on demand (not part of the test suite)::

    python benchmarks/solver_routes.py --layers 2               # ~8 minutes here
    python benchmarks/solver_routes.py --layers 32 --repeat 3   # Llama3-8B shapes

``bench_formulations.py`` measures whole runs in fresh processes, where autoparallel's build
swings by a third between identical runs. This one builds autoparallel's llama3 (dim 4096, 8x8,
the lab's configuration) once, adds autoparallel's memory rows as its ``_solve`` does, finds
strict's forbidden strategies (its default: upper bounds 0), and then times, interleaved after
one warm-up round (the order reversed every other round), what ``optimize_placement`` does
after the build on each route — set the objective, solve:

* ``cbc``: autoparallel's own ``_set_objective``, then PuLP's CBC as autoparallel calls it;
* ``highs-lp``: the objective in bulk (``plan._solvers.objective_in_bulk``, what the HiGHS routes use),
  then the LP relaxation with HiGHS, accepted when integral, else the MIP;
* ``highs-lp-own``: autoparallel's own ``_set_objective``, then the same HiGHS solve (what the
  bulk objective saves);
* ``strict-cbc``, ``strict-highs-lp``: as ``cbc`` and ``highs-lp`` with strict's bounds set (the
  solve with the plugin's forbidding against the solve without, per solver; the size couplings
  every formulation also adds are not in this problem);
* ``staged-highs-lp``: as ``strict-highs-lp``, staged as ``add_op_constraints`` does on highs-lp
  (``solve_with_highs(held_back=...)``): the problem without strict's bounds first, then the
  bounds set on that HiGHS instance and the LP re-solved from its basis.

Printed per variant: CPU seconds (this process + the CBC child) of the objective and of the solve,
median [min-max], the ratio to ``cbc`` paired by round, the objective (which must be equal), and
on HiGHS the relaxation's verdict and HiGHS's simplex iterations (its path: deterministic for one
problem, so a difference between two problems is the path, not noise).
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
from typing import Any

from _one_build import build_arguments, llama3_up_to_the_solve, spread

VARIANTS = ("cbc", "highs-lp", "highs-lp-own", "strict-cbc", "strict-highs-lp", "staged-highs-lp")


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children (CBC)."""
    return sum(r.ru_utime + r.ru_stime for r in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    build_arguments(parser)
    parser.add_argument("--repeat", type=int, default=3, help="measured rounds after one warm-up round")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")

    import pulp

    from autoparallel_constraints.formulations import Namer, make_formulation
    from autoparallel_constraints.plan._solvers import HeldBack, objective_in_bulk, solve_with_highs

    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    with llama3_up_to_the_solve(mesh=args.mesh, layers=args.layers, dim=args.dim, size=args.size) as build:
        spec, opt, sites = build.spec, build.opt, build.sites
        own_objective = type(opt)._set_objective  # autoparallel's step, as the cbc routes use it
        strict = make_formulation("strict").build(opt, sites, Namer("strict"))
        columns = [v for bound in strict.bounds.values() for v in bound.variables]
        print(f"{spec.description}, {args.mesh}: built in {build.seconds:.0f} s; "
              f"{len(opt.decision_vars):,} decision variables, {len(opt.prob.constraints):,} rows; "
              f"strict fixes {len(columns)} columns at 0 ({len(strict.bounds)} bound entries)", flush=True)

        def run(variant: str) -> dict[str, Any]:
            old = [(v, v.upBound) for v in columns]
            held = None
            if variant.startswith(("strict-", "staged-")):
                if variant.startswith("staged-"):  # what the plugin's state hands the hook
                    prior: dict[int, Any] = {}
                    for v in columns:
                        prior.setdefault(id(v), (v, v.lowBound, v.upBound))
                    held = HeldBack(rows=frozenset(), prior=prior)
                for v in columns:
                    v.upBound = 0
            c0 = _cpu()
            if variant in ("highs-lp", "strict-highs-lp", "staged-highs-lp"):
                opt.prob += objective_in_bulk(opt)
            else:
                own_objective(opt)
            c1 = _cpu()
            relaxation, iterations = None, None
            if variant.endswith("cbc"):
                with tempfile.TemporaryDirectory() as tmpdir:
                    solver = pulp.PULP_CBC_CMD(msg=False)
                    solver.tmpDir = tmpdir
                    pulp.LpProblem.solve(opt.prob, solver)
            else:
                highs = solve_with_highs(opt.prob, relax_first=True, held_back=held)
                relaxation, iterations = highs.relaxation, highs.simplex_iterations
            c2 = _cpu()
            for v, up in old:
                v.upBound = up
            return {"objective_cpu_s": c1 - c0, "solve_cpu_s": c2 - c1, "total_cpu_s": c2 - c0,
                    "objective": float(pulp.value(opt.prob.objective)), "status": pulp.LpStatus[opt.prob.status],
                    "relaxation": relaxation, "simplex_iterations": iterations}

        for round_index in range(args.repeat + 1):
            for variant in variants if round_index % 2 == 0 else variants[::-1]:
                r = run(variant)
                tag = "warm-up" if round_index == 0 else f"round {round_index}"
                print(f"  {tag:8} {variant:16} objective set {r['objective_cpu_s']:6.2f} s  solve "
                      f"{r['solve_cpu_s']:7.2f} s  objective {r['objective']:.4f} {r['status']}"
                      + (f", relaxation {r['relaxation']}, {r['simplex_iterations']:,} simplex iterations"
                         if r["relaxation"] else ""), flush=True)
                if round_index:
                    results[variant].append(r)

    print(f"\nCPU seconds (process + CBC child), median [min-max] of {args.repeat} rounds after a warm-up; "
          "ratios paired by round:")
    base = results.get("cbc")
    for variant in variants:
        rs = results[variant]
        line = (f"  {variant:16} objective set {spread([r['objective_cpu_s'] for r in rs])}  solve "
                f"{spread([r['solve_cpu_s'] for r in rs])}  both {spread([r['total_cpu_s'] for r in rs])}")
        if base and variant != "cbc":
            ratios = [r["total_cpu_s"] / b["total_cpu_s"] for r, b in zip(rs, base)]
            line += f"   / cbc: {spread(ratios, '.3f')}"
        objectives = sorted({round(r["objective"], 4) for r in rs})
        verdicts = sorted({r["relaxation"] for r in rs if r["relaxation"]})
        print(line + f"   objective {', '.join(map(str, objectives))}"
              + (f"   relaxation {', '.join(verdicts)}" if verdicts else ""))
    for variant, against in (("strict-cbc", "cbc"), ("strict-highs-lp", "highs-lp"), ("staged-highs-lp", "highs-lp"),
                             ("staged-highs-lp", "strict-highs-lp"), ("highs-lp", "highs-lp-own")):
        if variant in results and against in results:
            ratios = [r["total_cpu_s"] / b["total_cpu_s"] for r, b in zip(results[variant], results[against])]
            print(f"  {variant} / {against}: {spread(ratios, '.3f')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"layers": args.layers, "dim": args.dim, "mesh": args.mesh, "size": args.size, "runs": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
