"""The one seam between this package and autoparallel, torch and PuLP.

Every change the package makes to their objects (a wrapper, a name swapped for a block, a method
shadowed on one object, a name added to a class) is a row of :data:`SHIMS`, and every read of a
private upstream name is a function of :mod:`.dtensor`, :mod:`.tracing`, :mod:`.autop` or
:mod:`.lp`. Nothing else in the package patches or reads a private upstream name
(``tests/seam/test_scan.py`` holds it to that).

What the import does, decided (``docs/seam.md``): ``import autoparallel_constraints`` attaches the
shims whose :class:`Effect` leaves autoparallel's own results as they are (a memo, a name added,
the apply step's recording) or turns an upstream crash into the fix or a clear error; a user who
never calls the plugin gets autoparallel's ILP, plan and graph. The shims that change results
(:attr:`Effect.CHANGES`) are attached by the call that uses them. ``$APC_SHIMS`` picks at import:
``none`` (attach none), ``-name`` (not that one), ``+name`` (that one too), comma-separated.

::

    from autoparallel_constraints import seam

    for row in seam.status():
        print(row.name, row.state, row.changes)
    seam.uninstall()        # autoparallel as if the package had never been imported
    seam.install()          # the import's shims again

A shim whose probe finds the upstream fix installed stays off and says so; a shim whose target
moved raises :class:`~autoparallel_constraints.errors.UpstreamChangedError` with its name and what
stops working, at install (or at its first use), never a silent no-op.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..errors import PIN_COMMIT, InvalidOptionError, UpstreamChangedError, UpstreamChangedWarning
from . import _patching
from ._model import Effect, Probe, Shim, Target, TargetKind, Verdict, When
from ._patching import get_original, is_patched, patched_targets, resolve
from ._shims import SHIMS

logger = logging.getLogger(__name__)

__all__ = [
    "ENV",
    "SHIMS",
    "Effect",
    "Probe",
    "Shim",
    "ShimStatus",
    "Target",
    "Verdict",
    "When",
    "attach",
    "attach_for_use",
    "detach",
    "detached",
    "get_original",
    "install",
    "is_attached",
    "is_patched",
    "probe",
    "shim",
    "status",
    "uninstall",
]

#: The environment variable :func:`install` reads (see the module docstring).
ENV = "APC_SHIMS"

_BY_NAME: dict[str, Shim] = {row.name: row for row in SHIMS}
_patching.ORDER.update({row.name: i for i, row in enumerate(SHIMS)})
_patching.STOPS.update({row.name: row.stops for row in SHIMS})

_attached: set[str] = set()
_reasons: dict[str, str] = {}  # why a shim is not attached (switched off, fixed upstream)


@dataclass(frozen=True, slots=True)
class ShimStatus:
    """One shim on the autoparallel installed: ``state`` is ``attached``, ``attaches on use``,
    ``in calls only`` (scoped), ``off (...)``, ``not needed (...)`` or ``target missing (...)``."""

    name: str
    state: str
    when: When
    effect: Effect
    brief: str
    changes: str
    retired_by: str
    detail: str


def shim(name: str) -> Shim:
    """The row named ``name``; an unknown name lists the known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise InvalidOptionError(f"no shim named {name!r}; the shims are: {', '.join(_BY_NAME)}") from None


def probe(name: str) -> Probe:
    """Whether shim ``name`` is needed on the autoparallel and torch installed: its targets where
    they were (else :attr:`Verdict.MISSING`), then its own probe."""
    row = shim(name)
    missing = _missing_target(row)
    if missing is not None:
        return Probe(Verdict.MISSING, missing)
    if row.probe is None:
        return Probe(Verdict.NEEDED, "")
    try:
        return row.probe()
    except Exception as exc:  # noqa: BLE001 - a probe that cannot decide keeps the shim on
        return Probe(Verdict.NEEDED, f"probe failed ({type(exc).__name__}: {exc}); kept on")


def _missing_target(row: Shim) -> str | None:
    """The error of the first of ``row``'s targets that is not where it was, or None."""
    for target in row.targets:
        if target.kind is TargetKind.INSTANCE:
            target = Target(target.module, target.path)  # the class's method must be there
        try:
            resolve(row.name, target)
        except UpstreamChangedError as exc:
            return str(exc)
    return None


def is_attached(name: str) -> bool:
    """Whether shim ``name`` is attached right now."""
    shim(name)
    return name in _attached


def attach(name: str, *, force: bool = False) -> bool:
    """Attach shim ``name`` (idempotent); returns whether it is attached.

    A shim whose probe says the upstream fix is in stays off (logged; ``force=True`` attaches it
    anyway); a missing target raises :class:`UpstreamChangedError`. Scoped and per-object shims
    have nothing to attach: their calls apply them."""
    row = shim(name)
    if name in _attached:
        return True
    if row.attach is None:
        return False
    found = probe(name)
    if found.verdict is Verdict.MISSING:
        raise UpstreamChangedError(found.detail, shim=name)
    if found.verdict is Verdict.FIXED and not force:
        _reasons[name] = "not needed: upstream fixed"
        logger.info("apc seam: %s not attached: %s", name, found.detail)
        return False
    row.attach()
    _attached.add(name)
    _reasons.pop(name, None)
    logger.debug("apc seam: attached %s", name)
    return True


