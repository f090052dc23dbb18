"""Guards the numerics runner's default tolerances (``harness._numerics.tolerances``/``compare``):
fp32 reordering noise — the same sums in another order, as a Partial reduction or a sharded
contraction computes them — passes at magnitudes like a real model's gradients (values up to ~80),
where a fixed 1e-5 fails; a 2x gradient, a swapped shard, an unreduced or twice-reduced Partial and
one wrong element fail. The float64 yardstick (``harness._yardstick``) passes a cancelling sum's
float32 rounding past those tolerances and still fails a wrong gradient. No AutoParallel here:
``compare`` on hand-made runs, a few milliseconds."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from autoparallel_constraints.harness._numerics import (
    NOISE_ULPS,
    Reference,
    TensorCheck,
    build_reference,
    compare,
    tolerances,
)
from autoparallel_constraints.harness._parallel import ParallelRun
from autoparallel_constraints.harness._yardstick import YARDSTICK_FACTOR, against_float64

RANKS = (0, 1, 2, 3)


def _grad_pair() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A weight gradient ``x.T @ g`` summed over 256 tokens: the one-device value, what a plan
    sharding the tokens 4 ways computes (4 Partial sums, reduced), and rank 0's Partial alone."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 64, generator=gen) * 3
    g = torch.randn(256, 32, generator=gen)
    full = x.T @ g
    parts = [x[i : i + 64].T @ g[i : i + 64] for i in range(0, 256, 64)]
    return full, (parts[0] + parts[1]) + (parts[2] + parts[3]), parts[0]


def _compare(ref: torch.Tensor, actual: torch.Tensor, **tol: float) -> bool:
    reference = Reference(model=nn.Identity(), inputs=(), outputs=(), grad_outputs=(),
                          param_grads={"w": ref}, input_grads={})
    run = ParallelRun(gathered={"grad:w": {r: actual for r in RANKS}}, physical={})
    (check,) = compare(reference, run, **tol)
    return check.ok


def test_reordering_noise_passes_where_a_fixed_tolerance_fails() -> None:
    """The Partial's sum in another order differs from one device by rounding only (values ~170,
    error 8e-5 to 1.1e-4 — about 4 to 5.2 eps of the largest value, as the CPU's BLAS orders the sums):
    the defaults pass it; the old fixed ``atol = rtol = 1e-5`` did not."""
    full, reduced, _ = _grad_pair()
    assert float(full.abs().max()) > 50
    err = float((reduced - full).abs().max())
    assert 0 < err < 16 * torch.finfo(torch.float32).eps * float(full.abs().max())
    assert _compare(full, reduced)
    assert not _compare(full, reduced, atol=1e-5, rtol=1e-5)


def test_tolerances_scale_with_magnitude_and_dtype() -> None:
    """atol = NOISE_ULPS·eps·max|ref| and rtol = NOISE_ULPS·eps; bf16 gets its own eps; given
    values are kept."""
    ref = torch.tensor([-80.0, 1.0])
    eps = torch.finfo(torch.float32).eps
    assert tolerances(ref) == (NOISE_ULPS * eps * 80.0, NOISE_ULPS * eps)
    assert tolerances(ref.bfloat16())[1] == NOISE_ULPS * torch.finfo(torch.bfloat16).eps
    assert tolerances(ref, atol=1e-3) == (1e-3, NOISE_ULPS * eps)


def test_twice_reduced_partial_fails() -> None:
    """PR #517's class: a Partial reduced again downstream, the gradient 2x."""
    full, reduced, _ = _grad_pair()
    assert not _compare(full, 2 * reduced)


def test_unreduced_partial_fails() -> None:
    """A Partial treated as Replicate and never reduced: one rank's half of the sum."""
    full, _, rank0 = _grad_pair()
    assert not _compare(full, rank0)


def test_swapped_shards_fail() -> None:
    """The two row shards gathered in the wrong order (same norm, same shape)."""
    full, reduced, _ = _grad_pair()
    swapped = torch.cat([reduced[32:], reduced[:32]])
    assert not _compare(full, swapped)


def test_one_wrong_element_fails() -> None:
    """A single element off by 0.1 % of the tensor's largest value is far above noise."""
    full, reduced, _ = _grad_pair()
    wrong = reduced.clone()
    wrong[3, 5] += 1e-3 * float(full.abs().max())
    assert not _compare(full, wrong)


def test_small_errors_spread_over_the_tensor_fail_on_the_norm() -> None:
    """Every element off by 40 eps of max|ref| passes element-wise (below 64) but not as a whole:
    the error's norm is far above what reordering gives."""
    full, _, _ = _grad_pair()
    eps = torch.finfo(torch.float32).eps
    biased = full + 40 * eps * float(full.abs().max()) * torch.sign(full)
    assert not _compare(full, biased)


def test_integer_outputs_must_be_equal() -> None:
    """Integer tensors get zero tolerance."""
    ref = torch.arange(6)
    assert _compare(ref, ref.clone())
    assert not _compare(ref, ref + torch.tensor([0, 0, 0, 0, 0, 1]))


