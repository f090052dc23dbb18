"""Benchmark: what the plugin costs against autoparallel alone, each run in a fresh process.

Run on demand (not part of the test suite)::

    python benchmarks/bench_formulations.py --model seed --mesh 2x4 --size tiny
    python benchmarks/bench_formulations.py --model llama3 --mesh 8x8 --layers 2 --dim 4096 --no-apply \\
        --json /tmp/bench_llama3_2l.json
    # Llama3-8B shapes (32 layers, dim 4096, 32 heads / 8 kv, vocab 128256, batch 16, seq 8192):
    # about 3 minutes and several GB per run; 6 rows x (3 repeats) + 1 warm-up ~ 45-60 minutes
    python benchmarks/bench_formulations.py --model llama3 --mesh 8x8 --layers 32 --dim 4096 --no-apply \\
        --rows none/cbc,strict/cbc,lazy/cbc,explicit/cbc,none/highs-lp,strict/highs-lp \\
        --json /tmp/bench_llama3_32l.json
    # where the plugin's time goes, in a separate run (cProfile never runs in a timed one):
    python benchmarks/bench_formulations.py --model llama3 --mesh 8x8 --layers 2 --dim 4096 --profile

How it measures:

* **One fresh process per run.** Each run of a row is ``python bench_formulations.py --worker
  ROW ...``: it builds the model, enters ``AutoParallel``, adds the plugin (or not), solves, and
  reports its :class:`RunSummary` and its peak RSS. A fresh process is what makes the peak RSS a
  per-row figure (``ru_maxrss`` only grows within a process): ``rss`` is the worker's own peak
  (``getrusage(RUSAGE_SELF)``: the model, the ILP, PuLP, and HiGHS, which runs in-process); the
  RSS target is taken on it. ``RUSAGE_CHILDREN`` is recorded too but is *not* the CBC binary's
  own peak: a forked child starts with its parent's high-water mark (Linux keeps it across
  ``exec``), so it reads as the worker's RSS at the fork (measured: equal to the worker's peak on
  llama3 32 layers). CBC's own memory is therefore not in these figures.
* **Interleaved repeats after a warm-up** (``autoparallel_constraints.core._stats.interleave``):
  ``--warmup`` discarded runs first (the rows in order; they warm the page cache and the byte
  code — there is no in-process state to warm, every run is a new process), then ``--repeat``
  rounds (3 by default) that visit every row once, the order reversed every other round, so drift
  of a shared machine hits the rows alike. Every figure is the median with its min–max; every
  ratio is paired (round *i* of a row over round *i* of its reference).
* **CPU seconds** are the worker's process time plus its waited-for children (the CBC binary):
  on a shared machine they are steadier than wall seconds, which are printed too.
* **The plugin's own seconds** are ``add_op_constraints`` (CPU seconds) plus its hooks around the
  solves (objective terms, pin checks, lazy's checks, the report; wall, well under a second),
  against ``AutoParallel.__enter__`` in CPU seconds, measured without any profiler (a runs file
  recorded before the CPU figures were kept gives the wall share, and says so); ``--profile`` is
  a separate, untimed run that prints a cProfile of ``add_op_constraints``.

Rows are ``formulation/solver``: ``none`` is autoparallel alone; solvers are ``cbc``, ``highs``
and ``highs-lp`` (HiGHS's LP relaxation, accepted when integral — then optimal for the ILP —
else the MIP: ``autoparallel_constraints.plan._solvers``). Printed: the lab table, then each target of
issue 13 as ``median [min-max]  bound  verdict`` (``ok``: every repeat meets the bound,
``MISSED``: none does, ``undecided``: the spread contains it):

- strict and lazy build+solve / autoparallel alone <= 1.05, explicit <= 1.10, same solver (CPU);
  then the same with autoparallel's build pooled: ``AutoParallel.__enter__`` is the same work in
  every row (the plugin runs after it), so each run's own is replaced by the median of all runs,
  leaving the plugin's seconds and the solve, paired by round, to differ;
- the plugin's own seconds <= 3 % of autoparallel's build (``AutoParallel.__enter__``);
- the fast exact route's solve (``none/highs-lp``) >= 3x faster than CBC's (``none/cbc``), with
  the same objective, and strict/lazy on that route, build+solve <= 0.85x ``none/cbc``;
- per solver, the solve with the plugin's rows over the solve without (information);
- peak RSS with the plugin / without <= 1.10, same solver (the worker process's peak).

``--json FILE`` writes every run (each repeat and warm-up), the spreads, ratios and verdicts at the
end, and appends each run to ``FILE.runs.jsonl`` as it completes; ``--from-runs FILE.runs.jsonl``
(same ``--rows`` and ``--warmup``) prints the figures of the complete rounds recorded there.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

ROWS = (
    ("none", "cbc"),
    ("strict", "cbc"),
    ("lazy", "cbc"),
    ("explicit", "cbc"),
    ("none", "highs-lp"),
    ("strict", "highs-lp"),
    ("lazy", "highs-lp"),
)
FAST = "highs-lp"
BOUNDS = {"strict": 1.05, "lazy": 1.05, "explicit": 1.10}
PLUGIN_SHARE = 0.03
FAST_SOLVE = 1 / 3
FAST_WHOLE = 0.85
RSS_BOUND = 1.10


def pooled_build_ratio(runs: Sequence[Any], base_runs: Sequence[Any], pooled: float) -> Any:
    """``runs`` over ``base_runs`` round by round, each run's ``AutoParallel.__enter__`` CPU
    seconds replaced by ``pooled``: (pooled + plugin + solve) / (pooled + solve)."""
    from autoparallel_constraints.core._stats import paired_ratio

    def own(s: Any) -> float:
        return pooled + s.build_solve_cpu_s - s.enter_cpu_s

    return paired_ratio([own(s) for s in runs], [own(s) for s in base_runs])


def bound_verdict(spread: Any, bound: float, at_most: bool) -> str:
    """``ok`` when every repeat meets the bound, ``MISSED`` when none does, ``undecided`` when the
    min–max contains it (the side-of rule of "within noise", against the bound instead of 1.0)."""
    side = spread.side_of(bound)
    if side == "contains":
        return "undecided: the spread contains the bound"
    return "ok" if side == ("below" if at_most else "above") else "MISSED"


def _model_args(args: argparse.Namespace) -> list[str]:
    out = ["--model", args.model, "--mesh", args.mesh, "--size", args.size]
    if args.layers is not None:
        out += ["--layers", str(args.layers)]
    if args.dim is not None:
        out += ["--dim", str(args.dim)]
    if args.no_apply:
        out.append("--no-apply")
    if args.time_limit is not None:
        out += ["--time-limit", str(args.time_limit)]
    return out


# ---------------------------------------------------------------------------------------------
# one run, in its own process


def _worker(args: argparse.Namespace) -> int:
    """Run the row ``args.worker`` once and write its summary and peak RSS to ``args.out``."""
    import autoparallel_constraints  # noqa: F401  (installs add_op_constraints)
    from autoparallel_constraints.lab import compare_rows

    form, solver = args.worker.split("/")
    mesh = tuple(int(x) for x in args.mesh.lower().split("x"))
    result = compare_rows(
        args.model, mesh, [(form, solver)], size=args.size, layers=args.layers, dim=args.dim, repeat=1,
        warmup=0, apply=not args.no_apply, time_limit=args.time_limit,
    )
    (run,) = result.rows[0].runs
    payload = {
        "summary": asdict(run),
        "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "solver_rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
        "description": result.description,
        "machine": result.machine,
    }
    with open(args.out, "w") as f:
        json.dump(payload, f)
    return 0


def _launch(args: argparse.Namespace, row: tuple[str, str]) -> dict[str, Any]:
    """One worker process for ``row``; its payload, plus the wall seconds of the whole process."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        out = tmp.name
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "/".join(row), "--out", out, *_model_args(args)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"worker {'/'.join(row)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        with open(out) as f:
            payload = json.load(f)
    finally:
        os.unlink(out)
    payload["process_s"] = time.perf_counter() - t0
    payload["row"] = "/".join(row)
    if args.json:  # every run as it completes, so a cut-short benchmark still leaves its data
        with open(args.json + ".runs.jsonl", "a") as f:
            f.write(json.dumps(payload) + "\n")
    return payload


