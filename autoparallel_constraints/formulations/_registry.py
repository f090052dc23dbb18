"""The formulation registry: the one door every formulation (built-in or yours) comes in by.

``register_formulation(cls)`` validates a class and makes it available by name;
``make_formulation(spec, **options)`` turns a name, an import path ``"pkg.mod:Class"``, a class or
an instance into a ready :class:`Formulation`.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
from typing import Any

from ..errors import InvalidOptionError
from ._base import Formulation

__all__ = ["FORMULATIONS", "load_formulation", "make_formulation", "register_formulation", "validate_formulation"]

# name -> class; filled through register_formulation only.
FORMULATIONS: dict[str, type[Formulation]] = {}
"""The registered formulations, name -> class (filled through :func:`register_formulation` only)."""

NAME = re.compile(r"^[a-z][a-z0-9]*$")
RESERVED = ("none", "size")  # the lab's baseline; the size couplings' prefix
MATH_SECTIONS = ("Sets:", "Variables:", "Objective", "Constraints:")


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def validate_formulation(cls: Any) -> type[Formulation]:
    """Check that ``cls`` can be used as a formulation; raise :class:`InvalidOptionError` saying what to fix."""
    if not (isinstance(cls, type) and issubclass(cls, Formulation)):
        raise InvalidOptionError(
            f"a formulation must be a subclass of autoparallel_constraints.Formulation; got "
            f"{cls!r} ({type(cls).__name__})"
        )
    where = _qualname(cls)
    name = cls.__dict__.get("name", getattr(cls, "name", None))
    if not isinstance(name, str) or not NAME.match(name):
        raise InvalidOptionError(
            f"formulation {where} needs a class attribute `name`: lowercase letters and digits, starting "
            f"with a letter (it prefixes every addition: <name>.<family>_<idx>); got {name!r}"
        )
    if name in RESERVED:
        raise InvalidOptionError(f"formulation {where}: the name {name!r} is reserved ({', '.join(RESERVED)}); choose another")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise InvalidOptionError(f"formulation {where} ({name!r}) does not implement {missing}")
    doc = cls.__doc__ or ""
    absent = [s for s in MATH_SECTIONS if s not in doc]
    if absent:
        raise InvalidOptionError(
            f"formulation {where} ({name!r}): its own docstring must state its math with the sections "
            f"{', '.join(MATH_SECTIONS)} (missing: {', '.join(absent)}); see Strict's docstring or docs/formulations.md"
        )
    if not isinstance(getattr(cls, "options", {}), dict):
        raise InvalidOptionError(f"formulation {where}: `options` must be a dict of option name -> default")
    return cls


def register_formulation(cls: type[Formulation], *, override: bool = False) -> type[Formulation]:
    """Make ``cls`` available by its ``name`` (validated); usable as a class decorator.

    Registering another class under a taken name raises unless ``override=True``; registering the
    same class again is a no-op. Returns ``cls``.
    """
    validate_formulation(cls)
    name = cls.name
    current = FORMULATIONS.get(name)
    if current is not None and current is not cls and not override:
        raise InvalidOptionError(
            f"formulation name {name!r} is already registered by {_qualname(current)}; choose another "
            f"name for {_qualname(cls)}, or pass override=True to replace it"
        )
    FORMULATIONS[name] = cls
    return cls


def load_formulation(path: str) -> type[Formulation]:
    """The class named by ``"pkg.mod:Class"`` (imported, validated, not registered)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise InvalidOptionError(f"formulation import path must be 'package.module:Class', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidOptionError(
            f"cannot import module {module_name!r} for formulation {path!r}: {exc}. Install the package "
            "that provides it, or run from the directory that contains it (or add it to PYTHONPATH)"
        ) from exc
    cls = getattr(module, attr, None)
    if cls is None:
        found = sorted(
            n for n in dir(module)
            if isinstance(v := getattr(module, n), type) and issubclass(v, Formulation) and v is not Formulation
        )
        close = difflib.get_close_matches(attr, found, n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise InvalidOptionError(
            f"module {module_name!r} has no {attr!r}; formulations in it: {', '.join(found) or 'none'}.{hint}"
        )
    return validate_formulation(cls)


def make_formulation(spec: Any, **options: Any) -> Formulation:
    """A ready formulation from a registered name, ``"pkg.mod:Class"``, a class or an instance.

    ``options`` go to the class; with an instance (already configured) they must be empty.
    """
    if isinstance(spec, Formulation):
        validate_formulation(type(spec))
        if options:
            raise InvalidOptionError(
                f"options {', '.join(sorted(options))} were passed with a formulation instance "
                f"({type(spec).__name__}); give them to its constructor instead"
            )
        return spec
    if isinstance(spec, type):
        return validate_formulation(spec)(**options)
    if not isinstance(spec, str):
        raise InvalidOptionError(
            f"formulation must be a name, 'package.module:Class', a Formulation subclass or instance; "
            f"got {type(spec).__name__}: {spec!r}"
        )
    if ":" in spec:
        return load_formulation(spec)(**options)
    cls = FORMULATIONS.get(spec)
    if cls is None:
        close = difflib.get_close_matches(spec, FORMULATIONS, n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise InvalidOptionError(
            f"unknown formulation {spec!r}; registered: {', '.join(sorted(FORMULATIONS))}.{hint} "
            "Your own: register_formulation(MyFormulation), or pass 'package.module:MyFormulation'"
        )
    return cls(**options)
