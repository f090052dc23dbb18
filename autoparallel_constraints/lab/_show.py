"""``python -m autoparallel_constraints show``: the plan page of a run, or of two runs side by side.

    show RUN.json -o plan.html                 one run (``json.dump(apc.export(autop), f)``)
    show BEFORE.json AFTER.json -o diff.html   what AFTER changed against BEFORE
    show --example 348 -o plan.html            a known run, built here on CPU (fake ranks):

``--example`` builds the run and autoparallel alone's on one build (:class:`~..workbench.Workbench`,
formulations ``none`` and the default call's ``explicit``), writes both exports as JSON beside the
page (``<page>.alone.json``, ``<page>.run.json``) and draws the run's page, or with ``--diff`` the
two side by side:

* ``348``: upstream #348 forced at the seed's sizes on 2x4 (DTensor's pre-fix index_put strategy
  offered, its producers pinned): alone flags index_put, the plugin inserts a redistribution;
* ``517``: the seed model at 16 heads x 64, batch 8, seq 64 on 2x2 with input/output
  ``(S(0), S(1))``: alone's graph delivers Replicate where the plan has Partial, the default call
  materializes every planned edge;
* ``llama3``: autoparallel's llama3 test model, 2 layers, tiny (dim 256) on 2x4.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.distributed.tensor.placement_types import Placement, Replicate, Shard

from ..errors import InvalidOptionError
from ..models import SeedBlock, SeedConfig
from ..view import compare_to, load_export, render_diff, render_page

logger = logging.getLogger(__name__)

__all__ = ["EXAMPLES", "add_show_subcommand", "example_runs", "write_page"]

INDEX_PUT = torch.ops.aten.index_put.default
_R = Replicate()
_RR: tuple[Placement, ...] = (_R, _R)
_RS0: tuple[Placement, ...] = (_R, Shard(0))
_RS1: tuple[Placement, ...] = (_R, Shard(1))
_IO_S0_S1: tuple[Placement, ...] = (Shard(0), Shard(1))
_DIVERGING = SeedConfig(num_heads=16, head_dim=64, batch=8, seq=64)
EXAMPLES = ("348", "517", "llama3")


@contextmanager
def _case(name: str) -> Iterator[Any]:
    """An entered, constrained ``AutoParallel`` of the example ``name`` (CPU harness around it)."""
    from autoparallel.api import AutoParallel

    from ..harness import cpu_mesh, device_name, fresh_strategy_cache, init_fake_process_group
    from ..harness._inject import find_nodes, offer_strategy
    from ._models import lab_model

    init_fake_process_group()
    with device_name("H100"), fresh_strategy_cache():
        if name == "348":
            with torch.device("meta"):
                model = SeedBlock()
            offer = offer_strategy(INDEX_PUT, input_placements=[_RS0, _RR, _RS1], output_placements=_RS0)
            with offer, AutoParallel(model, model.make_input, cpu_mesh((2, 4))) as autop:
                autop.add_input_constraints([(Shard(0), _R)])
                (node,) = find_nodes(autop, INDEX_PUT)
                autop.sharding_optimizer.add_node_constraint(node.args[0], _RS0, constraint_name="pin_self")
                autop.sharding_optimizer.add_node_constraint(node.args[2], _RS1, constraint_name="pin_values")
                yield autop
        elif name == "517":
            with torch.device("meta"):
                model = SeedBlock(_DIVERGING)
            with AutoParallel(model, model.make_input, cpu_mesh((2, 2))) as autop:
                autop.add_input_constraints([_IO_S0_S1])
                autop.add_output_constraints([_IO_S0_S1])
                autop.add_parameter_memory_constraint()
                yield autop
        elif name == "llama3":
            spec = lab_model("llama3", (2, 4), size="tiny")
            with spec.enter(cpu_mesh((2, 4), spec.mesh_dim_names)) as autop:
                spec.constrain(autop)
                yield autop
        else:
            raise InvalidOptionError(f"unknown example {name!r}; available: {', '.join(EXAMPLES)}")


def example_runs(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(autoparallel alone's export, the default call's export marked against it) for an example."""
    from ..workbench import Workbench

    if name not in EXAMPLES:
        raise InvalidOptionError(f"unknown example {name!r}; available: {', '.join(EXAMPLES)}")
    with _case(name) as autop:
        bench = Workbench(autop, export=True)
        alone = bench.run("none")
        run = bench.run("explicit")
    assert alone.export is not None and run.export is not None  # Workbench(export=True) sets both
    return alone.export, compare_to(run.export, alone.export)


def write_page(page: str, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page)
    return out


def _show(args: argparse.Namespace) -> int:
    out = Path(args.output)
    if args.example:
        if args.runs:
            raise InvalidOptionError("show takes run files or --example, not both")
        t0 = time.perf_counter()
        print(f"show: building example {args.example} (autoparallel alone and the default call) ...", file=sys.stderr)
        before, after = example_runs(args.example)
        for tag, data in (("alone", before), ("run", after)):
            path = out.with_suffix(f".{tag}.json")
            path.write_text(json.dumps(data, indent=1, default=str))
            print(f"wrote {path}")
        print(f"show: example {args.example} built in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        page = render_diff(before, after) if args.diff else render_page(after)
    elif len(args.runs) == 1:
        page = render_page(load_export(args.runs[0]))
    elif len(args.runs) == 2:
        page = render_diff(load_export(args.runs[0]), load_export(args.runs[1]))
    else:
        raise InvalidOptionError("show takes one run (its page) or two (BEFORE AFTER: the diff), or --example NAME")
    write_page(page, out)
    print(f"wrote {out} ({len(page) // 1024} KB)")
    return 0


def add_show_subcommand(subparsers: Any) -> argparse.ArgumentParser:
    """``show``: the plan page."""
    p = subparsers.add_parser(
        "show",
        help="the plan page: autoparallel's visualizer with the plugin's marks; two runs: the diff",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runs", nargs="*", help="RUN.json (json.dump(apc.export(autop), f)); two: BEFORE AFTER")
    p.add_argument("-o", "--output", default="plan.html", help="the page to write (default plan.html)")
    p.add_argument("--example", choices=EXAMPLES, default=None, help="build a known run here instead")
    p.add_argument("--diff", action="store_true", help="with --example: the diff of alone against the default call")
    p.set_defaults(func=_show)
    return p
