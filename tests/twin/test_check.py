"""The twin check's verdicts: within the tolerance, within the twin's seed spread, outside."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from pddbench.harness.rundir.ladder import LadderVerdict
from pddbench.twin.check import PointRun, ladder_point, rows

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


def test_a_figure_missing_on_one_side_is_not_judged() -> None:
    row = _row("SLA attainment %", 98.49, NAN)
    assert row.within is None and row.verdict == "n/a"
    assert _row("SLA attainment %", NAN, 96.5, [97.0]).verdict == "n/a"
    assert _row("RLD share %", NAN, NAN).verdict == "ok"  # both sides have none


def _walk(system: str, points: list[tuple[int, float, float]]) -> LadderVerdict:
    """A walk's verdict file as the ladder writes it (only the fields the check reads vary)."""
    point = {"load_scale": 1.0, "trace_duration_s": 60.0, "requests": 400, "met_by": {}}
    point |= {"warmup_excluded": 0, "attainment_low": 0.0, "attainment_high": 1.0}
    point |= {"goodput": 1.0, "offered_rps": 1.0}
    walk = {"system": system, "target_pct": 99.0, "confidence": 0.95, "warmup_s": 10}
    walk |= {"point_s": 46, "max_lag_p99_s": 0.5, "loads": [2.34, 1.7], "basis": "capacity"}
    walk["reason"] = "r"
    walk["points"] = [
        point | {"index": i, "trace_start_s": t, "met": round(400 * a), "attainment": a}
        for i, t, a in points
    ]
    return LadderVerdict.model_validate(walk)


def test_a_points_attainment_is_the_walks_verdict_on_that_point(tmp_path: Path) -> None:
    same = [(0, 1832467.08, 0.9849), (1, 1832467.08, 0.992)]
    # the twin's walk: the verdict only in the ladder's folder, beside a point's folder
    # and another system's walk over the same window
    (tmp_path / "a-same-dc-pd-ladder-1").mkdir()
    _walk("same-dc-pd", same).save(tmp_path / "a-same-dc-pd-ladder-1")
    (tmp_path / "a-pdd-ladder-2").mkdir()
    _walk("pdd", [(1, 1832467.08, 0.5)]).save(tmp_path / "a-pdd-ladder-2")
    point = tmp_path / "b-same-dc-pd-x1.7"
    point.mkdir()
    got = ladder_point(point, "same-dc-pd", 1, 1832467.0804)
    assert got is not None and got.attainment == 0.992
    assert ladder_point(point, "same-dc-pd", 2, 1832467.08) is None
    assert ladder_point(point, "same-dc-pd", 1, 1832000.0) is None  # another window
    # the emulated walk copies the whole walk's verdict into each point's folder: the
    # point's own entry, not the first
    _walk("same-dc-pd", same).save(point)
    got = ladder_point(point, "same-dc-pd", 1, 1832467.08)
    assert got is not None and got.attainment == 0.992


def _point(index: int, start: float, point_s: float, scale: float) -> PointRun:
    return PointRun(Path("p"), "pdd", "virtual", index, start, scale, pd.DataFrame(), None, None,
                    point_s)  # fmt: skip


def test_points_pair_only_over_the_same_load_and_window() -> None:
    # run 11's pdd walks: the third point at x1.00059 measured 75 s emulated and 81 s in
    # the twin (the walks had parted): another run, not the same point
    a = _point(2, 1834452.1, 75.0, 1.000586873792366)
    assert a.key == _point(2, 1834452.1004, 75.0, 1.0005868).key
    assert a.key != _point(2, 1834452.1, 81.0, 1.000586873792366).key
    assert a.key != _point(2, 1834452.1, 75.0, 1.101).key
    assert a.key != _point(3, 1834452.1, 75.0, 1.000586873792366).key
