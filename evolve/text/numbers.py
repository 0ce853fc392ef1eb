"""Numbers as the commands print them: one place, so every table reads alike.

``evolve.cli.output`` re-exports these for the commands; workflows use them for the
progress lines they say (the cli package sits above them).
"""

from __future__ import annotations

import math


def pct(x: float | None) -> str:
    """An APE fraction as a percentage, or '-'."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{100.0 * x:.1f}%"


def num(x: float | None, digits: int = 4) -> str:
    """A fixed-point number, '-' for None or NaN, 'inf' for infinity."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return "inf" if math.isinf(x) else f"{x:.{digits}f}"


def percent(x: float, digits: int = 1, signed: bool = False) -> str:
    """A fraction as a percentage number, no sign of percent, no special cases (infinity
    is ``inf``, NaN ``nan``, as Python prints them): ``evolve generalize``'s table and
    lines, which add their own ``%`` (``signed``: the step-time sensitivity, ``+1.5``)."""
    return f"{100 * x:{'+' if signed else ''}.{digits}f}"
