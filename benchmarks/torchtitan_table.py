"""torchtitan's models the way torchtitan runs them through autoparallel, alone and with the
plugin's default call: built, audited, verified and run on simulated ranks against one device.

    python benchmarks/torchtitan_table.py --families llama3,deepseek_v3 --meshes 2x2,2x4 \\
        --calls alone,default --precisions fp32,bf16 --json benchmarks/results/torchtitan_table.json

One row per (family, layers, mesh, call, precision). A row has two halves, each in its own process
(a fresh strategy cache, memory returned, a timeout each): in one process a static build followed
by a dynamic one of torchtitan's DeepSeek-V3 runs wrong numbers with the default call (ranks
disagree) that the same dynamic build in a fresh process runs exact (docs/limits.md):

* **torchtitan's build**: ``AutoParallelGraph`` with static shapes, torchtitan's constraints
  (``lab/_torchtitan.py``), solved (alone: autoparallel on ``highs-lp``, the default solver;
  default: ``add_op_constraints(verify="warn")``), applied by ``_apply_placement_common`` (the step
  ``apply_placement_for_fx_module`` starts with), then ``apc.audit`` and ``apc.verify``: the audit's
  verdict, the verifier's unknown nodes and unproven outputs.
* **numbers**: ``run_numerics`` with the same model, constraints and call on a dynamic build (a
  static graph bakes rank 0's coordinates in), every rank simulated; bf16 rows are judged by the
  float64 yardstick against one device at the same precision (the worst ratio is printed), fp32
  rows by the dtype tolerance. ``exact``, ``wrong`` (a tensor outside) or ``crash`` (a stage raised).

``--json`` keeps rows already there, a row run again replacing its own; ``--resume`` skips them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CALLS = ("alone", "default")
PRECISIONS = ("fp32", "bf16")


def _mesh(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("x"))


def _configure(call: str):
    import autoparallel_constraints as apc

    def configure(autop) -> None:
        if call == "default":
            autop.add_op_constraints(verify="warn")
        else:
            apc.use_solver(autop, "highs-lp")

    return configure


def run_cell(family: str, layers: int | None, mesh_text: str, call: str, precision: str, half: str = "both") -> dict:
    import warnings

    import torch

    import autoparallel_constraints as apc
    from autoparallel_constraints.harness._cpu import cpu_mesh, device_name
    from autoparallel_constraints.lab._torchtitan import autoparallel_graph_class, torchtitan_case

    warnings.simplefilter("ignore")
    shape = _mesh(mesh_text)
    case = torchtitan_case(family, layers=layers, mixed_precision=precision == "bf16")
    row: dict = {"family": family, "layers": case.layers, "mesh": mesh_text, "call": call, "precision": precision}
    if half == "numbers":
        return _numbers(row, case, shape, call)
    t0 = time.perf_counter()
    try:
        with torch.device("meta"):
            model = case.model_fn()
        with device_name(), autoparallel_graph_class()(
            model, case.input_fn, cpu_mesh(shape, ("dp", "tp")), mp_policy=case.mp_policy
        ) as autop:
            case.configure(autop)
            _configure(call)(autop)
            placement = autop.optimize_placement()
            autop._apply_placement_common(placement)
            audit = apc.audit(autop)
            verify = apc.verify(autop)
        row.update(
            built=True, objective=float(autop.sharding_optimizer.prob.objective.value()),
            audit="clean" if audit.ok else audit.verdict if hasattr(audit, "verdict") else str(audit).splitlines()[0],
            verify=verify.verdict, unknown=verify.n_unknown, unproven=len(verify.unproven_outputs),
            violations=[f"{v.kind} {v.node}: {v.reason}" for v in verify.violations][:4],
        )
    except Exception as exc:  # noqa: BLE001 - a row reports what stopped it
        row.update(built=False, build_error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")
    row["build_s"] = round(time.perf_counter() - t0, 1)
    return row if half == "build" else _numbers(row, case, shape, call)


def _numbers(row: dict, case, shape: tuple[int, ...], call: str) -> dict:
    from autoparallel_constraints.harness._numerics import run_numerics
    from autoparallel_constraints.lab._torchtitan import autoparallel_graph_class

    t1 = time.perf_counter()

    def configure(autop) -> None:
        autop.add_parameter_memory_constraint(low=None, high=None)
        _configure(call)(autop)

    report = run_numerics(
        case.model_fn, case.input_fn, shape, configure=configure, parameter_memory_constraint=False,
        input_placements=list(case.input_placements), output_placements=list(case.output_placements),
        mp_policy=case.mp_policy, autoparallel_cls=autoparallel_graph_class(),
    )
    if report.error is not None:
        row["numerics"] = "crash"
        row["numerics_error"] = report.error[:300]
    else:
        row["numerics"] = "exact" if report.ok else "wrong"
        sticks = [c.yardstick for c in report.checks if c.yardstick is not None]
        row["worst_yardstick"] = round(max(sticks), 3) if sticks else None
        row["failures"] = [f"{c.name}: {c.note[:160]}" for c in report.failures][:4]
    row["numerics_s"] = round(time.perf_counter() - t1, 1)
    return row


def outcome(row: dict) -> tuple[str, str]:
    """A row's outcome and the reason, read from what it recorded."""
    if row.get("not_run"):
        return "not run", row["not_run"]
    if not row.get("built"):
        return "build failed", row.get("build_error", "")
    if row.get("numerics") == "crash":
        return "numbers crash", row.get("numerics_error", "")
    checks = [
        (row.get("audit") != "clean", f"audit: {row.get('audit')}"),
        (row.get("verify") != "clean", f"verify: {row.get('verify')}"),
        (row.get("unknown", 0) or row.get("unproven", 0), f"{row.get('unknown')} unknown, {row.get('unproven')} unproven"),
        (row.get("numerics") != "exact", "numbers: " + "; ".join(row.get("failures", []))[:200]),
    ]
    reasons = [why for bad, why in checks if bad]
    return ("proven exact", "") if not reasons else ("not proven", "; ".join(reasons))


