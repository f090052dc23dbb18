"""Command line: ``python -m autoparallel_constraints demo``.

demo   the seed block of upstream issue #348 (batch 16, seq 128, 73 heads x 64, bf16 params,
       fp32 reduce, input (Shard(0), Replicate())) on a 2x4 CPU mesh: autoparallel alone and with
       each formulation, side by side in one process.
compare  the formulation lab: formulations x solvers on seed, falcon or llama3, one table, JSON
       and a PNG bar chart (``compare --help``).
coverage  ops with two or more tensor inputs in a model's joint graph, and the row of each.
crosscheck  DTensor/autoparallel strategies the table rejects, checked by numerics.
groundtruth  every row checked against numerics on simulated ranks (``--full`` for the sweep).
distributed-seed  one forward+backward step of the seed block on real ranks (under ``torchrun``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from ._cli import parse_mesh
from ._coverage import add_subcommands as add_coverage_subcommands
from ._lab import add_compare_subcommand
from .table._groundtruth import add_subcommand as add_groundtruth_subcommand
from .testing.distributed_seed import add_subcommand as add_distributed_seed_subcommand

logger = logging.getLogger("autoparallel_constraints.cli")


def demo(args: argparse.Namespace) -> int:
    from . import FORMULATIONS
    from ._lab import compare, render_compare, result_payload

    formulations = ["none", *sorted(FORMULATIONS)] if args.formulations is None else args.formulations.split(",")
    result = compare("seed", args.mesh, formulations, ["cbc"], repeat=args.repeat, device=args.device_name,
                     progress=sys.stderr)
    print(render_compare(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result_payload(result), f, indent=2)
    return 0 if all(run.audit_ok for row in result.rows for run in row.runs) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autoparallel_constraints", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="seed block: baseline vs each formulation")
    p.add_argument("--mesh", type=parse_mesh, default=(2, 4), help="mesh shape, e.g. 2x4 (default)")
    p.add_argument("--formulations", default=None, help="comma list, default: none and every formulation")
    p.add_argument("--device-name", default="H100", help="GPU whose limits the cost model uses (CPU run)")
    p.add_argument("--repeat", type=int, default=3, help="interleaved runs per formulation: median and min-max")
    p.add_argument("--json", default=None, help="also write the rows as JSON to this file")
    p.set_defaults(func=demo)
    add_compare_subcommand(sub)
    add_coverage_subcommands(sub)
    add_groundtruth_subcommand(sub)
    add_distributed_seed_subcommand(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
