"""Where 2x2x2 time goes: the seed block (8 heads x 8, batch 8, seq 8) built and solved on a 2x2x2 CPU
mesh under cProfile, with the default call (``plugin``) or autoparallel alone (``none``).

    python benchmarks/profile_3d_seed.py plugin    # prints stage seconds, ILP size, the top of the profile

A profile, not a timing: cProfile inflates Python-heavy code; read the shares, not the seconds.
"""
import cProfile
import pstats
import sys
import time

import torch
from autoparallel.api import AutoParallel
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints  # noqa: F401  (installs autop.add_op_constraints)
from autoparallel_constraints.models import SeedBlock, SeedConfig
from autoparallel_constraints.testing import cpu_mesh, device_name

plugin = sys.argv[1] == "plugin"
mesh = cpu_mesh((2, 2, 2))
cfg = SeedConfig(num_heads=8, head_dim=8, batch=8, seq=8)
with torch.device("meta"):
    model = SeedBlock(cfg)
prof = cProfile.Profile()
t = {}
with device_name():
    prof.enable()
    t0 = time.perf_counter()
    with AutoParallel(model, lambda: model.make_input(), mesh, dynamic=True) as autop:
        t["enter"] = time.perf_counter() - t0
        autop.add_input_constraints([(Shard(0), Replicate(), Replicate())])
        t1 = time.perf_counter()
        if plugin:
            autop.add_op_constraints()
        t["plugin add"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        placement = autop.optimize_placement()
        t["optimize_placement"] = time.perf_counter() - t1
    prof.disable()
print(plugin, {k: round(v, 1) for k, v in t.items()})
opt = autop.sharding_optimizer
print("variables", len(opt.prob.variables()), "rows", len(opt.prob.constraints))
pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
