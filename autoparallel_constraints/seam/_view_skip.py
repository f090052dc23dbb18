"""Let autoparallel's view rule skip an input strategy DTensor refuses to view, as it means to.

autoparallel's ``view_rule`` (``shardings/propagation_rules.py``) asks DTensor's
``propagate_shape_and_sharding`` for every input strategy of a view and skips the strategy when
DTensor raises ``AssertionError`` (its comment: "Skip this strategy; the replicated variant is
already covered by another iteration"). torch 2.13 refuses one more layout with ``RuntimeError``
instead: a flatten whose non-last dim is split unevenly by a mesh dim that is not the last to
split it ("Cannot shard unevenly distributed tensor", ``_view_ops.py``). autoparallel offers the
strategy that meets it when every mesh dim shards a head dim at least as large as the mesh (meshes
of 3 or more dims): a fused qkv of 8 query heads + k + v, 10 heads, on 2×2×2 (10 → 5 → 5 / 2), or
14; and the whole build stops in ``AutoParallel.__enter__``, with or without constraints.

While one ``__enter__`` runs, :func:`skipping_unviewable_strategies` replaces the name
``view_rule`` looks up with a function that turns exactly that ``RuntimeError`` into the
``AssertionError`` autoparallel already handles. Strategies DTensor can view are untouched, so a
build that succeeded before builds the same strategies and ILP; a build that stopped now gets a
plan. Whether that plan can run is another matter: autoparallel alone may still store a tensor
with a nested uneven shard, which the default call's ``nested.even`` rows keep out.

Turn it off with :func:`use_view_skip` ``(False)`` (or ``APC_SHIMS=-view_skip``) to see
autoparallel's own behaviour; the next build after a switch starts from an empty placement-option
cache (the cache would otherwise serve strategies computed under the other setting). Like
autoparallel's builds themselves (module-global caches), the skip assumes one build at a time per
process: it swaps a module-global name for the block.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from ..errors import InvalidOptionError
from ._model import Probe, Target, Verdict
from ._patching import swapped

logger = logging.getLogger(__name__)

__all__ = ["SkipStats", "around_build", "enabled", "probe", "skipping_unviewable_strategies", "use_view_skip"]

TARGET = Target("autoparallel.shardings.propagation_rules", "propagate_shape_and_sharding")

_enabled = True
_built_with: bool | None = None  # the setting the placement-option cache was last filled under
#: The message of the only ``RuntimeError`` turned into a skip (torch's ``_rewrite_plain_shard``).
REFUSAL = "Cannot shard unevenly distributed tensor"


class SkipStats:
    """Refusals turned into skips during one build (strategies served from autoparallel's cache,
    e.g. for repeated layers, are not asked again and not counted), and the first one's text."""

    __slots__ = ("first", "skipped")

    def __init__(self) -> None:
        self.skipped = 0
        self.first: str | None = None

    def __repr__(self) -> str:
        return f"SkipStats(skipped={self.skipped})"


last_stats: SkipStats | None = None


def use_view_skip(enabled: bool) -> bool:
    """Switch the view skip on or off for later ``AutoParallel`` builds; returns the previous
    setting. On by default: it only changes builds that autoparallel would otherwise stop."""
    global _enabled
    if not isinstance(enabled, bool):
        raise InvalidOptionError(f"use_view_skip takes True or False, got {enabled!r}")
    previous, _enabled = _enabled, enabled
    return previous


def enabled() -> bool:
    """Whether later builds run with the view skip."""
    return _enabled


@contextlib.contextmanager
def skipping_unviewable_strategies() -> Iterator[SkipStats]:
    """Within the block, autoparallel's view rule skips input strategies DTensor refuses with
    "Cannot shard unevenly distributed tensor". Yields the block's :class:`SkipStats`; restores
    autoparallel's name on exit, also on error. Switched off, the block changes nothing."""
    global last_stats
    stats = SkipStats()
    last_stats = stats
    if not _enabled:
        yield stats
        return

    def propagate_shape_and_sharding(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except RuntimeError as e:
            if REFUSAL not in str(e):
                raise
            stats.skipped += 1
            if stats.first is None:
                stats.first = str(e)
            raise AssertionError(str(e)) from e

    with swapped("view_skip", TARGET, propagate_shape_and_sharding) as original:
        yield stats
    if stats.skipped:
        logger.info("apc: autoparallel's view rule skipped %d input strategies DTensor cannot view (%s)",
                    stats.skipped, stats.first)


def around_build(call: Any, autop: Any) -> Any:
    """The ``view_skip`` shim's around on ``AutoParallel.__enter__``. A build under the other
    setting than the last starts from an empty placement-option cache: its view strategies differ."""
    global _built_with
    from ._caches import clear_strategy_caches

    if _built_with is not None and _built_with != _enabled:
        logger.info("apc: the view skip was switched %s since the last build; clearing autoparallel's "
                    "placement-option cache", "on" if _enabled else "off")
        clear_strategy_caches()
    _built_with = _enabled
    with skipping_unviewable_strategies():
        return call(autop)


def probe() -> Probe:
    """Needed while torch refuses the view with ``RuntimeError`` and autoparallel's view rule
    skips only ``AssertionError``: both asked directly (a flatten of a dim of 10 over a 2x2x2 mesh,
    10 -> 5 -> 5 / 2; autoparallel's ``view_rule`` read for the exceptions it catches)."""
    import ast
    import inspect

    from autoparallel.shardings import propagation_rules
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor._ops._view_ops import view_groups

    try:
        dtensor_view = getattr(propagation_rules, "propagate_shape_and_sharding")
        rule = view_groups([10, 4], [40])
        dtensor_view([Shard(0), Shard(0), Shard(0)], (10, 4), rule, (2, 2, 2), strict_view=False)
        return Probe(Verdict.FIXED, "torch views the layout now (no refusal to turn into a skip)")
    except RuntimeError as exc:
        if REFUSAL not in str(exc):
            return Probe(Verdict.NEEDED, f"torch refuses the layout otherwise: {exc}")
    except AssertionError:
        return Probe(Verdict.FIXED, "torch refuses the layout with AssertionError again, which autoparallel skips")
    except Exception as exc:  # noqa: BLE001 - a probe reports, it does not stop the import
        return Probe(Verdict.NEEDED, f"could not ask torch ({type(exc).__name__}: {exc}); kept on")
    try:
        tree = ast.parse(inspect.getsource(propagation_rules.view_rule).lstrip())
    except (OSError, TypeError, SyntaxError, AttributeError) as exc:
        return Probe(Verdict.NEEDED, f"view_rule not readable ({exc}); kept on")
    caught = {ast.unparse(h.type) for node in ast.walk(tree) if isinstance(node, ast.Try) for h in node.handlers if h.type}
    if any("RuntimeError" in c or c == "Exception" for c in caught):
        return Probe(Verdict.FIXED, "autoparallel's view_rule catches RuntimeError now")
    return Probe(Verdict.NEEDED, f"torch raises RuntimeError ({REFUSAL!r}); view_rule catches {sorted(caught)} only")
