"""Guards the CPU harness: the opt-in device-name answer (and its restore), CPU meshes, and the
strategy cache — at the pin two meshes in one process reuse stale strategies unless the cache is
cleared, which is what the per-test fixture (and the seam's ``mesh_strategy_cache`` shim) does;
where autoparallel keys the cache on the mesh (its PR #511), they do not."""

from __future__ import annotations

import torch
from autoparallel.api import AutoParallel
from torch import nn

from autoparallel_constraints import seam
from autoparallel_constraints.testing import device_name, fresh_strategy_cache, reset_strategy_cache


def test_device_name_is_opt_in_and_restored():
    """The device module the cost model asks (``torch.get_device_module()``: torch.cpu on a CPU
    build, torch.cuda on a CUDA build without a GPU) answers with the name inside device_name()
    and is restored on exit."""
    module = torch.get_device_module()
    assert module.get_device_name() == "H100"  # the session fixture is active here
    with device_name("A100"):
        assert torch.get_device_module().get_device_name() == "A100"
        from autoparallel.cost_models.compute_estimation import _get_device_limit

        assert _get_device_limit().name == "A100"
    assert module.get_device_name() == "H100"  # back to the session's answer


def test_cpu_mesh_shapes(make_mesh):
    """1-D and 2-D CPU meshes over the fake group, named dim0, dim1 by default."""
    m1, m2 = make_mesh((4,)), make_mesh((2, 4))
    assert m1.device_type == "cpu" and tuple(m1.shape) == (4,)
    assert tuple(m2.shape) == (2, 4) and m2.mesh_dim_names == ("dim0", "dim1")


def _stale_strategy_count(mesh) -> tuple[int, int]:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
    with AutoParallel(model, lambda: torch.randn(8, 16), mesh) as autop:
        # call_function strategies go through the cache (placeholders' are built fresh)
        strats = autop.sharding_optimizer.strats
        strategies = [s for n, op in strats.items() if n.op == "call_function" for s in op.strategies]
        meshes = [spec.mesh for s in strategies for spec in (s.output_specs if isinstance(s.output_specs, (list, tuple)) else [s.output_specs]) if spec is not None]
        return sum(tuple(m.shape) != tuple(mesh.shape) for m in meshes), len(meshes)


def test_strategy_cache_and_the_fixture_on_both_sides_of_the_upstream_fix(make_mesh, fresh_strategies):
    """(2,4) then (4,2) in one process with the seam's guard off: where its probe finds the cache
    mesh-blind (the pin), every strategy of the second run still carries the (2,4) mesh; where
    upstream keys it on the mesh (PR #511), none does. Cleared between runs (what
    ``fresh_strategies`` does), none does either way. Rests on autoparallel's placement-option
    cache key (shim ``mesh_strategy_cache``)."""
    first, second = make_mesh((2, 4)), make_mesh((4, 2))
    reset_strategy_cache()
    with seam.detached("mesh_strategy_cache"):  # fresh_strategies empties what this leaves mixed
        _stale_strategy_count(first)
        stale, total = _stale_strategy_count(second)  # no reset in between: the upstream hazard
    blind = seam.probe("mesh_strategy_cache").verdict is seam.Verdict.NEEDED
    assert total and stale == (total if blind else 0), (stale, total, blind)
    with fresh_strategy_cache():
        _stale_strategy_count(first)
    with fresh_strategy_cache():
        stale, total = _stale_strategy_count(second)
    assert total and stale == 0
