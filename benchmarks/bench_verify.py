"""What the verifier costs: its seconds against autoparallel's build, side by side in each run.

Run on demand (not part of the test suite)::

    python benchmarks/bench_verify.py --model seed --mesh 2x4 --repeat 3
    python benchmarks/bench_verify.py --model llama3 --mesh 8x8 --layers 2 --dim 4096 --repeat 3

Each round builds the model with ``AutoParallel`` (``__enter__`` timed: autoparallel's build), adds
the plugin with its defaults (``--formulation`` aside) but ``verify="off"``, solves, applies, and then times ``apc.verify`` on
the parallel graph ``apply_placement`` built. CPU seconds of this process (the verifier runs no
subprocess). One warm-up round (discarded), then ``--repeat`` rounds; printed: the medians and
min–max of both, the paired ratio verify / build (target <= 0.10), the verifier's verdict and its
unknown nodes by op. ``--json FILE`` writes it all.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def _cpu() -> float:
    return time.process_time()


def one_round(
    model: str, mesh_shape: tuple[int, ...], layers: int | None, dim: int | None, formulation: str = "explicit"
) -> dict[str, Any]:
    from autoparallel.api import AutoParallel

    import autoparallel_constraints as apc
    from autoparallel_constraints.lab import lab_model
    from autoparallel_constraints.testing import cpu_mesh, device_name, reset_strategy_cache

    lab = lab_model(model, mesh_shape, size="full", layers=layers, dim=dim)
    reset_strategy_cache()
    mesh = cpu_mesh(mesh_shape, lab.mesh_dim_names)
    with device_name():
        c0 = _cpu()
        with AutoParallel(lab.model, lab.input_fn, mesh, lab.mp_policy) as autop:
            build = _cpu() - c0
            autop.add_input_constraints(list(lab.input_placements))
            if lab.output_placements is not None:
                autop.add_output_constraints(list(lab.output_placements))
            if lab.parameter_memory_constraint:
                autop.add_parameter_memory_constraint()
            autop.add_op_constraints(formulation=formulation, verify="off")
            placement = autop.optimize_placement()
            autop.apply_placement(placement)
            c1 = _cpu()
            report = apc.verify(autop)
            seconds = _cpu() - c1
    return {
        "build_cpu_s": build,
        "verify_cpu_s": seconds,
        "verdict": report.verdict,
        "proven": report.n_proven,
        "unknown": report.n_unknown,
        "unproven_outputs": list(report.unproven_outputs),
        "unknown_by_op": report.unknown,
        "unknown_reasons": dict(list(report.unknown_reasons.items())[:20]),
        "nodes": report.nodes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="seed", choices=("seed", "llama3", "falcon"))
    parser.add_argument("--mesh", default="2x4")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--dim", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--formulation", default="explicit", help="the default call's (explicit), or strict, ...")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    from autoparallel_constraints.core._stats import Spread, interleave, paired_ratio
    from autoparallel_constraints.testing import init_fake_process_group

    mesh_shape = tuple(int(x) for x in args.mesh.split("x"))
    init_fake_process_group()

    def progress(step: int, total: int, row: str, warm: bool, result: dict[str, Any]) -> None:
        print(f"[{step}/{total}{' warm-up' if warm else ''}] build {result['build_cpu_s']:.1f} s, "
              f"verify {result['verify_cpu_s']:.2f} s, {result['verdict']}, {result['unknown']} unknown", flush=True)

    measured, _ = interleave(
        ["run"], lambda _row: one_round(args.model, mesh_shape, args.layers, args.dim, args.formulation),
        repeat=args.repeat, warmup=args.warmup, on_done=progress,
    )
    rounds = measured["run"]
    build = [r["build_cpu_s"] for r in rounds]
    verify = [r["verify_cpu_s"] for r in rounds]
    ratio = paired_ratio(verify, build)
    last = rounds[-1]
    print(f"\n{args.model} {args.mesh}" + (f" layers {args.layers}" if args.layers else "") + (f" dim {args.dim}" if args.dim else "")
          + f", add_op_constraints(formulation={args.formulation!r}) with the other defaults")
    print(f"  autoparallel build (CPU s): {Spread.of(build).format()}")
    print(f"  apc.verify        (CPU s): {Spread.of(verify).format()}")
    print(f"  verify / build           : {ratio.spread.format('.3f')}  target <= 0.10  "
          f"{'ok' if ratio.spread.high <= 0.10 else ('MISSED' if ratio.spread.low > 0.10 else 'undecided')}")
    print(f"  verdict {last['verdict']}, {last['proven']} tensor nodes proven, {last['unknown']} unknown"
          + (f": {last['unknown_by_op']}" if last["unknown"] else ""))
    for node, why in last["unknown_reasons"].items():
        print(f"    {node}: {why}")
    print(f"  outputs unproven: {len(last['unproven_outputs'])}" + "".join(f"\n    {o}" for o in last["unproven_outputs"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rounds": rounds, "ratio": ratio.as_dict()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
