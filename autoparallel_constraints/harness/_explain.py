"""The text an assertion about a run should carry: :func:`explain`.

A test that runs a model asserts on what the run returned (``report.ok``, an audit made inside the
run, a row's outcome). When the run itself failed, ``run_numerics`` reports the exception instead of
raising it, so the assertion is the only place its error can surface::

    report = run_numerics(...)
    assert report.ok, explain(report)
    assert audit is not None and audit.ok, explain(audit, report)

pytest shows a message that is not a ``str`` through its repr cut to 240 characters, which drops
both the error past its first line and its traceback; :func:`explain` returns the whole text.
"""

from __future__ import annotations

import traceback
from textwrap import indent

__all__ = ["explain"]


def _text(result: object) -> str:
    if result is None:
        return "None (never made: the run stopped before it; its error is in the run's report)"
    if isinstance(result, BaseException):
        return "".join(traceback.format_exception(result)).rstrip()
    text = str(result)
    # NumericsReport (and anything shaped like it): the one-line error plus the traceback it caught
    details = getattr(result, "details", "")
    if getattr(result, "error", None) is not None and isinstance(details, str) and details.strip():
        text += "\n  the run's traceback:\n" + indent(details.rstrip(), "    ")
    return text


def explain(*results: object) -> str:
    """Every result as text, one after the other, for an assertion message.

    A :class:`~._numerics.NumericsReport` whose run raised comes with the traceback it caught
    (``details``), an exception with its traceback, ``None`` (an audit the run never reached) as
    such, anything else (an audit, a verifier report, a zoo row) as its ``str``.
    """
    return "\n".join(_text(r) for r in results)
