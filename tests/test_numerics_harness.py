"""Guards the LocalTensorMode numerics runner (``autoparallel_constraints.harness._numerics``).

The runner is what every correctness claim of the package rests on, so it is proved both ways:
exact on plans that are right (a Linear, an MLP, the seed block, uneven shards, a ``_StridedShard``
parameter, an all_to_all redistribution), and failing, with the failing tensor named, when a shard
is corrupted and when torch's rank-0 all_to_all fallback is left in place (autoparallel a54c252's
Partial-divergence plan is in test_numerics_plugin.py). Real autoparallel throughout, no mocks.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import Replicate, Shard, _StridedShard

from autoparallel_constraints.errors import InvalidOptionError
from autoparallel_constraints.harness import _parallel
from autoparallel_constraints.harness._cpu import cpu_mesh
from autoparallel_constraints.harness._numerics import NumericsReport, run_numerics
from autoparallel_constraints.harness._parallel import ShardPerturbation, rank_aware_all_to_all
from autoparallel_constraints.models import SeedBlock, SeedConfig
from autoparallel_constraints.testing import explain

SMALL_SEED = SeedConfig(num_heads=6, head_dim=8, batch=4, seq=8)


class MLP(nn.Module):
    def __init__(self, dim: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class ReluScale(nn.Module):
    """``relu(x) * w``: pinning relu to S(0) and the product to S(1) forces an S(0) -> S(1)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.w


def _first(autop, target) -> torch.fx.Node:
    return next(n for n in autop.gm.graph.nodes if n.target == target)


def _pin_column_parallel_fc1(autop) -> None:
    """fc1's matmul as (S(0), S(1)): fc1.weight is used as (R, S(0)) while stored (S(0), S(0)),
    the pattern autoparallel lays out with a reversed shard order (``_StridedShard``)."""
    autop.sharding_optimizer.add_node_constraint(_first(autop, torch.ops.aten.mm.default), (Shard(0), Shard(1)))


def _pin_all_to_all(autop) -> None:
    """relu and the aliases after it stay S(0); the product is S(1): the edge is an S(0) -> S(1)."""
    optimizer = autop.sharding_optimizer
    relu = _first(autop, torch.ops.aten.relu.default)
    frontier = [relu]
    while frontier:
        node = frontier.pop()
        optimizer.add_node_constraint(node, (Shard(0),))
        frontier.extend(u for u in node.users if u.target == torch.ops.aten.alias.default)
    optimizer.add_node_constraint(_first(autop, torch.ops.aten.mul.Tensor), (Shard(1),))


def _assert_exact(report: NumericsReport) -> None:
    assert report.ok, f"{explain(report)}\n{report.placement_summary}"


# --------------------------------------------------------------------------------------------
# Exact on correct plans
# --------------------------------------------------------------------------------------------


def test_linear_exact_on_1d_mesh() -> None:
    """A Linear with bias on (2,): forward and both parameter gradients match the reference."""
    report = run_numerics(lambda: nn.Linear(16, 16), lambda: torch.randn(8, 16), (2,))
    _assert_exact(report)
    assert {c.name for c in report.checks} == {"output[0]", "grad:weight", "grad:bias"}
    assert all(c.ratio == pytest.approx(1.0, abs=1e-6) for c in report.checks)


def test_mlp_exact_on_2d_mesh_with_input_gradients() -> None:
    """An MLP on (2, 2) traced with a differentiable input: the input gradient is checked too."""
    report = run_numerics(MLP, lambda: torch.randn(8, 16), (2, 2), input_requires_grad=True)
    _assert_exact(report)
    assert {c.name for c in report.checks} == {"output[0]", "grad:fc1.weight", "grad:fc2.weight", "grad:input[0]"}


