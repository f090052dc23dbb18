"""Guards the demo (``python -m autoparallel_constraints demo``) and the statistics every printed
ratio goes through (``autoparallel_constraints.core._stats``): medians and min–max of repeats, paired
ratios whose spread decides "within noise", and the interleaved order of runs with a discarded
warm-up round. The demo itself runs once (``--quick``) and must tell the story in order: the
forced #348 case crashes Inductor and is flagged without the plugin and is clean with it; the
swapped case is wrong with matching shapes and exact with the plugin; the PR #517 case is 2x off
without the plugin and exact with the call the demo names; the time section shows paired ratios
with their spread."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autoparallel_constraints.core._stats import Ratio, Spread, interleave, paired_ratio, round_order
from autoparallel_constraints.errors import InvalidOptionError

ROOT = Path(__file__).resolve().parents[1]
ISSUE_348 = "Broadcast failed in ExpandView([16, 32, 1, 64], [4, 128, 1, 64])"

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


def test_benchmark_pooled_build_ratio_leaves_the_plugin_and_the_solve():
    """bench_formulations' pooled ratio: autoparallel's build (the same work in every row) is
    replaced by one pooled figure, so a row whose build swung with the machine but whose plugin
    seconds and solve equal the baseline's comes out 1.0, and a plugin second counts in full."""
    import importlib.util
    from types import SimpleNamespace as Run

    spec = importlib.util.spec_from_file_location("bench", ROOT / "benchmarks" / "bench_formulations.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    base = [Run(enter_cpu_s=80.0, build_solve_cpu_s=80.0 + 40.0), Run(enter_cpu_s=100.0, build_solve_cpu_s=140.0)]
    swung = [Run(enter_cpu_s=118.0, build_solve_cpu_s=118.0 + 40.0), Run(enter_cpu_s=78.0, build_solve_cpu_s=118.0)]
    assert bench.pooled_build_ratio(swung, base, 90.0).spread.samples == (1.0, 1.0)
    plugin = [Run(enter_cpu_s=80.0, build_solve_cpu_s=80.0 + 13.0 + 40.0)] * 2
    assert bench.pooled_build_ratio(plugin, base, 90.0).spread.median == pytest.approx(143 / 130)


# ---------------------------------------------------------------------------------------------
# the demo, run once


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """``python -m autoparallel_constraints demo --quick --json FILE`` in a subprocess (its own
    harness, as a user runs it): return code, stdout, stderr and the JSON."""
    out = tmp_path_factory.mktemp("demo") / "demo.json"
    proc = subprocess.run(
        [sys.executable, "-m", "autoparallel_constraints", "demo", "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=900, cwd=ROOT, check=False,
    )
    payload = json.loads(out.read_text()) if out.exists() else None
    return proc, payload


def _section(stdout: str, number: int) -> str:
    match = re.search(rf"^{number}\. .*?(?=^\d\. |^demo wall time)", stdout, re.DOTALL | re.MULTILINE)
    assert match, stdout
    return match.group(0)


@pytest.mark.full
def test_demo_runs_and_says_the_fix_holds(demo):
    """Exit 0 (every with-plugin verdict holds), four sections in order, a progress line per
    run on stderr, the wall time printed."""
    proc, payload = demo
    assert proc.returncode == 0, proc.stderr[-3000:]
    heads = re.findall(r"^(\d)\. ", proc.stdout, re.MULTILINE)
    assert heads == ["1", "2", "3", "4"], proc.stdout
    assert re.search(r"^demo wall time \d+\.\ds$", proc.stdout, re.MULTILINE)
    for n in range(1, 5):
        assert f"[demo {n}/4]" in proc.stderr
    assert "[1/6] seed none/cbc (warm-up) ..." in proc.stderr
    assert "implicitly registering" not in proc.stderr and "alltoall" not in proc.stderr  # upstream's notes: --verbose
    assert "show --example 348 --diff" in proc.stdout  # where to see the plans
    assert payload["fixed"] is True and payload["wall_s"] > 0


@pytest.mark.full
def test_demo_forced_348_crashes_without_and_lowers_with_the_plugin(demo):
    """Section 1: without the plugin index_put runs the illegal pair, the audit flags it and
    Inductor fails with the issue's message; with add_op_constraints() clean and lowered; the
    price is printed against the run without."""
    proc, payload = demo
    without, with_plugin = payload["forced_348"]
    assert without["index_put"] == "self (R, S(0)), values (R, S(1))"
    assert without["flagged"] == ["not_cosharded index_put"]
    assert ISSUE_348 in without["inductor_error"]
    assert with_plugin["call"] == "add_op_constraints()"
    assert with_plugin["flagged"] == [] and with_plugin["inductor_error"] is None
    assert with_plugin["objective"] >= without["objective"]  # the legal plan can't be cheaper
    text = _section(proc.stdout, 1)
    before, after = text.split("add_op_constraints()", 1)
    assert "Inductor fails: " in before and ISSUE_348 in before and "audit flags not_cosharded index_put" in before
    assert "audit clean" in after and "Inductor lowers the parallel graph" in after
    assert re.search(r"price\s+objective [\d.]+ vs [\d.]+ without \([+-][\d.]+ %\), comm cost", after)


@pytest.mark.full
def test_demo_swapped_case_is_wrong_with_matching_shapes_and_exact_with_the_plugin(demo):
    """Section 2: no error, matching leading local shapes and a wrong gradient without the
    plugin; max error 0 with it."""
    proc, payload = demo
    without, with_plugin = payload["swapped"]
    assert without["error"] is None and not without["ok"] and without["max_abs_err"] > 0
    assert without["flagged"] == ["not_cosharded index_put"]
    assert without["local_shapes"] == ["self [4, 4, 6, 8]", "values [4, 4, 1, 8]"]
    assert with_plugin["ok"] and with_plugin["max_abs_err"] == 0 and with_plugin["flagged"] == []
    text = _section(proc.stdout, 2)
    assert "WRONG: grad:proj.weight max error" in text and "exact: output and 1 gradient" in text


@pytest.mark.full
def test_demo_pr517_case_names_the_call_that_makes_it_exact(demo):
    """Section 3: 2x the reference's norm without the plugin; the default call is reported as
    it is (its materialize read from the signature); the last call is exact (within tolerance)."""
    proc, payload = demo
    runs = payload["partial_517"]
    assert runs[0]["worst"] == "grad:proj.weight" and runs[0]["ratio"] == pytest.approx(2.0, abs=1e-3)
    assert any(f.startswith("edge_diverges") for f in runs[0]["flagged"])
    assert runs[1]["call"] == "add_op_constraints()"
    if runs[1]["ok"]:  # a default that is already exact needs no further call
        assert len(runs) == 2
    else:
        assert runs[1]["ratio"] == pytest.approx(2.0, abs=1e-3) and payload["default_materialize"] != "all"
        assert len(runs) == 3 and runs[2]["call"] == "add_op_constraints(materialize='all')"
    assert runs[-1]["ok"] and runs[-1]["flagged"] == []
    text = _section(proc.stdout, 3)
    assert f"(default: materialize={payload['default_materialize']!r})" in text
    assert "2.000x the reference's norm" in text


@pytest.mark.full
def test_demo_time_section_reports_paired_ratios_with_spread(demo):
    """Section 4: two measured repeats per row after one warm-up run each, every sample in the
    JSON, and the printed verdict follows the paired ratios' min–max."""
    proc, payload = demo
    cost = payload["cost"]
    assert cost["repeat"] == 2 and cost["warmup"] == 1
    # autoparallel alone on its own solver against the default call (explicit on highs-lp)
    assert [r["label"] for r in cost["rows"]] == ["none/cbc", "explicit/highs-lp"]
    for row in cost["rows"]:
        assert len(row["samples"]) == 2 and len(row["warmups"]) == 1
        assert row["build_solve_s"]["samples"] == [s["build_s"] + s["solve_s"] for s in row["samples"]]
    base, plugin = cost["rows"]
    wall = cost["ratios"]["explicit/highs-lp"]["wall"]
    pairs = [a / b for a, b in zip(plugin["build_solve_s"]["samples"], base["build_solve_s"]["samples"])]
    assert wall["samples"] == pytest.approx(pairs)
    assert wall["within_noise"] == (min(pairs) <= 1.0 <= max(pairs))
    text = _section(proc.stdout, 4)
    assert "median [min-max] of 2 interleaved repeats per row after 1 warm-up round (discarded)" in text
    line = next(line for line in text.splitlines() if "explicit/highs-lp / none/cbc build+solve" in line)
    assert f"wall {wall['median']:.3f}x [{min(pairs):.3f}–{max(pairs):.3f}] {wall['verdict']}" in line
