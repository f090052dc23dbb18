"""Compare formulations: the lab's table and PNG, and what presolve makes of prune vs strict.

Part 1 runs the formulation lab (``python -m autoparallel_constraints compare``) on the seed
block at tiny size on a 2x4 CPU mesh: autoparallel alone, ``strict``, ``explicit`` and this
folder's ``prune`` (given as ``prune:Prune``, an import path), one table and a PNG bar chart.
Part 2 solves the forced #348 case (seed block 10 heads x 16, batch 8, seq 16) with ``strict`` and
with ``prune``, writes each problem as MPS and lets HiGHS presolve it: columns and rows before
and after presolve, and the objective, which must be equal. Prints ``VERDICT: ok`` when the PNG
is written, every run audits clean and the objectives agree.

    python examples/compare_formulations.py [out.png]
"""

import sys
import tempfile
from pathlib import Path

import torch
from autoparallel.api import AutoParallel
from prune import Prune
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.__main__ import main as apc_main
from autoparallel_constraints.models import SeedBlock, SeedConfig
from autoparallel_constraints.testing import (
    cpu_mesh,
    device_name,
    find_nodes,
    init_fake_process_group,
    offer_strategy,
)

INDEX_PUT = torch.ops.aten.index_put.default
RR, RS0, RS1 = (Replicate(), Replicate()), (Replicate(), Shard(0)), (Replicate(), Shard(1))
SMALL = SeedConfig(num_heads=10, head_dim=16, batch=8, seq=16)


def presolved(formulation, tmp: Path) -> dict:
    """Solve the forced case; HiGHS's presolve of the exact problem the solver got."""
    import highspy

    with torch.device("meta"):
        model = SeedBlock(SMALL)
    with offer_strategy(INDEX_PUT, input_placements=[RS0, RR, RS1], output_placements=RS0), \
            AutoParallel(model, model.make_input, cpu_mesh((2, 4))) as autop:
        autop.add_input_constraints([(Shard(0), Replicate())])
        (node,) = find_nodes(autop, INDEX_PUT)
        autop.sharding_optimizer.add_node_constraint(node.args[0], RS0, constraint_name="pin_self")
        autop.sharding_optimizer.add_node_constraint(node.args[2], RS1, constraint_name="pin_values")
        autop.add_op_constraints(formulation=formulation)
        autop.apply_placement(autop.optimize_placement())
        prob = autop.sharding_optimizer.prob
        path = tmp / "problem.mps"
        prob.writeMPS(str(path))
        out = {"objective": float(prob.objective.value()), "audit": apc.audit(autop)}
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.readModel(str(path))
    out["before"] = (h.getLp().num_col_, h.getLp().num_row_)
    h.presolve()
    out["after"] = (h.getPresolvedLp().num_col_, h.getPresolvedLp().num_row_)
    return out


if __name__ == "__main__":
    png = Path(sys.argv[1] if len(sys.argv) > 1 else "formulations.png")
    apc_main(["compare", "--model", "seed", "--size", "tiny", "--mesh", "2x4", "--solvers", "cbc",
              "--formulations", "none,strict,explicit,prune:Prune", "--png", str(png)])
    with device_name("H100"), tempfile.TemporaryDirectory() as tmp:
        init_fake_process_group()
        runs = {"strict": presolved("strict", Path(tmp)), "prune": presolved(Prune(), Path(tmp))}
    for name, r in runs.items():
        print(f"forced #348, {name}: columns x rows {r['before'][0]} x {r['before'][1]}, after HiGHS presolve "
              f"{r['after'][0]} x {r['after'][1]}; objective {r['objective']:.4f}; audit {r['audit'].verdict}")
    ok = png.is_file() and all(r["audit"].ok for r in runs.values()) and abs(
        runs["prune"]["objective"] - runs["strict"]["objective"]) <= 1e-6 * abs(runs["strict"]["objective"])
    print(f"VERDICT: {'ok' if ok else 'unexpected'}")