#: What a call of the plugin attaches for the builds after it (add_op_constraints, enable, the test kit).
FOR_USE = ("mesh_strategy_cache", "mesh_comm_cost_cache")


def attach_for_use() -> None:
    """Attach the shims the plugin needs once it is in use (:data:`FOR_USE`), unless ``$APC_SHIMS``
    switched them off; the ones upstream fixed stay off."""
    _, removed, _ = _selection(os.environ)
    for name in FOR_USE:
        if name not in removed:
            attach(name)


def detach(name: str) -> None:
    """Take shim ``name`` off (idempotent): its targets are autoparallel's again where no other
    shim holds them."""
    row = shim(name)
    if name not in _attached:
        return
    assert row.detach is not None  # only shims with attach/detach are ever attached
    row.detach()
    _attached.discard(name)


@contextlib.contextmanager
def detached(*names: str) -> Iterator[None]:
    """Shims ``names`` off inside the block (autoparallel's own behaviour there), back on after it
    if they were attached."""
    was = [name for name in names if is_attached(name)]
    for name in was:
        detach(name)
    try:
        yield
    finally:
        for name in was:
            attach(name, force=True)


def _selection(environ: Mapping[str, str]) -> tuple[set[str], set[str], bool]:
    """(added, removed, none) from ``$APC_SHIMS``."""
    text = environ.get(ENV, "").strip()
    added: set[str] = set()
    removed: set[str] = set()
    none = False
    for item in filter(None, (part.strip() for part in text.split(","))):
        if item in ("none", "-all"):
            none = True
            continue
        sign, name = (item[0], item[1:]) if item[0] in "+-" else ("+", item)
        if name not in _BY_NAME:
            raise InvalidOptionError(f"${ENV}: no shim named {name!r}; the shims are: {', '.join(_BY_NAME)}")
        (added if sign == "+" else removed).add(name)
    return added, removed, none


def install(environ: Mapping[str, str] | None = None) -> list[str]:
    """Attach the import's shims in the table's order, as ``$APC_SHIMS`` selects; returns the
    names attached. What the package's import runs; idempotent.

    A shim it attaches whose target moved raises :class:`UpstreamChangedError`; one it does not
    attach (attached on use, per object, scoped) is checked too, and a moved target warns once
    (:class:`UpstreamChangedWarning`): the calls that use that shim raise the error."""
    added, removed, none = _selection(os.environ if environ is None else environ)
    moved = []
    for row in SHIMS:
        wanted = (row.when is When.IMPORT and not none) or row.name in added
        if row.name in removed:
            wanted = False
        if wanted:
            attach(row.name)
            continue
        if row.when is When.IMPORT:
            _reasons[row.name] = f"off (${ENV})"
        elif _missing_target(row) is not None:
            moved.append(row)
    if moved:
        warnings.warn(
            "autoparallel or torch moved what these shims attach to: "
            + "; ".join(f"{row.name} (without it {row.stops})" for row in moved)
            + f". The calls that use them will raise UpstreamChangedError; this package is tested with "
            f"autoparallel at {PIN_COMMIT[:7]} (python -m autoparallel_constraints doctor).",
            UpstreamChangedWarning, stacklevel=3,
        )
    return [row.name for row in SHIMS if row.name in _attached]


def uninstall() -> None:
    """Take every shim off, last first: autoparallel's, torch's and PuLP's objects are theirs
    again, as if the package had never been imported. (Hooks a call put on one optimizer stay on
    that object: they are that run's.)"""
    for row in reversed(SHIMS):
        detach(row.name)
        _reasons.pop(row.name, None)


def status() -> list[ShimStatus]:
    """Every shim, in the table's order, with its state on the autoparallel installed."""
    out = []
    for row in SHIMS:
        found = probe(row.name)
        if row.name in _attached:
            state = "attached"
        elif found.verdict is Verdict.MISSING:
            state = "target missing"
        elif found.verdict is Verdict.FIXED:
            state = "not needed: upstream fixed"
        elif row.name in _reasons:
            state = _reasons[row.name]
        elif row.when is When.SCOPED:
            state = "in the package's calls only"
        elif row.attach is None:
            state = "per optimizer, by its call"
        else:
            state = "attaches on use"
        out.append(ShimStatus(row.name, state, row.when, row.effect, row.brief, row.changes, row.retired_by, found.detail))
    return out


def attached() -> tuple[str, ...]:
    """The shims attached right now, in the table's order."""
    return tuple(row.name for row in SHIMS if row.name in _attached)


def patches() -> dict[str, tuple[str, ...]]:
    """Every upstream target touched right now, with the shims on it."""
    return patched_targets()
