"""argparse types for the project's command lines (the probe, the profiler, the built-in
trainer): a bad value is one line naming it. Imports nothing heavy."""

from __future__ import annotations

import argparse
from typing import Callable


def int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type for an integer of at least `low` (and at most `high`, where given)."""
    def parse(text: str) -> int:
        """`text` as an integer within the bounds, else ArgumentTypeError naming the value."""
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum, {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{value} is above the maximum, {high}")
        return value
    return parse


def positive_float(text: str) -> float:
    """An argparse type: `text` as a number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not above 0")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: `text` as a number of 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is below 0")
    return value
