"""Exceptions raised by autoparallel_constraints.

Every error names what was wrong, where (node, op, argument, rule), and what to do about it.
All of them derive from :class:`ConstraintsError`, so callers can catch the package's failures
with one ``except`` clause.
"""

from __future__ import annotations

__all__ = [
    "AutoParallelMissingError",
    "AuditError",
    "BuildTooLargeError",
    "ConstraintsError",
    "FormulationError",
    "InfeasibleConstraintsError",
    "InvalidOptionError",
    "InvalidRowError",
    "PluginStateError",
    "SolverTimeLimitError",
    "StaleStrategiesError",
    "SolverUnavailableError",
    "StrictConflictError",
    "UnknownOpError",
    "UntestedVersionWarning",
    "UpstreamChangedError",
    "UpstreamChangedWarning",
    "VerificationError",
    "VerificationWarning",
]

PIN_COMMIT = "a54c2529b1cb10b6b27a585b4a6fc2f84bc1d232"
INSTALL_HINT = (
    "Install autoparallel from its public repository at the pinned commit:\n"
    f"    pip install 'git+https://github.com/meta-pytorch/autoparallel@{PIN_COMMIT}'\n"
    "(The PyPI package named 'autoparallel' is an unrelated project; uninstall it first if present.)"
)


class ConstraintsError(Exception):
    """Base class of every error this package raises."""


class AutoParallelMissingError(ConstraintsError, ImportError):
    """meta-pytorch/autoparallel is not importable, or the importable one is not it."""


class UnknownOpError(ConstraintsError, KeyError):
    """An op name or overload has no row in the compatibility table."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class InvalidRowError(ConstraintsError, ValueError):
    """A compatibility-table row is inconsistent (roles, dims, alignment or Partial rules)."""


class InvalidOptionError(ConstraintsError, ValueError):
    """An argument of ``add_op_constraints`` (or another entry point) has a wrong type or value."""


class FormulationError(ConstraintsError, RuntimeError):
    """A formulation broke its contract: its ``build``/``after_solve`` raised a non-package error,
    returned something other than ``Additions``, wrote to the problem, or named an addition outside
    ``<formulation>.<family>_<idx>``."""


class PluginStateError(ConstraintsError, RuntimeError):
    """A call came at the wrong time (outside the ``with`` block, after solving, before apply)."""


class StrictConflictError(ConstraintsError, RuntimeError):
    """The ``strict`` formulation and a user pin exclude every legal strategy of a table op."""


class InfeasibleConstraintsError(ConstraintsError, RuntimeError):
    """The solver found no plan that satisfies the table together with the user's constraints."""


class AuditError(ConstraintsError, RuntimeError):
    """The audit was asked for something it cannot check (e.g. before ``apply_placement``)."""


class SolverUnavailableError(ConstraintsError, ImportError):
    """The chosen solver is not installed (HiGHS needs the ``highs`` extra: ``highspy``)."""


class SolverTimeLimitError(ConstraintsError, RuntimeError):
    """The solver hit its time limit before it found any feasible plan."""


class BuildTooLargeError(ConstraintsError, RuntimeError):
    """autoparallel's ILP for this model and mesh could not be built and solved within the memory
    budget (``apc.set_build_budget``): raised inside ``AutoParallel.__enter__`` after the strategy
    enumeration, before any variable is created. ``size`` is the count (an ``IlpSize``),
    ``budget_bytes`` the budget it was held to."""

    def __init__(self, message: str, *, size: object = None, budget_bytes: int | None = None) -> None:
        super().__init__(message)
        self.size = size
        self.budget_bytes = budget_bytes


class UpstreamChangedError(ConstraintsError, RuntimeError):
    """autoparallel, torch or PuLP no longer has what one of this package's shims (``seam``) attaches
    to or reads: a target moved or was renamed. ``shim`` names the shim, ``target`` the missing name
    (``module:attribute.path``), ``stops`` what stops working without it. Never a silent no-op:
    ``python -m autoparallel_constraints doctor`` lists every shim and its target."""

    def __init__(self, message: str, *, shim: str = "", target: str = "", stops: str = "") -> None:
        super().__init__(message)
        self.shim = shim
        self.target = target
        self.stops = stops


class UpstreamChangedWarning(UserWarning):
    """At import: a shim that the import does not attach has a target that moved; the calls that
    use it will raise :class:`UpstreamChangedError` (``doctor`` lists it as ``target missing``)."""


class StaleStrategiesError(ConstraintsError, RuntimeError):
    """The optimizer's strategies were computed for another mesh (autoparallel's mesh-blind cache)."""


class VerificationError(ConstraintsError, RuntimeError):
    """The verifier rejects the parallel graph (``add_op_constraints(verify="raise")``, the default).

    ``report`` is the :class:`~autoparallel_constraints.VerifyReport`; the message names the first
    violating node, the placement the verifier inferred there and the one expected.
    """

    def __init__(self, report: object, *, materialize: str | None = None) -> None:
        self.report = report
        violations = getattr(report, "violations", ())
        first = violations[0] if violations else None
        where = (
            f"{first.node} ({first.op}): {first.reason}; inferred {first.inferred}, expected {first.expected}"
            if first is not None else "outputs the verifier could not prove: "
            + "; ".join(getattr(report, "unproven_outputs", ()))
        )
        # advice that fits the call: materialize='all' only where it is not already on
        advice = (
            "verify='warn' returns the graph to inspect it; if its numbers match one device "
            "(autoparallel_constraints.testing.run_numerics), the verifier is wrong: please report it"
            if materialize == "all" else
            "the plan can be right while the graph is not (upstream PR #517): use "
            "add_op_constraints(materialize='all'), or verify='warn' to get the graph and inspect it"
        )
        super().__init__(
            f"the parallel graph fails verification at {where}. {len(violations)} violation(s) in all "
            f"(see .report). {advice[0].upper()}{advice[1:]}."
        )


class VerificationWarning(UserWarning):
    """``add_op_constraints(verify="warn")``: the verifier rejects the parallel graph."""


class UntestedVersionWarning(UserWarning):
    """torch or autoparallel is not a version the suite was run with (warned once, at import).

    ``python -m autoparallel_constraints doctor`` lists every version against the tested one."""
