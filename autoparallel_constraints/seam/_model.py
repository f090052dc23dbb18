"""What a shim is, as data: :class:`Shim` (one row of the seam's table), its :class:`Target` s, and
the enums that classify it.

A shim is every change this package makes to autoparallel, torch or PuLP: a wrapper around one of
their functions, a name swapped for the length of a call, a method shadowed on one object, or a
name added to one of their classes. Each row says what it changes, why (the measured upstream
behaviour and its ``docs/limits.md`` entry), what would retire it upstream, whether it changes what
autoparallel alone computes, when it is attached, and how to tell whether it is needed on the
autoparallel installed (its probe).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Effect", "Probe", "Shim", "Target", "TargetKind", "Verdict", "When"]


class Effect(enum.Enum):
    """What a shim changes in what autoparallel alone computes (a user who never calls the plugin)."""

    NOTHING = "nothing"
    """The same ILP variable for variable, the same plan and graph: a memo, a name added."""
    OBSERVES = "observes"
    """Records and tags only: the ILP, the plan and the parallel graph's ops are autoparallel's."""
    CRASH_TO_FIX = "crash -> fix"
    """Where autoparallel alone stops, the build goes on the way upstream means it to."""
    CRASH_TO_ERROR = "crash -> clear error"
    """Where autoparallel alone fails obscurely (or is killed), a package error or a note says why."""
    CHANGES = "changes results"
    """Changes what is computed: attached only by a call of this package, never by the import."""


class When(enum.Enum):
    """When a shim is attached."""

    IMPORT = "import"
    """By ``import autoparallel_constraints`` (``$APC_SHIMS`` or :func:`~.detach` switch it off)."""
    USE = "use"
    """By the call that needs it: ``add_op_constraints``, ``enable``, ``use_solver``, the test kit."""
    SCOPED = "scoped"
    """Only for the length of one of this package's calls (the verifier, the CPU harness)."""


class Verdict(enum.Enum):
    """What a shim's probe found on the autoparallel and torch installed."""

    NEEDED = "needed"
    """The upstream behaviour it answers is there and its targets are where they were."""
    FIXED = "not needed (fixed upstream)"
    """The upstream fix is in: the shim stays off and says so."""
    MISSING = "target missing"
    """A target moved or was renamed: attaching raises :class:`~.UpstreamChangedError`."""


@dataclass(frozen=True, slots=True)
class Probe:
    """A probe's answer and what it saw."""

    verdict: Verdict
    detail: str = ""


class TargetKind(enum.Enum):
    """How a shim touches a target."""

    ATTRIBUTE = "attribute"
    """An existing function, method or module name, wrapped or swapped."""
    NEW = "new"
    """A name the shim adds to an upstream class (the class must exist, the name must not)."""
    INSTANCE = "instance"
    """A method shadowed on one object at a time (the class's method must exist)."""
    READ = "read"
    """Private state read, never written (the owner must exist)."""


@dataclass(frozen=True, slots=True)
class Target:
    """``module:Owner.attr``: where a shim attaches. ``kind`` says how (see :class:`TargetKind`)."""

    module: str
    path: str
    kind: TargetKind = TargetKind.ATTRIBUTE

    @classmethod
    def parse(cls, text: str, kind: TargetKind = TargetKind.ATTRIBUTE) -> Target:
        module, _, path = text.partition(":")
        return cls(module, path, kind)

    @property
    def key(self) -> str:
        return f"{self.module}:{self.path}"

    def __str__(self) -> str:
        suffix = {TargetKind.ATTRIBUTE: "", TargetKind.NEW: " (added)", TargetKind.INSTANCE: " (per object)",
                  TargetKind.READ: " (read)"}[self.kind]
        return self.key + suffix


@dataclass(frozen=True, kw_only=True, slots=True)
class Shim:
    """One row of the seam's table (:data:`~autoparallel_constraints.seam.SHIMS`).

    ``attach`` and ``detach`` act on the process (``None`` for :attr:`When.SCOPED` and per-object
    shims, which their own calls apply); ``probe`` says whether the upstream behaviour is still
    there (``None``: needed wherever its targets are). ``stops`` is what stops working without the
    shim, the second half of the error a missing target raises.
    """

    name: str
    targets: tuple[Target, ...]
    brief: str
    changes: str
    why: str
    limit: str
    retired_by: str
    effect: Effect
    when: When
    stops: str
    probe: Callable[[], Probe] | None = None
    attach: Callable[[], None] | None = None
    detach: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        if len(self.brief) > 64:
            raise ValueError(f"shim {self.name}: brief is {len(self.brief)} characters, at most 64 (doctor's line)")
        if self.when is When.IMPORT and self.effect is Effect.CHANGES:
            raise ValueError(f"shim {self.name}: a shim that changes results cannot attach on import")
        if (self.attach is None) != (self.detach is None):
            raise ValueError(f"shim {self.name}: give both attach and detach, or neither")