@pytest.mark.parametrize("mesh_shape", [(2,), (2, 2)])
def test_seed_block_exact(mesh_shape: tuple[int, ...]) -> None:
    """The Falcon-style seed block (index_put in its backward) at small sizes, default plan."""
    report = run_numerics(
        lambda: SeedBlock(SMALL_SEED), lambda: SeedBlock(SMALL_SEED).make_input(), mesh_shape, atol=1e-4, rtol=1e-5
    )
    _assert_exact(report)
    assert report.check("grad:proj.weight").ratio == pytest.approx(1.0, abs=1e-5)


def _replicate_bias_grad_view(autop) -> None:
    """The bias gradient's view (``[1, 10] -> [10]``) stays Replicate, as 2.13's solver leaves it.
    Sharded over 4 it is an uneven view, whose size autoparallel a54c252 localizes as the ceiling
    (``_localize_shape_arg``: 3 on every rank, rank 3 holds 1); torch 2.14.1 and 2.15.0's rules
    make that plan the solver's pick. Not the harness's concern: pinned away."""
    autop.sharding_optimizer.add_node_constraint(_first(autop, torch.ops.aten.view.default), (Replicate(),))


def test_uneven_shards_exact() -> None:
    """Shards of different sizes (torch.chunk: 10 over 4 ranks is 3,3,3,1; a batch of 6 is 2,2,2,0)
    are built, run and gathered consistently with the parallel graph."""
    report = run_numerics(
        lambda: nn.Linear(12, 10),
        lambda: torch.randn(6, 12),
        (4,),
        input_requires_grad=True,
        configure=_replicate_bias_grad_view,
    )
    _assert_exact(report)
    assert report.physical["param:bias"] == (Shard(0),), report.placement_summary  # 10 over 4
    assert report.physical["input[0]"] == (Shard(0),), report.placement_summary  # 6 over 4, one empty


def test_strided_shard_parameter_exact() -> None:
    """A parameter (and its gradient) whose shard order autoparallel reverses is laid out as
    _StridedShard; sharding and gathering by that physical layout is exact, and the layout really
    differs from the logical (S(0), S(0)), so ignoring it would mis-assemble the tensor."""
    report = run_numerics(MLP, lambda: torch.randn(8, 16), (2, 2), configure=_pin_column_parallel_fc1)
    _assert_exact(report)
    strided = (_StridedShard(0, split_factor=2), Shard(0))
    assert report.physical["param:fc1.weight"] == strided, report.placement_summary
    assert report.physical["grad:fc1.weight"] == strided, report.placement_summary

    mesh = cpu_mesh((2, 2))
    full = torch.arange(32.0).reshape(32, 1)
    shards = {}
    with LocalTensorMode(4):
        for placements in ((Shard(0), Shard(0)), (_StridedShard(0, split_factor=2), Shard(0))):
            replicated = DTensor.from_local(LocalTensor({r: full.clone() for r in range(4)}), mesh, (Replicate(),) * 2)
            shards[placements] = replicated.redistribute(mesh, placements).to_local()._local_tensors
    logical, physical = shards.values()
    assert not torch.equal(logical[1], physical[1])


def test_all_to_all_redistribution_exact() -> None:
    """An S(0) -> S(1) redistribution compiles to the _dtensor all_to_all collective, which every
    simulated rank runs with its own chunk: exact."""
    report = run_numerics(
        lambda: ReluScale(1024),
        lambda: torch.randn(64, 1024),
        (2,),
        input_placements=[(Shard(0),)],
        output_placements=[(Shard(1),)],
        configure=_pin_all_to_all,
    )
    _assert_exact(report)
    assert report.collectives.get("shard_dim_alltoall", 0) >= 1, report.placement_summary


# --------------------------------------------------------------------------------------------
# Failing when it should
# --------------------------------------------------------------------------------------------


def test_cpu_all_to_all_fallback_bakes_rank_zero() -> None:
    """Without the rank-aware routing torch's CPU fallback indexes the gathered chunks with rank
    0's coordinate: every rank gets rank 0's chunk and the runner reports the output wrong."""
    report = run_numerics(
        lambda: ReluScale(1024),
        lambda: torch.randn(64, 1024),
        (2,),
        input_placements=[(Shard(0),)],
        output_placements=[(Shard(1),)],
        configure=_pin_all_to_all,
        all_to_all_per_rank=False,
    )
    assert report.error is None and not report.ok, explain(report)
    assert "shard_dim_alltoall" not in report.collectives
    assert not report.check("output[0]").ok


