"""The plugin switched on for code you do not edit: :func:`enable`, :func:`disable`, :func:`enabled`.

torchtitan calls ``optimize_placement`` itself, and so does autoparallel's one-call
``auto_parallel(...)``: their users have no line where ``add_op_constraints()`` could go. While
enabled, every ``AutoParallel`` (subclasses such as torchtitan's ``AutoParallelGraph`` included)
gets ``add_op_constraints(**options)`` at its first ``optimize_placement``, unless its user already
called it. The options are checked when enabling, not at the first solve far away.

``APC_OPTIONS`` (a JSON object of the same options) configures :func:`enable_from_env`, which
``autoparallel_constraints.torchtitan`` calls on import: torchtitan's ``--module`` loads it by name.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import InvalidOptionError
from ..seam import attach, attach_for_use
from ..seam._handlers import provide
from ._state import get_state

logger = logging.getLogger(__name__)

__all__ = ["OPTIONS_ENV", "disable", "enable", "enable_from_env", "enabled", "enabled_options"]

#: The environment variable :func:`enable_from_env` reads: a JSON object of add_op_constraints options.
OPTIONS_ENV = "APC_OPTIONS"

_options: dict[str, Any] | None = None


def _check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    from ._plugin import add_op_constraints

    params = inspect.signature(add_op_constraints).parameters
    named = {n for n, p in params.items() if n != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD}
    unknown = sorted(set(options) - named)
    if unknown:
        # a formulation's own options (penalty, max_rounds) pass through **options; anything else
        # would only fail at the first solve, far from this call
        from ..formulations import make_formulation

        formulation = options.get("formulation", "explicit")
        try:
            make_formulation(formulation, **{k: options[k] for k in unknown})
        except Exception as exc:  # noqa: BLE001 - reported with what add_op_constraints accepts
            raise InvalidOptionError(
                f"enable(): {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not an option of "
                f"add_op_constraints or of formulation {formulation!r} ({exc}); the options are: "
                f"{', '.join(sorted(named))}, plus the formulation's own"
            ) from exc
    return dict(options)


def enable(**options: Any) -> None:
    """Call ``add_op_constraints(**options)`` on every ``AutoParallel`` before its first solve.

    An ``AutoParallel`` whose user called ``add_op_constraints`` keeps that call. Enabling again
    replaces the options. Raises :class:`~autoparallel_constraints.InvalidOptionError` for an
    option ``add_op_constraints`` would refuse by name."""
    global _options
    _options = _check_options(options)
    attach("enable_hook")
    attach_for_use()
    logger.info("apc: enabled for every AutoParallel (%s)", ", ".join(f"{k}={v!r}" for k, v in _options.items()) or "defaults")


def disable() -> None:
    """Stop adding the plugin to new solves (an ``AutoParallel`` that already has it keeps it)."""
    global _options
    _options = None


def enabled_options() -> dict[str, Any] | None:
    """The options in force, or None when the plugin is not enabled."""
    return None if _options is None else dict(_options)


@contextlib.contextmanager
def enabled(**options: Any) -> Iterator[None]:
    """:func:`enable` inside the block; what was in force before is restored after it."""
    global _options
    before = _options
    enable(**options)
    try:
        yield
    finally:
        _options = before


def enable_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """:func:`enable` with the options in ``$APC_OPTIONS`` (a JSON object; unset or empty: the
    defaults); returns them."""
    text = (os.environ if environ is None else environ).get(OPTIONS_ENV, "").strip()
    try:
        options = json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise InvalidOptionError(f"${OPTIONS_ENV} is not JSON ({exc}): give an object, e.g. '{{\"formulation\": \"strict\"}}'") from exc
    if not isinstance(options, dict):
        raise InvalidOptionError(f"${OPTIONS_ENV} must be a JSON object of add_op_constraints options, got {text!r}")
    enable(**options)
    return options


def _before_first_solve(autop: Any) -> None:
    """The ``enable_hook`` shim's handler: ``add_op_constraints(**options)`` on an ``AutoParallel``
    about to solve, unless its user called it or it was solved already."""
    if _options is not None and get_state(autop) is None and getattr(autop, "sharding_placement", None) is None:
        logger.info("apc: enabled: add_op_constraints(%s) on %s", _options, type(autop).__name__)
        autop.add_op_constraints(**_options)


provide("enable", _before_first_solve)
