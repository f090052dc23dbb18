"""Guards the verifier on real models' graphs with symbolic coordinates (as the numerics harness
builds them): the default call's parallel graph comes out clean, every node proven, and exact
against one device.

The full tier runs the Falcon-style LM this package owns (index_put in its backward on every
transformers version). The other models are on demand: each is a variant of a case the full tier
already proves through ``apc.audit``, whose ``ok`` needs the verifier clean with no unknown node
(tests/test_real_models.py: llama3 and HF Falcon with the default call on 2x2), or of a unit test
(the batch of one per rank on 4x2: tests/test_verify.py::test_a_batch_of_one_per_rank_moves_into_the_rows).
"""

from __future__ import annotations

from typing import Any

import pytest
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.models import falcon_style, falcon_tiny, llama3_small
from autoparallel_constraints.testing import explain, run_numerics

BUILDERS = {"llama3_small": llama3_small, "falcon_style": falcon_style, "falcon_tiny": falcon_tiny}
ONDEMAND = pytest.mark.ondemand


@pytest.mark.full
@pytest.mark.parametrize(
    ("name", "mesh", "batch"),
    [
        pytest.param("falcon_style", (2, 2), 4, id="falcon_style-2x2"),
        pytest.param("llama3_small", (2, 2), 4, id="llama3-2x2", marks=ONDEMAND),
        pytest.param("falcon_tiny", (2, 2), 4, id="hf_falcon-2x2", marks=ONDEMAND),
        pytest.param("llama3_small", (4, 2), 4, id="llama3-4x2", marks=ONDEMAND),
    ],
)
def test_real_model_graphs_have_no_unknowns(name, mesh, batch):
    """Graphs with symbolic coordinates (the numerics harness's): clean, every node proven, exact.
    On 4x2 batch 4 is one sample per rank, which the retrace drops into a bmm's rows (see
    test_a_batch_of_one_per_rank_moves_into_the_rows)."""
    model_fn, input_fn = BUILDERS[name](batch=batch)
    seen: list[Any] = []
    pins = [(Shard(0), Replicate())] if mesh == (4, 2) else None  # batch on the 4-way dim only, as `mutate` pins it
    report = run_numerics(
        model_fn, input_fn, mesh, atol=1e-4, rtol=1e-4, input_placements=pins, output_placements=pins,
        configure=lambda autop: autop.add_op_constraints(),
        after_apply=lambda autop: seen.append(apc.verify(autop)),
    )
    assert report.ok, explain(report)
    (verification,) = seen
    assert verification.ok and verification.n_unknown == 0, explain(verification)
