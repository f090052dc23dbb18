"""What the package's stages give the seam to run: the seam knows where to attach to autoparallel,
the stages know what to do there. A stage registers its handler when it is imported
(:func:`provide`); a shim's around asks for it when it runs (:func:`handler`) and calls
autoparallel's own function when there is none."""

from __future__ import annotations

from typing import Any

__all__ = ["handler", "provide"]

_HANDLERS: dict[str, Any] = {}


def provide(name: str, value: Any) -> None:
    """Register ``value`` as the handler ``name`` (a stage's import does this once)."""
    _HANDLERS[name] = value


def handler(name: str) -> Any:
    """The handler registered as ``name``, or None."""
    return _HANDLERS.get(name)
