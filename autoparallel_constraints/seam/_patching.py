"""The one mechanism every shim uses to touch an upstream object.

* :func:`wrap` / :func:`unwrap`: an *around* function on an upstream function or method. One
  dispatcher per target, whatever the number of shims: the shims' arounds run in the table's order
  (the first row outermost), each given the next one (``call``) as its first argument. The
  dispatcher keeps the original as ``__wrapped__`` (``functools.wraps``) and the shims' names as
  ``__apc_shims__``; the last :func:`unwrap` puts the original object back (or removes the class's
  shadow when the name was inherited).
* :func:`add_name` / :func:`remove_name`: a name this package adds to an upstream class.
* :func:`swapped`: a module-global name replaced for the length of a block, restored on exit.
* :func:`hook_instance`: an around on one object's method, stored on that object only.
* :func:`resolve`: every target looked up by the same rules, so a target that moved raises
  :class:`~autoparallel_constraints.errors.UpstreamChangedError` with the shim's name and what
  stops working, never a silent no-op.

:func:`get_original` and :func:`is_patched` answer for any target (gevent's ``get_original`` /
``is_module_patched``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import UpstreamChangedError
from ._model import Target, TargetKind

logger = logging.getLogger(__name__)

__all__ = [
    "add_name",
    "get_original",
    "hook_instance",
    "is_patched",
    "patched_targets",
    "remove_name",
    "resolve",
    "swapped",
    "unwrap",
    "wrap",
]

Around = Callable[..., Any]

#: The order of each shim in the table (set by the table): arounds of earlier shims run outside.
ORDER: dict[str, int] = {}
#: What each shim's missing target stops (set by the table), for the error.
STOPS: dict[str, str] = {}


def _missing(shim: str, target: Target, why: str) -> UpstreamChangedError:
    stops = STOPS.get(shim, "")
    return UpstreamChangedError(
        f"shim {shim!r}: {target} is not there ({why}); without it {stops or 'this shim cannot work'}. "
        "autoparallel or torch moved the name: this package is tested with autoparallel at the commit "
        "`python -m autoparallel_constraints doctor` names; switch the shim off with APC_SHIMS=-" + shim
        + " to go on without it.",
        shim=shim,
        target=target.key,
        stops=stops,
    )


def resolve(shim: str, target: Target) -> tuple[Any, str, Any]:
    """``(owner, attribute name, current value)`` of ``target``; for a :attr:`TargetKind.NEW`
    target the value is None (and the name must not exist yet unless this package added it)."""
    try:
        owner: Any = importlib.import_module(target.module)
    except ImportError as exc:
        raise _missing(shim, target, f"module {target.module} does not import: {exc}") from exc
    *parents, attr = target.path.split(".")
    for part in parents:
        try:
            owner = getattr(owner, part)
        except AttributeError as exc:
            raise _missing(shim, target, f"{part} not found") from exc
    if target.kind is TargetKind.NEW:
        current = getattr(owner, attr, None)
        if current is not None and getattr(current, "__apc_shim__", None) != shim:
            raise _missing(shim, target, f"upstream now defines {attr} itself")
        return owner, attr, None
    if not hasattr(owner, attr):
        raise _missing(shim, target, f"{attr} not found")
    return owner, attr, getattr(owner, attr)


@dataclass
class _Chain:
    """The arounds on one target, and what was there before the first."""

    owner: Any
    attr: str
    original: Any
    own: bool  # the original was in owner.__dict__ (not inherited)
    arounds: list[tuple[int, str, Around]] = field(default_factory=list)


_CHAINS: dict[str, _Chain] = {}
_ADDED: dict[str, tuple[Any, str, str]] = {}  # target key -> (owner, attr, shim)


def _dispatcher(chain: _Chain) -> Callable[..., Any]:
    original = chain.original

    @functools.wraps(original)
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        call = original
        for _, _, around in reversed(chain.arounds):
            call = functools.partial(around, call)
        return call(*args, **kwargs)

    dispatch.__apc_shims__ = tuple(name for _, name, _ in chain.arounds)  # type: ignore[attr-defined]
    return dispatch


def _install(chain: _Chain, key: str) -> None:
    if chain.arounds:
        dispatch = _dispatcher(chain)
        setattr(chain.owner, chain.attr, dispatch)
        _CHAINS[key] = chain
        return
    if chain.own:
        setattr(chain.owner, chain.attr, chain.original)
    else:
        delattr(chain.owner, chain.attr)
    _CHAINS.pop(key, None)


def wrap(shim: str, target: Target, around: Around) -> None:
    """Run ``around(call, *args, **kwargs)`` around ``target`` (idempotent per shim and target)."""
    chain = _CHAINS.get(target.key)
    if chain is None:
        owner, attr, current = resolve(shim, target)
        own = isinstance(owner, types.ModuleType) or attr in vars(owner)
        chain = _Chain(owner, attr, current, own)
    elif not hasattr(chain.owner, chain.attr) or getattr(chain.owner, chain.attr).__wrapped__ is not chain.original:
        raise _missing(shim, target, "someone else replaced it after this package wrapped it")
    if any(name == shim for _, name, _ in chain.arounds):
        return
    chain.arounds.append((ORDER.get(shim, len(ORDER)), shim, around))
    chain.arounds.sort(key=lambda entry: entry[0])
    _install(chain, target.key)
    logger.debug("apc seam: %s wraps %s", shim, target)


def unwrap(shim: str, target: Target) -> None:
    """Take ``shim``'s around off ``target``; the last one off puts the original back."""
    chain = _CHAINS.get(target.key)
    if chain is None:
        return
    chain.arounds = [entry for entry in chain.arounds if entry[1] != shim]
    _install(chain, target.key)


