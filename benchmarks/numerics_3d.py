"""Numerics on a 3-D mesh: small models, autoparallel alone and the plugin's default call, each
solved, applied, audited and run under LocalTensorMode against one device.

    python benchmarks/numerics_3d.py --mesh 2x2x2 --models seed,fused,linear --json out.json

One row per (model, call), each in its own process (a fresh strategy cache, memory returned, a
timeout per row): the outcome (``exact``, ``wrong``: a tensor outside tolerance, ``crash``: a
stage raised, ``killed``: the process got SIGKILL, e.g. from the OOM killer, ``timeout``), the worst tensor by error over its tolerance, the audit's verdict and
kinds, the placeholders (parameters, inputs) stored with a nested uneven shard, the seconds.
``--json`` keeps the rows already there, a row run again replacing its own (``--resume`` skips
rows the file has). Inputs and outputs are pinned ``(S(0), R, R)``; the
parameter memory constraint is on (run_numerics' default); tolerances atol = rtol = 1e-4.
``--view-skip off`` builds without the package's view skip (``apc.use_view_skip(False)``: autoparallel's
own view rule, which stops the build on a flatten DTensor refuses); rows record it, and rows saved
before the skip existed count as off.

Models (sizes chosen so a 2x2x2 build fits in minutes on 2 cores; the head counts do not divide 4):

* ``seed``: the seed block (index_put from ``h[..., [-2], :]``), 6 heads x 8, batch = seq = 8;
  ``seed_h10``: 10 heads (8 + 2, Falcon's fused qkv of 8 heads: 5 per rank after one split);
* ``fused``: a Falcon-style fused qkv of ``heads + 2`` heads (4 + 2 = 6) viewed as heads, k and v
  sliced off the end, batch 8, seq 4; ``fused8``: the same with 8 + 2 = 10 heads;
* ``heads10``: ``models.FlattenedHeads``: a projection viewed as 10 heads and flattened back, on
  ``[8, 16]`` (the smallest flatten DTensor refuses on 3-D meshes); ``heads<N>``: N heads;
* ``linear``: ``nn.Linear(6, 10)`` on ``[8, 6]`` (a bias of 10: nested uneven over two mesh dims);
* ``mlp6`` / ``mlp12``: ``Linear(8, h) -> ReLU -> Linear(h, 8)`` on ``[8, 8]`` with a hidden of 6 or
  12 (6 splits unevenly over two mesh dims of 2, 12 over three);
* ``falcon_style``: the project's Falcon (multi-query, the list index), 1 layer, hidden 64, 4 heads;
* ``falcon``: transformers' Falcon, same sizes; ``llama3``: ``llama3_small()`` (2 layers, dim 64);
* ``fuzz``: the mutation table's fuzz model (every step of the fuzz menu);
* ``seed_517``: the seed block at the 2-D PR #517 sizes (16 heads x 64, batch 8, seq 64), for a
  natural Partial edge with ``--io`` (e.g. ``S0,S1,R``: input and output pinned so).
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
MODELS = ("seed", "seed_h10", "fused", "fused8", "heads10", "linear", "mlp6", "mlp12", "falcon_style", "falcon", "llama3", "fuzz", "seed_517")


def _builders(name: str):
    import torch
    from torch import nn

    from autoparallel_constraints.models import (
        CausalLMLogits,
        FlattenedHeads,
        SeedBlock,
        SeedConfig,
        falcon_style,
        falcon_tiny,
        llama3_small,
    )

    class Fused(nn.Module):
        """Falcon's fused qkv: heads + 2 heads in one projection, viewed as heads."""

        def __init__(self, heads: int = 4, head_dim: int = 4) -> None:
            super().__init__()
            self.heads, self.head_dim = heads, head_dim
            self.qkv = nn.Linear(heads * head_dim, (heads + 2) * head_dim, bias=False)
            self.out = nn.Linear(heads * head_dim, heads * head_dim, bias=False)

        def forward(self, x):
            b, t, _ = x.shape
            f = self.qkv(x).view(b, t, self.heads + 2, self.head_dim)
            q, k, v = f[..., :-2, :], f[..., -2:-1, :], f[..., -1:, :]
            return self.out((q * k + v).reshape(b, t, self.heads * self.head_dim))

    if name == "seed":
        cfg = SeedConfig(num_heads=6, head_dim=8, batch=8, seq=8)
        return lambda: SeedBlock(cfg), lambda: torch.randn(cfg.batch, cfg.seq, cfg.hidden)
    if name == "seed_h10":
        cfg = SeedConfig(num_heads=10, head_dim=8, batch=8, seq=8)
        return lambda: SeedBlock(cfg), lambda: torch.randn(cfg.batch, cfg.seq, cfg.hidden)
    if name == "seed_517":
        cfg = SeedConfig(num_heads=16, head_dim=64, batch=8, seq=64)
        return lambda: SeedBlock(cfg), lambda: torch.randn(cfg.batch, cfg.seq, cfg.hidden)
    if name in ("fused", "fused8"):
        heads = 4 if name == "fused" else 8
        return lambda: Fused(heads), lambda: torch.randn(8, 4, 4 * heads)
    if name in ("mlp6", "mlp12"):
        hidden = int(name[3:])
        return (lambda: nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 8)),
                lambda: torch.randn(8, 8))
    if name.startswith("heads") and name[5:].isdigit():
        return lambda: FlattenedHeads(int(name[5:])), lambda: torch.randn(8, 16)
    if name == "linear":
        return lambda: nn.Linear(6, 10), lambda: torch.randn(8, 6)
    if name in ("falcon_style", "falcon", "llama3"):
        model_fn, input_fn = {"falcon_style": falcon_style, "falcon": falcon_tiny, "llama3": llama3_small}[name]()
        return lambda: CausalLMLogits(model_fn()), input_fn
    if name == "fuzz":
        from autoparallel_constraints.harness._fuzz import FuzzModel
        from autoparallel_constraints.lab._mutate import _fuzz_spec

        spec = _fuzz_spec()
        return lambda: FuzzModel(spec), lambda: torch.randn(spec.batch, spec.seq, spec.hidden)
    raise SystemExit(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


def _placements(io: str | None):
    from torch.distributed.tensor.placement_types import Replicate, Shard

    if not io:
        return None
    return [tuple(Replicate() if p == "R" else Shard(int(p[1:])) for p in io.split(","))]


def run_one(model: str, call: str, mesh: tuple[int, ...], io: str | None = None, view_skip: bool = True) -> dict:
    """One row, in this process."""
    import autoparallel_constraints as apc
    from autoparallel_constraints.seam import _view_skip
    from autoparallel_constraints.plan._nested import nested_uneven
    from autoparallel_constraints.testing import device_name, run_numerics

    apc.use_view_skip(view_skip)
    model_fn, input_fn = _builders(model)
    seen: dict = {}

    def after_apply(autop) -> None:
        audit = apc.audit(autop)
        seen["audit"] = "clean" if audit.ok else "FLAGGED"
        seen["verdict"] = audit.verdict
        seen["kinds"] = sorted({v.kind for v in audit.violations})
        ver = audit.verification
        seen["unknown"] = sum(ver.unknown.values()) if ver is not None else None
        seen["unproven"] = len(ver.unproven_outputs) if ver is not None else None
        added = getattr(getattr(autop, "_apc_state", None), "added", None)
        seen["nested_rows"] = sum(n.startswith("nested.") for n in added.constraint_names) if added else 0
        seen["nested_params"] = sorted(
            f"{n.target if n.op == 'placeholder' else n.name} {tuple(s.output_specs.placements)}"
            for n, s in autop.sharding_placement.items()
            if n.op == "placeholder" and nested_uneven(s.output_specs, mesh, n.meta.get("val")) is not None
        )

    configure = (lambda autop: autop.add_op_constraints()) if call == "default" else None
    t0 = time.perf_counter()
    with device_name("H100"):
        report = run_numerics(model_fn, input_fn, mesh, configure=configure, after_apply=after_apply,
                              input_placements=_placements(io), output_placements=_placements(io),
                              atol=1e-4, rtol=1e-4)
    seconds = time.perf_counter() - t0
    worst = max(report.checks, key=lambda c: c.excess, default=None)
    outcome = "crash" if report.error else ("exact" if report.ok else "wrong")
    return {
        "model": model, "call": call, "mesh": list(mesh), "io": io or "S0,R,...", "outcome": outcome,
        "error": report.error, "failures": [c.name for c in report.failures][:6],
        "worst": worst.name if worst else None, "worst_ratio": getattr(worst, "ratio", None),
        "max_abs_err": getattr(worst, "max_abs_err", None), "seconds": round(seconds, 1), **seen,
        "view_skip": view_skip, "skipped": _view_skip.last_stats.skipped if _view_skip.last_stats else 0,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mesh", default="2x2x2")
    p.add_argument("--models", default=",".join(MODELS[:3]))
    p.add_argument("--calls", default=",".join(CALLS))
    p.add_argument("--io", default=None, help="input and output pins, e.g. S0,S1,R (default S(0) then R)")
    p.add_argument("--json", default=None)
    p.add_argument("--resume", action="store_true", help="skip rows the --json file already has")
    p.add_argument("--view-skip", choices=("on", "off"), default="on")
    p.add_argument("--row-timeout", type=float, default=3600)
    p.add_argument("--table", default=None, help="print the rows of a saved --json file and exit")
    p.add_argument("--one", nargs=2, metavar=("MODEL", "CALL"), help=argparse.SUPPRESS)
    args = p.parse_args()
    mesh = tuple(int(x) for x in args.mesh.split("x"))
    skip = args.view_skip == "on"
    if args.table:
        for row in json.loads(Path(args.table).read_text()):
            print(_line(row))
        return 0
    if args.one:
        print("ROW " + json.dumps(run_one(*args.one, mesh, args.io, skip)), flush=True)
        return 0
    rows = json.loads(Path(args.json).read_text()) if args.json and Path(args.json).exists() else []
    def key(r: dict) -> tuple:
        return r["model"], r["call"], tuple(r["mesh"]), r.get("io", "S0,R,..."), r.get("view_skip", False)

    done = {key(r) for r in rows} if args.resume else set()
    for model in args.models.split(","):
        for call in args.calls.split(","):
            if (model, call, mesh, args.io or "S0,R,...", skip) in done:
                continue
            t0 = time.perf_counter()
            cmd = [sys.executable, __file__, "--mesh", args.mesh, "--view-skip", args.view_skip, "--one", model, call,
                   *(["--io", args.io] if args.io else [])]
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.row_timeout,
                                     env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
                line = next((ln for ln in out.stdout.splitlines() if ln.startswith("ROW ")), None)
                killed = out.returncode == -9  # SIGKILL: on these machines the OOM killer (see dmesg)
                signal = f"signal {-out.returncode}: " if out.returncode < 0 else ""
                row = json.loads(line[4:]) if line else {
                    "model": model, "call": call, "mesh": list(mesh), "io": args.io or "S0,R,...", "view_skip": skip,
                    "outcome": "killed" if killed else "crash",
                    "error": ("killed by signal 9 (SIGKILL)" if killed
                              else signal + (out.stderr.strip().splitlines() or ["no output"])[-1][:300]),
                    "seconds": round(time.perf_counter() - t0, 1)}
            except subprocess.TimeoutExpired:
                row = {"model": model, "call": call, "mesh": list(mesh), "io": args.io or "S0,R,...", "view_skip": skip,
                       "outcome": "timeout",
                       "error": f"did not finish within {args.row_timeout:.0f} s", "seconds": args.row_timeout}
            rows = [r for r in rows if key(r) != key(row)] + [row]  # a re-run replaces its row
            print(_line(row), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def _line(r: dict) -> str:
    what = r.get("error") or (f"worst {r.get('worst')} ratio {r.get('worst_ratio')}" if r.get("worst") else "")
    return (f"{r['model']:<13} {r['call']:<8} {'x'.join(map(str, r['mesh'])):<6} {r.get('io', '-'):<9} {r['outcome']:<8} "
            f"audit {r.get('audit', '-'):<7} {','.join(r.get('kinds') or []) or '-':<22} "
            f"unknown/unproven {r.get('unknown', '-')}/{r.get('unproven', '-')}  "
            f"nested rows {r.get('nested_rows', '-')!s:<4} nested placeholders {len(r.get('nested_params') or [])} "
            f"view skip {'on' if r.get('view_skip') else 'off'} ({r.get('skipped', '-')}) "
            f"{r['seconds']:>7.1f} s  {what[:160]}")


if __name__ == "__main__":
    raise SystemExit(main())