def test_rank_aware_all_to_all_restores_torch() -> None:
    """The routing swaps torch's shard_dim_alltoall only while active, in both module bindings."""
    import torch.distributed.tensor._collective_utils as collective_utils
    import torch.distributed.tensor.placement_types as placement_types

    before = (collective_utils.shard_dim_alltoall, placement_types.shard_dim_alltoall)
    with rank_aware_all_to_all():
        assert placement_types.shard_dim_alltoall is not before[1]
    assert (collective_utils.shard_dim_alltoall, placement_types.shard_dim_alltoall) == before


@pytest.mark.parametrize(
    ("primal", "fails", "passes"),
    [
        ("param:weight", "output[0]", None),
        ("tangent[0]", "grad:weight", "output[0]"),
    ],
)
def test_corrupted_shard_is_detected(primal: str, fails: str, passes: str | None) -> None:
    """Adding 1.0 to rank 1's shard of one primal makes the runner fail and name the tensor it
    spoils; a corrupted tangent spoils gradients but not the forward output."""
    report = run_numerics(
        lambda: nn.Linear(16, 16),
        lambda: torch.randn(8, 16),
        (2,),
        perturb=ShardPerturbation(primal=primal, rank=1, delta=1.0),
    )
    assert report.error is None and not report.ok, explain(report)
    assert fails in {c.name for c in report.failures}, explain(report)
    if passes is not None:
        assert report.check(passes).ok, explain(report)
    assert fails in str(report)


def test_unknown_perturbation_target_raises() -> None:
    """A ShardPerturbation naming no graph input is a caller error that lists the real names."""
    with pytest.raises(InvalidOptionError, match=r"param:weight"):
        run_numerics(
            lambda: nn.Linear(8, 8), lambda: torch.randn(4, 8), (2,), perturb=ShardPerturbation(primal="param:nope")
        )


def test_failure_inside_the_run_is_reported_not_raised() -> None:
    """An exception on the parallel side comes back as report.error with its stage and text."""

    def broken(autop) -> None:
        raise RuntimeError("pin refused")

    report = run_numerics(lambda: nn.Linear(8, 8), lambda: torch.randn(4, 8), (2,), configure=broken)
    assert not report.ok
    assert report.error == "constraints: RuntimeError: pin refused"
    assert "pin refused" in str(report) and "Traceback" in report.details
    with pytest.raises(KeyError, match="the run stopped: constraints: RuntimeError: pin refused"):
        report.check("output[0]")


def test_explain_carries_the_runs_traceback() -> None:
    """What an assertion about a run shows: a failed run's whole error (its message past the first
    line and the traceback that raised it, which ``str(report)`` and pytest's cut repr drop), an
    audit the run never reached as such, and any other result as its text."""

    def broken(autop) -> None:
        raise RuntimeError("pin refused\nsecond line of the message")

    report = run_numerics(lambda: nn.Linear(8, 8), lambda: torch.randn(4, 8), (2,), configure=broken)
    text = explain(None, report)
    assert text.startswith("None (never made: the run stopped before it")
    assert "error: constraints: RuntimeError: pin refused ..." in text
    assert "second line of the message" in text and "second line" not in str(report)
    assert "the run's traceback:" in text and "in broken" in text  # the frame that raised
    ok = run_numerics(lambda: nn.Linear(8, 8), lambda: torch.randn(4, 8), (2,))
    assert ok.ok and explain(ok) == str(ok), explain(ok)  # nothing raised: the report's own text
    try:
        raise ValueError("an exception a test kept")
    except ValueError as exc:
        kept = exc
    assert "Traceback" in explain(kept) and "ValueError: an exception a test kept" in explain(kept)


