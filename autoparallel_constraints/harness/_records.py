"""The records numerics checks share: the single-device :class:`Reference` and one compared
tensor's :class:`TensorCheck`.

Apart from :mod:`~._numerics` so that :mod:`~._yardstick`, which ``run_numerics`` calls, can
read and remake them without importing back the module that calls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from torch import Tensor, nn

__all__ = ["Reference", "TensorCheck"]


@dataclass(frozen=True, kw_only=True, slots=True)
class TensorCheck:
    """One compared tensor: a forward output or a gradient.

    ``name`` is ``output[i]``, ``grad:<parameter fqn>`` or ``grad:input[i]``. Every simulated
    rank's gathered copy is compared; the errors are the worst rank's. ``ratio`` is
    ``norm(actual) / norm(reference)`` on that rank (None when the reference is zero): a gradient
    reduced twice over a mesh dimension of size 2 shows up as 2.0. ``rel_err`` is
    ``norm(actual - reference) / norm(reference)``. ``atol``/``rtol`` are the tolerances this
    tensor was checked with (see :func:`tolerances`); ``excess`` is the worst element's
    ``|actual - reference| / (atol + rtol * |reference|)`` (above 1 fails). ``ok``: every element
    within ``atol + rtol * |reference|`` on every rank and, with the default tolerances, ``rel_err``
    within :data:`NOISE_ULPS` machine epsilons. ``yardstick``: set when a failed float32 check was
    judged again against float64 (``run_numerics(float64_yardstick=True)``, see
    :mod:`~._yardstick`): its error over one device's float32 error, both against float64.
    """

    name: str
    max_abs_err: float
    max_ref: float
    ratio: float | None
    ok: bool
    note: str = ""
    rel_err: float | None = None
    atol: float = 0.0
    rtol: float = 0.0
    excess: float = 0.0
    yardstick: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Reference:
    """The single-device run: the model with real weights, its inputs, outputs and gradients.

    ``outputs`` and ``grad_outputs`` follow the tensor leaves of the model's output in pytree
    order; ``input_grads`` maps a positional input's index to its gradient (inputs that require
    grad only).
    """

    model: nn.Module
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    grad_outputs: tuple[Tensor, ...]
    param_grads: Mapping[str, Tensor]
    input_grads: Mapping[int, Tensor]
    #: every buffer after forward, by fqn: what a joint graph that mutates a buffer returns for it
    buffers_after: Mapping[str, Tensor] = field(default_factory=dict)
