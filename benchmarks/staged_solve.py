"""highs-lp with the plugin, staged or not: one build, the same problem solved both ways.

Run on demand (not part of the test suite)::

    python benchmarks/staged_solve.py --layers 2                  # ~3 minutes here
    python benchmarks/staged_solve.py --layers 32 --repeat 3      # Llama3-8B shapes, ~8 minutes

Builds autoparallel's llama3 (dim 4096, 8x8, the lab's configuration) once with
``add_op_constraints(formulation=..., solver="highs-lp")``, takes it up to the solve as
``optimize_placement`` does (the objective with the plugin's terms, the memory rows, the plugin's
rows behind them), then solves it through the plugin's hook, interleaved after one warm-up round
(the order reversed every other round):

* ``staged`` (the default): autoparallel's LP first, then the plugin's rows and bounds added to
  that HiGHS instance and the LP re-solved from its basis;
* ``whole``: ``SolverConfig(staged=False)``, the whole problem handed to HiGHS at once;
* ``alone``: autoparallel's problem alone in the same process (the plugin's rows taken out, its
  bounds back at their prior values, then put back), through ``solve_with_highs`` as the
  ``highs-lp`` route solves it without the plugin: what ``staged``'s first stage repeats.

Printed per variant: CPU seconds of the solve (conversion and HiGHS), median [min-max], the ratio
paired by round, HiGHS's simplex iterations of each ``run`` (deterministic for one problem: the
path, where the seconds are also noise), the objective and the relaxation's verdict.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import time
from typing import Any

from _one_build import build_arguments, llama3_up_to_the_solve, spread


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    build_arguments(parser)
    parser.add_argument("--formulation", default="strict", choices=("strict", "lazy", "explicit"))
    parser.add_argument("--repeat", type=int, default=3, help="measured rounds after one warm-up round")
    args = parser.parse_args(argv)

    import highspy

    from autoparallel_constraints.plan._solvers import solve_with_highs

    variants = ("staged", "whole", "alone")
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    run_highs = highspy.Highs.run
    with llama3_up_to_the_solve(mesh=args.mesh, layers=args.layers, dim=args.dim, size=args.size,
                                formulation=args.formulation, solver="highs-lp") as build:
        opt = build.opt
        hook = opt._apc_solver
        held = hook.held_back()
        config = hook.config
        print(f"{build.spec.description}, {args.mesh}, {args.formulation}: built in {build.seconds:.0f} s; "
              f"{len(opt.prob.constraints):,} rows, the plugin's part {len(held.rows)} rows and "
              f"{len(held.prior)} bounds", flush=True)
        runs: list[int] = []

        def counted(self: Any) -> Any:  # HiGHS's iterations of every run, staged or not
            status = run_highs(self)
            runs.append(int(self.getInfo().simplex_iteration_count))
            return status

        highspy.Highs.run = counted
        try:
            for round_index in range(args.repeat + 1):
                for variant in variants if round_index % 2 == 0 else variants[::-1]:
                    hook.config = dataclasses.replace(config, staged=variant == "staged")
                    runs.clear()
                    gc.collect()
                    if variant == "alone":
                        seconds, r = _alone(opt.prob, held, solve_with_highs)
                    else:
                        c0 = time.process_time()
                        opt.prob.solve()
                        seconds = time.process_time() - c0
                        outcome = hook.outcomes[-1]
                        r = {"objective": outcome.objective, "relaxation": outcome.relaxation}
                    r |= {"solve_cpu_s": seconds, "runs": list(runs)}
                    tag = "warm-up" if round_index == 0 else f"round {round_index}"
                    print(f"  {tag:8} {variant:7} solve {seconds:6.2f} s  simplex iterations per run "
                          f"{' + '.join(f'{n:,}' for n in runs)}  objective {r['objective']:.4f}, "
                          f"relaxation {r['relaxation']}", flush=True)
                    if round_index:
                        results[variant].append(r)
        finally:
            highspy.Highs.run = run_highs
            hook.config = config

    print(f"\nCPU seconds of the solve, median [min-max] of {args.repeat} rounds after a warm-up:")
    for variant in variants:
        rs = results[variant]
        iterations = sorted({" + ".join(map(str, r["runs"])) for r in rs})
        print(f"  {variant:7} {spread([r['solve_cpu_s'] for r in rs])}   iterations {', '.join(iterations)}   "
              f"objective {', '.join(sorted({format(r['objective'], '.4f') for r in rs}))}")
    for variant, against in (("staged", "whole"), ("staged", "alone"), ("whole", "alone")):
        ratios = [a["solve_cpu_s"] / b["solve_cpu_s"] for a, b in zip(results[variant], results[against])]
        print(f"  {variant} / {against}, paired by round: {spread(ratios, '.3f')}")
    return 0


def _alone(prob: Any, held: Any, solve_with_highs: Any) -> tuple[float, dict[str, Any]]:
    """Solve ``prob`` without the plugin's part (rows out, bounds at their prior values), as
    ``highs-lp`` does without the plugin; put the part back as it was."""
    import pulp

    rows = list(prob.constraints.items())
    current = [(var, var.lowBound, var.upBound) for var, _, _ in held.prior.values()]
    try:
        for name in held.rows:
            prob.constraints.pop(name, None)
        for var, low, up in held.prior.values():
            var.lowBound, var.upBound = low, up
        c0 = time.process_time()
        run = solve_with_highs(prob, relax_first=True)
        seconds = time.process_time() - c0
        objective = float(pulp.value(prob.objective))
    finally:
        prob.constraints.clear()
        prob.constraints.update(rows)
        for var, low, up in current:
            var.lowBound, var.upBound = low, up
    return seconds, {"objective": objective, "relaxation": run.relaxation}


if __name__ == "__main__":
    raise SystemExit(main())