def test_probe_rejects_a_rank_blind_local_tensor_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """If LocalTensorMode answered the run-time coordinate op with rank 0's value for every rank
    (as it did before torch 2.13), the runner refuses to run instead of comparing wrong."""

    class RankBlind(LocalTensorMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.device_mesh._runtime_compute_coordinate_on_dim.default:
                return 0
            return super().__torch_dispatch__(func, types, args, kwargs)

    mesh = cpu_mesh((2, 2))
    _parallel._require_rank_aware_local_tensor(mesh, range(4))  # the real one passes
    monkeypatch.setattr(_parallel, "LocalTensorMode", RankBlind)
    with pytest.raises(RuntimeError, match="per simulated rank"):
        _parallel._require_rank_aware_local_tensor(mesh, range(4))


def test_uneven_nested_shard_flattening_is_detected() -> None:
    """Found by this runner: at a54c252 a bias stored (S(0), S(0)) with 10 rows on (2, 2) is
    all-gathered on the flattened 4-rank mesh as if it were chunked 3,3,3,1, while its nested
    shards are 3,2,3,2 (``_optimize_same_nd_sharding_as_1d`` assumes even shards). The forward
    output and the bias gradient come out wrong; the runner says so."""
    report = run_numerics(lambda: nn.Linear(6, 10), lambda: torch.randn(6, 6), (2, 2), input_requires_grad=True)
    assert report.physical["param:bias"] == (Shard(0), Shard(0)), report.placement_summary
    assert report.error is None and not report.ok, explain(report)
    assert {"output[0]", "grad:bias"} <= {c.name for c in report.failures}, explain(report)
    assert report.check("grad:weight").ok and report.check("grad:input[0]").ok


def _bf16_policy():
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False)


def test_mixed_precision_is_judged_against_one_device_at_the_same_precision() -> None:
    """``mp_policy``: one device runs bfloat16 parameters too, and every floating output and
    gradient is judged by the float64 yardstick (a float32 tolerance would fail them all: their
    error is bfloat16's)."""
    report = run_numerics(MLP, lambda: torch.randn(8, 16, dtype=torch.bfloat16), (2, 2), mp_policy=_bf16_policy())
    assert report.ok, explain(report)
    assert {c.name for c in report.checks} == {"output[0]", "grad:fc1.weight", "grad:fc2.weight"}
    assert all(c.yardstick is not None and c.yardstick <= 4.0 for c in report.checks), explain(report)
    assert all("same-precision" in c.note for c in report.checks)


@pytest.mark.parametrize(("primal", "fails"), [("param:fc1.weight", "output[0]"), ("tangent[0]", "grad:fc2.weight")])
def test_mixed_precision_still_catches_a_corrupted_shard(primal: str, fails: str) -> None:
    """The yardstick is not a bfloat16-wide tolerance: 1.0 added to one rank's shard fails."""
    report = run_numerics(
        MLP, lambda: torch.randn(8, 16, dtype=torch.bfloat16), (2, 2), mp_policy=_bf16_policy(),
        perturb=ShardPerturbation(primal=primal, rank=1, delta=1.0),
    )
    assert report.error is None and not report.ok, explain(report)
    failed = report.check(fails)
    assert not failed.ok and failed.yardstick is not None and failed.yardstick > 4.0, explain(report)


def test_mixed_precision_refuses_tolerances_and_a_foreign_class() -> None:
    """atol/rtol mean nothing to a yardstick verdict, and autoparallel_cls must be an AutoParallel."""
    with pytest.raises(InvalidOptionError, match="yardstick"):
        run_numerics(MLP, lambda: torch.randn(8, 16), (2,), mp_policy=_bf16_policy(), atol=1e-3)
    with pytest.raises(InvalidOptionError, match="autoparallel_cls"):
        run_numerics(MLP, lambda: torch.randn(8, 16), (2,), autoparallel_cls=nn.Module)


