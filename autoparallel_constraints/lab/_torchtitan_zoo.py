"""torchtitan's model families through autoparallel the way torchtitan runs them, alone and with the
plugin's default call: built, audited, verified and run on simulated ranks against one device.

    python -m autoparallel_constraints zoo --torchtitan [--families llama3,deepseek_v3] [--layers 2] \\
        [--meshes 2x2,2x4] [--calls alone,default] [--precisions fp32,bf16] [--json FILE] [--resume]

One row per (family, mesh, call, precision); a family torchtitan ships that cannot run the sequence
(:data:`~._torchtitan.TORCHTITAN_NOT_RUN`) is one row saying why. A row has two halves, each in its
own process (a fresh strategy cache, memory returned, a timeout each):

* **torchtitan's build**: ``AutoParallelGraph`` with static shapes, torchtitan's constraints
  (:mod:`._torchtitan`), solved (alone: autoparallel on ``highs-lp``, the default solver;
  default: ``add_op_constraints(verify="warn")``), applied by ``_apply_placement_common`` (the step
  ``apply_placement_for_fx_module`` starts with), then ``apc.audit`` and ``apc.verify``: the audit's
  verdict, the verifier's unknown nodes and unproven outputs.
* **numbers**: ``run_numerics`` with the same model, constraints and call on a dynamic build (a
  static graph bakes rank 0's coordinates in), every rank simulated, judged by the float64
  yardstick against one device at the same precision (the worst ratio is printed; fp32 rows too,
  since torchtitan's routed experts run their grouped matmuls in bf16 in any model). ``exact``,
  ``wrong`` (a tensor outside) or ``crash`` (a stage raised).

Each row's outcome (:func:`outcome`): ``proven exact``, ``exact, off-plan edges`` (the numbers
exact and every output proven, but the audit finds edges autoparallel's apply delivered other than
planned), ``not proven`` with the reasons, ``build failed``, ``numbers crash`` or ``not run``.
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

from ..seam import autop as upstream
from ._torchtitan import TORCHTITAN_FAMILIES, TORCHTITAN_NOT_RUN

__all__ = ["CALLS", "PRECISIONS", "add_arguments", "outcome", "render", "run_cell", "run_table", "summary"]

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

    from ..harness._cpu import cpu_mesh, device_name
    from ._torchtitan import autoparallel_graph_class, torchtitan_case

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
            upstream.call_apply_placement_common(autop, placement)
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
    from ..harness._numerics import run_numerics
    from ._torchtitan import autoparallel_graph_class

    t1 = time.perf_counter()

    def configure(autop) -> None:
        autop.add_parameter_memory_constraint(low=None, high=None)
        _configure(call)(autop)

    report = run_numerics(
        case.model_fn, case.input_fn, shape, configure=configure, parameter_memory_constraint=False,
        input_placements=list(case.input_placements), output_placements=list(case.output_placements),
        mp_policy=case.mp_policy, autoparallel_cls=autoparallel_graph_class(),
        # fp32 rows too: torchtitan's routed experts run their grouped matmuls in bf16 in any model
        float64_yardstick=case.mp_policy is None,
    )
    if report.error is not None:
        row["numerics"] = "crash"
        error, _, note = report.error.partition(" [autoparallel_constraints: ")
        row["numerics_error"] = error[:300]
        if note:  # the plugin's note on a failed apply: the size couplings the plan breaks
            row["numerics_note"] = note.rstrip("]")[:600]
    else:
        row["numerics"] = "exact" if report.ok else "wrong"
        sticks = [c.yardstick for c in report.checks if c.yardstick is not None]
        row["worst_yardstick"] = round(max(sticks), 3) if sticks else None
        row["failures"] = [f"{c.name}: {c.note[:160]}" for c in report.failures][:4]
    row["numerics_s"] = round(time.perf_counter() - t1, 1)
    return row


def outcome(row: dict) -> tuple[str, str]:
    """A row's outcome and its reason, read from what the row recorded."""
    if row.get("not_run"):
        return "not run", row["not_run"]
    if not row.get("built"):
        return "build failed", row.get("build_error", "")
    if row.get("numerics") == "crash":
        return "numbers crash", row.get("numerics_error", "")
    audit = str(row.get("audit"))
    reasons = []
    if row.get("verify") != "clean":
        reasons.append(f"verify: {row.get('verify')}")
    if row.get("unknown") or row.get("unproven"):
        reasons.append(f"{row.get('unknown')} unknown, {row.get('unproven')} unproven")
    if row.get("numerics") != "exact":
        reasons.append("numbers: " + "; ".join(row.get("failures", []))[:200])
    off_plan = audit != "clean" and all("edge_diverges" in part for part in audit.split(", "))
    if audit != "clean" and not off_plan:
        reasons.append(f"audit: {audit}")
    if reasons:
        return "not proven", "; ".join(reasons)
    if off_plan:
        return "exact, off-plan edges", (f"audit: {audit} (autoparallel's apply delivered other placements than "
                                         "it planned; the graph is still proven and exact)")
    return "proven exact", ""


