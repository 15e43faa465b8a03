"""Capacity as the crossing of the SLA target, with its bootstrap interval."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pddbench.harness.analysis.crossing import _fit, crossing
from pddbench.harness.rundir.ladder import LadderPoint


def point(rate: float, met: int, n: int, **kw: object) -> LadderPoint:
    return LadderPoint(
        index=0, load_scale=1.0, trace_start_s=0.0, trace_duration_s=1.0, planned_rps=rate,
        requests=n, met=met, met_by={}, warmup_excluded=0, attainment=met / n,
        attainment_low=0.0, attainment_high=1.0, goodput=0.0, offered_rps=rate, **kw,
    )  # fmt: skip


def test_the_crossing_is_interpolated_in_log_rate_between_the_bracketing_points() -> None:
    c = crossing([point(4.0, 1000, 1000), point(16.0, 800, 1000)], 0.99)
    # attainment 1.0 at log 4, 0.8 at log 16: 0.99 is 1/20 of the way
    assert c.basis == "crossing"
    assert c.rate == pytest.approx(math.exp(math.log(4) + (0.01 / 0.2) * math.log(4)))
    assert c.goodput(c.rate) == pytest.approx(c.rate * 0.99)  # type: ignore[operator]
    assert c.low is not None and c.high is not None and c.low <= c.rate <= c.high  # type: ignore[operator]


def test_many_requests_narrow_the_interval() -> None:
    few = crossing([point(4, 99, 100), point(5, 97, 100), point(6, 90, 100)], 0.99)
    many = crossing([point(4, 9990, 10000), point(5, 9700, 10000), point(6, 9000, 10000)], 0.99)
    assert many.high - many.low < few.high - (few.low or 0)  # type: ignore[operator]


def test_no_miss_is_load_bounded_and_no_met_point_is_below_the_walk() -> None:
    up = crossing([point(4, 400, 400), point(8, 400, 400)], 0.99)
    assert up.basis == "load-bounded" and up.rate is None
    down = crossing([point(4, 300, 400), point(8, 100, 400)], 0.99)
    assert down.basis == "below the walk" and down.rate is None and down.low == 0.0


def test_a_point_left_busy_or_excluded() -> None:
    busy = crossing([point(4, 400, 400), point(8, 400, 400, backlog="busy")], 0.99)
    assert busy.basis == "crossing" and busy.rate is not None and busy.rate < 8
    skip = crossing([point(4, 400, 400), point(8, 10, 400, excluded="lag")], 0.99)
    assert skip.basis == "load-bounded"


def test_it_is_deterministic() -> None:
    pts = [point(3, 390, 400), point(6, 396, 400), point(9, 350, 400)]
    assert crossing(pts, 0.99) == crossing(pts, 0.99)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.integers(1, 50)), min_size=1, max_size=12))
def test_the_fit_is_non_increasing_and_keeps_the_weighted_mean(rows: list[tuple[float, int]]):
    import numpy as np

    a = np.array([r[0] for r in rows])
    w = np.array([float(r[1]) for r in rows])
    f = _fit(a, w)
    assert all(f[i] >= f[i + 1] - 1e-12 for i in range(len(f) - 1))
    assert float((f * w).sum()) == pytest.approx(float((a * w).sum()))
