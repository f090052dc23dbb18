"""Guards the formulation lab: ``python -m autoparallel_constraints compare`` runs every
formulation × solver on one model in one process, interleaved with a warm-up round, and prints one
table (size, median and min–max of build+solve wall and CPU seconds, objective, comm cost,
redistributes, audit), a progress line per run, paired ratios against autoparallel alone with CBC
("within noise" when their spread contains 1.0), writes every repeat as JSON and draws a PNG with
min–max error bars; bad choices fail before any run; the lab's models (seed, llama3, falcon) build
at both sizes."""

from __future__ import annotations

import json
import re

import pytest
import torch

from autoparallel_constraints import InvalidOptionError
from autoparallel_constraints.__main__ import main
from autoparallel_constraints.lab import (
    CompareResult,
    RowRuns,
    RunSummary,
    compare,
    compare_figure,
    lab_model,
    render_compare,
    result_payload,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _summary(formulation: str, solver: str, build: float, solve: float, cpu: float) -> RunSummary:
    """A RunSummary with the given timings (everything else fixed), for rendering tests."""
    return RunSummary(
        model="seed", mesh=(2, 4), formulation=formulation, solver=solver, variables=100, constraints=50,
        build_s=build, plugin_s=0.0, solve_s=solve, apply_s=0.1, objective=10.0, table_nodes=3,
        constrained_nodes=0, redistributes=0, audit="clean", audit_ok=True, build_cpu_s=cpu - solve,
        solve_cpu_s=solve, enter_s=build, comm_cost=4.0,
    )


def _synthetic_result() -> CompareResult:
    """none/cbc and two rows: strict/cbc faster in its best run but one pair above 1 (within
    noise); lazy/cbc slower in every pair."""
    rows = {
        ("none", "cbc"): [(4.0, 1.0, 5.0), (4.0, 1.0, 5.0), (4.0, 1.0, 5.0)],
        ("strict", "cbc"): [(2.5, 1.0, 4.5), (5.0, 1.0, 5.5), (4.0, 0.5, 4.4)],
        ("lazy", "cbc"): [(5.0, 1.0, 6.0), (5.0, 1.5, 6.5), (4.5, 1.0, 5.6)],
    }
    return CompareResult(
        model="seed", description="synthetic", mesh=(2, 4), repeat=3, warmup=1,
        rows=[
            RowRuns(formulation=f, solver=s, runs=tuple(_summary(f, s, *t) for t in times),
                    warmups=(_summary(f, s, 9.0, 9.0, 18.0),))
            for (f, s), times in rows.items()
        ],
        machine={"cpus": 2, "load_start": 1.5, "load_end": 2.0},
    )


def test_compare_ratios_are_paired_medians_and_say_within_noise():
    """strict/cbc's best run is 0.7x the baseline (what "fastest of N" printed as a speed-up), but
    its paired ratios are 0.7, 1.2, 0.9: within noise. lazy/cbc is slower in every pair. The warm-up
    runs (9 s) appear nowhere in the figures."""
    result = _synthetic_result()
    text = render_compare(result)
    lines = text.splitlines()
    assert lines[1] == (
        "median [min-max] of 3 interleaved repeats per row after 1 warm-up round (discarded); "
        "1-min load average 1.50 at start, 2.00 at end on 2 CPUs"
    )
    strict = next(line for line in lines if line.startswith("strict/cbc / none/cbc"))
    assert "wall 0.900x [0.700–1.200] within noise" in strict and "faster" not in strict
    assert "cpu 0.900x [0.880–1.100] within noise" in strict
    lazy = next(line for line in lines if line.startswith("lazy/cbc / none/cbc"))
    assert "wall 1.200x [1.100–1.300] slower" in lazy
    none_row = next(line for line in lines if line.startswith("none "))
    assert "5.00 [5.00–5.00]" in none_row and "9." not in none_row
    ratios = result.ratios()
    assert ratios["strict/cbc"]["wall"].within_noise and not ratios["lazy/cbc"]["wall"].within_noise


def test_compare_json_keeps_every_repeat_and_the_warmups():
    """The payload holds each row's samples, its warm-up runs apart, spreads and paired ratios."""
    payload = result_payload(_synthetic_result())
    strict = payload["rows"][1]
    assert strict["label"] == "strict/cbc" and len(strict["samples"]) == 3 and len(strict["warmups"]) == 1
    assert strict["build_solve_s"] == {"median": 4.5, "min": 3.5, "max": 6.0, "n": 3, "samples": [3.5, 6.0, 4.5]}
    assert payload["ratios"]["strict/cbc"]["wall"]["samples"] == pytest.approx([0.7, 1.2, 0.9])
    assert payload["ratios"]["strict/cbc"]["wall"]["verdict"] == "within noise"
    json.dumps(payload)  # JSON-ready


def test_compare_figure_draws_min_max_error_bars():
    """Time panel: one error bar per row from its min to its max build+solve; ratio panel: one
    error bar per row and kind from the paired ratios' min to max, hollow when within noise, and
    the line at 1.0."""
    from matplotlib.colors import to_rgba
    from matplotlib.container import ErrorbarContainer

    result = _synthetic_result()
    fig = compare_figure(result)
    ax_t, ax_r, _ = fig.axes
    (bars,) = [c for c in ax_t.containers if isinstance(c, ErrorbarContainer)]
    segments = bars.lines[2][0].get_segments()
    assert [(seg[0][1], seg[1][1]) for seg in segments] == [(r.wall.low, r.wall.high) for r in result.rows]
    ratio_bars = [c for c in ax_r.containers if isinstance(c, ErrorbarContainer)]
    assert len(ratio_bars) == 4  # (strict, lazy) x (wall, cpu)
    spans = sorted((round(seg[0][1], 6), round(seg[1][1], 6)) for c in ratio_bars for seg in c.lines[2][0].get_segments())
    assert (0.7, 1.2) in spans and (1.1, 1.3) in spans
    faces = {
        round(c.lines[2][0].get_segments()[0][0][1], 6): to_rgba(c.lines[0].get_markerfacecolor()) for c in ratio_bars
    }
    assert faces[0.7] == to_rgba("white") and faces[1.1] != to_rgba("white")
    assert any(line.get_ydata()[0] == 1.0 for line in ax_r.get_lines() if len(line.get_ydata()) == 2)
    import matplotlib.pyplot as plt

    plt.close(fig)


@pytest.mark.full
def test_compare_prints_one_table_and_writes_json_and_png(tmp_path, capsys):
    """seed (tiny), 2x4, none/lazy x cbc/highs, --repeat 2, on one build (--one-build; the demo's
    time section runs rows with a build each): four rows in one table with every column, the
    shared build in the heading, a progress line per run on stderr (warm-up runs tagged), equal
    objectives (the baseline plan is clean), JSON with two samples and one warm-up per row, the
    shared build and the paired ratios, and a PNG image."""
    out_json, out_png = tmp_path / "lab.json", tmp_path / "lab.png"
    code = main([
        "compare", "--model", "seed", "--size", "tiny", "--mesh", "2x4",
        "--formulations", "none,lazy", "--solvers", "cbc,highs", "--repeat", "2", "--one-build",
        "--json", str(out_json), "--png", str(out_png),
    ])
    assert code == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    header = next(line for line in lines if line.startswith("formulation"))
    for column in ("solver", "variables", "constraints", "build s", "solve s", "build+solve s [min-max]",
                   "cpu s [min-max]", "objective", "comm cost", "redistributes", "audit"):
        assert column in header, column
    rows = [line.split() for line in lines if line.split()[:1] and line.split()[0] in ("none", "lazy")
            and len(line.split()) > 5]
    assert [(r[0], r[1]) for r in rows] == [(f, s) for f in ("none", "lazy") for s in ("cbc", "highs")]
    assert all(r[-1] == "clean" for r in rows)
    assert "median [min-max] of 2 interleaved repeats per row after 1 warm-up round (discarded)" in captured.out
    assert re.search(r"one build shared by every row \([\d.]+ s wall, [\d.]+ s CPU\)", captured.out)
    ratio = next(line for line in lines if line.startswith("lazy/highs / none/cbc build+solve: wall "))
    assert re.search(r"\[[\d.]+–[\d.]+\] (within noise|faster|slower)", ratio) and "objective = none/cbc" in ratio
    progress = [line for line in captured.err.splitlines() if line.startswith("[")]
    assert progress[0] == "[1/12] seed none/cbc (warm-up) ..."
    assert "[5/12] seed lazy/highs ..." in progress  # the first measured round runs in reverse
    assert any(line.startswith("[12/12] seed lazy/highs:") for line in progress)

    payload = json.loads(out_json.read_text())
    assert payload["model"] == "seed" and payload["mesh"] == [2, 4] and payload["repeat"] == 2
    wall, cpu = payload["shared_build_s"]
    assert wall > 0 and cpu > 0
    assert all(s["build_s"] < wall for r in payload["rows"] for s in r["samples"])  # the plugin's part only
    assert [r["label"] for r in payload["rows"]] == ["none/cbc", "none/highs", "lazy/cbc", "lazy/highs"]
    for row in payload["rows"]:
        assert len(row["samples"]) == 2 and len(row["warmups"]) == 1
        assert row["build_solve_s"]["n"] == 2
    objectives = {round(s["objective"], 6) for r in payload["rows"] for s in r["samples"]}
    assert len(objectives) == 1
    assert payload["rows"][0]["samples"][0]["variables"] > 0
    assert payload["ratios"]["lazy/highs"]["wall"]["n"] == 2
    data = out_png.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": "gpt"}, "unknown model 'gpt'"),
        ({"formulations": ["none", "strictt"]}, "unknown formulation 'strictt'"),
        ({"solvers": ["gurobi"]}, "unknown solver 'gurobi'"),
        ({"repeat": 0}, "repeat must be >= 1"),
        ({"warmup": -1}, "warmup must be >= 0"),
    ],
)
def test_bad_lab_choices_fail_before_any_run(kwargs, match):
    """A wrong model, formulation, solver or repeat raises InvalidOptionError at once."""
    args = {"model": "seed", "formulations": ["none"], "solvers": ["cbc"], **kwargs}
    with pytest.raises(InvalidOptionError, match=match):
        compare(args.pop("model"), (2, 4), args.pop("formulations"), args.pop("solvers"), size="tiny",
                progress=None, **args)


@pytest.mark.parametrize("name", ["seed", "llama3", "falcon"])
@pytest.mark.parametrize("size", ["tiny", "full"])
def test_lab_models_build(name, size):
    """Each lab model builds on meta at both sizes, with inputs whose batch follows the mesh and the
    user constraints the lab applies (llama3: vocab-parallel output on a 2-D mesh)."""
    if name == "falcon":
        pytest.importorskip("transformers")
    mesh = (8, 8) if size == "full" else (2, 4)
    spec = lab_model(name, mesh, size=size)
    assert next(spec.model.parameters()).device.type == "meta"
    with torch.device("meta"):
        x = spec.input_fn()
    if name != "seed":
        assert x.shape[0] == 2 * mesh[0]
    assert len(spec.input_placements[0]) == 2
    if name == "llama3":
        assert spec.parameter_memory_constraint and spec.output_placements[0][1].dim == 2
        assert ("4096" in spec.description) == (size == "full") and "2 layers" in spec.description
