"""Whose code failed: autoparallel's own errors get one line from this package, never a new error.

When ``AutoParallel.__enter__``, ``optimize_placement`` or ``apply_placement`` raise and the code
that raised is autoparallel's (or torch's, called by autoparallel), the exception goes on unchanged
(same type, message and traceback) with one note added (:pep:`678`)::

    autoparallel_constraints: raised inside autoparallel (cost_models/compute_estimation.py:345
    _shard_args_for_node) while it built the sharding problem, not by autoparallel_constraints. ...

and, when the failure is a known one (:data:`KNOWN`), what it is and the way around it. The same
line is what the zoo prints for a row that failed upstream (:func:`origin`, :func:`upstream_line`
read a formatted traceback). Errors of this package are left alone.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["KNOWN", "STAGES", "KnownFailure", "around", "known_failure", "origin", "upstream_line"]

#: The packages a frame can belong to, most specific first (``autoparallel_constraints`` contains
#: ``autoparallel`` as a prefix, so it is matched before it).
_OWNERS = ("autoparallel_constraints", "autoparallel", "transformers", "torch")
#: Owners whose frames are plumbing: the frame that decides is the nearest caller outside them.
_PLUMBING = ("torch", "python")

#: What each wrapped method was doing, for the note.
STAGES = {
    "__enter__": "while it traced the model and built the sharding problem (AutoParallel.__enter__)",
    "optimize_placement": "while it solved the sharding problem (optimize_placement)",
    "apply_placement": "while it applied the plan (apply_placement)",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class KnownFailure:
    """An upstream failure measured here: where it raises (file and function inside autoparallel),
    a pattern of its message, what it is and the way around it. ``limit`` names its entry in
    ``docs/limits.md``."""

    name: str
    file: str
    function: str
    message: str  # regular expression searched in the exception's message
    what: str
    fix: str
    limit: str


#: Upstream failures measured at the pinned autoparallel, each with its minimal repro in
#: docs/limits.md. Data, in the order they are tried.
KNOWN: tuple[KnownFailure, ...] = (
    KnownFailure(
        name="sdpa-tensor-kwarg",
        file="cost_models/compute_estimation.py",
        function="_shard_args_for_node",
        message=r"_scaled_dot_product_\w*attention\w*",
        what=("its cost model cannot place a tensor passed as a keyword argument, and on CPU "
              "scaled_dot_product_attention passes attn_mask as one (transformers' default 'sdpa' "
              "attention with a mask)"),
        fix="build the model with attn_implementation='eager' (or call sdpa without a tensor mask)",
        limit="sdpa with a tensor mask on CPU",
    ),
    KnownFailure(
        name="tensor-kwarg",
        file="cost_models/compute_estimation.py",
        function="_shard_args_for_node",
        message=r"",
        what="its cost model cannot place a tensor passed to an op as a keyword argument",
        fix="pass that tensor positionally in the model, if the op allows it",
        limit="sdpa with a tensor mask on CPU",
    ),
    KnownFailure(
        name="view-nested-uneven",
        file="shardings/propagation_rules.py",
        function="view_rule",
        message=r"Cannot shard unevenly distributed tensor",
        what=("its view rule skips an input strategy DTensor cannot view only when DTensor raises "
              "AssertionError, and torch 2.13 raises RuntimeError for a flatten whose first dim is "
              "sharded by all three mesh dims of a 3-D mesh and splits unevenly before the last "
              "(Falcon's fused heads + 2 = 10 heads on 2x2x2: 10 -> 5 -> 5 / 2), so the build stops "
              "before any plan exists"),
        fix=("switch this package's view skip back on, apc.use_view_skip(True) (the default), "
             "which lets the view rule skip that strategy; or give that dim a size the first two "
             "mesh dims' product divides, or use a 2-D mesh (there the second split is the last, "
             "which torch exempts)"),
        limit="a flatten of a dim split unevenly by all three mesh dims (3-D meshes)",
    ),
)

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _owner(path: str) -> str:
    for name in _OWNERS:
        if f"/{name}/" in path:
            return name
    return "python"


def _deciding_frame(frames: list[tuple[str, str, str]]) -> tuple[str, str, str, str] | None:
    """(owner, path, line, function) of the innermost frame outside torch and Python, or None."""
    for path, line, func in reversed(frames):
        owner = _owner(path)
        if owner not in _PLUMBING:
            return owner, path, line, func
    return None


def _short(path: str, owner: str) -> str:
    return path.rsplit(owner + "/", 1)[-1]


def origin(details: str) -> str:
    """Whose code raised, from a formatted traceback: ``"autoparallel (file:line function)"``, or
    ``"torch (in transformers: file:line function)"`` when torch raised inside a caller of one of
    the named packages; ``"unknown"`` without frames."""
    frames = _FRAME.findall(details)
    if not frames:
        return "unknown"
    path, line, func = frames[-1]
    owner = _owner(path)
    deciding = _deciding_frame(frames) if owner in _PLUMBING else None
    if deciding is not None:
        caller, c_path, c_line, c_func = deciding
        return f"{owner} (in {caller}: {_short(c_path, caller)}:{c_line} {c_func})"
    return f"{owner} ({_short(path, owner)}:{line} {func})"


def known_failure(details: str, message: str) -> KnownFailure | None:
    """The :data:`KNOWN` entry a formatted traceback and its message match, or None."""
    frames = _FRAME.findall(details)
    for known in KNOWN:
        hit = any(path.endswith("autoparallel/" + known.file) and func == known.function for path, _, func in frames)
        if hit and re.search(known.message, message):
            return known
    return None


def upstream_line(details: str, message: str = "", *, stage: str = "") -> str | None:
    """The one line that says a failure is autoparallel's (or transformers'), or None when the code
    that decided it is this package's or cannot be told. ``details`` is a formatted traceback."""
    frames = _FRAME.findall(details)
    deciding = _deciding_frame(frames)
    if deciding is None or deciding[0] == "autoparallel_constraints":
        return None
    owner, path, line, func = deciding
    during = STAGES.get(stage, "")
    line_ = (f"autoparallel_constraints: raised inside {owner} ({_short(path, owner)}:{line} {func})"
             f"{' ' + during if during else ''}, not by autoparallel_constraints.")
    known = known_failure(details, message)
    if known is not None:
        line_ += (f" Known at the pinned autoparallel: {known.what}; {known.fix}. "
                  f"See autoparallel_constraints' docs/limits.md ({known.limit}).")
    return line_


def _annotate(exc: BaseException, stage: str) -> None:
    if getattr(exc, "__apc_upstream_noted__", False):
        return
    details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    line = upstream_line(details, str(exc), stage=stage)
    try:
        exc.__apc_upstream_noted__ = True  # type: ignore[attr-defined]
    except AttributeError:  # an exception type with __slots__: say it without the mark
        pass
    if line is not None:
        exc.add_note(line)
        logger.debug("apc: %s", line)


def around(stage: str) -> Callable[..., Any]:
    """The ``upstream_notes`` shim's around on ``AutoParallel.<stage>``: the same exception, its
    traceback, one note more."""

    def annotate(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            _annotate(exc, stage)
            raise

    annotate.__name__ = f"notes_around_{stage.strip('_')}"
    return annotate
