"""Guards the CPU harness: the opt-in device-name answer (and its restore), CPU meshes, and the
mesh-blind strategy cache — two meshes in one process reuse stale strategies unless the cache is
cleared, which is what the per-test fixture (and the plugin's own guard) does."""

from __future__ import annotations

import torch
from autoparallel.api import AutoParallel
from torch import nn

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


def test_strategy_cache_is_mesh_blind_and_the_fixture_clears_it(make_mesh, monkeypatch, fresh_strategies):
    """(2,4) then (4,2) in one process: without clearing, the second run's strategies still carry
    the (2,4) mesh; cleared between runs (what ``fresh_strategies`` does), none do."""
    from autoparallel_constraints.plan import _cache_guard

    first, second = make_mesh((2, 4)), make_mesh((4, 2))
    reset_strategy_cache()
    _stale_strategy_count(first)
    # the plugin's guard would clear the cache here; make it believe the cache is the second mesh's
    # (restored after the test; fresh_strategies empties the cache this leaves mixed)
    monkeypatch.setattr(_cache_guard, "_filled_for", _cache_guard.cache_key(second))
    stale, total = _stale_strategy_count(second)  # no reset in between: the upstream hazard
    assert total and stale == total, (stale, total)
    with fresh_strategy_cache():
        _stale_strategy_count(first)
    with fresh_strategy_cache():
        stale, total = _stale_strategy_count(second)
    assert total and stale == 0
