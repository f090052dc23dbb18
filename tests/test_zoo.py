"""Guards the transformers zoo (``_zoo``, ``models.ZOO``): every family's tiny config builds
without downloads, the table renders every kind of row, GPT-2 with ``dynamic=True`` on 2x2 — the
zoo's first failure, transformers' batch ``arange`` in ``sdpa_mask`` — is clean and exact through
the default call (full tier), and the whole zoo (10 families x 2x2, 2x4 x dynamic on/off) runs
on demand: every row clean and exact (static rows: clean and lowered by Inductor)."""

from __future__ import annotations

import pytest
import torch

from autoparallel_constraints.lab._zoo import MESHES, ZooRow, format_table, zoo_row
from autoparallel_constraints.models import ZOO, zoo_model

FAMILIES = {"llama", "mistral", "qwen2", "gpt2", "gpt_neox", "phi", "gemma", "opt", "bloom", "mixtral"}


def test_zoo_has_the_families_and_builds_them_on_meta():
    """The ten families of issue 15, built on the meta device from local configs; unknown names
    list the zoo."""
    assert set(ZOO) == FAMILIES
    for family in sorted(ZOO):
        model_fn, input_fn = zoo_model(family)
        with torch.device("meta"):
            model = model_fn()
        assert all(p.is_meta for p in model.parameters()), family
        assert tuple(input_fn().shape) == (4, 16)
    with pytest.raises(KeyError, match="llama"):
        zoo_model("lama")


def test_table_renders_rows_failures_and_uncovered_ops():
    rows = [
        ZooRow(family="llama", mesh=(2, 2), dynamic=True, table_ops=209, redistributes=0, audit="clean",
               numerics="exact", worst="grad:w", error=6.2e-7, ratio=1.0, seconds=90),
        ZooRow(family="gpt2", mesh=(2, 4), dynamic=False, uncovered=("aten.foo.default",), seconds=30,
               failure="apply: RuntimeError: boom"),
    ]
    text = format_table(rows)
    assert "llama   2x2   yes" in text and "exact" in text and "6.20e-07" in text
    assert "gpt2 2x4 dynamic=False: apply: RuntimeError: boom" in text
    assert "uncovered ops (>=2 tensor inputs, no table row): aten.foo.default" in text
    assert "1 of 2 runs clean and exact" in text


@pytest.mark.full
def test_gpt2_dynamic_exact_with_the_plugin():
    """GPT-2, eager attention, input [4, 16] on 2x2 with dynamic=True: autoparallel alone fails at
    apply ("expand: attempting to expand a dimension of length 2 -> 4!"); the default call's size
    coupling keeps sdpa_mask's batch arange global: audit clean and exact."""
    row = zoo_row("gpt2", (2, 2), dynamic=True)
    assert row.ok, f"{row.failure}\n{row.details}"
    assert row.uncovered == ()


@pytest.mark.ondemand
@pytest.mark.parametrize("dynamic", [True, False], ids=["dynamic", "static"])
@pytest.mark.parametrize("mesh", MESHES, ids=["x".join(map(str, m)) for m in MESHES])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_zoo_family(family, mesh, dynamic):
    row = zoo_row(family, mesh, dynamic=dynamic)
    assert row.ok, f"{format_table([row])}\n{row.details}"