def add_name(shim: str, target: Target, value: Any) -> None:
    """Add ``value`` as ``target``'s name on its owner (marked as this shim's)."""
    owner, attr, _ = resolve(shim, target)
    with contextlib.suppress(AttributeError, TypeError):
        value.__apc_shim__ = shim
    setattr(owner, attr, value)
    _ADDED[target.key] = (owner, attr, shim)


def remove_name(shim: str, target: Target) -> None:
    entry = _ADDED.pop(target.key, None)
    if entry is not None and entry[1] in vars(entry[0]):
        delattr(entry[0], entry[1])


@contextlib.contextmanager
def swapped(shim: str, target: Target, replacement: Any) -> Iterator[Any]:
    """``target`` replaced by ``replacement`` inside the block (yields the original); restored on
    exit, also on error. A replacement made by someone else meanwhile is logged and undone."""
    owner, attr, original = resolve(shim, target)
    own = isinstance(owner, types.ModuleType) or attr in vars(owner)
    setattr(owner, attr, replacement)
    try:
        yield original
    finally:
        current = getattr(owner, attr, None)
        if current is not replacement:
            logger.warning("apc seam: %s was replaced by someone else while %s had it (%r); restoring the original",
                           target, shim, current)
        if own:
            setattr(owner, attr, original)
        else:
            delattr(owner, attr)


def hook_instance(shim: str, obj: Any, attr: str, around: Around) -> None:
    """Run ``around(call, *args)`` around ``obj.attr`` for this object only (idempotent per shim).

    The arounds of one object's method share one bound dispatcher stored in the object's
    ``__dict__``, ordered by the table like :func:`wrap`'s."""
    current = obj.__dict__.get(attr)
    chain: _Chain | None = getattr(current, "__apc_chain__", None)
    if chain is None:
        if not hasattr(obj, attr):
            raise _missing(shim, Target(type(obj).__module__, f"{type(obj).__qualname__}.{attr}", TargetKind.INSTANCE),
                           f"{type(obj).__name__} has no {attr}")
        chain = _Chain(obj, attr, getattr(obj, attr), attr in obj.__dict__)
    if any(name == shim for _, name, _ in chain.arounds):
        chain.arounds = [entry for entry in chain.arounds if entry[1] != shim]
    chain.arounds.append((ORDER.get(shim, len(ORDER)), shim, around))
    chain.arounds.sort(key=lambda entry: entry[0])
    dispatch = _dispatcher(chain)
    dispatch.__apc_chain__ = chain  # type: ignore[attr-defined]
    obj.__dict__[attr] = dispatch


def get_original(target: Target | str) -> Any:
    """What ``target`` was before this package touched it (the current value when untouched)."""
    key = target.key if isinstance(target, Target) else target
    chain = _CHAINS.get(key)
    if chain is not None:
        return chain.original
    if key in _ADDED:
        return None
    parsed = target if isinstance(target, Target) else Target.parse(key)
    return resolve("get_original", parsed)[2]


def is_patched(target: Target | str) -> bool:
    """Whether any shim has ``target`` wrapped or added right now."""
    key = target.key if isinstance(target, Target) else target
    return key in _CHAINS or key in _ADDED


def patched_targets() -> dict[str, tuple[str, ...]]:
    """Every target touched right now, with the shims on it."""
    out = {key: tuple(name for _, name, _ in chain.arounds) for key, chain in _CHAINS.items()}
    out.update({key: (shim,) for key, (_, _, shim) in _ADDED.items()})
    return out
