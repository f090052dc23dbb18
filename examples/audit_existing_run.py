"""Audit an autoparallel run that does not use the plugin: "would my plan have been wrong?"

Importing ``autoparallel_constraints`` is enough for ``apc.audit(autop)``: it checks the applied
parallel graph against the plan, independently of the solver. Here autoparallel runs alone on
the seed block (16 heads x 64, batch 8, seq 64, fp32) on a 2x2 CPU mesh with input and output
``(Shard(0), Shard(1))`` and its parameter-memory constraint. Its plan is fine, but its apply step
turns a planned Partial target into Replicate (upstream PR #517), which makes a gradient come out
multiplied by the mesh-dim size: the audit reports the diverging edge. The same run with
``add_op_constraints(materialize="all")`` audits clean. Prints both verdicts and ``VERDICT: ok``.

    python examples/audit_existing_run.py
"""

import torch
from autoparallel.api import AutoParallel
from torch.distributed.tensor.placement_types import Shard

import autoparallel_constraints as apc
from autoparallel_constraints.models import SeedBlock, SeedConfig
from autoparallel_constraints.testing import cpu_mesh, device_name, init_fake_process_group

CONFIG = SeedConfig(num_heads=16, head_dim=64, batch=8, seq=64)
S0S1 = (Shard(0), Shard(1))


def run(materialize: str | None) -> apc.AuditReport:
    with torch.device("meta"):
        model = SeedBlock(CONFIG)
    with AutoParallel(model, model.make_input, cpu_mesh((2, 2))) as autop:
        autop.add_input_constraints([S0S1])
        autop.add_output_constraints([S0S1])
        autop.add_parameter_memory_constraint()
        if materialize is not None:
            autop.add_op_constraints(materialize=materialize)
        autop.apply_placement(autop.optimize_placement())
        return apc.audit(autop)


if __name__ == "__main__":
    with device_name("H100"):
        init_fake_process_group()
        alone = run(None)
        print("autoparallel alone:", alone)
        fixed = run("all")
        print("with add_op_constraints(materialize='all'): audit", fixed.verdict)
    ok = bool(alone.by_kind("edge_diverges")) and fixed.ok
    print(f"VERDICT: {'ok' if ok else 'unexpected'}")
