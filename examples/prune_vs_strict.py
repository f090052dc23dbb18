"""prune vs strict's row on the forced #348 case at the seed's sizes: what bounds instead of rows buy.

strict forbids by bounds by default, as prune does; ``Strict(forbid="row")`` adds one row per site
instead, which is what this compares prune with ("strict-row" below).

The seed block (73 heads x 64, batch 16, seq 128, bf16 params / fp32 reduce) on a 2x4 CPU mesh,
the pre-fix index_put strategy offered and its producers pinned. strict-row and prune (examples/prune.py)
run interleaved, 3 times each: PuLP's variables and rows, HiGHS's presolve of the exact problem
the solver got (columns x rows before and after), autoparallel's CBC ``optimize_placement``
seconds (each run and the median), objective and audit. Prints ``VERDICT: ok`` when every run
audits clean and prune's objective equals strict-row's. About 30 s.

``--model llama3`` runs the lab's llama3 instead (2 layers, dim 4096, 8x8 mesh, no injection:
autoparallel's plan already satisfies the table), ``--repeat N`` sets the interleaved runs per
formulation (default 3; a llama3 run takes about 2 minutes).

    python examples/prune_vs_strict.py
    python examples/prune_vs_strict.py --model llama3 --repeat 2
"""
import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import torch
from autoparallel.api import AutoParallel
from prune import Prune
from torch.distributed.fsdp import MixedPrecisionPolicy
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.formulations import Strict
from autoparallel_constraints.lab import lab_model
from autoparallel_constraints.models import SeedBlock
from autoparallel_constraints.testing import (
    cpu_mesh,
    device_name,
    find_nodes,
    init_fake_process_group,
    offer_strategy,
)

IP = torch.ops.aten.index_put.default
RR, RS0, RS1 = (Replicate(), Replicate()), (Replicate(), Shard(0)), (Replicate(), Shard(1))

def one(form, tmp, model_name="seed"):
    """One solve (the forced case, or llama3); sizes before and after HiGHS's presolve."""
    import highspy

    if model_name == "llama3":
        spec = lab_model("llama3", (8, 8), size="full")
        setup = contextlib.nullcontext()
        autoparallel = AutoParallel(spec.model, spec.input_fn, cpu_mesh((8, 8), spec.mesh_dim_names), spec.mp_policy)
    else:
        with torch.device("meta"):
            model = SeedBlock()
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        setup = offer_strategy(IP, input_placements=[RS0, RR, RS1], output_placements=RS0)
        autoparallel = AutoParallel(model, model.make_input, cpu_mesh((2, 4)), mp)
    with setup, autoparallel as autop:
        if model_name == "llama3":
            autop.add_input_constraints(list(spec.input_placements))
            autop.add_output_constraints(list(spec.output_placements))
            autop.add_parameter_memory_constraint()
        else:
            autop.add_input_constraints([(Shard(0), Replicate())])
            (node,) = find_nodes(autop, IP)
            autop.sharding_optimizer.add_node_constraint(node.args[0], RS0, constraint_name="pin_self")
            autop.sharding_optimizer.add_node_constraint(node.args[2], RS1, constraint_name="pin_values")
        added = autop.add_op_constraints(formulation=form)
        t0 = time.perf_counter()
        placement = autop.optimize_placement()
        solve = time.perf_counter() - t0
        prob = autop.sharding_optimizer.prob
        path = str(Path(tmp) / "problem.mps")
        prob.writeMPS(path)
        autop.apply_placement(placement)
        ok = apc.audit(autop).ok
        obj = float(prob.objective.value())
        nvar, ncon = len(prob.variables()), len(prob.constraints)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.readModel(path)
    before = (h.getLp().num_col_, h.getLp().num_row_)
    h.presolve()
    after = (h.getPresolvedLp().num_col_, h.getPresolvedLp().num_row_)
    return dict(solve=solve, obj=obj, ok=ok, nvar=nvar, ncon=ncon, before=before, after=after, added=str(added))

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("seed", "llama3"), default="seed")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with device_name("H100"), tempfile.TemporaryDirectory() as tmp:
        init_fake_process_group()
        res = {"strict-row": [], "prune": []}
        for i in range(args.repeat):  # interleaved, the order reversed every other round
            for name in ("strict-row", "prune") if i % 2 == 0 else ("prune", "strict-row"):
                res[name].append(one(Strict(forbid="row") if name == "strict-row" else Prune(), tmp, args.model))
    for name, rs in res.items():
        r0 = rs[0]
        print(f"{name}: pulp vars {r0['nvar']} rows {r0['ncon']}; MPS cols x rows {r0['before']} -> presolved {r0['after']}; "
              f"objective {[round(r['obj'], 6) for r in rs]}; audit ok {[r['ok'] for r in rs]}; CBC optimize_placement s "
              f"{[round(r['solve'], 2) for r in rs]} median {statistics.median(r['solve'] for r in rs):.2f}")
        print("  ", r0["added"])
    objs = [r["obj"] for rs in res.values() for r in rs]
    ok = all(r["ok"] for rs in res.values() for r in rs) and max(objs) - min(objs) <= 1e-6 * abs(objs[0])
    print(f"VERDICT: {'ok' if ok else 'unexpected'}")