def _recorded(
    args: argparse.Namespace, rows: list[tuple[str, str]]
) -> tuple[list[tuple[tuple[str, str], dict[str, Any]]], dict[tuple[str, str], list[dict[str, Any]]], None, None]:
    """The runs a benchmark appended to ``FILE.runs.jsonl`` (``--from-runs``): the first
    ``--warmup`` lines are the warm-up; of the rest, only complete rounds (every row once) count,
    so a benchmark cut short still gives paired figures over the rounds it finished."""
    with open(args.from_runs) as f:
        payloads = [json.loads(line) for line in f if line.strip()]
    warmups = [(tuple(p["row"].split("/")), p) for p in payloads[: args.warmup]]
    measured: dict[tuple[str, str], list[dict[str, Any]]] = {r: [] for r in rows}
    for p in payloads[args.warmup :]:
        measured.setdefault(tuple(p["row"].split("/")), []).append(p)
    complete = min(len(measured[r]) for r in rows)
    if complete < 1:
        raise SystemExit(f"{args.from_runs}: no complete round over {', '.join('/'.join(r) for r in rows)}")
    return warmups, {r: measured[r][:complete] for r in rows}, None, None


# ---------------------------------------------------------------------------------------------
# the profile, a separate run


def _profile(args: argparse.Namespace, rows: list[tuple[str, str]]) -> int:
    """cProfile of ``add_op_constraints`` for each plugin row, one untimed run per formulation."""
    from autoparallel.api import AutoParallel

    import autoparallel_constraints  # noqa: F401
    from autoparallel_constraints.lab import compare_rows

    original = AutoParallel.add_op_constraints
    profiles: dict[str, cProfile.Profile] = {}

    def add_op_constraints(self: Any, *a: Any, **kw: Any) -> Any:
        prof = profiles[kw.get("formulation", "explicit")] = cProfile.Profile()
        prof.enable()
        try:
            return original(self, *a, **kw)
        finally:
            prof.disable()

    AutoParallel.add_op_constraints = add_op_constraints
    mesh = tuple(int(x) for x in args.mesh.lower().split("x"))
    forms = list(dict.fromkeys(f for f, _ in rows if f != "none"))
    try:
        for form in forms:
            compare_rows(args.model, mesh, [(form, "cbc")], size=args.size, layers=args.layers, dim=args.dim,
                         repeat=1, warmup=0, apply=not args.no_apply, time_limit=args.time_limit,
                         progress=sys.stderr)
    finally:
        AutoParallel.add_op_constraints = original
    for form, prof in profiles.items():
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out)
        print(f"\nwhere add_op_constraints({form!r}) spends its time (cProfile, untimed run; "
              f"{stats.total_tt:.2f}s under the profiler):")
        stats.sort_stats("cumulative").print_stats("autoparallel_constraints", 18)
        lines = [line for line in out.getvalue().splitlines() if line.strip()]
        start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
        print("\n".join(lines[start:]))
    return 0


