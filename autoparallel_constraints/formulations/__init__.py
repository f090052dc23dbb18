"""Formulations: named ways of adding the compatibility table to autoparallel's ILP.

The public API for writing your own (guide: ``docs/formulations.md``): subclass
:class:`Formulation`, return :class:`Additions` from ``build`` (names from the :class:`Namer`,
bounds as :class:`Bound` (or :func:`forbid`, a bound or a row as the ``forbid`` option says), planned redistributions as :class:`Repair`), read the table
:class:`Site` s with :func:`strategy_indicator` and :func:`twin_count`, and make it available
with :func:`register_formulation`. The built-ins come in through the same door.
"""

from __future__ import annotations

from ._base import (
    FORBID_MODES,
    Additions,
    Bound,
    Elastic,
    Formulation,
    Namer,
    Repair,
    check_forbid_mode,
    elastic_constraint,
    forbid,
)
from ._pins import refuse_conflicting_pins
from ._registry import (
    FORMULATIONS,
    load_formulation,
    make_formulation,
    register_formulation,
    validate_formulation,
)
from ._sites import Site, strategy_indicator, twin_count
from .explicit import Explicit
from .lazy import Lazy
from .soft import Soft
from .strict import Strict

__all__ = [
    "FORBID_MODES",
    "FORMULATIONS",
    "Additions",
    "Bound",
    "Elastic",
    "Explicit",
    "Formulation",
    "Lazy",
    "Namer",
    "Repair",
    "Site",
    "Soft",
    "Strict",
    "check_forbid_mode",
    "elastic_constraint",
    "forbid",
    "load_formulation",
    "make_formulation",
    "refuse_conflicting_pins",
    "register_formulation",
    "strategy_indicator",
    "twin_count",
    "validate_formulation",
]

for _cls in (Strict, Explicit, Soft, Lazy):
    register_formulation(_cls)
del _cls
