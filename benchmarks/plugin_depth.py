"""The plugin's own CPU seconds against autoparallel's build, by depth: ``add_op_constraints
(formulation="strict", solver="highs")`` timed in CPU seconds against ``AutoParallel.__enter__``
(with the plugin's build memo, the default) in the same process, one fresh process per build,
the configurations interleaved (the order reverses every round) after a warm-up round.

    PYTHONPATH=. python benchmarks/plugin_depth.py --configs llama3:1:8x8,llama3:2:8x8,llama3:8:8x8,llama3:32:8x8,seed:1:2x2x2 \\
        --repeat 3 --warmup 1 --json benchmarks/results/plugin_depth.json

A configuration is ``model:layers:mesh``: ``llama3`` is autoparallel's llama3 at Llama3-8B shapes as
the lab builds it (input ``(S(0), R)``, output ``(S(0), S(2))``, parameter memory constraint,
bf16/fp32), ``seed`` the lab's seed block (its layers ignored). Printed per configuration: the
median [min-max] of the plugin's CPU seconds, of the build's CPU seconds and of their ratio (per
run), and the rows, bounds and variables the plugin added; then the plugin's growth from the
smallest llama3 depth above 1 to the largest. Each run also records a digest of the plugin's
additions (names, coefficients, right-hand sides, bounds), equal across the runs of a
configuration.

``--child model:layers:mesh --solve`` runs one build in this process and prints its record with the
plan (objective, a digest of every node's strategy): run it with ``PYTHONPATH`` on another
checkout to compare plans across versions. ``--profile model:layers:mesh`` instead runs one build and prints cProfile's top functions of the
``add_op_constraints`` call (profiles run apart from timed runs). ``--per-node`` (a private switch,
``_plugin.PER_CLUSTER = False``) times the plugin walking every node instead of each cluster once.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _digest(autop, added) -> str:
    """Every addition of the plugin: constraint names, coefficients and rhs; bounded variables."""
    state = autop._apc_state
    h = hashlib.sha256()
    for name, c in state.additions.constraints.items():
        h.update(repr((name, sorted((v.name, k) for v, k in c.items()), c.constant, c.sense)).encode())
    for name, b in state.additions.bounds.items():
        h.update(repr((name, sorted(v.name for v in b.variables), b.low, b.up)).encode())
    return h.hexdigest()[:16]


def child(model: str, layers: int, mesh: tuple[int, ...], profile: bool, per_node: bool, solve: bool = False) -> dict:
    """One build and one ``add_op_constraints`` in this process."""
    from autoparallel.api import AutoParallel

    import autoparallel_constraints  # noqa: F401  (the plugin's patches and build memo, as users get them)
    from autoparallel_constraints.lab import lab_model
    from autoparallel_constraints.plan import _plugin
    from autoparallel_constraints.testing import cpu_mesh, device_name, fresh_strategy_cache

    if per_node:
        _plugin.PER_CLUSTER = False
    spec = lab_model(model, mesh, size="full", layers=layers)
    with device_name(), fresh_strategy_cache():
        c0 = time.process_time()
        with AutoParallel(spec.model, spec.input_fn, cpu_mesh(mesh, spec.mesh_dim_names), spec.mp_policy) as autop:
            build = time.process_time() - c0
            spec.constrain(autop)
            opt = autop.sharding_optimizer
            if profile:
                import cProfile
                import pstats

                prof = cProfile.Profile()
                prof.enable()
            c1, w1 = time.process_time(), time.perf_counter()
            added = autop.add_op_constraints(formulation="strict", solver="highs")
            plugin, wall = time.process_time() - c1, time.perf_counter() - w1
            if profile:
                prof.disable()
                pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(45)
                pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
            out = {
                "model": model, "layers": layers, "mesh": list(mesh), "per_node": per_node,
                "build_cpu_s": round(build, 3), "plugin_cpu_s": round(plugin, 3), "plugin_wall_s": round(wall, 3),
                "ratio": round(plugin / build, 5), "ilp_variables": len(opt.pulp_variables),
                "sites": len(added.nodes), "rows": len(added.constraint_names), "bounds": len(added.bound_names),
                "bounded_variables": sum(len(b.variables) for b in autop._apc_state.additions.bounds.values()),
                "digest": _digest(autop, added),
                "package": str(Path(autoparallel_constraints.__file__).parent),  # which checkout ran
            }
            if solve:  # the plan: objective and every node's strategy (not timed)
                placement = autop.optimize_placement()
                plan = sorted((n.name, str(s)) for n, s in placement.items())
                out["objective"] = opt.prob.objective.value()
                out["plan_digest"] = hashlib.sha256(repr(plan).encode()).hexdigest()[:16]
                out["plan_nodes"] = len(plan)
    return out


def _spawn(config: str, per_node: bool) -> dict:
    cmd = [sys.executable, __file__, "--child", config] + (["--per-node"] if per_node else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        raise SystemExit(f"run failed ({config}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def _parse(config: str) -> tuple[str, int, tuple[int, ...]]:
    model, layers, mesh = config.split(":")
    return model, int(layers), tuple(int(x) for x in mesh.lower().split("x"))


def _spread(xs: list[float], fmt: str) -> str:
    return f"{statistics.median(xs):{fmt}} [{min(xs):{fmt}}-{max(xs):{fmt}}]"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default="llama3:1:8x8,llama3:2:8x8,llama3:8:8x8,llama3:32:8x8,seed:1:2x2x2")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="warm-up rounds (each configuration once, not counted)")
    p.add_argument("--per-node", action="store_true", help="the plugin walks every node (private switch)")
    p.add_argument("--json", default=None)
    p.add_argument("--profile", metavar="CONFIG", help="one build, cProfile of add_op_constraints on stderr")
    p.add_argument("--solve", action="store_true", help="with --child: solve and record the plan (objective, digest)")
    p.add_argument("--child", metavar="CONFIG", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child or args.profile:
        model, layers, mesh = _parse(args.child or args.profile)
        print(json.dumps(child(model, layers, mesh, bool(args.profile), args.per_node, args.solve)), flush=True)
        return 0

    configs = args.configs.split(",")
    runs: list[dict] = []
    for i in range(args.warmup):
        for config in configs:
            r = _spawn(config, args.per_node)
            print(f"warm-up {config}: plugin {r['plugin_cpu_s']} s, build {r['build_cpu_s']} s", flush=True)
    for i in range(args.repeat):
        for config in configs if i % 2 == 0 else configs[::-1]:
            r = _spawn(config, args.per_node)
            r["round"], r["config"] = i, config
            runs.append(r)
            print(json.dumps(r), flush=True)

    print(f"\nplugin's own CPU seconds (strict, highs) / autoparallel's build (CPU s, build memo on); "
          f"{args.repeat} interleaved rounds after {args.warmup} warm-up{' ; per-node path' if args.per_node else ''}")
    print(f"| configuration | ILP variables | plugin CPU s | build CPU s | plugin / build | sites | rows + bounds | digests |")
    print("|---|---|---|---|---|---|---|---|")
    summary = {}
    for config in configs:
        rs = [r for r in runs if r["config"] == config]
        digests = {r["digest"] for r in rs}
        summary[config] = {
            "plugin_cpu_s": statistics.median(r["plugin_cpu_s"] for r in rs),
            "build_cpu_s": statistics.median(r["build_cpu_s"] for r in rs),
            "ratio": statistics.median(r["ratio"] for r in rs),
            "ratio_min": min(r["ratio"] for r in rs), "ratio_max": max(r["ratio"] for r in rs),
            "digests_equal": len(digests) == 1,
        }
        print(f"| {config} | {rs[0]['ilp_variables']:,} | {_spread([r['plugin_cpu_s'] for r in rs], '.2f')} | "
              f"{_spread([r['build_cpu_s'] for r in rs], '.1f')} | {_spread([r['ratio'] for r in rs], '.4f')} | "
              f"{rs[0]['sites']} | {rs[0]['rows']} + {rs[0]['bounds']} | {'equal' if len(digests) == 1 else digests} |")
    llama = sorted((_parse(c)[1], c) for c in configs if c.startswith("llama3:") and _parse(c)[1] > 1)
    if len(llama) >= 2:
        (lo, lo_c), (hi, hi_c) = llama[0], llama[-1]
        growth = summary[hi_c]["plugin_cpu_s"] / summary[lo_c]["plugin_cpu_s"]
        print(f"plugin CPU seconds from {lo} to {hi} layers: {growth:.2f}x (medians)")
        summary["growth"] = {"from": lo_c, "to": hi_c, "ratio": round(growth, 3)}
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": " ".join(["python", "benchmarks/plugin_depth.py", *sys.argv[1:]]),
            "repeat": args.repeat, "warmup": args.warmup, "per_node": args.per_node,
            "summary": summary, "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
