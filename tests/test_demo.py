"""Guards the statistics every printed ratio goes through (``autoparallel_constraints._stats``):
medians and min–max of repeats, paired ratios whose spread decides "within noise", and the
interleaved order of runs with a discarded warm-up round."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoparallel_constraints._stats import Ratio, Spread, interleave, paired_ratio, round_order
from autoparallel_constraints.errors import InvalidOptionError

ROOT = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------------
# the statistics helper


def test_spread_is_median_min_max_of_the_samples():
    """Odd and even counts (the even median is the mean of the middle two), and the text form."""
    odd = Spread.of([3.0, 1.0, 2.0])
    assert (odd.median, odd.low, odd.high, odd.n) == (2.0, 1.0, 3.0, 3)
    even = Spread.of([10.0, 1.0, 3.0, 2.0])
    assert (even.median, even.low, even.high) == (2.5, 1.0, 10.0)
    assert odd.format() == "2.00 [1.00–3.00]" and Spread.of([4.0]).format() == "4.00"
    with pytest.raises(InvalidOptionError, match="at least one sample"):
        Spread.of([])


def test_paired_ratio_is_taken_repeat_by_repeat():
    """The ratio's spread is over A_i / B_i, not over the rows' separate spreads: rows whose
    ranges overlap can still be consistently faster, pair by pair."""
    ratio = paired_ratio([1.0, 2.0, 3.0], [1.1, 2.1, 3.1])
    assert ratio.spread.samples == pytest.approx((1 / 1.1, 2 / 2.1, 3 / 3.1))
    assert ratio.spread.median == pytest.approx(2 / 2.1)
    assert not ratio.within_noise and ratio.verdict == "faster"
    slower = paired_ratio([2.0, 2.2], [1.0, 2.0])
    assert slower.verdict == "slower" and slower.spread.low == pytest.approx(1.1)


def test_a_ratio_whose_spread_contains_one_is_within_noise():
    """Median 0.9 (what a single sample or a best-of would print as a speed-up), but one pair
    is above 1: within noise. A bound exactly at 1.0 counts as contained."""
    ratio = paired_ratio([0.9, 1.2, 0.8], [1.0, 1.0, 1.0])
    assert ratio.spread.median == pytest.approx(0.9)
    assert ratio.within_noise and ratio.verdict == "within noise"
    assert ratio.format() == "0.900x [0.800–1.200] within noise"
    assert paired_ratio([1.0, 0.5], [1.0, 1.0]).within_noise


def test_one_repeat_gets_no_verdict_and_mismatched_repeats_raise():
    """A single pair has no spread: never called a speed-up (nor within noise)."""
    single = paired_ratio([0.5], [1.0])
    assert not single.within_noise and single.verdict == "one repeat, no spread"
    assert single.format() == "0.500x one repeat, no spread"
    with pytest.raises(InvalidOptionError, match="same number of repeats"):
        paired_ratio([1.0, 2.0], [1.0])
    with pytest.raises(InvalidOptionError, match="not positive"):
        paired_ratio([1.0], [0.0])


def test_side_of_a_bound():
    """The one rule behind "within noise" and the benchmark's bound verdicts."""
    s = Spread.of([0.9, 1.1])
    assert s.side_of(1.0) == "contains" and s.side_of(1.2) == "below" and s.side_of(0.8) == "above"
    assert Ratio(s).as_dict()["within_noise"] is True


def test_interleave_discards_the_warmup_and_reverses_every_other_round():
    """Rows a, b, c: warm-up round a b c (discarded), then c b a, a b c; every row's measured
    results are in round order so row i of A pairs with row i of the baseline."""
    calls: list[tuple[str, int]] = []
    counter = iter(range(100))

    def run(row: str) -> tuple[str, int]:
        calls.append((row, len(calls)))
        return row, next(counter)

    steps: list[tuple[int, int, str, bool]] = []
    measured, warmups = interleave(
        ["a", "b", "c"], run, repeat=2, warmup=1, on_step=lambda *a: steps.append(a)
    )
    assert [r for r, _ in calls] == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert warmups == {"a": [("a", 0)], "b": [("b", 1)], "c": [("c", 2)]}
    assert measured == {"a": [("a", 5), ("a", 6)], "b": [("b", 4), ("b", 7)], "c": [("c", 3), ("c", 8)]}
    assert steps[0] == (1, 9, "a", True) and steps[3] == (4, 9, "c", False)
    assert round_order(["x", "y"], 3) == ["y", "x"]
    with pytest.raises(InvalidOptionError, match="repeat must be >= 1"):
        interleave(["a"], run, repeat=0)
    with pytest.raises(InvalidOptionError, match="distinct"):
        interleave(["a", "a"], run, repeat=1)


def test_benchmark_bound_verdicts_use_the_same_rule():
    """bench_formulations: ok when every repeat meets the bound, MISSED when none does,
    undecided when the spread contains it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench", ROOT / "benchmarks" / "bench_formulations.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.bound_verdict(Spread.of([1.01, 1.04]), 1.05, at_most=True) == "ok"
    assert bench.bound_verdict(Spread.of([1.06, 1.20]), 1.05, at_most=True) == "MISSED"
    assert bench.bound_verdict(Spread.of([1.00, 1.10]), 1.05, at_most=True).startswith("undecided")
    assert bench.bound_verdict(Spread.of([4.0, 5.0]), 3.0, at_most=False) == "ok"
