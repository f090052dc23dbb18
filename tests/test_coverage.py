"""Guards the table's coverage of real models and the cross-check against upstream strategies: every
op with two or more tensor inputs in the joint graphs of the seed block, autoparallel's llama3, our
Falcon-style LM and HF transformers' Falcon (built locally) has a row that binds every one of its
nodes; the index_put the project exists for is in the models the project owns on every
transformers version, and HF Falcon's op mix is what the installed transformers makes (see
``tests/_upstream.py``); the
``coverage`` and ``crosscheck`` commands run from the package CLI; an op without a row is listed
as uncovered; and the cross-check finds the upstream strategies that compute wrong results."""

from __future__ import annotations

import pytest
import torch
from _upstream import HF_FALCON_LIST_INDEX, TRANSFORMERS

import autoparallel_constraints as apc
from autoparallel_constraints.__main__ import main as cli_main
from autoparallel_constraints.lab import _coverage
from autoparallel_constraints.models import falcon_style, falcon_tiny, llama3_small

aten = torch.ops.aten


MODELS = ("seed", "llama3", "falcon_style", "falcon")


@pytest.fixture(scope="module")
def reports() -> dict[str, _coverage.CoverageReport]:
    """One trace per model on 2x2, shared by the tests below."""
    return {name: _coverage.coverage(name, (2, 2)) for name in MODELS}


def test_every_multi_input_op_of_the_four_models_is_covered(reports):
    """seed, llama3, falcon_style and HF falcon: no uncovered op with >=2 tensor inputs, every node bound."""
    for name, report in reports.items():
        assert report.ops, name
        assert report.ok, str(report)
        assert all(o.bound == o.nodes for o in report.ops), str(report)


def test_model_specific_ops_are_seen(reports):
    """The traces contain what the issue is about: index_put from the list-indexed head in the seed
    block and our Falcon-style LM (on any transformers), llama3's attention and embedding backward,
    Falcon's layer norm backward. HF Falcon has index_put only where its transformers version
    still takes k and v by list index (up to 5.24); from 5.25 it splits, and the trace shows that."""
    ops = {name: {o.op for o in report.ops} for name, report in reports.items()}
    assert "aten.index_put.default" in ops["seed"] and "aten.index_put.default" in ops["falcon_style"]
    assert "aten._scaled_dot_product_flash_attention_for_cpu_backward.default" in ops["llama3"]
    assert "aten.embedding_dense_backward.default" in ops["llama3"]
    for name in ("falcon", "falcon_style"):
        assert "aten.native_layer_norm_backward.default" in ops[name], name
    if HF_FALCON_LIST_INDEX:
        assert "aten.index_put.default" in ops["falcon"], f"transformers {TRANSFORMERS}"
    else:  # the split's backward concatenates the q, k, v gradients instead
        assert "aten.index_put.default" not in ops["falcon"], f"transformers {TRANSFORMERS}"
        assert "aten.cat.default" in ops["falcon"], f"transformers {TRANSFORMERS}"


def test_coverage_command_prints_rows_and_exits_zero(capsys):
    """``python -m autoparallel_constraints coverage seed`` lists each op and its row."""
    assert cli_main(["coverage", "seed"]) == 0
    out = capsys.readouterr().out
    assert "aten.index_put.default" in out and "index_put: aten.index_put.default" in out
    assert "0 uncovered" in out


def test_an_op_without_a_row_is_listed_as_uncovered():
    """With a table lacking add, the seed's adds are reported uncovered and the report fails."""
    table = apc.default_table().copy()
    table.unregister(aten.add.Tensor)
    report = _coverage.coverage("seed", (2, 2), table)
    assert not report.ok
    assert [o.op for o in report.uncovered] == ["aten.add.Tensor"]
    assert "UNCOVERED" in str(report)


def test_models_build_locally():
    """falcon_tiny, falcon_style and llama3_small build from code (no download) and give token inputs."""
    for builder in (falcon_tiny, falcon_style, llama3_small):
        model_fn, input_fn = builder()
        with torch.device("meta"):
            model = model_fn()
        assert sum(p.numel() for p in model.parameters()) > 0
        tokens = input_fn()
        assert tokens.dtype == torch.int64 and tokens.dim() == 2


def test_crosscheck_finds_upstream_strategies_that_compute_wrong_results():
    """DTensor offers position-sharded embedding_dense_backward with scale_grad_by_freq=True and a
    gather whose index is narrower than self on a sharded dim: both compute wrong results on the
    shards, and the table rejects them. index_put's upstream strategies all pass the table."""
    rows = apc.default_table().select(["embedding_dense_backward", "gather", "index_put"])
    report = _coverage.crosscheck((2, 2), rows)
    by_op = {o.op: o for o in report.ops}
    assert by_op["aten.embedding_dense_backward.default"].wrong > 0
    assert by_op["aten.gather.default"].wrong > 0
    assert by_op["aten.index_put.default"].strategies > 0 and by_op["aten.index_put.default"].rejected == 0
    assert all(o.right == 0 for o in report.ops)
    assert "wrong" in str(report)


def test_crosscheck_command_on_a_model(capsys):
    """``crosscheck --model seed`` takes the calls from the traced graph and lists rejections."""
    assert cli_main(["crosscheck", "--model", "seed", "--rows", "index_put,slice_scatter"]) == 0
    out = capsys.readouterr().out
    assert "aten.index_put.default" in out and "calls from seed" in out
