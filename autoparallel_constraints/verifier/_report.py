"""What the verifier says: one :class:`GraphViolation` per node that breaks a rule, and the
:class:`VerifyReport` of a whole graph (proven and unknown nodes per op, the outputs checked).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

__all__ = ["GraphViolation", "KINDS", "VerifyReport"]

KINDS = (
    "illegal_collective",
    "hidden_redistribution",
    "not_cosharded",
    "local_shape",
    "output_mismatch",
    "region_input",  # a local_map region gets an input in placements its declaration does not take
    "region_output",  # a local_map region's output declared Replicate on a mesh dim its value varies along
)


@dataclass(frozen=True, kw_only=True, slots=True)
class GraphViolation:
    """One node of the parallel graph whose inferred placements break a rule."""

    kind: str  # one of KINDS
    node: str
    op: str
    reason: str
    inferred: str = "-"
    expected: str = "-"

    def __str__(self) -> str:
        return (
            f"{self.kind.upper().replace('_', ' ')}: {self.node} ({self.op}): {self.reason}"
            f" [inferred {self.inferred}, expected {self.expected}]"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class VerifyReport:
    """What :func:`verify` proved. ``ok``: no violation (unknowns are reported, not failures)."""

    violations: tuple[GraphViolation, ...]
    proven: dict[str, int]  # op -> tensor nodes whose placement was derived
    unknown: dict[str, int]  # op -> tensor nodes left unknown
    unknown_reasons: dict[str, str]  # node -> why
    nodes: int
    seconds: float = field(default=0.0, compare=False)  # reports of one graph compare equal
    outputs_checked: int = 0
    unproven_outputs: tuple[str, ...] = ()  # outputs left unknown: nothing proven about them
    table_notes: tuple[str, ...] = ()  # table rows stricter than DTensor's propagation on proven ops

    @property
    def ok(self) -> bool:
        """No violation and every output proven (an unknown output is not a clean one)."""
        return not self.violations and not self.unproven_outputs

    @property
    def n_proven(self) -> int:
        return sum(self.proven.values())

    @property
    def n_unknown(self) -> int:
        return sum(self.unknown.values())

    @property
    def verdict(self) -> str:
        if self.ok:
            return "clean"
        counts = Counter(v.kind for v in self.violations)
        parts = [f"{n} {k}" for k, n in counts.items()]
        if self.unproven_outputs:
            parts.append(f"{len(self.unproven_outputs)} outputs unproven")
        return ", ".join(parts)

    def __str__(self) -> str:
        """The verdict, one line per violation and unproven output, the unknowns counted by op; why
        each node is unknown is in :attr:`report`."""
        head = (
            f"verify: {self.verdict} ({self.n_proven} tensor nodes proven, {self.n_unknown} unknown, "
            f"{self.outputs_checked} outputs checked)"  # no seconds: two runs of one plan print the same bytes
        )
        lines = [head]
        lines += [f"  {v}" for v in self.violations]
        lines += [f"  UNPROVEN OUTPUT: {_first_line(u)}" for u in self.unproven_outputs]
        if self.unknown:
            lines.append("  unknown by op: " + ", ".join(f"{op} {n}" for op, n in sorted(self.unknown.items())))
        return "\n".join(lines)

    @property
    def report(self) -> str:
        """The long form: ``str()`` in full (unproven outputs whole) and why each unknown node is unknown."""
        lines = [str(self).splitlines()[0]]
        lines += [f"  {v}" for v in self.violations]
        lines += [f"  UNPROVEN OUTPUT: {u}" for u in self.unproven_outputs]
        if self.unknown:
            lines.append("  unknown by op: " + ", ".join(f"{op} {n}" for op, n in sorted(self.unknown.items())))
            lines += [f"    {node}: {why}" for node, why in self.unknown_reasons.items()]
        return "\n".join(lines)


def _first_line(text: str, width: int = 160) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= width else line[: width - 3] + "..."
