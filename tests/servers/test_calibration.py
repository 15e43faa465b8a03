"""The compute model against public measured serving points (profiles/calibration.toml)."""

from __future__ import annotations

import pytest

from pddbench.servers.calibration import BAND, Row, evaluate, load_points, table

ROWS = table()


def _id(row: Row) -> str:
    return row.point.id


@pytest.mark.parametrize("row", ROWS, ids=_id)
def test_model_matches_each_public_point_or_its_row_says_why(row: Row) -> None:
    p = row.point
    if p.reason:
        assert p.expected_ratio is not None, f"{p.id}: a divergence needs its expected ratio"
        assert row.ratio == pytest.approx(p.expected_ratio, rel=0.10)
    else:
        lo, hi = BAND
        assert lo <= row.ratio <= hi, f"{p.id}: model/measured = {row.ratio:.2f}"


def test_points_cite_hardware_measurements_only() -> None:
    points = load_points()
    assert len(points) >= 10
    for p in points:
        assert p.source and p.url.startswith("https://") and p.quote, p.id
        assert "PDD" not in p.source and "pdd" not in p.url.lower(), p.id
    fitted = [p for p in points if p.fitted]
    # a few points fit efficiencies; most of the table checks them independently
    assert 0 < len(fitted) <= len(points) // 2


def test_the_table_reacts_to_the_model() -> None:
    p = next(p for p in load_points() if p.id == "sglang-decode-2k")
    row = evaluate(p)
    assert row.model_tokens_per_s > 0 and row.step.seconds > row.step.latency_s > 0
