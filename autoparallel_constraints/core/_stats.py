"""Repeated timings and their ratios: the one place the package decides what a measured ratio says.

Every ratio the package prints (the demo, ``compare``, ``benchmarks/bench_formulations.py``) comes
from rows run interleaved (:func:`interleave`): a warm-up round first, discarded, then ``repeat``
rounds that visit every row once, the order reversed every other round so slow drift of a shared
machine hits the rows alike. Then:

* a row's figure is :class:`Spread`: the median of its repeats and their min–max;
* a ratio is :func:`paired_ratio`: repeat *i* of row A over repeat *i* of the baseline, for every
  *i*; its median and the min–max of those paired ratios. When that interval contains 1.0 the
  ratio is **within noise** and is never printed as a speed-up or a slow-down. A single repeat
  has no spread and gets no verdict either.
"""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..errors import InvalidOptionError

__all__ = ["Ratio", "Spread", "cpu_seconds", "interleave", "paired_ratio", "round_order"]

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

WITHIN_NOISE = "within noise"
NO_SPREAD = "one repeat, no spread"


def cpu_seconds() -> float:
    """CPU seconds of this process (all threads) plus its waited-for children (the CBC binary):
    beside wall seconds, so a busy machine shows up as wall > CPU instead of skewing a ratio."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@dataclass(frozen=True, slots=True)
class Spread:
    """The median and the min–max of ``n`` samples (the samples themselves are kept)."""

    median: float
    low: float
    high: float
    samples: tuple[float, ...]

    @classmethod
    def of(cls, samples: Sequence[float]) -> Spread:
        values = tuple(float(s) for s in samples)
        if not values:
            raise InvalidOptionError("a spread needs at least one sample")
        return cls(median=statistics.median(values), low=min(values), high=max(values), samples=values)

    @property
    def n(self) -> int:
        return len(self.samples)

    def side_of(self, value: float) -> str:
        """``"below"`` when every sample is below ``value``, ``"above"`` when every one is above,
        ``"contains"`` when the min–max holds it (bounds included)."""
        if self.high < value:
            return "below"
        if self.low > value:
            return "above"
        return "contains"

    def format(self, fmt: str = ".2f") -> str:
        """``"7.12 [6.80–7.91]"``; one sample prints alone."""
        if self.n == 1:
            return f"{self.median:{fmt}}"
        return f"{self.median:{fmt}} [{self.low:{fmt}}–{self.high:{fmt}}]"

    def as_dict(self) -> dict[str, object]:
        return {"median": self.median, "min": self.low, "max": self.high, "n": self.n, "samples": list(self.samples)}


@dataclass(frozen=True, slots=True)
class Ratio:
    """A ratio of paired repeats: ``spread`` is over the per-repeat ratios A_i / B_i."""

    spread: Spread

    @property
    def within_noise(self) -> bool:
        """True when the paired ratios' min–max contains 1.0 (with two or more repeats)."""
        return self.spread.n >= 2 and self.spread.side_of(1.0) == "contains"

    @property
    def verdict(self) -> str:
        """``"within noise"``, ``"faster"`` (every paired ratio < 1), ``"slower"`` (every one > 1),
        or ``"one repeat, no spread"``."""
        if self.spread.n < 2:
            return NO_SPREAD
        side = self.spread.side_of(1.0)
        return {"contains": WITHIN_NOISE, "below": "faster", "above": "slower"}[side]

    def format(self) -> str:
        """``"1.04x [0.97–1.12] within noise"``, ``"0.81x [0.78–0.85] faster"``."""
        s = self.spread
        body = f"{s.median:.3f}x" if s.n == 1 else f"{s.median:.3f}x [{s.low:.3f}–{s.high:.3f}]"
        return f"{body} {self.verdict}"

    def as_dict(self) -> dict[str, object]:
        return {**self.spread.as_dict(), "within_noise": self.within_noise, "verdict": self.verdict}


def paired_ratio(samples: Sequence[float], baseline: Sequence[float]) -> Ratio:
    """Ratio of ``samples`` to ``baseline`` repeat by repeat (both from the same rounds)."""
    if len(samples) != len(baseline) or not samples:
        raise InvalidOptionError(
            f"paired ratios need the same number of repeats on both sides, got {len(samples)} and {len(baseline)}"
        )
    if any(b <= 0 for b in baseline):
        raise InvalidOptionError(f"a baseline sample is not positive: {list(baseline)}")
    return Ratio(Spread.of([a / b for a, b in zip(samples, baseline)]))


def round_order(rows: Sequence[K], round_index: int) -> list[K]:
    """The rows in order on even rounds, reversed on odd ones."""
    return list(rows) if round_index % 2 == 0 else list(reversed(rows))


def interleave(
    rows: Sequence[K],
    run: Callable[[K], T],
    *,
    repeat: int,
    warmup: int = 1,
    on_step: Callable[[int, int, K, bool], None] | None = None,
    on_done: Callable[[int, int, K, bool, T], None] | None = None,
) -> tuple[dict[K, list[T]], dict[K, list[T]]]:
    """Run every row ``warmup`` rounds (discarded) and then ``repeat`` rounds, interleaved.

    Round *r* visits the rows in :func:`round_order` (reversed on odd rounds). Returns
    ``(measured, warmups)``: per row, the results of its measured rounds (repeat *i* at index *i*,
    so rows pair up round by round) and of its warm-up rounds. ``on_step(step, total, row,
    is_warmup)`` is called before and ``on_done(..., result)`` after each run (progress lines).
    """
    if repeat < 1:
        raise InvalidOptionError(f"repeat must be >= 1, got {repeat}")
    if warmup < 0:
        raise InvalidOptionError(f"warmup must be >= 0, got {warmup}")
    if len(set(rows)) != len(rows):
        raise InvalidOptionError(f"rows must be distinct, got {list(rows)}")
    measured: dict[K, list[T]] = {row: [] for row in rows}
    warmups: dict[K, list[T]] = {row: [] for row in rows}
    total = (warmup + repeat) * len(rows)
    step = 0
    for round_index in range(warmup + repeat):
        is_warmup = round_index < warmup
        for row in round_order(rows, round_index):
            step += 1
            if on_step is not None:
                on_step(step, total, row, is_warmup)
            result = run(row)
            (warmups if is_warmup else measured)[row].append(result)
            if on_done is not None:
                on_done(step, total, row, is_warmup, result)
    return measured, warmups
