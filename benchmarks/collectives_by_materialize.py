"""What ``materialize="all"`` costs in communication: the parallel graphs' collectives side by side.

Run on demand (the evidence behind the default ``materialize``)::

    python benchmarks/collectives_by_materialize.py            # seed 2x4, llama3 tiny, falcon tiny
    python benchmarks/collectives_by_materialize.py --models seed --mesh 2x4 --json out.json

For each model, three parallel graphs of the same clean problem: autoparallel alone, the plugin with
``materialize="table"`` and with ``materialize="all"`` (formulation ``explicit``, verification off so
every graph is built). For each graph: every collective by type, count and local bytes (the larger of
its input and output on the tracing rank), the objective, and the verifier's verdict. Collectives are
counted, not timed: the numbers are exact and need no repeats.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from typing import Any

MODES = ("none", "table", "all")
COLLECTIVES = ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "all_to_all_single", "shard_dim_alltoall")


def collectives(gm: Any) -> dict[str, tuple[int, int]]:
    """Collective name -> (count, local bytes) in ``gm``."""
    import torch

    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        name = node.target._schema.name.split("::")[-1]
        if name not in COLLECTIVES:
            continue
        sizes = [node.meta.get("val")] + [a.meta.get("val") for a in node.args if isinstance(a, torch.fx.Node)]
        nbytes = max((t.numel() * t.element_size() for t in sizes if isinstance(t, torch.Tensor)), default=0)
        out[name][0] += 1
        out[name][1] += int(nbytes)
    return {k: (v[0], v[1]) for k, v in sorted(out.items())}


def run(model_name: str, mesh_shape: tuple[int, ...], mode: str) -> dict[str, Any]:
    from autoparallel_constraints.lab import lab_model, run_model
    from autoparallel_constraints.testing import cpu_mesh, device_name, reset_strategy_cache
    from autoparallel_constraints.verifier._contract import verify

    lab = lab_model(model_name, mesh_shape, size="full" if model_name == "seed" else "tiny")
    seen: dict[str, Any] = {}

    def after_apply(autop: Any) -> None:
        seen["collectives"] = collectives(autop.parallel_gm)
        seen["verify"] = verify(autop)

    reset_strategy_cache()
    with device_name():
        summary, _ = run_model(
            lab.model, lab.input_fn, cpu_mesh(mesh_shape), name=model_name,
            formulation=None if mode == "none" else "explicit",
            input_placements=lab.input_placements, output_placements=lab.output_placements,
            mp_policy=lab.mp_policy, parameter_memory_constraint=lab.parameter_memory_constraint,
            plugin_options=None if mode == "none" else {"materialize": mode, "verify": "off"},
            after_apply=after_apply,
        )
    report = seen["verify"]
    return {
        "model": model_name,
        "mesh": "x".join(map(str, mesh_shape)),
        "mode": mode,
        "objective": summary.objective,
        "collectives": seen["collectives"],
        "verify": report.verdict,
        "unknown": report.n_unknown,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="seed,llama3,falcon")
    parser.add_argument("--mesh", default="2x4")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    from autoparallel_constraints.testing import init_fake_process_group

    mesh_shape = tuple(int(x) for x in args.mesh.split("x"))
    init_fake_process_group()
    rows = [run(m, mesh_shape, mode) for m in args.models.split(",") for mode in MODES]
    print(f"{'model':<8} {'mode':<6} {'objective':>12}  {'verify':<28} collectives (count, local MiB)")
    for r in rows:
        text = ", ".join(f"{k} {c} ({b / 2**20:.2f})" for k, (c, b) in r["collectives"].items()) or "none"
        verdict = f"{r['verify']} ({r['unknown']} unknown)"
        print(f"{r['model']:<8} {r['mode']:<6} {r['objective']:>12.3f}  {verdict:<28} {text}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
