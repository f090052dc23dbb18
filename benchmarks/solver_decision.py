"""Which solver should ``add_op_constraints()`` use by default: CBC against ``highs-lp``, model by mesh.

Run on demand (not part of the test suite)::

    python benchmarks/solver_decision.py --json benchmarks/results/solver_decision.json
    python benchmarks/solver_decision.py --models seed,llama3 --meshes 2x2 --repeat 1   # a quick look
    python benchmarks/solver_decision.py --models llama3-2l --meshes 8x8                 # llama3 dim 4096

One ``AutoParallel`` build per model × mesh (``apc.Workbench``, no apply): rows autoparallel alone,
``explicit`` (the default formulation) and ``strict``, each on CBC and on ``highs-lp``, ``--warmup``
discarded rounds then ``--repeat`` rounds interleaved (the order reversed every other round).
Printed per model × mesh × formulation: both objectives and whether they are equal (relative
1e-9), ``highs-lp``'s LP relaxation (integral: the LP optimum is the ILP's; fractional: HiGHS's MIP
ran), both solve times (wall seconds of ``optimize_placement``: CBC's subprocess included) as
median [min-max], and the paired ratio highs-lp / CBC. The last line is the decision the figures
support: ``highs-lp`` as the default only if its objective equals CBC's in every row.

Models: ``seed``, ``llama3``, ``falcon`` (the lab's tiny sizes), ``llama3-2l`` (the lab's llama3,
dim 4096, 2 layers) and every family of the curated transformers zoo (``zoo``), or names of it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FORMULATIONS = ("none", "explicit", "strict")
SOLVERS = ("cbc", "highs-lp")
LAB = ("seed", "llama3", "falcon")


@contextmanager
def _entered(model: str, shape: tuple[int, ...]) -> Iterator[Any]:
    """An entered, constrained ``AutoParallel`` of ``model`` on a CPU mesh of ``shape``."""
    from autoparallel_constraints.testing import cpu_mesh, device_name, fresh_strategy_cache

    with device_name(), fresh_strategy_cache():
        if model in LAB or model == "llama3-2l":
            from autoparallel_constraints.lab import lab_model

            spec = (lab_model("llama3", shape, size="full", layers=2, dim=4096) if model == "llama3-2l"
                    else lab_model(model, shape, size="tiny"))
            with spec.enter(cpu_mesh(shape, spec.mesh_dim_names)) as autop:
                spec.constrain(autop)
                yield autop
            return
        import torch
        from autoparallel.api import AutoParallel
        from torch.distributed.tensor.placement_types import Replicate, Shard

        from autoparallel_constraints.models import zoo_model

        model_fn, input_fn = zoo_model(model)
        with torch.device("meta"):
            module = model_fn()
        batch = [(Shard(0),) + (Replicate(),) * (len(shape) - 1)]
        with AutoParallel(module, input_fn, cpu_mesh(shape)) as autop:  # as the zoo's rows constrain it
            autop.add_input_constraints(batch)
            autop.add_output_constraints(batch)
            autop.add_parameter_memory_constraint()
            yield autop


def _rows_of(model: str, shape: tuple[int, ...], repeat: int, warmup: int) -> list[dict[str, Any]]:
    import autoparallel_constraints as apc
    from autoparallel_constraints.core._stats import Spread, paired_ratio

    with _entered(model, shape) as autop:
        bench = apc.Workbench(autop, apply=False)
        runs = {(r.formulation, r.solver): r for r in bench.compare(list(FORMULATIONS), SOLVERS, repeat=repeat, warmup=warmup)}
    out = []
    for f in FORMULATIONS:
        cbc, highs = runs[(f, "cbc")], runs[(f, "highs-lp")]
        ref, got = cbc.first.objective, highs.first.objective
        solve = {s: [r.solve_s for r in runs[(f, s)].runs] for s in SOLVERS}
        out.append({
            "model": model, "mesh": "x".join(map(str, shape)), "formulation": f,
            "variables": cbc.first.variables,
            "cbc_objective": ref, "highs_objective": got,
            "equal": abs(got - ref) <= 1e-9 * max(1.0, abs(ref)),
            "stable": len({r.objective for rows in (cbc, highs) for r in rows.runs}) == 1,
            "relaxation": highs.first.relaxation,
            "cbc_solve": Spread.of(solve["cbc"]).as_dict(),
            "highs_solve": Spread.of(solve["highs-lp"]).as_dict(),
            "ratio": paired_ratio(solve["highs-lp"], solve["cbc"]).as_dict(),
        })
    return out


def _line(r: dict[str, Any]) -> str:
    def spread(d: dict[str, Any]) -> str:
        return f"{d['median']:.2f}" if d["n"] == 1 else f"{d['median']:.2f} [{d['min']:.2f}-{d['max']:.2f}]"

    return (f"{r['model']:<12} {r['mesh']:<5} {r['formulation']:<9} {r['variables']:>9,} {r['cbc_objective']:>16.4f} "
            f"{r['highs_objective']:>16.4f} {'yes' if r['equal'] else 'NO':<5} {r['relaxation'] or '-':<12} "
            f"{spread(r['cbc_solve']):>20} {spread(r['highs_solve']):>20} {r['ratio']['median']:>7.3f}")


HEADER = (f"{'model':<12} {'mesh':<5} {'form':<9} {'variables':>9} {'CBC objective':>16} {'highs-lp objective':>16} "
          f"{'equal':<5} {'LP':<12} {'CBC solve s':>20} {'highs-lp solve s':>20} {'ratio':>7}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="seed,llama3,falcon,zoo", help="comma list; 'zoo' = the curated families")
    parser.add_argument("--meshes", default="2x2,2x4,4x2")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from autoparallel_constraints.models import ZOO

    models: list[str] = []
    for m in args.models.split(","):
        models.extend(sorted(ZOO) if m == "zoo" else [m])
    meshes = [tuple(int(x) for x in m.split("x")) for m in args.meshes.split(",")]
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    print(HEADER, flush=True)
    for model in models:
        for shape in meshes:
            try:
                got = _rows_of(model, shape, args.repeat, args.warmup)
            except Exception as exc:  # noqa: BLE001 - a model autoparallel cannot build is a line, not the end
                failures.append(f"{model} {'x'.join(map(str, shape))}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
                print(f"{model:<12} {'x'.join(map(str, shape)):<5} failed: {failures[-1]}", flush=True)
                continue
            rows.extend(got)
            for r in got:
                print(_line(r), flush=True)
    verdict = _decide(rows)
    for f in failures:
        print("failed:", f)
    print(verdict)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows, "failures": failures, "decision": verdict}, indent=2))
        print(f"wrote {args.json}")
    return 0


def _decide(rows: list[dict[str, Any]]) -> str:
    from autoparallel_constraints.core._stats import Spread

    if not rows:
        return "decision: no rows"
    unequal = [r for r in rows if not r["equal"]]
    fractional = [r for r in rows if r["relaxation"] != "integral"]
    ratio: Callable[[dict[str, Any]], float] = lambda r: r["ratio"]["median"]
    spread = Spread.of([ratio(r) for r in rows])
    head = (f"{len(rows)} rows: objective equal in {len(rows) - len(unequal)}, relaxation integral in "
            f"{len(rows) - len(fractional)}, highs-lp / CBC solve median of row medians {spread.format('.3f')}")
    if unequal:
        where = ", ".join(f"{r['model']} {r['mesh']} {r['formulation']}" for r in unequal)
        return f"{head}\ndecision: keep CBC (highs-lp's objective differs at {where})"
    return f"{head}\ndecision: highs-lp gives CBC's objective in every row" + (
        " and is faster at the median" if spread.median < 1 else ", but is not faster at the median")


if __name__ == "__main__":
    sys.exit(main())
