"""Guards the build size guard (``seam/_build_size.py``): before autoparallel creates its ILP's
variables, the plugin counts them and refuses a build whose variables cannot fit the memory
budget, with a package error that names the count. These tests hold the count to what
autoparallel then creates, the refusal to the budget (the default, what the system reports
available, and a fixed one), and autoparallel's method to being restored after every build.

Rests on upstream behaviour at the pin: ``ShardingOptimizer.__init__`` enumerates strategies,
then calls ``self._create_pulp_variables()``, which creates one variable per
``walk_over_options`` item of every node not linked to an identical one.
"""

from __future__ import annotations

import pytest
import torch
from autoparallel.api import AutoParallel
from autoparallel.cost_models.collective_runtime_estimation import get_nccl_topo_config
from autoparallel.optimize_sharding import ShardingOptimizer
from torch import nn

import autoparallel_constraints as apc
from autoparallel_constraints.seam import _build_size

CREATE_VARIABLES = ShardingOptimizer.__dict__["_create_pulp_variables"]


def _enter(mesh):
    """An MLP on 2-D meshes; on 3-D, where an MLP's build takes 20 s on 2 cores, one linear."""
    with torch.device("meta"):
        if mesh.ndim == 3:
            return AutoParallel(nn.Linear(6, 10), lambda: torch.randn(8, 6), mesh, dynamic=True)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
    return AutoParallel(model, lambda: torch.randn(8, 16), mesh, dynamic=True)


@pytest.fixture
def budget():
    """Restore the process-wide budget after the test."""
    previous = apc.set_build_budget("available")
    yield
    apc.set_build_budget(previous)


def test_the_count_is_what_autoparallel_creates(make_mesh, budget):
    """The variables counted before the build are the ones autoparallel creates (2-D and 3-D);
    a build within the budget goes through untouched."""
    for shape in ((2, 2), (2, 2, 2)):
        with _enter(make_mesh(shape)) as autop:
            created = len(autop.sharding_optimizer.pulp_variables)
        size = _build_size.last_size
        assert size is not None and size.variables == created > 0, (shape, size, created)
    assert ShardingOptimizer.__dict__["_create_pulp_variables"] is CREATE_VARIABLES


def test_a_build_over_the_budget_is_refused_before_its_variables(make_mesh, budget):
    """Over a fixed budget: BuildTooLargeError naming the count, the estimate and the way out,
    raised before autoparallel creates a variable; its method and the process-wide settings
    autoparallel's __enter__ had changed restored, and the next build on the same mesh works once
    the budget allows it."""
    mesh = make_mesh((2, 2))
    with _enter(mesh) as autop:
        created = len(autop.sharding_optimizer.pulp_variables)
    padding, nccl = torch._inductor.config.comprehensive_padding, get_nccl_topo_config()
    apc.set_build_budget(1e-6)  # about 1 KiB
    with pytest.raises(apc.BuildTooLargeError, match=f"{created:,} binary variables") as info:
        with _enter(mesh):
            pytest.fail("the build should not get here")
    assert info.value.size.variables == created
    assert info.value.budget_bytes == int(1e-6 * 2**30)
    assert "apc.set_build_budget(None)" in str(info.value) and "mesh (2, 2)" in str(info.value)
    assert ShardingOptimizer.__dict__["_create_pulp_variables"] is CREATE_VARIABLES
    # what autoparallel's __enter__ set for its __exit__, which a failed __enter__ never reaches
    assert torch._inductor.config.comprehensive_padding is padding
    assert get_nccl_topo_config() is nccl
    apc.set_build_budget(None)
    with _enter(mesh) as autop:
        assert len(autop.sharding_optimizer.pulp_variables) == created


def test_the_estimate_holds_the_solve_too(make_mesh, budget):
    """A budget the build alone fits but the build and the solve do not is refused: a build that
    cannot be solved is of no use."""
    mesh = make_mesh((2, 2))
    with _enter(mesh) as autop:
        created = len(autop.sharding_optimizer.pulp_variables)
    build_only = created * _build_size.BYTES_PER_VARIABLE
    apc.set_build_budget((build_only + created * _build_size.SOLVE_BYTES_PER_VARIABLE / 2) / 2**30)
    with pytest.raises(apc.BuildTooLargeError, match="to build and solve"), _enter(mesh):
        pass


def test_the_default_budget_is_the_memory_available(make_mesh, budget, monkeypatch):
    """By default the estimate is held to the memory the system reports available: refused when
    that is smaller, built when it is unknown or the guard is off."""
    mesh = make_mesh((2, 2))
    monkeypatch.setattr(_build_size, "_available_bytes", lambda: 1024)
    with pytest.raises(apc.BuildTooLargeError, match="available now"):
        with _enter(mesh):
            pass
    monkeypatch.setattr(_build_size, "_available_bytes", lambda: None)
    with _enter(mesh) as autop:
        assert autop.sharding_optimizer.pulp_variables


def test_the_memory_available_is_read_on_this_machine():
    """On Linux the default budget is a real figure (MemAvailable), not silently off."""
    available = _build_size._available_bytes()
    assert available is not None and available > 2**27, available


def test_a_cgroup_limit_below_the_machine_s_memory_is_the_budget(tmp_path):
    """In a container the cgroup's limit less its usage is what the build can take when lower
    than MemAvailable, page cache the kernel can drop (inactive_file) not counted as used."""
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    proc.mkdir()
    cgroup.mkdir()
    (proc / "meminfo").write_text(f"MemTotal: {16 * 2**20} kB\nMemAvailable: {8 * 2**20} kB\n")
    assert _build_size._available_bytes(proc, cgroup) == 8 * 2**30  # no cgroup files: the machine's
    (cgroup / "memory.max").write_text(f"{4 * 2**30}\n")
    (cgroup / "memory.current").write_text(f"{3 * 2**30}\n")
    (cgroup / "memory.stat").write_text(f"anon {2 * 2**30}\ninactive_file {2**30}\n")
    assert _build_size._available_bytes(proc, cgroup) == 2 * 2**30
    (cgroup / "memory.max").write_text("max\n")
    assert _build_size._available_bytes(proc, cgroup) == 8 * 2**30


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), "all", True, [4]])
def test_the_budget_is_checked(bad, budget):
    """A budget that is not a positive number of GiB, 'available' or None is an InvalidOptionError
    that names the accepted values, and leaves the setting as it was."""
    with pytest.raises(apc.InvalidOptionError, match="'available' or None"):
        apc.set_build_budget(bad)
    assert apc.set_build_budget("available") == "available"


# on demand (30 s): the count against autoparallel's own stays in the default tier
# (test_the_count_is_what_autoparallel_creates), and the per-cluster tests hold linked layers
@pytest.mark.ondemand
def test_repeated_layers_share_their_variables_in_the_count(make_mesh, budget):
    """autoparallel links a repeated layer's nodes to the first layer's and creates no variable
    for them: the count leaves them out too (llama3 small, 2 layers, on 2x2), so it is the
    number created and below one variable per option of every node."""
    from autoparallel_constraints.models import llama3_small

    model_fn, input_fn = llama3_small()
    with torch.device("meta"):
        model = model_fn()
    with AutoParallel(model, input_fn, make_mesh((2, 2)), dynamic=True) as autop:
        opt = autop.sharding_optimizer
        created = len(opt.pulp_variables)
        every_option = sum(1 for n in opt.strats if n.op != "output" for _ in opt.walk_over_options(n))
    assert opt.cluster_links, "the model no longer has linked layers: pick one that does"
    assert _build_size.last_size.variables == created < every_option
