"""Units of metric values: the base unit a metric is computed in and how it is displayed.

Owns the conversion from a base unit (seconds, fractions, bytes, ...) to a display unit
(milliseconds, percent, GB, ...) and the formatting of a value for tables. Knows nothing
about which metric uses which unit.
"""

from __future__ import annotations

import math
from enum import StrEnum


class Unit(StrEnum):
    SECONDS = "s"
    MILLISECONDS = "ms"
    FRACTION = "fraction"
    PERCENT = "%"
    REQUESTS = "requests"
    SESSIONS = "sessions"
    REQ_PER_S = "req/s"
    SESSIONS_PER_S = "sessions/s"
    TOKENS = "tokens"
    TOK_PER_S = "tok/s"
    BYTES = "B"
    GIGABYTES = "GB"
    BIT_PER_S = "bit/s"
    GBIT_PER_S = "Gbit/s"
    RATIO = "x"
    REQ_PER_S_PER_COST = "req/s per cost unit"


# display unit -> (base unit, factor such that display = base * factor)
_FACTORS: dict[Unit, tuple[Unit, float]] = {
    Unit.MILLISECONDS: (Unit.SECONDS, 1e3),
    Unit.PERCENT: (Unit.FRACTION, 100.0),
    Unit.GIGABYTES: (Unit.BYTES, 1e-9),
    Unit.GBIT_PER_S: (Unit.BIT_PER_S, 1e-9),
}


def factor(unit: Unit, display_unit: Unit) -> float:
    """The multiplier taking a value in ``unit`` to ``display_unit``."""
    if unit == display_unit:
        return 1.0
    base, mult = _FACTORS.get(display_unit, (None, 1.0))
    if base != unit:
        raise ValueError(f"cannot display {unit} as {display_unit}")
    return mult


def fmt(value: float | None, *, digits: int = 3) -> str:
    """A value for a table: ``-`` when missing or NaN, else ``digits`` significant digits.

    Large values get thousands separators and no exponent; small ones keep
    ``digits`` significant digits (0.0123 -> "0.0123").
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0"
    mag = abs(value)
    if mag >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    decimals = max(0, digits - 1 - math.floor(math.log10(mag)))
    return f"{value:.{decimals}f}"
