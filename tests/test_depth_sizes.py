"""Guards the size rows of repeated layers: a twin's size couplings resolve to its cluster root's
variables, so they are skipped before building, and what remains equals a plain build of every
coupling and mesh dim. Its own module: the seed stack is built while no other AutoParallel's
context is open (test_depth.py keeps llama3's open for its module)."""

from __future__ import annotations

import pytest
import torch
from autoparallel.api import AutoParallel
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints  # noqa: F401  (installs add_op_constraints)
from autoparallel_constraints.formulations import Namer, _sites
from _ilp import reference_size_rows


@pytest.fixture(scope="module")
def seed_stack_opt():
    """The seed block stacked twice on 2x2: cluster-linked layers whose factory sizes couple
    (``size.even``). llama3's only couplings were the tuple outputs of CPU SDPA read as sizes, a
    bug since fixed, so it has none to compare."""
    from autoparallel_constraints.models import SeedConfig, SeedStack
    from autoparallel_constraints.testing import cpu_mesh

    config = SeedConfig(num_heads=6, head_dim=8, batch=8, seq=8)
    with torch.device("meta"):
        model = SeedStack(config, layers=2)
    with AutoParallel(model, lambda: SeedStack(config, layers=2).make_input(), cpu_mesh((2, 2))) as autop:
        autop.add_input_constraints([(Shard(0), Replicate())])
        yield autop.sharding_optimizer


def test_size_rows_of_twins_are_not_built_again(seed_stack_opt, monkeypatch):
    """A repeated layer's size couplings resolve to its root's variables: skipping them before
    building gives the rows (and notes) building every coupling gives, with fewer sums built, and
    the rows (and notes) a plain build of every coupling and mesh dim gives."""
    from autoparallel_constraints.plan import _sizes

    opt = seed_stack_opt
    couplings = _sizes.find_size_couplings(opt.graph, lambda n: n in opt.strats, tuple(opt.mesh.shape), dynamic=False)
    # the plugin's way: only the values no cluster root stands for are read for sizes
    assert couplings == _sizes.find_size_couplings(opt.graph, lambda n: n in opt.strats, tuple(opt.mesh.shape),
                                                   dynamic=False, not_tensors=_sizes.not_tensor_nodes(opt.graph, opt))
    built = [0]
    indicator = _sites.strategy_indicator

    def counted(*a):
        built[0] += 1
        return indicator(*a)

    def rows(**patches):
        built[0] = 0
        with monkeypatch.context() as patch:
            patch.setattr(_sites, "strategy_indicator", counted)
            for name, value in patches.items():
                patch.setattr(_sites, name, value)
            out = _sizes.build_size_constraints(opt, couplings, Namer("size", taken=opt.prob.constraints))
        return {n: str(c) for n, c in out.constraints.items()}, out.notes, built[0]

    fast, fast_notes, fast_built = rows()
    every, every_notes, every_built = rows(root_of=lambda opt: lambda idx: idx)  # no node linked: all built
    assert fast, "the model must have size couplings for the comparison to mean anything"
    assert (fast, fast_notes) == (every, every_notes)
    assert fast_built < every_built, (fast_built, every_built)
    assert [(fast[n], fast_notes[n]) for n in fast] == reference_size_rows(opt, couplings)
