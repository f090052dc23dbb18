"""Formulations: named ways of adding the compatibility table to autoparallel's ILP."""

from __future__ import annotations

from ..errors import InvalidOptionError
from ._base import Additions, Elastic, Formulation, Namer, Repair
from .explicit import Explicit
from .lazy import Lazy
from .soft import Soft
from .strict import Strict

__all__ = [
    "FORMULATIONS",
    "Additions",
    "Elastic",
    "Explicit",
    "Formulation",
    "Lazy",
    "Namer",
    "Repair",
    "Soft",
    "Strict",
    "make_formulation",
]

FORMULATIONS: dict[str, type[Formulation]] = {cls.name: cls for cls in (Strict, Explicit, Soft, Lazy)}


def make_formulation(name: str, **options: object) -> Formulation:
    """Instantiate the formulation called ``name`` with its options (validated)."""
    if not isinstance(name, str):
        raise InvalidOptionError(f"formulation must be a name (str), got {type(name).__name__}")
    cls = FORMULATIONS.get(name)
    if cls is None:
        import difflib

        close = difflib.get_close_matches(name, FORMULATIONS, n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise InvalidOptionError(
            f"unknown formulation {name!r}; available: {', '.join(sorted(FORMULATIONS))}.{hint}"
        )
    return cls(**options)
