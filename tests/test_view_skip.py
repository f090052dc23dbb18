"""Guards the view skip (``seam._view_skip``): during a build, autoparallel's view rule skips an
input strategy DTensor refuses to view with "Cannot shard unevenly distributed tensor", as it
already does for DTensor's ``AssertionError``, instead of stopping ``AutoParallel.__enter__``.

Rests on autoparallel at the pin (``view_rule`` in ``shardings/propagation_rules.py`` calls the
module's name ``propagate_shape_and_sharding`` and skips on ``AssertionError`` only) and on torch
2.13 (``_view_ops._rewrite_plain_shard`` raises ``RuntimeError`` for a flatten whose non-last dim a
mesh dim other than the last splits unevenly). The case (``models.FlattenedHeads``): heads viewed
out of a projection and flattened back, 10 heads on 2×2×2 (10 → 5 → 5 / 2: a Falcon-style fused qkv
of 8 query heads + k + v). When upstream skips on that error itself,
``test_without_the_skip_autoparallel_stops_the_build`` fails: then the skip, its switch and the
``view-nested-uneven`` note go.
"""

from __future__ import annotations

import pytest
import torch
from _ilp import build_ilp
from torch.distributed.tensor._ops._view_ops import view_groups
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.errors import InvalidOptionError
from autoparallel_constraints.models import FlattenedHeads
from autoparallel_constraints.seam import _view_skip
from autoparallel_constraints.seam._view_skip import skipping_unviewable_strategies
from autoparallel_constraints.testing import cpu_mesh, device_name, explain, run_numerics

S0, R = Shard(0), Replicate()
MESH = (2, 2, 2)


@pytest.fixture
def skip_off():
    previous = apc.use_view_skip(False)
    yield
    apc.use_view_skip(previous)


def _build(heads: int, dynamic: bool = True) -> None:
    from autoparallel.api import AutoParallel

    with torch.device("meta"):
        model = FlattenedHeads(heads)
    with device_name("H100"), AutoParallel(model, lambda: torch.randn(8, 16), cpu_mesh(MESH), dynamic=dynamic) as autop:
        autop.add_input_constraints([(S0, R, R)])


def _flatten(placements: tuple) -> tuple:
    from autoparallel.shardings import propagation_rules

    return propagation_rules.propagate_shape_and_sharding(placements, (10, 4), view_groups((10, 4), (40,)), MESH,
                                                          strict_view=False)


def test_only_dtensors_uneven_view_refusal_becomes_a_skip():
    """Inside the block DTensor's refusal reaches autoparallel as the AssertionError its view rule
    skips, and is counted; any other error and every viewable strategy pass untouched; the name
    is autoparallel's again after the block, also when the block raised."""
    from autoparallel.shardings import propagation_rules

    original = propagation_rules.propagate_shape_and_sharding
    with pytest.raises(RuntimeError, match="Cannot shard unevenly distributed tensor"):
        _flatten((S0, S0, S0))
    with skipping_unviewable_strategies() as stats:
        with pytest.raises(AssertionError, match="dimension 0 \\(size 5\\)"):
            _flatten((S0, S0, S0))
        assert _flatten((S0, S0, R)) == original((S0, S0, R), (10, 4), view_groups((10, 4), (40,)), MESH,
                                                  strict_view=False)
    assert stats.skipped == 1 and "size 5" in stats.first
    assert propagation_rules.propagate_shape_and_sharding is original
    with pytest.raises(ValueError), skipping_unviewable_strategies():
        raise ValueError
    assert propagation_rules.propagate_shape_and_sharding is original


def test_switched_off_the_block_changes_nothing(skip_off):
    """Off, the block leaves autoparallel's name alone and DTensor's refusal stays a RuntimeError."""
    from autoparallel.shardings import propagation_rules

    original = propagation_rules.propagate_shape_and_sharding
    with skipping_unviewable_strategies() as stats:
        assert propagation_rules.propagate_shape_and_sharding is original
        with pytest.raises(RuntimeError, match="Cannot shard unevenly distributed tensor"):
            _flatten((S0, S0, S0))
    assert stats.skipped == 0


def test_other_errors_pass_through_the_skip(monkeypatch):
    """Any other RuntimeError of DTensor's view propagation stays a RuntimeError (autoparallel then
    stops as it would without the package), and is not counted."""
    from autoparallel.shardings import propagation_rules

    def refuses(*args, **kwargs):
        raise RuntimeError("This operation would remove or reshape sharded dimension 0")

    monkeypatch.setattr(propagation_rules, "propagate_shape_and_sharding", refuses)
    with skipping_unviewable_strategies() as stats, pytest.raises(RuntimeError, match="reshape sharded"):
        _flatten((S0, S0, S0))
    assert stats.skipped == 0 and propagation_rules.propagate_shape_and_sharding is refuses


