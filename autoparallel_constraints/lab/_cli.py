"""Argument helpers shared by the command-line subcommands (demo, compare, coverage, crosscheck)."""

from __future__ import annotations

import argparse

__all__ = ["parse_mesh"]


def parse_mesh(text: str) -> tuple[int, ...]:
    """``"2x4"`` -> ``(2, 4)``; an argparse error naming the expected form otherwise."""
    try:
        shape = tuple(int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"mesh must look like 2x4, got {text!r}") from None
    if not shape or any(s < 1 for s in shape):
        raise argparse.ArgumentTypeError(f"mesh must look like 2x4, got {text!r}")
    return shape
