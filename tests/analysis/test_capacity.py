"""Capacity files: a ladder verdict reads back as the curve a report draws."""

from __future__ import annotations

from pddbench.harness.analysis.capacity import CapacityCurve, curve_from_verdict
from pddbench.harness.analysis.rundir import read_capacity
from pddbench.harness.plan.ladder import LadderSearch, PointMeasure
from pddbench.harness.plan.ladder_points import LadderSettings


def _verdict(mets: list[int]):  # type: ignore[no-untyped-def]
    search = LadderSearch(
        LadderSettings(growth=2.0), target_pct=99.0, origin_s=0.0, base_speedup=1.0
    )
    for met in mets:
        w = search.next_window()
        assert w is not None
        search.record(PointMeasure(w, 400, met, {"ttft": met}, 5, 60.0, 400 / 60.0))
    return search.verdict("pdd")


def test_verdict_file_reads_back_as_a_curve(tmp_path) -> None:
    v = _verdict([400, 400, 390])
    path = tmp_path / "capacity.json"
    path.write_text(v.model_dump_json())
    curve = read_capacity(path)
    assert curve == curve_from_verdict(v)
    assert [p.load_scale for p in curve.points] == [1.0, 2.0, 4.0]
    assert curve.capacity_load_scale == 2.0


def test_a_load_bounded_verdict_draws_no_capacity_mark() -> None:
    assert curve_from_verdict(_verdict([400] * 6)).capacity_load_scale is None


def test_older_curve_files_still_read(tmp_path) -> None:
    old = CapacityCurve(system="pdd", target_pct=99.0, points=[], capacity_load_scale=2.0)
    path = tmp_path / "capacity.json"
    path.write_text(old.model_dump_json())
    assert read_capacity(path) == old
