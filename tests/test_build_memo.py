"""Guards the build memo (``seam/_memos.py``): autoparallel's strategy enumeration asks DTensor's
``redistribute_cost`` the same question many times while tracing (where DTensor skips its own
cache); the plugin answers repeats from a per-build memo. These tests hold it to building exactly
the ILP autoparallel builds without it, to asking DTensor fewer times, and to leaving DTensor's
function in place after every build, failed or not.

Rests on upstream behaviour at the pin: ``generate_redistribute_costs`` looks the name
``redistribute_cost`` up in ``torch.distributed.tensor._ops.utils`` on each call (torch 2.13).
"""

from __future__ import annotations

import pytest
import torch
from _ilp import build_ilp
from autoparallel.api import AutoParallel
from torch import nn
from torch.distributed.tensor._ops import utils as dtensor_op_utils

import autoparallel_constraints as apc
from autoparallel_constraints.seam import _memos as _build_memo

DTENSOR_REDISTRIBUTE_COST = dtensor_op_utils.redistribute_cost


def _ilp(model_fn, input_fn, mesh, memo: bool) -> tuple[list, list, _build_memo.MemoStats]:
    """The ILP of a fresh build (``_ilp.build_ilp``) with the memo on or off, and its stats."""
    previous = apc.use_build_memo(memo)
    try:
        variables, rows = build_ilp(model_fn, input_fn, mesh)
        stats = _build_memo.last_stats
    finally:
        apc.use_build_memo(previous)
    assert stats is not None
    return variables, rows, stats


@pytest.mark.parametrize(
    "shape, model_fn, input_fn",
    [
        ((2, 2), lambda: nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)), lambda: torch.randn(8, 16)),
        ((2, 2, 2), lambda: nn.Linear(6, 10), lambda: torch.randn(8, 6)),
    ],
    ids=["mlp-2x2", "linear-2x2x2"],
)
def test_memo_builds_the_same_ilp(make_mesh, shape, model_fn, input_fn):
    """With the memo and without it, the same decision variables with the same costs and specs,
    and the same constraints; with it, DTensor computed fewer costs than were asked for (a 3-D
    mesh included, where shard orders span three mesh dims)."""
    mesh = make_mesh(shape)
    with_memo = _ilp(model_fn, input_fn, mesh, memo=True)
    without = _ilp(model_fn, input_fn, mesh, memo=False)
    assert with_memo[0] == without[0]
    assert with_memo[1] == without[1]
    stats = with_memo[2]
    assert 0 < stats.computed < stats.calls, stats
    assert without[2].calls == 0  # off: the build never went through the memo
    assert dtensor_op_utils.redistribute_cost is DTENSOR_REDISTRIBUTE_COST


def test_memo_is_removed_after_a_failed_build(make_mesh, fresh_strategies):
    """A build that raises inside ``__enter__`` still gives DTensor its own function back."""

    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("forward fails while autoparallel traces it")

    with torch.device("meta"):
        model = Broken()
    with pytest.raises(RuntimeError, match="forward fails"):
        with AutoParallel(model, lambda: torch.randn(4, 8), make_mesh((2, 2))):
            pass
    assert dtensor_op_utils.redistribute_cost is DTENSOR_REDISTRIBUTE_COST


def test_memo_answers_repeats_and_passes_unhashable_specs_through(monkeypatch):
    """Repeated questions are computed once; a spec that cannot be hashed (symbolic sizes) is
    asked of DTensor every time, never keyed."""
    asked: list[tuple] = []

    def fake_cost(a, b) -> float:
        asked.append((a, b))
        return float(len(asked))

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

    monkeypatch.setattr(dtensor_op_utils, "redistribute_cost", fake_cost)
    with _build_memo.memoized_redistribute_cost() as stats:
        memoized = dtensor_op_utils.redistribute_cost
        assert memoized is not fake_cost
        assert [memoized("a", "b"), memoized("a", "b"), memoized("b", "a")] == [1.0, 1.0, 2.0]
        odd = Unhashable()
        assert [memoized(odd, "b"), memoized(odd, "b")] == [3.0, 4.0]
    assert dtensor_op_utils.redistribute_cost is fake_cost
    assert (stats.calls, stats.computed, stats.unhashable) == (5, 4, 2)


def test_memo_keys_on_the_whole_spec(make_mesh):
    """Pairs of real specs on 2x2x2 that share placements but differ in shape, dtype or shard
    order each get DTensor's own cost, asked in any order and twice: a memo keyed on less than the
    whole spec would hand one pair's cost to another (autoparallel overwrites most of these costs
    with its own estimate, so the ILP comparison above alone could not tell)."""
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, ShardOrderEntry, TensorMeta
    from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

    mesh = make_mesh((2, 2, 2))

    def spec(placements, shape, dtype=torch.float32, shard_order=None):
        stride = torch.empty(shape, device="meta").stride()
        kwargs = {"shard_order": shard_order} if shard_order is not None else {}
        return DTensorSpec(mesh, placements, tensor_meta=TensorMeta(torch.Size(shape), stride, dtype), **kwargs)

    layouts = [(Shard(0), Shard(0), Replicate()), (Shard(0), Shard(1), Partial()), (Replicate(), Shard(1), Shard(0)),
               (Replicate(), Replicate(), Replicate())]
    specs = [spec(p, shape, dtype) for p in layouts for shape in [(8, 8), (16, 8), (8, 8, 4)]
             for dtype in (torch.float32, torch.bfloat16)]
    specs.append(spec((Shard(0), Shard(0), Replicate()), (8, 8), shard_order=(ShardOrderEntry(tensor_dim=0, mesh_dims=(1, 0)),)))
    pairs = [(a, b) for a in specs for b in specs if a.ndim == b.ndim] * 2
    truth = [DTENSOR_REDISTRIBUTE_COST(a, b) for a, b in pairs]
    assert len(set(truth)) > 10  # the pairs do price differently
    with _build_memo.memoized_redistribute_cost() as stats:
        memoized = dtensor_op_utils.redistribute_cost
        got = [memoized(a, b) for a, b in pairs]
    assert got == truth
    assert stats.computed == len(pairs) // 2


def test_use_build_memo_takes_a_bool():
    """Anything but True/False is refused with the package's exception, and the setting is kept."""
    with pytest.raises(apc.InvalidOptionError, match="True or False"):
        apc.use_build_memo("off")  # type: ignore[arg-type]
    assert apc.use_build_memo(True) is True