def _compare_two(sibling: torch.Tensor, sibling_actual: torch.Tensor, ref: torch.Tensor, actual: torch.Tensor):
    reference = Reference(model=nn.Identity(), inputs=(), outputs=(), grad_outputs=(),
                          param_grads={"w": sibling, "b": ref}, input_grads={})
    run = ParallelRun(gathered={"grad:w": dict.fromkeys(RANKS, sibling_actual),
                                "grad:b": dict.fromkeys(RANKS, actual)}, physical={})
    return {c.name: c for c in compare(reference, run)}


def test_a_gradient_at_the_noise_floor_is_checked_against_the_floor() -> None:
    """A key bias's gradient is 0 in exact arithmetic (softmax ignores a constant added to a row
    of scores), so one device and the plan each return rounding noise (OPT in the zoo: max error
    6.6e-8, norm ratio 1.03). Below the comparison's floor (64 eps of the largest value compared,
    here a gradient up to ~170) it is checked against that floor: independent noise passes, a value
    above the floor fails, and the large gradient's own check is unchanged (2x fails)."""
    full, reduced, _ = _grad_pair()
    gen = torch.Generator().manual_seed(1)
    noise, other_noise = (torch.randn(32, generator=gen) * 1e-6 for _ in range(2))
    checks = _compare_two(full, reduced, noise, other_noise)
    assert checks["grad:b"].ok and "noise floor" in checks["grad:b"].note
    assert checks["grad:w"].ok
    assert not _compare_two(full, reduced, noise, noise + 1e-2)["grad:b"].ok
    assert not _compare_two(full, 2 * reduced, noise, other_noise)["grad:w"].ok


class _Decay(nn.Module):
    """A per-head decay added to attention scores, as Doge's ``A``: its gradient is a sum over every
    key of the softmax's gradient (which sums to 0 per row) times scores near 10, so it cancels
    and float32 keeps only ~1e-3 of its digits. ``reverse``: the same function, keys in the other
    order, i.e. the same sums rounded another way (what a plan does)."""

    def __init__(self, reverse: bool = False) -> None:
        super().__init__()
        self.A = nn.Parameter(torch.full((4,), 0.5))
        self.reverse = reverse

    def forward(self, q, k, v, s):
        if self.reverse:
            k, v, s = k.flip(-2), v.flip(-2), s.flip(-1)
        scores = q @ k.transpose(-1, -2) + self.A[:, None, None] * s[:, :, None, :]
        return torch.softmax(scores, -1) @ v


def _decay_inputs() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(3)
    b, h, t, d = 4, 4, 64, 8
    qkv = [torch.randn(b, h, t, d, generator=gen) for _ in range(3)]
    return (*qkv, 10 + 1e-3 * torch.randn(b, h, t, generator=gen))


def _yardstick_checks(grad_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> dict[str, TensorCheck]:
    reference = build_reference(_Decay, _decay_inputs)
    reordered = build_reference(lambda: _Decay(reverse=True), _decay_inputs)
    grad = grad_of(reference.param_grads["A"], reordered.param_grads["A"])
    run = ParallelRun(gathered={"output[0]": {r: reordered.outputs[0] for r in RANKS},
                                "grad:A": {r: grad for r in RANKS}}, physical={})
    before = {c.name: c for c in compare(reference, run)}
    after = {c.name: c for c in against_float64(list(before.values()), reference, run)}
    return {"before": before["grad:A"], "after": after["grad:A"], "output": after["output[0]"]}


def test_a_cancelling_sums_rounding_passes_by_the_float64_yardstick() -> None:
    """The decay's gradient rounded another way is ~7e-4 of its norm off, far past 64 eps: the
    default check fails it; against the same model in float64 on one device the reordered float32
    result is about as far as one device's (ratio ~1.2, bound 4), so it is rounding. The passing
    output is left alone (not re-judged)."""
    got = _yardstick_checks(lambda ref, reordered: reordered)
    assert not got["before"].ok and got["before"].rel_err > 50 * NOISE_ULPS * torch.finfo(torch.float32).eps
    assert got["after"].ok and got["after"].yardstick is not None and got["after"].yardstick < 2
    assert "rounding" in got["after"].note and got["output"].yardstick is None


def test_a_wrong_gradient_fails_the_float64_yardstick() -> None:
    """A doubled gradient is hundreds of times one device's float32 error against float64; one
    element 5% of the largest off is past the bound too. Both stay failed and say "not rounding"."""
    doubled = _yardstick_checks(lambda ref, reordered: 2 * reordered)["after"]
    assert not doubled.ok and doubled.yardstick > 100 * YARDSTICK_FACTOR and "not rounding" in doubled.note

    def one_off(ref: torch.Tensor, reordered: torch.Tensor) -> torch.Tensor:
        bumped = reordered.clone()
        bumped[0] += 0.05 * ref.abs().max()
        return bumped

    off = _yardstick_checks(one_off)["after"]
    assert not off.ok and off.yardstick > YARDSTICK_FACTOR
