"""Argument types for argparse: integers and numbers in a range, seeds. Every command line of the
project (``maopd``, the benchmark scripts) refuses an out-of-range value with one line naming the
option and its bounds, before any work."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from maopd.base.config import MAX_SEED
from maopd.base.limits import Limit


def bounded_int(low: int, high: int | None = None):
    """An argparse ``type``: an integer in [low, high] (no upper bound when ``high`` is None)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            bound = f"at least {low}" if high is None else f"in [{low}, {high}]"
            raise argparse.ArgumentTypeError(f"{value} is out of range: must be {bound}")
        return value

    parse.__name__ = "int"
    return parse


def limited_int(limit: Limit):
    """An argparse ``type``: a positive integer within ``limit`` (``maopd.base.limits``), whose refusal
    names the bound and how to raise it."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{value} is out of range: must be at least 1")
        problem = limit.problem(value)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return value

    parse.__name__ = "int"
    return parse


def bounded_float(low: float, high: float):
    """An argparse ``type``: a number in [low, high] (NaN is not)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is out of range: must be in [{low}, {high}]")
        return value

    parse.__name__ = "float"
    return parse


def positive_float(text: str) -> float:
    """An argparse ``type``: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is out of range: must be a finite number above 0")
    return value


def repeated(values: Sequence) -> list[str]:
    """The values a list option (``--seeds 0 1 0``) gives more than once, as sorted text: a repeat
    would count one run or system twice."""
    return sorted({str(value) for value in values if values.count(value) > 1})


positive_int = bounded_int(1)
seed_int = bounded_int(0, MAX_SEED)
