"""Guards the plugin against autoparallel's mesh-blind strategy cache: with the plugin imported, a
second AutoParallel on another mesh in the same process gets the same plan as a fresh process
(placements, and the mesh and comm costs each chosen strategy was computed with), and an optimizer whose
strategies carry another mesh is refused by add_op_constraints."""

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
from autoparallel_constraints.plan import _cache_guard

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


def test_stale_strategies_are_refused(make_mesh, monkeypatch, fresh_strategies):
    """Bypass the guard (pretend the cache was filled for the second mesh): add_op_constraints
    finds strategies of the first mesh and raises StaleStrategiesError with the fix."""
    first, second = make_mesh((2, 4)), make_mesh((4, 2))
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
    with AutoParallel(model, lambda: torch.randn(8, 16), first):
        pass
    # the guard now believes the cache is fresh (restored after the test; fresh_strategies
    # empties the cache this forged run leaves mixed, since later tests share it)
    monkeypatch.setattr(_cache_guard, "_filled_for", _cache_guard.cache_key(second))
    with AutoParallel(model, lambda: torch.randn(8, 16), second) as autop:
        with pytest.raises(apc.StaleStrategiesError, match=r"computed for mesh \(2, 4\).*mesh is \(4, 2\)"):
            autop.add_op_constraints()


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
    monkeypatch.setattr(_cache_guard, "_filled_for", _cache_guard.cache_key(mesh))
    placement_options._placement_options_cache[("left", "by", "a failed build")] = None  # type: ignore[index]
    with pytest.raises(RuntimeError, match="forward fails"):
        with AutoParallel(model, lambda: torch.randn(4, 8), mesh):
            pass
    assert not placement_options._placement_options_cache
    assert _cache_guard._filled_for is None