def summary(rows: list[dict]) -> str:
    """One line per family: its rows' outcomes by call, and the first reason that is not proven exact."""
    lines = [f"{'family':<12} {'rows':>4}  {'default call':<32} {'autoparallel alone':<32} reason"]
    for family in dict.fromkeys(r["family"] for r in rows):
        mine = [r for r in rows if r["family"] == family]
        if mine[0].get("not_run"):
            lines.append(f"{family:<12} {0:>4}  {'not run':<32} {'not run':<32} {mine[0]['not_run']}")
            continue
        by_call = {}
        for call in CALLS:
            got = [outcome(r)[0] for r in mine if r["call"] == call]
            by_call[call] = ", ".join(f"{n}x {o}" for o, n in _counts(got)) or "-"
        why = next((f"{r['call']} {r['mesh']} {r['precision']}: {outcome(r)[1]}" for r in mine
                    if outcome(r)[0] != "proven exact"), "")
        lines.append(f"{family:<12} {len(mine):>4}  {by_call['default']:<32} {by_call['alone']:<32} {why[:160]}")
    return "\n".join(lines)


def _counts(items: list[str]) -> list[tuple[str, int]]:
    return [(o, items.count(o)) for o in dict.fromkeys(items)]


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
        if r.get("numerics_note"):
            lines.append(f"    note: {r['numerics_note'][:300]}")
    return "\n".join(lines)


_NUMBERS_FIELDS = ("numerics", "numerics_error", "numerics_note", "worst_yardstick", "failures", "numerics_s")


def _half_of(field: str) -> str:
    """Which half of a row records ``field``; the row's identity counts as the build's."""
    return "numbers" if field in _NUMBERS_FIELDS else "build"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The torchtitan zoo's options (``zoo --torchtitan`` and ``benchmarks/torchtitan_table.py``)."""
    parser.add_argument("--layers", type=int, default=None, help="torchtitan: the first N layers (default: all of the flavor)")
    parser.add_argument("--meshes", default="2x2", help="torchtitan: comma list of 2-D meshes (default 2x2)")
    parser.add_argument("--calls", default=",".join(CALLS), help="torchtitan: alone,default")
    parser.add_argument("--precisions", default=",".join(PRECISIONS), help="torchtitan: fp32,bf16")
    parser.add_argument("--timeout", type=int, default=1500, help="torchtitan: seconds per half row")
    parser.add_argument("--halves", default="build,numbers",
                        help="torchtitan: run only these halves of a row, keeping the other's fields from --json "
                             "(e.g. numbers, after a change to the numerics harness only)")
    parser.add_argument("--cell", default=None, help=argparse.SUPPRESS)


def run_table(args: argparse.Namespace) -> int:
    """Run the rows ``args`` names, each half in its own process; print the table. Exit 1 when a
    default-call row that ran is not proven exact."""
    if args.cell:
        family, layers, mesh_text, call, precision, half = args.cell.split(",")
        print("ROW " + json.dumps(run_cell(family, int(layers) if layers != "all" else None, mesh_text, call, precision, half)))
        return 0
    json_path = Path(args.json) if args.json else None
    rows: list[dict] = json.loads(json_path.read_text()) if json_path and json_path.exists() else []
    families = args.families or ",".join([*TORCHTITAN_FAMILIES, *TORCHTITAN_NOT_RUN])
    layers = "all" if args.layers is None else str(args.layers)
    for family in families.split(","):
        if family in TORCHTITAN_NOT_RUN:
            rows = [r for r in rows if r["family"] != family] + [
                {"family": family, "mesh": "-", "layers": None, "call": "-", "precision": "-", "not_run": TORCHTITAN_NOT_RUN[family]}]
            if json_path:
                json_path.write_text(json.dumps(rows, indent=1))
            continue
        for mesh_text in args.meshes.split(","):
            for precision in args.precisions.split(","):
                for call in args.calls.split(","):
                    key = (family, mesh_text, call, precision)
                    done = [r for r in rows if (r["family"], r["mesh"], r["call"], r["precision"]) == key]
                    if args.resume and done:
                        continue
                    halves = args.halves.split(",")
                    kept = ("build", "numbers") if not done else [h for h in ("build", "numbers") if h not in halves]
                    row = {k: v for k, v in (done[-1] if done else {}).items() if _half_of(k) in kept}
                    for half in [h for h in ("build", "numbers") if h in halves or not done]:
                        cmd = [sys.executable, "-m", "autoparallel_constraints", "zoo", "--torchtitan",
                               "--cell", ",".join([family, layers, mesh_text, call, precision, half])]
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
                    if json_path:
                        json_path.write_text(json.dumps(rows, indent=1))
    print(render(rows))
    print()
    print(summary(rows))
    bad = [r for r in rows if r.get("call") == "default" and not r.get("not_run") and outcome(r)[0] != "proven exact"]
    return 1 if bad else 0
