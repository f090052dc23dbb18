"""autoparallel's build (``AutoParallel.__enter__``) with and without the plugin's build memo, side
by side: one fresh process per build, the two settings interleaved (the order alternates by round)
after warm-up builds, and a digest of every decision variable's costs and specs and of every
constraint, so the two settings are shown to build the same ILP.

    python benchmarks/build_memo.py --model seed --mesh 2x2x2 --repeat 3 --warmup 1 --json out.json

Printed per setting: the median [min-max] of the build's seconds and of the process's peak
resident memory, DTensor's ``redistribute_cost`` calls and how many the memo computed; then the
ratio off / on (medians) and whether the digests agree. Models are ``numerics_3d.py``'s, and
``llama3_8b`` (autoparallel's llama3 at Llama3-8B shapes, 2 layers, as the lab builds it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(model: str, mesh: tuple[int, ...], memo: bool) -> dict:
    """One build in this process."""
    import torch
    from autoparallel.api import AutoParallel

    import autoparallel_constraints as apc
    from autoparallel_constraints.seam import _memos as _build_memo
    from autoparallel_constraints.testing import cpu_mesh, device_name

    sys.path.insert(0, str(HERE))
    from numerics_3d import _builders

    apc.use_build_memo(memo)
    device_mesh = cpu_mesh(mesh)
    if model == "llama3_8b":
        from autoparallel_constraints.lab._models import _llama3_model

        lab = _llama3_model(mesh, size="full", layers=2, dim=None)
        module, input_fn = lab.model, lab.input_fn
    else:
        model_fn, input_fn = _builders(model)
        with torch.device("meta"):
            module = model_fn()
    with device_name("H100"):
        t0 = time.perf_counter()
        with AutoParallel(module, lambda: input_fn(), device_mesh, dynamic=True) as autop:
            seconds = time.perf_counter() - t0
            opt = autop.sharding_optimizer
            digest = hashlib.sha256()
            for key in sorted(opt.decision_vars):
                dv = opt.decision_vars[key]
                digest.update(repr((key, dv.var.name, dv.cost, dv.comm_cost, dv.compute_cost,
                                    dv.sharding_transition_cost, str(dv.input_spec),
                                    str(dv.output_spec))).encode())
            for row in sorted(str(c) for c in opt.prob.constraints.values()):
                digest.update(row.encode())
            n_vars, n_rows = len(opt.decision_vars), len(opt.prob.constraints)
    stats = _build_memo.last_stats
    return {
        "model": model, "mesh": list(mesh), "memo": memo, "seconds": round(seconds, 2),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "calls": stats.calls if stats else None, "computed": stats.computed if stats else None,
        "variables": n_vars, "rows": n_rows, "digest": digest.hexdigest()[:16],
    }


def _spawn(model: str, mesh: str, memo: bool) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", "on" if memo else "off", "--model", model, "--mesh", mesh],
        capture_output=True, text=True, check=False,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        raise SystemExit(f"build failed ({model} {mesh} memo={memo}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def _median(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} [{min(xs):.1f}-{max(xs):.1f}]"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="seed")
    p.add_argument("--mesh", default="2x2x2")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--json", default=None)
    p.add_argument("--child", choices=("on", "off"), help=argparse.SUPPRESS)
    args = p.parse_args()
    mesh = tuple(int(x) for x in args.mesh.split("x"))
    if args.child:
        print(json.dumps(child(args.model, mesh, args.child == "on")), flush=True)
        return 0

    runs: list[dict] = []
    for i in range(args.warmup):
        r = _spawn(args.model, args.mesh, memo=i % 2 == 0)
        print(f"warm-up memo={'on' if r['memo'] else 'off'} {r['seconds']} s", flush=True)
    for i in range(args.repeat):
        for memo in ((True, False) if i % 2 == 0 else (False, True)):
            r = _spawn(args.model, args.mesh, memo)
            r["round"] = i
            runs.append(r)
            print(json.dumps(r), flush=True)

    on = [r for r in runs if r["memo"]]
    off = [r for r in runs if not r["memo"]]
    print(f"\n{args.model} on {args.mesh}: {on[0]['variables']:,} variables, {on[0]['rows']:,} rows; "
          f"{args.repeat} interleaved rounds after {args.warmup} warm-up")
    for name, rs in (("memo on ", on), ("memo off", off)):
        calls = f", redistribute_cost calls {rs[0]['calls']:,}, computed {rs[0]['computed']:,}" if rs[0]["calls"] else ""
        print(f"  {name}: build {_median([r['seconds'] for r in rs])} s, peak RSS "
              f"{_median([r['peak_rss_gib'] for r in rs])} GiB{calls}")
    ratio = statistics.median(r["seconds"] for r in off) / statistics.median(r["seconds"] for r in on)
    same = len({r["digest"] for r in runs}) == 1
    print(f"  build off / on: {ratio:.2f}x; same ILP (digest of every variable and row): {same}")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "mesh": list(mesh), "repeat": args.repeat,
                                               "warmup": args.warmup, "runs": runs, "ratio": round(ratio, 3),
                                               "same_ilp": same}, indent=1) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
