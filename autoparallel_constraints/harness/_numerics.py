"""Numerics on CPU: run an autoparallel plan on every simulated rank and compare with one device.

:func:`run_numerics` is the one-call entry point::

    report = run_numerics(lambda: nn.Linear(16, 16), lambda: torch.randn(8, 16), (2, 2))
    assert report.ok, explain(report)  # the run's own error and traceback when it raised

It runs four steps, each usable on its own:

1. :func:`build_reference` builds the model and inputs from ``seed``, runs forward once on one
   device, draws a seeded random gradient for every output and back-propagates it.
2. An ``AutoParallel`` is built on a meta copy of the model with ``dynamic=True`` on a ``"cpu"``
   mesh (inside :func:`~._cpu.device_name`; the plugin's cache guard clears autoparallel's
   mesh-blind strategy cache when the mesh changes); the
   input, output and parameter-memory constraints and the caller's ``configure`` hook are applied,
   the ILP is solved, and :func:`apply_on_one_rank` builds the parallel joint graph.
3. :func:`run_parallel_graph` shards every primal and tangent by the placement the plan gives it,
   runs the joint graph under ``LocalTensorMode`` with every rank simulated and gathers the
   forward outputs and all gradients back to full tensors.
4. :func:`compare` checks each gathered tensor, on every rank, against the reference: a replicated
   value that differs between ranks fails too. Tolerances default to each tensor's magnitude and
   dtype (:func:`tolerances`: ``NOISE_ULPS · eps · max|ref|`` absolute, ``NOISE_ULPS · eps``
   relative, and the error's norm within ``NOISE_ULPS · eps`` of the reference's), so fp32
   reordering noise passes and a 2x gradient, a swapped shard or a wrong Partial fails.

The rank-simulating half and what it works around in torch and autoparallel live in ``_parallel``.
"""

from __future__ import annotations

import logging
import math
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn
from torch.distributed.tensor.placement_types import Replicate, Shard

from ..core._placements import fmt_placements
from ..errors import ConstraintsError, InvalidOptionError, VerificationError
from ..seam.tracing import pytree
from ._cpu import cpu_mesh, device_name
from ._parallel import (
    ParallelRun,
    PlacementMap,
    Placements,
    ShardPerturbation,
    _joint_layout,
    apply_on_one_rank,
    collective_counts,
    run_parallel_graph,
)
from ._records import Reference, TensorCheck
from ._yardstick import against_float64

if TYPE_CHECKING:
    from autoparallel.api import AutoParallel
    from torch.distributed.fsdp import MixedPrecisionPolicy


logger = logging.getLogger(__name__)

__all__ = ["NOISE_ULPS", "NumericsReport", "Reference", "TensorCheck", "build_reference", "compare", "run_numerics", "tolerances"]

# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class NumericsReport:
    """The outcome of :func:`run_numerics`.

    A run that raised (constraints, solver, apply, a shape mismatch while running the graph) is
    reported, not re-raised: ``error`` is ``"<stage>: <exception type>: <first line>"`` and
    ``details`` the traceback. ``physical`` maps every primal, output and gradient name to the
    placements it was sharded or gathered by (``StridedShard`` where autoparallel reverses the
    shard order); ``collectives`` counts the collective ops of the parallel graph.
    """

    checks: tuple[TensorCheck, ...]
    error: str | None = None
    details: str = ""
    mesh_shape: tuple[int, ...] = ()
    physical: Mapping[str, Placements] = field(default_factory=dict)
    collectives: Mapping[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when nothing raised, something was checked and every check passed."""
        return self.error is None and bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def failures(self) -> tuple[TensorCheck, ...]:
        return tuple(c for c in self.checks if not c.ok)

    def check(self, name: str) -> TensorCheck:
        """The check called ``name``; the KeyError lists the names there are, and the run's error
        when it stopped before comparing."""
        for c in self.checks:
            if c.name == name:
                return c
        stopped = f" (the run stopped: {self.error})" if self.error is not None else ""
        raise KeyError(f"no check named {name!r}; checks are: {', '.join(c.name for c in self.checks)}{stopped}")

    @property
    def placements(self) -> dict[str, str]:
        """``physical`` in the package's compact placement text, e.g. ``(S(0), R)``."""
        return {name: fmt_placements(p) for name, p in self.physical.items()}

    @property
    def placement_summary(self) -> str:
        """One line per tensor with its physical placements, then the collectives."""
        texts = self.placements
        width = max((len(n) for n in texts), default=0)
        lines = [f"{name:<{width}}  {text}" for name, text in texts.items()]
        if self.collectives:
            lines.append("collectives: " + ", ".join(f"{k} x{v}" for k, v in self.collectives.items()))
        return "\n".join(lines)

    def __str__(self) -> str:
        head = f"numerics on mesh {self.mesh_shape}: {'OK' if self.ok else 'FAIL'}"
        if self.checks:
            head += f" ({len(self.failures)} of {len(self.checks)} checks failed)"
        lines = [head]
        if self.checks:
            width = max(len("tensor"), *(len(c.name) for c in self.checks))
            lines.append(f"  {'tensor':<{width}}  {'max_abs_err':>11}  {'max_ref':>11}  {'atol':>9}  {'ratio':>8}  ok")
            for c in self.checks:
                ratio = "-" if c.ratio is None else f"{c.ratio:8.4f}"
                row = (
                    f"  {c.name:<{width}}  {c.max_abs_err:11.4e}  {c.max_ref:11.4e}  {c.atol:9.2e}  {ratio:>8}  "
                    f"{'yes' if c.ok else 'NO'}"
                )
                lines.append(row + (f"  ({c.note})" if c.note else ""))
        if self.error is not None:
            lines.append(f"  error: {self.error}")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Reference
# --------------------------------------------------------------------------------------------


def _as_tuple(inputs: object) -> tuple[Tensor, ...]:
    if isinstance(inputs, Tensor):
        return (inputs,)
    if isinstance(inputs, (tuple, list)) and all(isinstance(t, Tensor) for t in inputs):
        return tuple(inputs)
    raise InvalidOptionError(
        f"input_fn must return a Tensor or a tuple of Tensors, got {type(inputs).__name__}; "
        "wrap other structures in a model whose forward takes positional tensors."
    )


def build_reference(
    model_fn: Callable[[], nn.Module],
    input_fn: Callable[[], Tensor | tuple[Tensor, ...]],
    *,
    seed: int = 0,
    input_requires_grad: bool = False,
    mp_policy: MixedPrecisionPolicy | None = None,
) -> Reference:
    """Build the model and the inputs from ``seed`` on CPU and run forward and backward once.

    ``torch.manual_seed(seed)``, then ``model_fn()``, then ``input_fn()``. With
    ``input_requires_grad`` the floating inputs require grad. Every floating output gets a
    gradient drawn from a generator seeded with ``seed + 1``.

    With ``mp_policy`` one device runs the precision autoparallel runs: every parameter cast to
    ``param_dtype`` where forward reads it (autoparallel's ``dtype_cast``; the cast's backward
    brings each gradient back to the parameter's dtype), inputs as given (autoparallel does not
    cast them, whatever ``cast_forward_inputs`` says). ``reduce_dtype`` is the parameters' own
    dtype in every policy this is used with (float32): the reference does not round gradients to
    another one.
    """
    torch.manual_seed(seed)
    model = model_fn()
    inputs = tuple(
        t.detach().clone().requires_grad_(input_requires_grad and t.is_floating_point())
        for t in _as_tuple(input_fn())
    )
    buffers_before = {n: b.detach().clone() for n, b in model.named_buffers()}
    param_dtype = None if mp_policy is None else mp_policy.param_dtype
    if param_dtype is None:
        out = model(*inputs)
    else:
        cast = {n: p.to(param_dtype) for n, p in model.named_parameters()}
        out = torch.func.functional_call(model, cast, inputs, tie_weights=True)
    leaves = [t for t in pytree.tree_leaves(out) if isinstance(t, Tensor)]
    generator = torch.Generator().manual_seed(seed + 1)
    grad_outputs = tuple(
        torch.randn(t.shape, dtype=t.dtype, generator=generator) if t.is_floating_point() else torch.zeros_like(t)
        for t in leaves
    )
    differentiable = [(t, g) for t, g in zip(leaves, grad_outputs) if t.requires_grad]
    if differentiable:
        torch.autograd.backward([t for t, _ in differentiable], [g for _, g in differentiable])
    return Reference(
        model=model,
        inputs=tuple(t.detach() for t in inputs),
        outputs=tuple(t.detach() for t in leaves),
        grad_outputs=grad_outputs,
        param_grads={n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None},
        input_grads={i: t.grad.detach().clone() for i, t in enumerate(inputs) if t.grad is not None},
        buffers_after=_restore_buffers(model, buffers_before),
    )


def _restore_buffers(model: nn.Module, before: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The buffers as forward left them; the model's put back to ``before``, so the parallel run
    and the float64 yardstick start from the values forward started from."""
    after = {n: b.detach().clone() for n, b in model.named_buffers()}
    with torch.no_grad():
        for n, b in model.named_buffers():
            b.copy_(before[n])
    return after


# --------------------------------------------------------------------------------------------
# Comparing
# --------------------------------------------------------------------------------------------


#: Default tolerance in machine epsilons of the tensor's dtype (see :func:`tolerances`).
NOISE_ULPS = 64


def tolerances(
    ref: Tensor, atol: float | None = None, rtol: float | None = None, *, scale: float = 0.0
) -> tuple[float, float]:
    """``(atol, rtol)`` for comparing a tensor with ``ref``; given values are kept.

    Defaults scale with the reference's magnitude and dtype, so that fp32 reordering noise passes
    and real errors do not::

        eps   = torch.finfo(ref.dtype).eps           (1.19e-7 for fp32, 7.8e-3 for bf16)
        floor = NOISE_ULPS · eps · scale             (scale: the largest max|ref| of the comparison)
        atol  = NOISE_ULPS · eps · max|ref|,  or floor when max|ref| <= floor
        rtol  = NOISE_ULPS · eps

    The floor: a tensor whose every value is below the comparison's own noise floor is rounding
    noise of a cancellation, e.g. the gradient of an attention key bias, exactly 0 in exact
    arithmetic (softmax ignores a constant added to every score of a row). Measured in the zoo:
    OPT's ``k_proj.bias`` gradient, max error 6.6e-8 and norm ratio 1.03, noise against noise.
    Such a tensor is checked against the floor and without the norm check.

    Why ``max|ref|``: a parallel plan sums the same terms in another order (a Partial reduced over
    ranks, a sharded contraction), and a sum's rounding error is relative to the magnitude of its
    terms, not of its result: an element that cancels to nearly 0 carries an absolute error of a few
    ``eps · max|ref|``. Measured: a 2-layer transformers Llama on 2x2 gives ``v_proj.weight``'s
    gradient a max error of 1.5e-5 against values up to 80.3 (1.6 eps · max|ref|; norm ratio
    1.000000006), which a fixed 1e-5 calls wrong. Integer and bool tensors must be equal.
    """
    eps = torch.finfo(ref.dtype).eps if ref.is_floating_point() else 0.0
    max_ref = float(ref.abs().max()) if ref.numel() else 0.0
    magnitude = max(max_ref, scale) if max_ref <= NOISE_ULPS * eps * scale else max_ref
    return (NOISE_ULPS * eps * magnitude if atol is None else atol, NOISE_ULPS * eps if rtol is None else rtol)


def _at_noise_floor(ref: Tensor, scale: float) -> bool:
    if not ref.is_floating_point() or not ref.numel():
        return False
    return float(ref.abs().max()) <= NOISE_ULPS * torch.finfo(ref.dtype).eps * scale


def _missing(name: str, ref: Tensor | None, note: str) -> TensorCheck:
    max_ref = float(ref.abs().max()) if ref is not None and ref.numel() else 0.0
    return TensorCheck(name=name, max_abs_err=math.inf, max_ref=max_ref, ratio=None, ok=False, note=note,
                       excess=math.inf)


def _check(
    name: str, per_rank: Mapping[int, Tensor], ref: Tensor, atol: float | None, rtol: float | None, scale: float
) -> TensorCheck:
    ref = ref.detach()
    floor = atol is None and _at_noise_floor(ref, scale)
    norm_check = atol is None and rtol is None and ref.is_floating_point() and not floor
    atol, rtol = tolerances(ref, atol, rtol, scale=scale)
    max_ref = float(ref.abs().max()) if ref.numel() else 0.0
    ref_norm = float(ref.double().norm()) if ref.numel() else 0.0
    worst: tuple[float, int, Tensor] | None = None
    all_close = True
    excess = 0.0
    for rank, actual in sorted(per_rank.items()):
        if tuple(actual.shape) != tuple(ref.shape):
            return _missing(name, ref, f"rank {rank} has shape {tuple(actual.shape)}, reference {tuple(ref.shape)}")
        actual = actual.to(ref.dtype)
        diff = (actual.double() - ref.double()).abs()
        err = float(diff.max()) if ref.numel() else 0.0
        if ref.numel():
            bound = atol + rtol * ref.double().abs()
            over = diff / bound.clamp_min(torch.finfo(torch.float64).tiny)
            over = torch.where(diff == 0, torch.zeros_like(over), over)
            rank_excess = float(over.max())
            excess = rank_excess if math.isnan(rank_excess) else max(excess, rank_excess)
        if math.isnan(err) or not bool(torch.isclose(actual, ref, rtol=rtol, atol=atol).all()):
            all_close = False
        if worst is None or not err <= worst[0]:  # NaN counts as worst
            worst = (err, rank, actual)
    if worst is None:
        return _missing(name, ref, "no rank returned it")
    err, rank, actual = worst
    ratio = float(actual.double().norm()) / ref_norm if ref_norm > 0 else None
    rel_err = float((actual.double() - ref.double()).norm()) / ref_norm if ref_norm > 0 else None
    note = ""
    if norm_check and rel_err is not None and not rel_err <= rtol:
        all_close = False
        note = f"norm of the error is {rel_err:.2e} of the reference's (noise allows {rtol:.1e})"
    copies = list(per_rank.values())
    disagree = any(not torch.equal(copies[0], c) for c in copies[1:])
    if disagree and not all_close:
        note = "; ".join(filter(None, [f"ranks disagree; worst is rank {rank}", note]))
    if floor:
        note = "; ".join(filter(None, ["reference at the noise floor", note]))
    return TensorCheck(name=name, max_abs_err=err, max_ref=max_ref, ratio=ratio, ok=all_close, note=note,
                       rel_err=rel_err, atol=atol, rtol=rtol, excess=excess)


def compare(
    reference: Reference, run: ParallelRun, *, atol: float | None = None, rtol: float | None = None
) -> list[TensorCheck]:
    """Check every forward output and every gradient of ``run`` against ``reference``.

    Tolerances default per tensor to its magnitude and dtype (:func:`tolerances`): an element
    passes when ``|actual - ref| <= NOISE_ULPS·eps·max|ref| + NOISE_ULPS·eps·|ref|``, and the whole
    tensor also needs ``norm(actual - ref) <= NOISE_ULPS·eps·norm(ref)``; a tensor entirely below
    the comparison's noise floor (``NOISE_ULPS·eps`` times the largest value of any compared
    tensor) is checked against that floor instead. That passes fp32
    reordering noise and fails a 2x gradient, a swapped or corrupted shard and an unreduced or
    twice-reduced Partial (``tests/test_numerics_tolerance.py``). Given ``atol``/``rtol`` replace the
    defaults and the check is plain ``torch.isclose``. A tensor the reference has but the parallel
    graph does not return, or the other way round, is a failed check.
    """
    expected: dict[str, Tensor] = {f"output[{i}]": t for i, t in enumerate(reference.outputs)}
    expected.update({f"grad:{n}": g for n, g in reference.param_grads.items()})
    expected.update({f"grad:input[{i}]": g for i, g in reference.input_grads.items()})
    # a buffer forward updates is returned by the joint graph: checked against one device's
    expected.update({name: reference.buffers_after[name[len("mutated:buffer:"):]] for name in run.gathered
                     if name.startswith("mutated:buffer:") and name[len("mutated:buffer:"):] in reference.buffers_after})
    scale = max((float(t.abs().max()) for t in expected.values() if t.is_floating_point() and t.numel()), default=0.0)
    checks = [
        _check(name, run.gathered[name], ref, atol, rtol, scale)
        if name in run.gathered
        else _missing(name, ref, "the parallel graph does not return it")
        for name, ref in expected.items()
    ]
    checks += [
        _missing(name, None, "returned by the parallel graph, absent from the reference")
        for name in run.gathered
        if name not in expected
    ]
    return checks


# --------------------------------------------------------------------------------------------
# One call
# --------------------------------------------------------------------------------------------


def _default_placements(ndim: int) -> Placements:
    return (Shard(0),) + (Replicate(),) * (ndim - 1)


def _physical(autop: AutoParallel, placement: PlacementMap) -> dict[str, Placements]:
    in_slots, out_slots = _joint_layout(autop, placement)
    return {s.name: s.physical for s in [*in_slots, *out_slots] if s is not None}


def _error_text(stage: str, exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    notes = "".join(f" [{note}]" for note in getattr(exc, "__notes__", ()))  # e.g. the sizes a plan breaks
    return f"{stage}: {type(exc).__name__}: {first}{' ...' if len(lines) > 1 else ''}{notes}"


def run_numerics(
    model_fn: Callable[[], nn.Module],
    input_fn: Callable[[], Tensor | tuple[Tensor, ...]],
    mesh_shape: tuple[int, ...],
    *,
    configure: Callable[[AutoParallel], None] | None = None,
    input_placements: list[Placements] | None = None,
    output_placements: list[Placements] | None = None,
    parameter_memory_constraint: bool = True,
    seed: int = 0,
    atol: float | None = None,
    rtol: float | None = None,
    input_requires_grad: bool = False,
    perturb: ShardPerturbation | None = None,
    all_to_all_per_rank: bool = True,
    after_apply: Callable[[AutoParallel], None] | None = None,
    float64_yardstick: bool = False,
    mp_policy: MixedPrecisionPolicy | None = None,
    autoparallel_cls: type[AutoParallel] | None = None,
) -> NumericsReport:
    """Solve, apply and run an autoparallel plan on CPU; compare the outputs and all gradients.

    ``model_fn`` is called twice (under ``torch.device("meta")`` for autoparallel, and after
    ``torch.manual_seed(seed)`` for the reference); ``input_fn`` once, after it, and must return a
    Tensor or a tuple of positional Tensors. ``input_placements`` / ``output_placements`` default
    to ``(Shard(0), Replicate(), ...)`` for every input / output. ``configure(autop)`` runs after
    those constraints and the parameter memory constraint, before ``optimize_placement``: add op
    constraints or node pins there.

    Inputs are traced as not requiring grad, as in training, so the plan checked is the one
    autoparallel makes for real use. ``input_requires_grad=True`` traces floating inputs as
    requiring grad and checks their gradients too; that changes the joint graph and may change the
    plan. ``perturb`` and ``all_to_all_per_rank=False`` exist to show the check fails when it
    should. ``after_apply(autop)`` runs inside the AutoParallel context once the parallel graph
    is built (e.g. ``autoparallel_constraints.audit``). ``atol``/``rtol`` default per tensor to
    its magnitude and dtype (:func:`tolerances`, :func:`compare`). ``float64_yardstick=True``
    judges a failed float32 check again against the same model run in float64 on one device: it
    passes when the plan's error there is within a small factor of one device's float32 error
    (rounding of a sum that cancels, see :mod:`~._yardstick`); a wrong plan still fails.

    ``mp_policy`` (e.g. bfloat16 params, float32 reduce) is given to ``AutoParallel`` and one
    device runs the same precision (:func:`build_reference`). Then every floating output and
    gradient is judged by the float64 yardstick, not by a dtype tolerance: its error against the
    model run in float64 on one device within ``YARDSTICK_FACTOR`` times one device's own
    mixed-precision error (:func:`~._yardstick.against_float64` with ``every=True``).
    ``autoparallel_cls`` builds with a subclass of ``AutoParallel`` (torchtitan's
    ``AutoParallelGraph``); the parallel graph is built by the apply step every subclass shares.

    Failures on the parallel side (constraints, solver, apply, running the graph) come back in
    ``NumericsReport.error``; errors in the reference model or in the arguments raise.
    """
    from autoparallel.api import AutoParallel

    cls = AutoParallel if autoparallel_cls is None else autoparallel_cls
    if not (isinstance(cls, type) and issubclass(cls, AutoParallel)):
        raise InvalidOptionError(f"autoparallel_cls must be AutoParallel or a subclass of it, got {cls!r}")
    mp = mp_policy is not None and mp_policy.param_dtype is not None
    if mp and (atol is not None or rtol is not None):
        raise InvalidOptionError(
            "atol/rtol with mp_policy: a mixed-precision run is judged by the float64 yardstick, not by "
            "tolerances; drop atol/rtol (or mp_policy)"
        )
    mesh_shape = tuple(int(s) for s in mesh_shape)
    ndim = len(mesh_shape)
    reference = build_reference(
        model_fn, input_fn, seed=seed, input_requires_grad=input_requires_grad, mp_policy=mp_policy
    )
    if input_placements is None:
        input_placements = [_default_placements(ndim)] * len(reference.inputs)
    if output_placements is None:
        output_placements = [_default_placements(ndim)] * len(reference.outputs)
    for what, given in (("input_placements", input_placements), ("output_placements", output_placements)):
        for p in given:
            if p is not None and len(p) != ndim:  # None: leave that input/output to the solver
                raise InvalidOptionError(
                    f"{what} entry {p} has {len(p)} placements; the mesh {mesh_shape} has {ndim} dims"
                )

    mesh = cpu_mesh(mesh_shape)
    with torch.device("meta"):
        meta_model = model_fn()
    traced = [(tuple(t.shape), t.dtype, input_requires_grad and t.is_floating_point()) for t in reference.inputs]

    def traced_inputs() -> tuple[Tensor, ...]:
        return tuple(torch.empty(shape, dtype=dtype, requires_grad=rg) for shape, dtype, rg in traced)

    stage = "build"
    checks: list[TensorCheck] = []
    physical: dict[str, Placements] = {}
    collectives: dict[str, int] = {}
    try:
        with device_name():
            with cls(meta_model, traced_inputs, mesh, mp_policy=mp_policy, dynamic=True) as autop:
                stage = "constraints"
                autop.add_input_constraints(list(input_placements))
                autop.add_output_constraints(list(output_placements))
                if parameter_memory_constraint:
                    autop.add_parameter_memory_constraint()
                if configure is not None:
                    configure(autop)
                stage = "solve"
                placement = autop.optimize_placement()
                stage = "apply"
                parallel_gm = apply_on_one_rank(autop, placement, all_to_all_per_rank=all_to_all_per_rank)
                collectives = collective_counts(parallel_gm)
                physical = _physical(autop, placement)
                if after_apply is not None:
                    stage = "after_apply"
                    after_apply(autop)
        stage = "run"
        run = run_parallel_graph(
            autop, placement, reference.model, reference.inputs, reference.grad_outputs, perturb=perturb
        )
        stage = "compare"
        checks = compare(reference, run, atol=atol, rtol=rtol)
        if mp:
            stage = "float64 yardstick"
            checks = list(against_float64(checks, reference, run, every=True))
        elif float64_yardstick and atol is None and rtol is None:
            stage = "float64 yardstick"
            checks = list(against_float64(checks, reference, run))
    except ConstraintsError as exc:  # the caller's mistake (bad option, pin conflict), not a wrong plan
        if not isinstance(exc, VerificationError):
            raise
        # the verifier refusing the graph is a finding about the plan: reported like a crash
        return NumericsReport(
            checks=(), error=_error_text(stage, exc), details=traceback.format_exc(),
            mesh_shape=mesh_shape, physical=physical, collectives=collectives,
        )
    except Exception as exc:  # reported, not raised: a wrong plan may well crash the graph
        logger.debug("numerics run failed at %s", stage, exc_info=True)
        return NumericsReport(
            checks=tuple(checks),
            error=_error_text(stage, exc),
            details=traceback.format_exc(),
            mesh_shape=mesh_shape,
            physical=physical,
            collectives=collectives,
        )
    report = NumericsReport(
        checks=tuple(checks), mesh_shape=mesh_shape, physical=physical, collectives=collectives
    )
    logger.info("%s", report)
    return report