def test_without_the_skip_autoparallel_stops_the_build(fresh_strategies, skip_off):
    """Switched off, autoparallel's build stops on the 10-head flatten with torch's RuntimeError,
    which keeps one note naming autoparallel's view rule and the ways around it."""
    with pytest.raises(RuntimeError, match="Cannot shard unevenly distributed tensor") as info:
        _build(10)
    (note,) = info.value.__notes__
    assert "view_rule" in note and "use_view_skip" in note


@pytest.fixture(scope="module")
def eight_heads():
    """8 heads on 2x2x2 built once with the skip on (the default), for the two tests below: the
    build's ILP (``build_ilp`` empties the strategy cache first) and what the skip counted."""
    with device_name("H100"):
        ilp = build_ilp(lambda: FlattenedHeads(8), lambda: torch.randn(8, 16), cpu_mesh(MESH))
    return ilp, _view_skip.last_stats.skipped


def test_with_the_skip_the_same_model_builds(fresh_strategies, eight_heads):
    """On (the default), the 10-head model builds and the skip is counted; 8 heads (even) never
    reach it."""
    _build(10)
    assert _view_skip.last_stats.skipped >= 1
    assert eight_heads[1] == 0


def test_a_build_the_skip_does_not_touch_has_the_same_ilp(fresh_strategies, eight_heads):
    """8 heads on 2x2x2 go through the wrapped view rule without a refusal: with the skip and
    without it, the same decision variables, costs, specs and constraints."""
    on = eight_heads[0]
    with device_name("H100"):
        previous = apc.use_view_skip(False)
        try:
            off = build_ilp(lambda: FlattenedHeads(8), lambda: torch.randn(8, 16), cpu_mesh(MESH))
        finally:
            apc.use_view_skip(previous)
    assert on[0] and on == off


def test_switching_the_skip_off_brings_the_failure_back_in_one_process(fresh_strategies):
    """Static shapes (autoparallel caches their strategies): a build with the skip, then one
    without it on the same mesh, fails as autoparallel does; the cache filled with the skip is not
    served to it."""
    _build(10, dynamic=False)
    previous = apc.use_view_skip(False)
    try:
        with pytest.raises(RuntimeError, match="Cannot shard unevenly distributed tensor"):
            _build(10, dynamic=False)
    finally:
        apc.use_view_skip(previous)


@pytest.mark.full
@pytest.mark.parametrize("call", ["alone", "default"])
def test_the_plan_of_a_skipped_build_runs_exact(call, fresh_strategies):
    """The plan a skipped build gets is executable: exact against one device under LocalTensorMode,
    audit clean and every output proven, alone and with the default call."""
    audits: list = []
    report = run_numerics(
        lambda: FlattenedHeads(10), lambda: torch.randn(8, 16), MESH,
        input_placements=[(S0, R, R)], atol=1e-4, rtol=1e-4,
        configure=None if call == "alone" else (lambda autop: autop.add_op_constraints()),
        after_apply=lambda autop: audits.append(apc.audit(autop)),
    )
    assert _view_skip.last_stats.skipped >= 1
    assert report.ok, explain(report)
    assert audits[0].ok, explain(audits[0])
    ver = audits[0].verification
    assert ver is not None and ver.n_unknown == 0 and not ver.unproven_outputs, explain(ver)


@pytest.mark.ondemand
def test_the_seed_block_with_falcons_fused_heads_runs_on_a_3d_mesh(fresh_strategies):
    """The seed block with 10 heads (8 query heads + k + v) on 2x2x2, which autoparallel's build
    stops on without the skip: exact and clean with the default call (~200 s)."""
    from autoparallel_constraints.models import SeedBlock, SeedConfig

    cfg = SeedConfig(num_heads=10, head_dim=8, batch=8, seq=8)
    audits: list = []
    report = run_numerics(lambda: SeedBlock(cfg), lambda: torch.randn(cfg.batch, cfg.seq, cfg.hidden), MESH,
                          atol=1e-4, rtol=1e-4, configure=lambda autop: autop.add_op_constraints(),
                          after_apply=lambda autop: audits.append(apc.audit(autop)))
    assert _view_skip.last_stats.skipped >= 1
    assert report.ok, explain(report)
    assert audits[0].ok, explain(audits[0])


def test_use_view_skip_takes_a_bool():
    """A non-bool is refused with the package's option error; a bool returns the previous setting."""
    with pytest.raises(InvalidOptionError, match="True or False"):
        apc.use_view_skip("yes")  # type: ignore[arg-type]
    previous = apc.use_view_skip(False)
    try:
        assert previous is True  # the default
        assert apc.use_view_skip(False) is False
    finally:
        assert apc.use_view_skip(previous) is False
