"""One build for every row against one build per row: what the workbench saves, and that it changes nothing.

Run on demand (not part of the test suite)::

    python benchmarks/bench_workbench.py --layers 2 --repeat 1        # llama3 dim 4096, 8x8
    python benchmarks/bench_workbench.py --layers 32 --repeat 3       # Llama3-8B shapes
    python benchmarks/bench_workbench.py --size tiny --mesh 2x2       # the tests' llama3 (minutes)

The lab's llama3 (``_one_build``'s options), rows ``none``, ``strict``, ``lazy``, ``explicit`` and
``examples/prune.py``'s ``prune``, all on ``--solver`` (``highs-lp`` by default), without apply.
Each round runs both sides once, in alternating order (the first side of round *i* is the second of
round *i + 1*), so slow drift of a shared machine hits both alike:

* **separate**: every row in its own ``AutoParallel`` build, as the lab runs rows;
* **workbench**: one build, then every row on it (``apc.Workbench``), restored between rows.

Printed per round: each side's total wall and CPU seconds (this process + the CBC child); then the
paired ratio workbench / separate, median [min-max] over the rounds (one round: no spread). Every
row's objective and chosen strategy of every node must be equal on both sides, in every round.
``--json`` keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from _one_build import build_arguments

ROWS = ("none", "strict", "lazy", "explicit", "prune:Prune")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    build_arguments(parser)
    parser.add_argument("--repeat", type=int, default=3, help="rounds (each runs both sides once)")
    parser.add_argument("--solver", default="highs-lp")
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))  # prune:Prune

    import autoparallel_constraints as apc
    from autoparallel_constraints.core._stats import cpu_seconds, paired_ratio
    from autoparallel_constraints.lab import lab_model
    from autoparallel_constraints.testing import cpu_mesh, device_name, fresh_strategy_cache
    from autoparallel_constraints.workbench import plan_choices

    rows = [r for r in args.rows.split(",") if r]
    shape = tuple(int(x) for x in args.mesh.lower().split("x"))
    spec = lab_model("llama3", shape, size=args.size, layers=args.layers, dim=args.dim)
    mesh = cpu_mesh(shape, spec.mesh_dim_names)

    def separate() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for row in rows:
            t0 = time.perf_counter()
            with fresh_strategy_cache(), spec.enter(mesh) as autop:
                spec.constrain(autop)
                if row == "none":
                    apc.use_solver(autop, args.solver)
                else:
                    autop.add_op_constraints(formulation=row, solver=args.solver, verify="off")
                placement = autop.optimize_placement()
                out[row] = {
                    "objective": float(autop.sharding_optimizer.prob.objective.value()),
                    "choices": plan_choices(placement),
                    "seconds": time.perf_counter() - t0,
                }
            print(f"  separate {row}: {out[row]['seconds']:.1f} s, objective {out[row]['objective']:.4f}", flush=True)
        return out

    def workbench() -> dict[str, Any]:
        out: dict[str, Any] = {}
        t0 = time.perf_counter()
        with fresh_strategy_cache(), spec.enter(mesh) as autop:
            spec.constrain(autop)
            print(f"  workbench build: {time.perf_counter() - t0:.1f} s", flush=True)
            bench = apc.Workbench(autop, apply=False)
            for row in rows:
                r = bench.run(None if row == "none" else row, args.solver)
                out[row] = {"objective": r.objective, "choices": r.choices, "seconds": r.plugin_solve_s + r.restore_s}
                print(f"  workbench {row}: {out[row]['seconds']:.1f} s, objective {r.objective:.4f}", flush=True)
        return out

    sides = {"separate": separate, "workbench": workbench}
    rounds: list[dict[str, Any]] = []
    with device_name():
        for i in range(args.repeat):
            order = ["separate", "workbench"] if i % 2 == 0 else ["workbench", "separate"]
            record: dict[str, Any] = {"order": order}
            for side in order:
                print(f"round {i + 1}/{args.repeat}: {side}", flush=True)
                t0, c0 = time.perf_counter(), cpu_seconds()
                record[side] = {"rows": sides[side]()}
                record[side]["wall"] = time.perf_counter() - t0
                record[side]["cpu"] = cpu_seconds() - c0
            record["equal"] = {
                row: record["separate"]["rows"][row]["choices"] == record["workbench"]["rows"][row]["choices"]
                and abs(record["separate"]["rows"][row]["objective"] - record["workbench"]["rows"][row]["objective"])
                <= 1e-9 * max(1.0, abs(record["separate"]["rows"][row]["objective"]))
                for row in rows
            }
            rounds.append(record)
            print(
                f"round {i + 1}: separate {record['separate']['wall']:.1f} s wall / {record['separate']['cpu']:.1f} s CPU, "
                f"workbench {record['workbench']['wall']:.1f} s / {record['workbench']['cpu']:.1f} s; "
                f"plans equal: {all(record['equal'].values())}",
                flush=True,
            )
    wall = paired_ratio([r["workbench"]["wall"] for r in rounds], [r["separate"]["wall"] for r in rounds])
    cpu = paired_ratio([r["workbench"]["cpu"] for r in rounds], [r["separate"]["cpu"] for r in rounds])
    equal = all(all(r["equal"].values()) for r in rounds)
    print(f"llama3 {args.layers} layers, dim {args.dim}, {args.mesh}, rows {', '.join(rows)} on {args.solver}")
    print(f"workbench / separate: wall {wall.format()}, cpu {cpu.format()}; every row's plan equal: {equal}")
    if args.json:
        for r in rounds:  # choices are for the check, not the record (22k nodes per row at 32 layers)
            for side in ("separate", "workbench"):
                for row in r[side]["rows"].values():
                    row.pop("choices", None)
        payload = {"args": vars(args), "rows": rows, "rounds": rounds, "wall": wall.as_dict(), "cpu": cpu.as_dict(), "equal": equal}
        Path(args.json).write_text(json.dumps(payload, indent=2))
        print(f"wrote {args.json}")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
