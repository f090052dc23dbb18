"""Guards the seam's cache shims (``seam/_caches.py``): with the mesh guards attached (the test kit's
``cpu_mesh`` and any plugin call attach them), a second AutoParallel on another mesh in the same
process gets the same plan as a fresh process (placements, and the mesh and comm costs each chosen
strategy was computed with); an optimizer whose strategies carry another mesh is refused by
add_op_constraints; a failed build leaves no cache behind. The tests that rest on autoparallel's
mesh-blind keys read the shim's probe and hold on both sides of the upstream fix."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from autoparallel.api import AutoParallel
from torch import nn

import autoparallel_constraints as apc
from autoparallel_constraints import seam
from autoparallel_constraints.seam import _caches
from autoparallel_constraints.seam.dtensor import DTensorSpec, TensorMeta

ROOT = Path(__file__).resolve().parents[1]

PLAN_CODE = """
import torch
from torch import nn
from autoparallel.api import AutoParallel
import autoparallel_constraints
from autoparallel_constraints.testing import cpu_mesh, device_name

def mesh_dependent(strategy):
    # the mesh each output spec was computed for, and the comm costs priced on it: stale caches
    # serve another mesh's strategies and costs
    specs = strategy.output_specs if isinstance(strategy.output_specs, (list, tuple)) else [strategy.output_specs]
    meshes = [tuple(spec.mesh.shape) for spec in specs if spec is not None]
    return meshes, [[round(c, 6) for c in row] for row in strategy.redistribute_cost]

def plan(shape):
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
    with device_name(), AutoParallel(model, lambda: torch.randn(32, 64), cpu_mesh(shape)) as autop:
        placement = autop.optimize_placement()
    return sorted((n.name, str(s), *mesh_dependent(s)) for n, s in placement.items())
"""


def _plan_in_fresh_process(shape: tuple[int, ...]) -> list[tuple[str, str, list, list]]:
    code = PLAN_CODE + f"\nprint(repr(plan({shape!r})))\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - our own repr of strs, ints and floats


def test_two_meshes_in_one_process_plan_like_separate_processes():
    """(2,4) then (4,2) in one process (no manual cache reset): the (4,2) plan equals a fresh
    process's (4,2) plan, because the plugin's guard clears the caches when the mesh changes."""
    namespace: dict = {}
    exec(textwrap.dedent(PLAN_CODE), namespace)  # noqa: S102
    namespace["plan"]((2, 4))
    in_process = namespace["plan"]((4, 2))
    assert {m for _, _, meshes, _ in in_process for m in meshes} == {(4, 2)}
    assert in_process == _plan_in_fresh_process((4, 2))


def test_stale_strategies_are_refused(make_mesh, fresh_strategies):
    """With the guard off, a second mesh's build: where the strategy cache is mesh-blind (its probe
    says the shim is needed, the pin), add_op_constraints finds strategies of the first mesh and
    raises StaleStrategiesError with the fix; where upstream keys it on the mesh (PR #511), the
    strategies are the second mesh's and the call goes through. (fresh_strategies empties the
    cache this run leaves mixed, since later tests share it.)"""
    first, second = make_mesh((2, 4)), make_mesh((4, 2))
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
    blind = seam.probe("mesh_strategy_cache").verdict is seam.Verdict.NEEDED
    with seam.detached("mesh_strategy_cache"):
        with AutoParallel(model, lambda: torch.randn(8, 16), first):
            pass
        with AutoParallel(model, lambda: torch.randn(8, 16), second) as autop:
            if blind:
                with pytest.raises(apc.StaleStrategiesError, match=r"computed for mesh \(2, 4\).*mesh is \(4, 2\)"):
                    autop.add_op_constraints()
            else:
                assert autop.add_op_constraints().nodes


def test_comm_cost_cache_on_both_sides_of_the_upstream_fix(make_mesh, fresh_strategies):
    """autoparallel's ILP prices each edge with ``estimate_strategy_comms_cost``, cached by the two
    specs' placements and tensor metadata. Asked on (2,4) then (4,2) with nothing cleared between,
    the (4,2) answer is the (2,4) one where the key holds no mesh (the probe of shim
    ``mesh_comm_cost_cache``: the pin and PR #511) and the right one where it does; the shim's
    around clears the cache when a build's mesh changes, so the build gets the right one."""
    import types

    from autoparallel.cost_models.collective_runtime_estimation import estimate_strategy_comms_cost
    from torch.distributed.tensor.placement_types import Replicate, Shard

    first, second = make_mesh((2, 4)), make_mesh((4, 2))
    meta = TensorMeta(torch.Size([64, 64]), (64, 1), torch.float32)

    def cost(mesh):
        return estimate_strategy_comms_cost(DTensorSpec(mesh, (Shard(0), Replicate()), tensor_meta=meta),
                                            DTensorSpec(mesh, (Replicate(), Replicate()), tensor_meta=meta))

    _caches.clear_strategy_caches()
    on_first = cost(first)
    served = cost(second)
    _caches.clear_strategy_caches()
    on_second = cost(second)
    assert on_first != on_second  # an all-gather over 2 ranks, then over 4
    blind = seam.probe("mesh_comm_cost_cache").verdict is seam.Verdict.NEEDED
    assert served == (on_first if blind else on_second)
    cost(first)
    _caches.set_filled_for("comm_costs", _caches.mesh_key(first))
    assert _caches.around_build_comm_costs(lambda autop: cost(autop.mesh), types.SimpleNamespace(mesh=second)) == on_second
    assert _caches.filled_for("comm_costs") == _caches.mesh_key(second)


def test_a_failed_build_leaves_no_cache_behind(make_mesh, monkeypatch, fresh_strategies):
    """An ``AutoParallel.__enter__`` that raises empties autoparallel's placement-option cache even
    when the mesh did not change: autoparallel writes tensor metadata in place on the specs that
    cache shares, and entries a failed build left made the next model's build fail the same way
    (recurrent_gemma's view_rule error, repeated by nine families built after it on 2x2)."""
    from autoparallel.shardings import placement_options

    mesh = make_mesh((2, 2))

    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("forward fails while autoparallel traces it")

    with torch.device("meta"):
        model = Broken()
    # the cache was filled on this very mesh: only the failure can clear it
    _caches.set_filled_for("strategies", _caches.mesh_key(mesh))
    placement_options._placement_options_cache[("left", "by", "a failed build")] = None  # type: ignore[index]
    with pytest.raises(RuntimeError, match="forward fails"):
        with AutoParallel(model, lambda: torch.randn(4, 8), mesh):
            pass
    assert not placement_options._placement_options_cache
    assert _caches.filled_for("strategies") is None
