"""Rounding or the plan? A float64 yardstick for a float32 comparison that fails by a little.

A parallel plan sums the same terms in another order, so its float32 result differs from one
device's by rounding. :func:`~._numerics.tolerances` allows ``NOISE_ULPS`` epsilons for that, which
is too little for a tensor that is a sum of many terms that cancel: the gradient of a per-head
decay (Doge's ``self_attn.A``, Qwen3.5's ``linear_attn.A_log``) is such a sum over every batch
row, position and key, and its float32 error is 1e-5 of its norm on one device already.

Re-running the plan in float64 does not settle it either: models cast to float32 on purpose
(RMSNorm, rotary tables, softmax), so a float64 model keeps float32 islands, and a float64
difference of one ulp flips a float32 rounding there. Measured on Doge 2x2: in float64 the plan's
``A`` gradient was still 2.6e-5 off.

The yardstick asks the question directly. The same weights, inputs and output gradients are run
once more on one device with the model in float64 (its float32 islands included). That run is the
reference both float32 results are measured against::

    device = norm(one device, float32  -  one device, float64)    the rounding of float32 itself
    plan   = norm(parallel,   float32  -  one device, float64)    per rank, the worst

and a tensor is rounding when ``plan <= YARDSTICK_FACTOR * device``: the plan is about as accurate
as one device. A plan error is as large in float64 as in float32 and dwarfs ``device`` (a 2x
gradient: a ratio in the hundreds). This is the usual test for a fused kernel (its error against a
float64 reference within a small factor of the eager float32 error).

Some models refuse float64: gpt-oss's experts cast to bfloat16 by hand and run ``_grouped_mm``,
which has no float64 kernel, then scatter into a tensor of the activations' dtype. For those the
float64 run is redone under :class:`_RoundedFloat64`: every tensor stays float64, a cast to a
narrower float rounds the values in place (the model's own rounding, as its float32 islands keep
theirs), and ``_grouped_mm`` runs as one float64 matmul per group.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..seam.tracing import TorchDispatchMode, pytree
from ._records import Reference, TensorCheck

if TYPE_CHECKING:
    from ._parallel import ParallelRun

logger = logging.getLogger(__name__)

__all__ = ["YARDSTICK_FACTOR", "against_float64", "float64_results", "yardstick_summary"]

#: A plan whose float32 error against float64 is within this factor of one device's is rounding.
#: Measured on the transformers zoo, 2x2: over every tensor of Doge's plan the median ratio is 1.01
#: and the largest 1.43 (``layers.0.self_attn.A``); the failed float32 tensors of Qwen3.5 and
#: CPM-Ant are at most 1.15 and 1.02. A doubled gradient is some 590, one element 5% of the
#: largest off some 23 (``tests/test_numerics_tolerance.py``).
YARDSTICK_FACTOR = 4.0


_NARROW = (torch.float32, torch.bfloat16, torch.float16)


class _RoundedFloat64(TorchDispatchMode):
    """Keeps a float64 run in float64 where the model casts down or calls a kernel without float64.

    A floating result narrower than float64 (a cast, a factory with an explicit dtype) is computed
    as the model asks, so its values carry that dtype's rounding, and handed on as float64: the
    next op sees float64 inputs only. ``aten._grouped_mm`` with float64 inputs runs as a float64
    matmul per group (its CPU kernel takes float32 and narrower only).
    """

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 - torch's protocol
        kwargs = kwargs or {}
        if func is torch.ops.aten._grouped_mm.default:
            out = _grouped_mm_float64(*args, **kwargs)
            if out is not None:
                return out
        out = func(*args, **kwargs)
        return pytree.tree_map_only(
            Tensor, lambda t: t.to(torch.float64) if t.dtype in _NARROW else t, out
        )


def _grouped_mm_float64(a: Tensor, b: Tensor, offs: Tensor | None = None, bias: Tensor | None = None,
                        out_dtype: torch.dtype | None = None) -> Tensor | None:
    """``_grouped_mm`` in float64 for the two layouts an MoE's forward and backward use: a 2-D
    ``a`` whose rows are grouped by ``offs`` against a 3-D ``b`` (one matrix per group), and two
    2-D operands grouped along the shared dim (a weight's gradient, one matrix per group out).
    None for any other call (the op then runs as the model made it)."""
    if a.dtype != torch.float64 or offs is None or bias is not None or a.dim() != 2:
        return None
    ends = offs.tolist()
    starts = [0, *ends[:-1]]
    if b.dim() == 3:
        out = a.new_zeros(a.shape[0], b.shape[-1])
        for group, (start, end) in enumerate(zip(starts, ends)):
            out[start:end] = a[start:end] @ b[group]
        return out
    if b.dim() == 2:
        return torch.stack([a[:, start:end] @ b[start:end] for start, end in zip(starts, ends)])
    return None


def float64_results(reference: Reference) -> dict[str, Tensor]:
    """The outputs, gradients and updated buffers of ``reference``'s run again on one device, the
    model in float64; redone under :class:`_RoundedFloat64` when the model refuses float64.

    Same weights (a copy of ``reference.model``), same inputs and output gradients (floating ones
    cast to float64); named as :func:`~._numerics.compare` names its checks.
    """
    try:
        return _float64_run(reference, contextlib.nullcontext())
    except (RuntimeError, TypeError) as exc:
        logger.info("the float64 run failed (%s); again with narrow casts rounded in float64", exc)
        return _float64_run(reference, _RoundedFloat64())


def _float64_run(reference: Reference, mode: contextlib.AbstractContextManager[Any]) -> dict[str, Tensor]:
    model = copy.deepcopy(reference.model).double()  # buffers as forward started (the reference restored them)
    model.zero_grad(set_to_none=True)
    inputs = tuple(
        t.double().requires_grad_(i in reference.input_grads) if t.is_floating_point() else t
        for i, t in enumerate(reference.inputs)
    )
    with mode:  # forward and backward only: copying a model under the mode would retype its storages
        out = model(*inputs)
        leaves = [t for t in pytree.tree_leaves(out) if isinstance(t, Tensor)]
        pairs = [(t, g.double()) for t, g in zip(leaves, reference.grad_outputs) if t.requires_grad]
        if pairs:
            torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
    results = {f"output[{i}]": t.detach() for i, t in enumerate(leaves)}
    results.update({f"grad:{n}": p.grad for n, p in model.named_parameters() if p.grad is not None})
    results.update({f"grad:input[{i}]": t.grad for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.grad is not None})
    # what forward left in a buffer it updates (an MoE's token counts): the float64 run's routing
    results.update({f"mutated:buffer:{n}": b.detach() for n, b in model.named_buffers() if n in reference.buffers_after})
    return results


def _reference_tensors(reference: Reference) -> dict[str, Tensor]:
    tensors = {f"output[{i}]": t for i, t in enumerate(reference.outputs)}
    tensors.update({f"grad:{n}": g for n, g in reference.param_grads.items()})
    tensors.update({f"grad:input[{i}]": g for i, g in reference.input_grads.items()})
    tensors.update({f"mutated:buffer:{n}": b for n, b in reference.buffers_after.items()})
    return tensors


def _ratio(plan: float, device: float) -> float:
    if device > 0:
        return plan / device
    return 0.0 if plan == 0 else math.inf


def against_float64(
    checks: Sequence[TensorCheck], reference: Reference, run: ParallelRun, *, every: bool = False
) -> tuple[TensorCheck, ...]:
    """``checks`` with every failed float32 check judged again by the float64 yardstick.

    A failed check of a float32 tensor the reference and every rank have gets ``yardstick`` (the
    plan's error over one device's, both against float64) and passes when it is within
    :data:`YARDSTICK_FACTOR`; its note says which. Other checks are returned unchanged, and nothing
    is run when no float32 check failed.

    ``every=True`` judges every floating check this way, passed or failed, whatever its dtype: the
    verdict for a mixed-precision run (:func:`~._numerics.run_numerics` with ``mp_policy``), whose
    float32 gradients carry bfloat16 rounding that no float32 tolerance describes, while a bfloat16
    tolerance (64 epsilons: half the value) would let a 1.5x gradient through. One device runs the
    same precision, so the rounding both share (the cast parameters) cancels out of the ratio.
    """
    expected = _reference_tensors(reference)
    judged = [
        c for c in checks
        if (every or not c.ok) and c.name in expected and c.name in run.gathered
        and (expected[c.name].is_floating_point() if every else expected[c.name].dtype == torch.float32)
        and c.max_abs_err != math.inf and not math.isnan(c.max_abs_err)
    ]
    if not judged:
        return tuple(checks)
    exact = float64_results(reference)
    redone: dict[str, TensorCheck] = {}
    for c in judged:
        if c.name not in exact:
            continue
        truth = exact[c.name]
        device = float((expected[c.name].double() - truth).norm())
        plan = max(float((t.double() - truth).norm()) for t in run.gathered[c.name].values())
        ratio = _ratio(plan, device)
        ok = ratio <= YARDSTICK_FACTOR
        verdict = "rounding" if ok else "not rounding"
        precision = "same-precision" if every else "float32"
        note = (f"against float64 on one device its error is {ratio:.2f}x one device's {precision} error "
                f"({plan:.2e} vs {device:.2e}; {verdict}, the bound is {YARDSTICK_FACTOR:g}x)")
        logger.info("%s: %s", c.name, note)
        redone[c.name] = replace(c, ok=ok, yardstick=ratio, note="; ".join(filter(None, [c.note, note])))
    return tuple(redone.get(c.name, c) for c in checks)


def yardstick_summary(checks: Mapping[str, TensorCheck] | Sequence[TensorCheck]) -> str:
    """One line naming the checks that passed only by the yardstick, worst first ("" if none)."""
    items = checks.values() if isinstance(checks, Mapping) else checks
    by = sorted((c for c in items if c.yardstick is not None and c.ok), key=lambda c: -(c.yardstick or 0.0))
    if not by:
        return ""
    worst = by[0]
    return (f"{len(by)} tensor(s) past the float32 noise tolerance are rounding by the float64 yardstick "
            f"(worst {worst.name}: {worst.yardstick:.2f}x one device's error, bound {YARDSTICK_FACTOR:g}x)")