def render(rows: list[dict]) -> str:
    head = f"{'family':<12} {'L':>2} {'mesh':<5} {'call':<8} {'prec':<5} {'audit':<28} {'verify':<30} {'unk':>3} {'unpr':>4} {'numerics':<9} {'yardstick':>9} {'build s':>7} {'num s':>6}"
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.get("not_run"):
            lines.append(f"{r['family']:<12} {'-':>2} {r['mesh']:<5} {'-':<8} {'-':<5} not run: {r['not_run']}")
            continue
        if not r.get("built"):
            lines.append(f"{r['family']:<12} {r['layers']:>2} {r['mesh']:<5} {r['call']:<8} {r['precision']:<5} "
                         f"build failed: {r.get('build_error', '')[:80]}   numerics {r.get('numerics')}")
            continue
        stick = "-" if r.get("worst_yardstick") is None else f"{r['worst_yardstick']:.2f}x"
        lines.append(
            f"{r['family']:<12} {r['layers']:>2} {r['mesh']:<5} {r['call']:<8} {r['precision']:<5} {r['audit'][:28]:<28} "
            f"{r['verify'][:30]:<30} {r['unknown']:>3} {r['unproven']:>4} {r.get('numerics', '-'):<9} {stick:>9} "
            f"{r.get('build_s', '-'):>7} {r.get('numerics_s', '-'):>6}"
        )
        for v in r.get("violations", []):
            lines.append(f"    {v[:150]}")
        for f in r.get("failures", []):
            lines.append(f"    {f[:150]}")
        if r.get("numerics_error"):
            lines.append(f"    {r['numerics_error'][:150]}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="llama3,deepseek_v3")
    parser.add_argument("--layers", type=int, default=None, help="first N layers (default: all of the flavor)")
    parser.add_argument("--meshes", default="2x2")
    parser.add_argument("--calls", default=",".join(CALLS))
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--timeout", type=int, default=1500)
    parser.add_argument("--cell", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        family, layers, mesh_text, call, precision, half = args.cell.split(",")
        print("ROW " + json.dumps(run_cell(family, int(layers) if layers != "all" else None, mesh_text, call, precision, half)))
        return
    rows: list[dict] = json.loads(args.json.read_text()) if args.json and args.json.exists() else []
    layers = "all" if args.layers is None else str(args.layers)
    from autoparallel_constraints.lab._torchtitan import TORCHTITAN_NOT_RUN

    for family in args.families.split(","):
        if family in TORCHTITAN_NOT_RUN:
            rows = [r for r in rows if r["family"] != family] + [
                {"family": family, "mesh": "-", "layers": None, "call": "-", "precision": "-", "not_run": TORCHTITAN_NOT_RUN[family]}]
            continue
        for mesh_text in args.meshes.split(","):
            for precision in args.precisions.split(","):
                for call in args.calls.split(","):
                    key = (family, mesh_text, call, precision)
                    done = [r for r in rows if (r["family"], r["mesh"], r["call"], r["precision"]) == key]
                    if args.resume and done:
                        continue
                    row = {}
                    for half in ("build", "numbers"):
                        cmd = [sys.executable, __file__, "--cell", ",".join([family, layers, mesh_text, call, precision, half])]
                        try:
                            out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                                                 env={**os.environ, "PYTHONWARNINGS": "ignore"})
                            found = [ln for ln in out.stdout.splitlines() if ln.startswith("ROW ")]
                            got = json.loads(found[-1][4:]) if found else {
                                "built": False,
                                "build_error" if half == "build" else "numerics_error":
                                    f"{half}: process exited {out.returncode}: {out.stderr.strip().splitlines()[-1:]}",
                            }
                        except subprocess.TimeoutExpired:
                            got = {"build_error" if half == "build" else "numerics_error": f"{half}: timeout after {args.timeout} s"}
                        row.update({k: v for k, v in got.items() if half == "build" or k not in ("built",)})
                    row.update(family=family, mesh=mesh_text, call=call, precision=precision)
                    row.setdefault("layers", layers)
                    rows = [r for r in rows if (r["family"], r["mesh"], r["call"], r["precision"]) != key] + [row]
                    print(render([row]).splitlines()[-1], flush=True)
                    if args.json:
                        args.json.write_text(json.dumps(rows, indent=1))
    print(render(rows))


if __name__ == "__main__":
    main()
