"""Guards the formulation lab: ``python -m autoparallel_constraints compare`` runs every
formulation × solver on one model in one process and prints one table (size, build and solve
seconds, objective, comm cost, redistributes, audit), a progress line per run, ratios against
autoparallel alone with CBC, writes the rows as JSON and draws a PNG; bad choices fail before any
run; the lab's models (seed, llama3, falcon) build at both sizes."""

from __future__ import annotations

import json

import pytest
import torch

from autoparallel_constraints import InvalidOptionError
from autoparallel_constraints.__main__ import main
from autoparallel_constraints._lab import compare, lab_model

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_compare_prints_one_table_and_writes_json_and_png(tmp_path, capsys):
    """seed (tiny), 2x4, none/lazy/soft x cbc/highs: six rows in one table with every column,
    a progress line per run on stderr, equal objectives (the baseline plan is clean), JSON rows and
    ratios, and a PNG image."""
    out_json, out_png = tmp_path / "lab.json", tmp_path / "lab.png"
    code = main([
        "compare", "--model", "seed", "--size", "tiny", "--mesh", "2x4",
        "--formulations", "none,lazy,soft", "--solvers", "cbc,highs",
        "--json", str(out_json), "--png", str(out_png),
    ])
    assert code == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    header = next(line for line in lines if line.startswith("formulation"))
    for column in ("solver", "variables", "constraints", "build s", "solve s", "objective", "comm cost",
                   "redistributes", "audit"):
        assert column in header, column
    rows = [line.split() for line in lines if line.split()[:1] and line.split()[0] in ("none", "lazy", "soft")
            and len(line.split()) > 5]
    assert [(r[0], r[1]) for r in rows] == [(f, s) for f in ("none", "lazy", "soft") for s in ("cbc", "highs")]
    assert all(r[-1] == "clean" for r in rows)
    assert "lazy/highs: build+solve" in captured.out and "objective = none/cbc" in captured.out
    progress = [line for line in captured.err.splitlines() if line.startswith("[")]
    assert progress[0] == "[1/6] seed none/cbc ..." and any(line.startswith("[6/6] seed soft/highs:") for line in progress)

    payload = json.loads(out_json.read_text())
    assert payload["model"] == "seed" and payload["mesh"] == [2, 4]
    assert [r["label"] for r in payload["rows"]] == ["none/cbc", "none/highs", "lazy/cbc", "lazy/highs", "soft/cbc", "soft/highs"]
    objectives = {round(r["objective"], 6) for r in payload["rows"]}
    assert len(objectives) == 1
    assert payload["rows"][0]["variables"] > 0 and payload["rows"][0]["comm_cost"] >= 0
    assert "lazy/highs / none/cbc build+solve" in payload["ratios"]
    data = out_png.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": "gpt"}, "unknown model 'gpt'"),
        ({"formulations": ["none", "strictt"]}, "unknown formulation 'strictt'"),
        ({"solvers": ["gurobi"]}, "unknown solver 'gurobi'"),
        ({"repeat": 0}, "repeat must be >= 1"),
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