class CountingLinear(nn.Module):
    """A Linear that adds its batch's column sums into a buffer in forward, as an MoE layer counts
    tokens per expert: the joint graph returns the updated buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16, bias=False)
        self.register_buffer("seen", torch.zeros(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.seen.add_(x.sum(0))
        return self.fc(x)


def test_a_buffer_forward_updates_is_checked_against_one_device() -> None:
    """The joint graph's mutated buffer comes back as ``mutated:buffer:<fqn>`` and is compared with
    the buffer as one device's forward left it; the parallel run starts from its initial value
    (a reference that kept the updated value would count twice and fail)."""
    report = run_numerics(CountingLinear, lambda: torch.randn(8, 16), (2,))
    assert report.ok, explain(report)
    check = report.check("mutated:buffer:seen")
    assert check.ok and check.max_ref > 0


def test_mixed_precision_judges_an_updated_buffer_by_the_yardstick() -> None:
    """Under ``mp_policy`` a buffer forward updates (an MoE's token counts) is judged as every other
    floating tensor is, by the float64 yardstick (the float64 run's own buffer is the truth), not by
    a float32 tolerance its bfloat16 routing cannot meet; one rank's buffer started 1.0 off fails."""
    def bf16_input() -> torch.Tensor:
        return torch.randn(8, 16, dtype=torch.bfloat16)

    report = run_numerics(CountingLinear, bf16_input, (2,), mp_policy=_bf16_policy())
    assert report.ok, explain(report)
    check = report.check("mutated:buffer:seen")
    assert check.yardstick is not None and "same-precision" in check.note, check.note
    bad = run_numerics(CountingLinear, bf16_input, (2,), mp_policy=_bf16_policy(),
                       perturb=ShardPerturbation(primal="buffer:seen", rank=1, delta=1.0))
    assert bad.error is None, explain(bad)
    failed = bad.check("mutated:buffer:seen")
    assert not failed.ok and failed.yardstick is not None and failed.yardstick > 4.0, explain(bad)


class Bf16Experts(nn.Module):
    """gpt-oss's expert pattern: a hand-made bfloat16 cast, ``_grouped_mm`` (no float64 kernel on
    CPU) and a scatter into a tensor of the activations' dtype, which refuses a float64 model; a
    plain float32 buffer, which a copy made under a dtype-changing mode would break."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(2, 16, 16) / 4)
        self.register_buffer("scale", torch.full((16,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        offs = torch.tensor([3, 8], dtype=torch.int32)
        h = torch._grouped_mm(x.bfloat16(), self.w.bfloat16(), offs=offs)
        index = torch.arange(8).flip(0).unsqueeze(1).expand(8, 16)
        return torch.zeros_like(x).scatter_add(0, index, h) * self.scale.to(x.dtype)


def test_yardstick_runs_a_model_that_refuses_float64() -> None:
    """A model that casts to bfloat16 by hand and calls ``_grouped_mm`` raises in float64; the
    yardstick then runs it in float64 with those casts rounded in place and ``_grouped_mm`` as a
    float64 matmul per group: every result float64, and as close to the bfloat16 run as bfloat16
    rounding allows (a wrong group or a lost cast would be off by the whole value)."""
    from autoparallel_constraints.harness._numerics import build_reference
    from autoparallel_constraints.harness._yardstick import float64_results

    x = torch.randn(8, 16, dtype=torch.bfloat16)
    reference = build_reference(Bf16Experts, lambda: x.clone(), seed=0, mp_policy=_bf16_policy())
    with pytest.raises(RuntimeError, match="dtype"):
        Bf16Experts().double()(x.double())
    exact = float64_results(reference)
    assert set(exact) >= {"output[0]", "grad:w"}
    assert all(t.dtype == torch.float64 for t in exact.values())
    for name, got in (("output[0]", reference.outputs[0]), ("grad:w", reference.param_grads["w"])):
        error = float((exact[name] - got.double()).norm() / got.double().norm())
        assert error < 2e-2, f"{name}: {error:.2e} from the bfloat16 run"
