"""``docs/seam.md``, generated from the seam's table (``python -m autoparallel_constraints doctor
--seam-md > docs/seam.md``); a test compares the file with this output, so it cannot go stale."""

from __future__ import annotations

from ._model import Effect, When
from ._shims import SHIMS

__all__ = ["seam_markdown"]

_INTRO = """\
# The seam to autoparallel, torch and PuLP

Every change this package makes to autoparallel's, torch's or PuLP's objects is one *shim*, declared
as a row of `autoparallel_constraints.seam.SHIMS`, and every read of a private upstream name is a
function of `autoparallel_constraints.seam` (`dtensor`, `tracing`, `autop`, `lp`). Nothing else in
the package patches or reads a private upstream name: `tests/test_seam.py` scans the source.

**What the import does.** `import autoparallel_constraints` attaches the shims marked *import*
below: each leaves autoparallel's own results as they are (*nothing*, *observes*) or turns an
upstream crash into the fix or a clear error. A user who imports the package and never calls it gets
autoparallel's ILP, plan and graph (`tests/test_seam.py` compares them with a process that never
imported it). The shims that change results are attached by the call that uses them
(*use*: `add_op_constraints`, `apc.enable()`, `use_solver`, the test kit's `cpu_mesh`) or live
only inside one of the package's calls (*scoped*: the verifier, the CPU harness).

**Switching them.** `APC_SHIMS` picks at import, comma-separated: `none` (attach none), `-name`
(not that one), `+name` (that one too); `seam.detach(name)`, `seam.attach(name)` and
`with seam.detached(name):` do it in code; `seam.uninstall()` takes every one off, leaving
autoparallel as if the package had never been imported. `python -m autoparallel_constraints doctor`
prints each shim's state on the autoparallel installed: attached, attaches on use, not needed
(its probe finds the upstream fix), or target missing (a name it attaches to moved: attaching
raises `UpstreamChangedError` naming the shim and what stops working).

| shim | when | effect on autoparallel alone | what it changes | why (measured) | docs/limits.md | retired by |
|---|---|---|---|---|---|---|
"""

_TARGETS = """
## Targets

What each shim attaches to (`module:Owner.name`; *added*: a name the shim adds, *per object*: shadowed
on one optimizer or problem, *read*: read to probe, never written).

| shim | targets |
|---|---|
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or "—"


def seam_markdown() -> str:
    """The page, from :data:`~autoparallel_constraints.seam.SHIMS`."""
    effect = {Effect.NOTHING: "nothing", Effect.OBSERVES: "observes", Effect.CRASH_TO_FIX: "crash → fix",
              Effect.CRASH_TO_ERROR: "crash → clear error", Effect.CHANGES: "changes results"}
    when = {When.IMPORT: "import", When.USE: "use", When.SCOPED: "scoped"}
    rows = [
        f"| `{s.name}` | {when[s.when]} | {effect[s.effect]} | {_cell(s.changes)} | {_cell(s.why)} | "
        f"{_cell(s.limit)} | {_cell(s.retired_by)} |"
        for s in SHIMS
    ]
    targets = [f"| `{s.name}` | {'<br>'.join(f'`{t}`' for t in s.targets)} |" for s in SHIMS]
    return _INTRO + "\n".join(rows) + "\n" + _TARGETS + "\n".join(targets) + "\n"
