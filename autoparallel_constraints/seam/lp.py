"""PuLP's private state the package reads and rolls back: the variable registry of a problem.

PuLP registers a variable the first time a row using it is added, by appending it to
``LpProblem._variables`` and keying it by hash in ``_variable_ids``, and never prunes either. The
plugin's atomic additions forget the variables a failed addition registered; the workbench counts
and restores them. Nothing here changes PuLP's classes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["forget_variables_after", "registered_count", "registered_variables", "variable_ids"]


def registered_variables(prob: Any) -> list[Any]:
    """The problem's registered variables, in registration order (PuLP's list itself)."""
    return prob._variables


def variable_ids(prob: Any) -> dict[Any, Any]:
    """The problem's variable registry by hash (PuLP's dict itself)."""
    return prob._variable_ids


def registered_count(prob: Any) -> int:
    return len(prob._variables)


def forget_variables_after(prob: Any, count: int) -> None:
    """Forget every variable registered after the first ``count`` (an addition rolled back)."""
    for var in prob._variables[count:]:
        prob._variable_ids.pop(var.hash, None)
    del prob._variables[count:]
