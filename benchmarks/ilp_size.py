"""How many ILP variables autoparallel would create for a model on a mesh, counted after its
strategy enumeration and before it creates any (so a model whose ILP does not fit in memory can
still be sized). One process per call.

    python benchmarks/ilp_size.py --model falcon_style --mesh 2x2x2
    python benchmarks/ilp_size.py --model seed --mesh 2x2x2 --memory

Printed: enumeration seconds and peak resident memory, graph nodes, strategies per node (median
and max), the variable count (one per node x argument x own strategy x producer strategy, as
autoparallel's ``walk_over_options`` yields them, nodes linked to an identical one left out as
autoparallel leaves them out, counted as the plugin's build size guard counts them; the count without
that sharing beside it), the ops holding the most and the seconds the count took. Models are
``numerics_3d.py``'s, and ``llama3_8b`` (autoparallel's llama3 at Llama3-8B shapes, 2 layers, as
the lab builds it, with mesh dims named dp/tp/cp on 3-D meshes). Rests on autoparallel at the pin: ``ShardingOptimizer.__init__`` enumerates
strategies, then calls ``_create_pulp_variables``, which this script replaces by a counter that
stops the build.

``--memory`` lets the build finish instead and adds what autoparallel's ILP holds in memory per
variable: resident memory just before it creates its variables and after its build returns
(variables, cost records, rows; autoparallel makes its objective in the solve), both after a garbage
collection, divided by the variables created, and the same from the build's peak resident memory
(transients included); the figures behind the build size guard's ``BYTES_PER_VARIABLE`` (Linux).

``--memory --solve`` then solves autoparallel's ILP alone with ``highs-lp`` (the default solver, no
plugin rows) and adds the solve's peak resident memory above the built ILP, per variable (None when
the solve did not raise the process's peak), and the relaxation's verdict: the figure behind
``SOLVE_BYTES_PER_VARIABLE``.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


class _Sized(Exception):
    """Raised by the counter to stop the build once the variables are counted."""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="seed")
    p.add_argument("--mesh", default="2x2x2")
    p.add_argument("--memory", action="store_true", help="build in full and measure bytes per variable")
    p.add_argument("--solve", action="store_true",
                   help="with --memory: then solve autoparallel's ILP with highs-lp (no plugin rows) and "
                        "measure the solve's peak per variable")
    args = p.parse_args()

    import torch
    from autoparallel import optimize_sharding
    from autoparallel.api import AutoParallel

    import autoparallel_constraints as apc  # the cache guard and build memo, as users get them
    from autoparallel_constraints import use_solver
    from autoparallel_constraints.seam import _build_size
    from autoparallel_constraints.seam import _memos as _build_memo
    from autoparallel_constraints.testing import cpu_mesh, device_name

    sys.path.insert(0, str(HERE))
    from numerics_3d import _builders

    found: dict = {}

    def count(self) -> None:
        # the plugin's own count (the build size guard counted just before this, wrapping it), then
        # what it leaves out: strategies per node, and the variables before repeated layers share theirs
        size = _build_size.last_size
        strategies = sorted(len(self.strats[n].strategies) for n in self.strats if n.op != "output")
        unlinked = sum(1 for n in self.strats if n.op != "output" for _ in self.walk_over_options(n))
        found.update(variables=size.variables, without_cluster_links=unlinked, nodes=len(strategies),
                     strategies_median=strategies[len(strategies) // 2], strategies_max=strategies[-1],
                     top_ops=list(size.top_ops), count_s=round(size.seconds, 2))
        if not args.memory:
            raise _Sized
        gc.collect()
        found["rss_before_gib"] = _rss() / 2**30
        return create(self)

    # the guard would refuse the ILPs this script exists to size (it counts as this does)
    apc.set_build_budget(None)
    create = optimize_sharding.ShardingOptimizer._create_pulp_variables
    optimize_sharding.ShardingOptimizer._create_pulp_variables = count
    mesh = tuple(int(x) for x in args.mesh.split("x"))
    names = ("dp", "tp", "cp")[: len(mesh)] if len(mesh) == 3 else None
    if args.model == "llama3_8b":
        from autoparallel_constraints.lab._models import _llama3_model

        lab = _llama3_model(mesh, size="full", layers=2, dim=None)
        model, input_fn = lab.model, lab.input_fn
    else:
        model_fn, input_fn = _builders(args.model)
        with torch.device("meta"):
            model = model_fn()
    t0 = time.perf_counter()
    try:
        with device_name("H100"), AutoParallel(model, lambda: input_fn(), cpu_mesh(mesh, names), dynamic=True) as autop:
            gc.collect()
            after, created = _rss() / 2**30, len(autop.sharding_optimizer.pulp_variables)
            found.update(rss_after_gib=round(after, 3), created=created,
                         bytes_per_variable=round((after - found["rss_before_gib"]) * 2**30 / created))
            found["rss_before_gib"] = round(found["rss_before_gib"], 3)
            found["build_s"] = round(time.perf_counter() - t0, 1)
            if args.solve:
                # the solve's high-water mark above the built ILP; ru_maxrss is the process's, so
                # the figure stands only when the solve raised it (else None)
                hook = use_solver(autop, "highs-lp")
                before_solve = _peak()
                t1 = time.perf_counter()
                autop.optimize_placement()
                peak_solve = _peak()
                outcome = hook.outcomes[-1] if hook.outcomes else None
                found.update(solve_s=round(time.perf_counter() - t1, 1),
                             solve_relaxation=getattr(outcome, "relaxation", None),
                             solve_peak_bytes_per_variable=(round((peak_solve - after * 2**30) / created)
                                                            if peak_solve > before_solve else None))
    except _Sized:
        pass
    stats = _build_memo.last_stats
    peak = _peak()
    if args.memory and "created" in found:
        # the high-water mark over the build, transients included, per variable created
        found["peak_bytes_per_variable"] = round((peak - found["rss_before_gib"] * 2**30) / found["created"])
    print(json.dumps({
        "model": args.model, "mesh": list(mesh), **({} if args.memory else {"enumeration_s": round(time.perf_counter() - t0, 1)}),
        "peak_rss_gib": round(peak / 2**30, 2), **found,
        "memo_calls": stats.calls if stats else None, "memo_computed": stats.computed if stats else None,
    }))
    return 0


def _peak() -> int:
    """The process's peak resident memory so far, in bytes (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status (Linux only)")


if __name__ == "__main__":
    sys.exit(main())
