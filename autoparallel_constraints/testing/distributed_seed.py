"""A real distributed check: the constrained seed block, one forward+backward step on N processes.

Run with torch's launcher on the CPU gloo backend (4 processes, a 2x2 mesh)::

    torchrun --standalone --nproc-per-node 4 -m autoparallel_constraints distributed-seed \\
        --mesh 2x2 --formulation explicit --materialize all --json /tmp/apc_dist.json

Every rank builds the single-device reference from the same seed, traces and solves the seed
block with the plugin (the plans of all ranks are compared, they must be identical), applies it,
loads the reference weights into its shards, runs one step on its input shard and compares the
gathered output and every gathered gradient with the reference. Rank 0 prints (and optionally
writes) a JSON verdict; the exit code is 0 only when every rank's numbers match.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import traceback
from typing import Any

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)


def _plan_digest(placement: dict) -> str:
    """A digest of the chosen strategies, equal across ranks iff they solved to the same plan."""
    h = hashlib.sha256()
    for node, spec in sorted(placement.items(), key=lambda kv: kv[0].name):
        h.update(f"{node.name}:{spec}\n".encode())
    return h.hexdigest()[:16]


def _parse_placements(text: str, ndim: int) -> tuple:
    from torch.distributed.tensor.placement_types import Replicate, Shard

    items = [t.strip() for t in text.split(",")] if text else []
    out = tuple(Replicate() if t.upper() == "R" else Shard(int(t.upper().lstrip("S"))) for t in items)
    if len(out) != ndim:
        raise SystemExit(f"--io {text!r} must give {ndim} placements like S0,R")
    return out


def run(
    mesh_shape: tuple[int, ...],
    formulation: str,
    materialize: str,
    config_text: str,
    io_text: str = "",
    memory: bool = False,
    inject_swapped: bool = False,
) -> dict:
    from autoparallel.api import AutoParallel
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.placement_types import Replicate, Shard

    import autoparallel_constraints as apc
    from autoparallel_constraints.models import SeedBlock, SeedConfig
    from autoparallel_constraints.testing import device_name

    from ..seam.tracing import unset_fake_temporarily

    nh, hd, batch, seq = (int(v) for v in config_text.split(","))
    config = SeedConfig(num_heads=nh, head_dim=hd, batch=batch, seq=seq)
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", mesh_shape, mesh_dim_names=tuple(f"dim{i}" for i in range(len(mesh_shape))))
    io = _parse_placements(io_text, len(mesh_shape)) if io_text else (Shard(0),) + (Replicate(),) * (len(mesh_shape) - 1)

    torch.manual_seed(0)
    reference = SeedBlock(config)
    x = torch.randn(config.batch, config.seq, config.hidden)
    ref_out = reference(x)
    grad_out = torch.randn_like(ref_out)
    ref_out.backward(grad_out)

    with torch.device("meta"):
        meta_model = SeedBlock(config)
    injection = contextlib.nullcontext()
    if inject_swapped:  # offer and pin the swapped index_put strategy: self (S0,S1), values (S1,S0)
        from autoparallel_constraints.testing import offer_strategy

        swapped = ((Shard(0), Shard(1)), (Replicate(), Replicate()), (Shard(1), Shard(0)))
        injection = offer_strategy(torch.ops.aten.index_put.default, input_placements=swapped, output_placements=swapped[0])
    with device_name(), injection, AutoParallel(meta_model, lambda: torch.empty(x.shape), mesh) as autop:
        autop.add_input_constraints([io])
        autop.add_output_constraints([io])
        if memory:
            autop.add_parameter_memory_constraint()
        if inject_swapped:
            from autoparallel_constraints.testing import find_nodes, pin_strategy, strategy_index

            (node,) = find_nodes(autop, torch.ops.aten.index_put.default)
            pin_strategy(autop, node, strategy_index(autop, node, list(swapped), swapped[0]), name="pin_swapped")
        if formulation != "none":
            autop.add_op_constraints(formulation=formulation, materialize=materialize)
        placement = autop.optimize_placement()
        digests: list[str | None] = [None] * world
        with unset_fake_temporarily():  # the with-block runs under autoparallel's FakeTensorMode
            dist.all_gather_object(digests, _plan_digest(placement))
        if len(set(digests)) != 1:
            raise RuntimeError(f"ranks solved to different plans: {digests}")
        parallel = autop.apply_placement(placement)
        audit = apc.audit(autop)

    parallel.to_empty(device="cpu")
    ref_params = dict(reference.named_parameters())
    with torch.no_grad():
        for name, param in parallel.named_parameters():
            full = DTensor.from_local(ref_params[name].detach(), param.device_mesh, [Replicate()] * len(mesh_shape))
            param.to_local().copy_(full.redistribute(param.device_mesh, param.placements).to_local())

    def shard(t: torch.Tensor) -> torch.Tensor:
        return DTensor.from_local(t, mesh, [Replicate()] * len(mesh_shape)).redistribute(mesh, io).to_local()

    out = parallel(shard(x))
    out.backward(shard(grad_out))
    checks = {}
    full_out = DTensor.from_local(out.detach(), mesh, io, shape=ref_out.shape, stride=ref_out.stride()).full_tensor()
    checks["output"] = float((full_out - ref_out.detach()).abs().max())
    for name, param in parallel.named_parameters():
        grad = param.grad.full_tensor() if isinstance(param.grad, DTensor) else param.grad
        checks[f"grad:{name}"] = float((grad - ref_params[name].grad).abs().max())
    scale = {k: 1e-4 * max(1.0, float(ref_out.abs().max() if k == "output" else ref_params[k[5:]].grad.abs().max()))
             for k in checks}
    ok = all(err <= scale[k] for k, err in checks.items())
    return {
        "rank": rank,
        "world": world,
        "mesh": list(mesh_shape),
        "formulation": formulation,
        "materialize": materialize,
        "plan": digests[0],
        "audit": audit.verdict,
        "redistributes": len(audit.redistributes),
        "io": [str(p) for p in io],
        "memory_constraint": memory,
        "inject_swapped": inject_swapped,
        "max_abs_err": checks,
        "ok": ok,
    }


def add_subcommand(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``distributed-seed`` on the package CLI's subparsers (run it under torchrun)."""
    p = subparsers.add_parser("distributed-seed", help="one step of the seed block on real ranks (under torchrun)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mesh", default="2x2")
    p.add_argument("--formulation", default="explicit")
    p.add_argument("--materialize", default="all")
    p.add_argument("--config", default="6,8,8,8", help="num_heads,head_dim,batch,seq")
    p.add_argument("--io", default="", help="input/output placements, e.g. S0,S1 (default S0,R,...)")
    p.add_argument("--memory", action="store_true", help="add the default parameter-memory constraint")
    p.add_argument("--inject-swapped", action="store_true",
                   help="offer and pin index_put's swapped strategy (self (S0,S1), values (S1,S0))")
    p.add_argument("--json", default=None)
    p.set_defaults(func=_command)
    return p


def _command(args: argparse.Namespace) -> int:
    mesh_shape = tuple(int(v) for v in args.mesh.split("x"))
    dist.init_process_group("gloo")
    try:
        try:
            result = run(mesh_shape, args.formulation, args.materialize, args.config, args.io, args.memory,
                         args.inject_swapped)
        except Exception as exc:  # every rank reports; the exact upstream error is the finding
            result = {"rank": dist.get_rank(), "ok": False, "error": f"{type(exc).__name__}: {exc}",
                      "traceback": traceback.format_exc()}
        results: list[dict | None] = [None] * dist.get_world_size()
        dist.all_gather_object(results, result)
    finally:
        dist.destroy_process_group()
    if int(os.environ.get("RANK", "0")) == 0:
        verdict = {"ok": all(r and r.get("ok") for r in results), "ranks": results}
        text = json.dumps(verdict, indent=2)
        print(text)
        if args.json:
            with open(args.json, "w") as f:
                f.write(text)
    return 0 if all(r and r.get("ok") for r in results) else 1