# ---------------------------------------------------------------------------------------------
# the measured rounds and the targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("seed", "llama3", "falcon"), default="seed")
    parser.add_argument("--mesh", default="2x4")
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--dim", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3, help="measured rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="discarded runs before the rounds (default 1)")
    parser.add_argument("--rows", default=",".join(f"{f}/{s}" for f, s in ROWS), help="formulation/solver list")
    parser.add_argument("--no-apply", action="store_true", help="skip apply_placement and the audit (build+solve only)")
    parser.add_argument("--time-limit", type=float, default=None, help="solver seconds per optimize_placement")
    parser.add_argument("--profile", action="store_true", help="only profile add_op_constraints (untimed)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--from-runs", default=None, metavar="FILE.runs.jsonl",
                        help="no runs: print the figures of the runs a benchmark recorded (complete rounds)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args)

    from autoparallel_constraints.core._stats import Ratio, Spread, interleave, paired_ratio
    from autoparallel_constraints.lab import (
        CompareResult,
        RowRuns,
        RunSummary,
        render_compare,
        result_payload,
    )
    from autoparallel_constraints.lab._compare import _load
    from autoparallel_constraints.lab._runs import BASELINE

    rows = [tuple(r.split("/")) for r in args.rows.split(",") if r]
    if args.profile:
        return _profile(args, rows)

    def progress(tag: str, row: tuple[str, str], p: dict[str, Any]) -> None:
        s = p["summary"]
        print(f"{tag} {'/'.join(row)}: build {s['build_s']:.2f}s (plugin {s['plugin_s']:.3f}s), solve "
              f"{s['solve_s']:.2f}s, cpu {s['build_cpu_s'] + s['solve_cpu_s']:.2f}s, objective {s['objective']:.4f}, "
              f"rss {p['rss_kib'] / 2**20:.2f} GiB; "
              f"{s['solver_status']}", file=sys.stderr, flush=True)

    if args.from_runs:
        warmups, measured, load_start, load_end = _recorded(args, rows)
    else:
        load_start = _load()
        warmups = []
        for i in range(args.warmup):
            row = rows[i % len(rows)]
            warmups.append((row, _launch(args, row)))
            progress(f"[warm-up {i + 1}/{args.warmup}]", row, warmups[-1][1])
        total = args.repeat * len(rows)

        def on_done(step: int, total_: int, row: tuple[str, str], _w: bool, p: dict[str, Any]) -> None:
            progress(f"[{step}/{total}]", row, p)

        measured, _ = interleave(rows, lambda row: _launch(args, row), repeat=args.repeat, warmup=0, on_done=on_done)
        load_end = _load()
    args.repeat = len(measured[rows[0]])

    def summary(p: dict[str, Any]) -> RunSummary:
        return RunSummary(**{**p["summary"], "mesh": tuple(p["summary"]["mesh"])})

    first = measured[rows[0]][0]
    result = CompareResult(
        model=args.model,
        description=first["description"],
        mesh=tuple(int(x) for x in args.mesh.lower().split("x")),
        repeat=args.repeat,
        warmup=args.warmup,
        rows=[
            RowRuns(formulation=f, solver=s, runs=tuple(summary(p) for p in measured[(f, s)]),
                    warmups=tuple(summary(p) for r, p in warmups if r == (f, s)))
            for f, s in rows
        ],
        machine={**first["machine"], **({"load_start": load_start, "load_end": load_end} if load_start is not None and load_end is not None else {})},
    )
    print(render_compare(result))
    print(f"warm-up: {args.warmup} discarded run(s) ({', '.join('/'.join(r) for r, _ in warmups) or 'none'}); "
          "every run a fresh process")

    def rss(p: dict[str, Any]) -> float:
        return p["rss_kib"] / 2**20

    print("\npeak RSS per row, GiB (the worker process, RUSAGE_SELF; median [min-max]):")
    for r in rows:
        ps = measured[r]
        print(f"  {'/'.join(r):<20} {Spread.of([rss(p) for p in ps]).format('.2f'):>22}   (largest child's "
              f"ru_maxrss {Spread.of([p['solver_rss_kib'] / 2**20 for p in ps]).format('.2f')}: includes the "
              "parent's RSS at fork)")

    verdicts: list[dict[str, Any]] = []

    def target(name: str, measured_: Ratio, bound: float, *, at_most: bool = True, note: str = "") -> None:
        verdict = bound_verdict(measured_.spread, bound, at_most)
        verdicts.append({"target": name, "measured": measured_.as_dict(), "bound": bound, "at_most": at_most,
                         "verdict": verdict, "note": note})
        sign = "<=" if at_most else ">="
        print(f"  {name:<58} {measured_.spread.format('.3f'):>24}   {sign} {bound:<6.3g} {verdict}  {note}")

    def info(name: str, measured_: Ratio) -> None:
        verdicts.append({"target": name, "measured": measured_.as_dict(), "verdict": "info"})
        print(f"  {name:<58} {measured_.format():>40}")

    print(f"\ntargets of issue 13: median [min-max] of the {args.repeat} paired ratios (CPU seconds: process + "
          "solver child); ok = every repeat meets the bound")
    solvers = list(dict.fromkeys(s for _, s in rows))
    # (formulation row, its baseline on the same solver, bound) for every bounded formulation run
    bounded = [(r, base, bound) for solver in solvers if (base := result.row(BASELINE, solver)) is not None
               for form, bound in BOUNDS.items() if (r := result.row(form, solver)) is not None]
    for r, base, bound in bounded:
        target(f"{r.label} build+solve / {base.label}", paired_ratio(r.cpu.samples, base.cpu.samples), bound)
    # autoparallel's build (AutoParallel.__enter__) is the same code on the same input in every
    # row (the plugin runs after it), so its spread across rows is the machine's: the same
    # __enter__ took 77-118 CPU s within one 32-layer run. Pooled here (the median of every
    # measured run of every row) it leaves each row's own difference, the plugin's seconds and
    # the solve, still paired by round.
    enters = [s.enter_cpu_s for r in result.rows for s in r.runs]
    if all(e is not None for e in enters):
        pooled = Spread.of(enters).median
        print(f"the same, autoparallel's build pooled ({pooled:.2f} CPU s, the median __enter__ of all "
              f"{len(enters)} runs: (pooled + plugin + solve) / (pooled + solve)):")
        for r, base, bound in bounded:
            target(f"{r.label} / {base.label}, build pooled", pooled_build_ratio(r.runs, base.runs, pooled), bound)
    for r in result.rows:
        if r.formulation == BASELINE:
            continue
        # CPU seconds where the runs recorded them (add and __enter__; the hooks are wall, and
        # short), else wall: a runs file from before
        cpu = all(s.plugin_cpu_s is not None and s.enter_cpu_s is not None for s in r.runs)
        add = (lambda s: s.plugin_cpu_s) if cpu else (lambda s: s.plugin_s)
        enter = (lambda s: s.enter_cpu_s) if cpu else (lambda s: s.enter_s)
        share = Ratio(Spread.of([(add(s) + s.plugin_hook_s) / enter(s) for s in r.runs]))
        target(f"{r.label}: plugin seconds / autoparallel build", share, PLUGIN_SHARE,
               note=f"medians {r.spread(add).median:.3f}s add + "
                    f"{r.spread(lambda s: s.plugin_hook_s).median:.3f}s hooks vs "
                    f"{r.spread(enter).median:.2f}s __enter__ ({'CPU' if cpu else 'wall'})")
    cbc, fast = result.row(BASELINE, "cbc"), result.row(BASELINE, FAST)
    if cbc is not None and fast is not None:
        target(f"{BASELINE}/{FAST} solve / {BASELINE}/cbc solve",
               paired_ratio(fast.spread(lambda s: s.solve_cpu_s).samples, cbc.spread(lambda s: s.solve_cpu_s).samples),
               FAST_SOLVE)
        for form in ("strict", "lazy"):
            r = result.row(form, FAST)
            if r is not None:
                target(f"{form}/{FAST} build+solve / {BASELINE}/cbc", paired_ratio(r.cpu.samples, cbc.cpu.samples),
                       FAST_WHOLE)
    if cbc is not None:
        for r in result.rows:
            if r is cbc:
                continue
            same = abs(r.first.objective - cbc.first.objective) <= 1e-6 * max(1.0, abs(cbc.first.objective))
            lp = [s.solver_status.split("LP relaxation ")[-1] for s in r.runs if "LP relaxation" in s.solver_status]
            verdicts.append({"target": f"{r.label} objective = {BASELINE}/cbc", "measured": r.first.objective,
                             "bound": cbc.first.objective, "same": same, "relaxation": lp})
            print(f"  {r.label + ' objective = none/cbc':<58} {'=' if same else '!='} ({r.first.objective:.4f} vs "
                  f"{cbc.first.objective:.4f})" + (f"; LP relaxation: {', '.join(sorted(set(lp)))}" if lp else ""))
    print("\nsolve with the plugin's rows / without, per solver (CPU seconds, paired):")
    for solver in solvers:
        base = result.row(BASELINE, solver)
        for r in result.rows:
            if base is None or r.solver != solver or r is base:
                continue
            info(f"{r.label} solve / {base.label} solve",
                 paired_ratio(r.spread(lambda s: s.solve_cpu_s).samples, base.spread(lambda s: s.solve_cpu_s).samples))
    print("\npeak RSS with the plugin / without, same solver (worker process, paired):")
    for solver in solvers:
        if (BASELINE, solver) not in measured:
            continue
        base_rss = [rss(p) for p in measured[(BASELINE, solver)]]
        for r in rows:
            if r[1] == solver and r[0] != BASELINE:
                target(f"{'/'.join(r)} peak RSS / {BASELINE}/{solver}",
                       paired_ratio([rss(p) for p in measured[r]], base_rss), RSS_BOUND)
    if args.json:
        payload = result_payload(result)
        for row_payload, r in zip(payload["rows"], rows):
            row_payload["rss_gib"] = [rss(p) for p in measured[r]]
            row_payload["process_rss_kib"] = [p["rss_kib"] for p in measured[r]]
            row_payload["solver_rss_kib"] = [p["solver_rss_kib"] for p in measured[r]]
            row_payload["process_s"] = [p["process_s"] for p in measured[r]]
        payload["command"] = " ".join([os.path.basename(sys.executable), *sys.argv])
        payload["targets"] = verdicts
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
