"""The twin check's verdicts: within the tolerance, within the twin's seed spread, outside."""

from __future__ import annotations

import math

from pddbench.twin.check import rows

NAN = math.nan


def _row(figure: str, emulated: float, virtual: float, seeds: list[float] | None = None):
    s = [{figure: x} for x in seeds] if seeds is not None else None
    (row,) = rows({figure: emulated}, {figure: virtual}, None, s)
    return row


def test_within_tolerance_is_ok_whatever_the_spread() -> None:
    assert _row("TTFT P50 s", 1.0, 1.1).verdict == "ok"
    assert _row("TTFT P50 s", 1.0, 1.1, [3.0, 4.0]).verdict == "ok"


def test_outside_tolerance_without_ensemble_is_outside() -> None:
    row = _row("TTFT P90 s", 1.131, 1.586)
    assert row.spread is None and row.in_spread is None
    assert row.verdict == "OUTSIDE"


def test_emulated_inside_the_seed_spread_is_marked_so() -> None:
    # same-dc-pd at x2.36 (bench_twin_check): emulated 1.131 s, twin 1.586 at seed 0 and
    # 1.02-1.89 over seeds 0-4
    row = _row("TTFT P90 s", 1.131, 1.586, [1.179, 1.021, 1.893, 1.655])
    assert row.spread == (1.021, 1.893)
    assert row.verdict == "in spread"


def test_spread_ends_widen_by_the_tolerance() -> None:
    # 1.0 is 13 % below the spread's low end 1.15: within ±15 % of it
    assert _row("TTFT P50 s", 1.0, 1.5, [1.15]).verdict == "in spread"
    # 2.243 s lies 18 % above 1.893: outside the widened spread
    row = _row("TTFT P90 s", 2.243, 1.586, [1.179, 1.021, 1.893, 1.655])
    assert row.verdict == "OUTSIDE"


def test_pp_tolerance_and_figures_without_a_bar() -> None:
    assert _row("SLA attainment %", 96.0, 98.5, [97.5]).verdict == "in spread"
    assert _row("SLA attainment %", 95.0, 98.5, [97.5]).verdict == "OUTSIDE"
    assert _row("SLA attainment %", 95.0, 98.5, [97.5, 98.0]).spread == (97.5, 98.5)
    assert _row("E2E P99 s", 10.0, 30.0, [5.0]).verdict == ""


def test_nan_seeds_are_left_out_of_the_spread() -> None:
    row = _row("TTFT P50 s", 1.0, 2.0, [NAN, 1.05])
    assert row.spread == (1.05, 2.0)
    assert row.verdict == "in spread"
