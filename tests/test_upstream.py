"""Guards how autoparallel's own failures reach the user (the seam's ``upstream_notes`` shim, ``seam/_notes.py``): the exception is
autoparallel's, unchanged, with one note from this package that says so, names the frame, and for
a known failure says what it is and the way around it; this package's own errors get no note.

Rests on autoparallel at the pin: its cost model asserts on a tensor keyword argument
(``cost_models/compute_estimation.py``, ``_shard_args_for_node``), which CPU sdpa's ``attn_mask``
is (the ``view_rule`` note, with this package's view skip off, is guarded in
tests/test_view_skip.py). When upstream fixes that, ``test_sdpa_mask_failure_is_said_to_be_autoparallels``
fails: then the entry of ``KNOWN`` and its limit in docs/limits.md go."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.seam._notes import KNOWN, around, known_failure, upstream_line
from autoparallel_constraints.lab._zoo import _outcome_of_failure
from autoparallel_constraints.testing import cpu_mesh

SITE = "/usr/lib/python3.11/site-packages"


def _tb(*frames: tuple[str, int, str], error: str = "AssertionError: boom") -> str:
    return "Traceback (most recent call last):\n" + "".join(
        f'  File "{path}", line {line}, in {fn}\n    code\n' for path, line, fn in frames) + error + "\n"


class MaskedAttention(nn.Module):
    """The smallest model that meets it: sdpa with a tensor mask (what transformers' 'sdpa'
    attention passes on CPU)."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, s, d)


def test_sdpa_mask_failure_is_said_to_be_autoparallels():
    """The HF Falcon (sdpa) failure, minimal: autoparallel's own AssertionError, unchanged, with
    exactly one note naming autoparallel's frame, the build stage and the eager fix."""
    from autoparallel.api import AutoParallel

    with torch.device("meta"):
        model = MaskedAttention()
    with pytest.raises(AssertionError, match="_scaled_dot_product_flash_attention_for_cpu") as info:
        with AutoParallel(model, lambda: torch.randn(4, 8, 16), cpu_mesh((2,)), dynamic=True) as autop:
            autop.add_input_constraints([(Shard(0),)])
            autop.add_op_constraints()
            autop.optimize_placement()
    notes = getattr(info.value, "__notes__", [])
    assert len(notes) == 1, notes
    note = notes[0]
    assert note.startswith("autoparallel_constraints: raised inside autoparallel (cost_models/compute_estimation.py:")
    assert "_shard_args_for_node" in note and "AutoParallel.__enter__" in note
    assert "not by autoparallel_constraints" in note and "attn_implementation='eager'" in note
    assert info.traceback[-1].path.name == "compute_estimation.py"  # the traceback is autoparallel's own


def test_the_same_model_with_the_eager_fix_runs():
    """The advice of the note works: the same attention without a tensor mask (is_causal) builds
    and solves through the default call."""
    from autoparallel.api import AutoParallel

    class Causal(MaskedAttention):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, d = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)

    with torch.device("meta"):
        model = Causal()
    with AutoParallel(model, lambda: torch.randn(4, 8, 16), cpu_mesh((2,)), dynamic=True) as autop:
        autop.add_input_constraints([(Shard(0),)])
        autop.add_op_constraints()
        assert autop.optimize_placement()


def test_errors_of_this_package_get_no_note():
    """A failure decided in this package's code (here an unknown op in the table) is ours: no note."""
    noted = around("optimize_placement")
    with pytest.raises(apc.UnknownOpError) as info:
        noted(apc.default_table().__getitem__, "aten.no_such_op.default")
    assert not getattr(info.value, "__notes__", [])


def test_the_line_names_the_deciding_frame_and_known_failures():
    """torch raising inside autoparallel is autoparallel's; inside this package's hook it is ours;
    a known failure adds what it is and the fix."""
    in_torch = _tb((f"{SITE}/autoparallel/api.py", 500, "optimize_placement"),
                   (f"{SITE}/torch/distributed/tensor/_ops/_view_ops.py", 640, "propagate_shape_and_sharding"))
    line = upstream_line(in_torch, "boom", stage="optimize_placement")
    assert line is not None and "inside autoparallel (api.py:500 optimize_placement) while it solved" in line
    assert "Known" not in line
    ours = _tb((f"{SITE}/autoparallel/api.py", 500, "optimize_placement"),
               ("/work/autoparallel_constraints/plan/_plugin.py", 42, "_solve"),
               (f"{SITE}/torch/_ops.py", 10, "__call__"))
    assert upstream_line(ours, "boom") is None
    sdpa = _tb((f"{SITE}/autoparallel/cost_models/compute_estimation.py", 345, "_shard_args_for_node"))
    message = "_scaled_dot_product_flash_attention_for_cpu FakeTensor(..., size=(4, 1, 16, 16))"
    assert known_failure(sdpa, message) is KNOWN[0]
    assert known_failure(sdpa, "some_other_op FakeTensor(...)") is KNOWN[1]
    view = _tb((f"{SITE}/autoparallel/shardings/propagation_rules.py", 253, "view_rule"),
               (f"{SITE}/torch/distributed/tensor/_ops/_view_ops.py", 1278, "_rewrite_plain_shard"))
    message = ("Cannot shard unevenly distributed tensor: dimension 2 (size 5) is not evenly divisible "
               "by mesh dimension 1 (size 2). Please redistribute the tensor before this operation.")
    assert known_failure(view, message).name == "view-nested-uneven"
    line = upstream_line(view, message, stage="__enter__")
    assert "inside autoparallel (shardings/propagation_rules.py:253 view_rule) while it traced" in line
    assert "RuntimeError" in line and "2-D mesh" in line


def test_a_zoo_row_says_a_known_upstream_failure_in_one_line():
    """The zoo's reason for an upstream row: the frame, and for a known failure what it is and the fix."""
    sdpa = _tb((f"{SITE}/autoparallel/cost_models/compute_estimation.py", 345, "_shard_args_for_node"))
    outcome, reason = _outcome_of_failure("build: AssertionError: _scaled_dot_product_flash_attention_for_cpu x", sdpa)
    assert outcome == "upstream"
    assert "[raised in autoparallel (cost_models/compute_estimation.py:345 _shard_args_for_node); known:" in reason
    assert "attn_implementation='eager'" in reason and "\n" not in reason


@pytest.mark.parametrize("placements", [[(Shard(0),)], [(Replicate(),)]])
def test_a_successful_build_is_untouched(placements):
    """The wrapped entry points return what autoparallel returns (a solved plan) and raise nothing."""
    from autoparallel.api import AutoParallel

    with torch.device("meta"):
        model = nn.Linear(16, 16)
    with AutoParallel(model, lambda: torch.randn(4, 16), cpu_mesh((2,)), dynamic=True) as autop:
        autop.add_input_constraints(placements)
        assert autop.optimize_placement()
