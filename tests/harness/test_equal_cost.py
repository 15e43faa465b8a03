"""The main job's equal-cost verdict: agreement, BCR ratio and its interval, placed walks."""

from __future__ import annotations

import math

import pytest

from pddbench.harness.jobs.equal_cost import compose, placed_ladder, system_verdict
from pddbench.harness.plan.ladder_points import DEFAULT_LADDER
from pddbench.harness.rundir.ladder import LadderPoint, LadderVerdict
from pddbench.harness.sizing.result import SizedRow


def pts(rows: list[tuple[float, int, int]]) -> list[LadderPoint]:
    return [
        LadderPoint(
            index=i,
            load_scale=1.0,
            trace_start_s=0.0,
            trace_duration_s=1.0,
            planned_rps=r,
            requests=n,
            met=m,
            met_by={},
            warmup_excluded=0,
            attainment=m / n,
            attainment_low=0.0,
            attainment_high=1.0,
            goodput=0.0,
            offered_rps=r,
        )
        for i, (r, m, n) in enumerate(rows)
    ]


def walk(name: str, rows: list[tuple[float, int, int]], basis: str = "capacity") -> LadderVerdict:
    return LadderVerdict(
        system=name,
        target_pct=99.0,
        confidence=0.95,
        warmup_s=10,
        point_s=30,
        max_lag_p99_s=0.5,
        loads=[1.0],
        points=pts(rows),
        basis=basis,  # type: ignore[arg-type]
        reason="r",
    )


def twin(cap: float) -> SizedRow:
    return SizedRow(
        deployment="d",
        source="sized",
        cost=88,
        bound_rps=10,
        bound_resource="prefill",
        basis="capacity",
        capacity=cap,
        capacity_low=0.0,
        capacity_high=cap * 1.2,
    )


BASE = [(5.0, 4000, 4000), (10.0, 3990, 4000), (12.0, 3800, 4000)]
PDD = [(4.0, 4000, 4000), (6.0, 3980, 4000), (8.0, 3000, 4000)]


def test_ratio_interval_takes_every_corner_and_agreement_reads_the_emulated_interval() -> None:
    b = system_verdict(
        "same-dc-pd", "d", "sized", 88.0, "", twin(10.19), walk("b", BASE), ("prefill", "")
    )
    p = system_verdict(
        "pdd", "d", "sized", 80.0, "", twin(3.0), walk("p", PDD), ("decode TPOT", "")
    )
    v = compose([b, p], budget=88, sla_text="s", emulation="e", quick=False, wall_s=1)
    row, base = v.row("pdd"), v.row("same-dc-pd")
    assert row is not None and base is not None
    cross = math.exp(math.log(10) + 0.0075 / 0.0475 * math.log(1.2))  # 10 -> 12 req/s
    assert base.emulated_capacity == pytest.approx(cross * 0.99)
    assert row.bcr == pytest.approx(row.emulated_capacity / 80.0)  # type: ignore[operator]
    assert row.bcr_ratio == pytest.approx(row.bcr / base.bcr)  # type: ignore[operator]
    assert row.bcr_ratio_low == pytest.approx(row.emulated_low / base.emulated_high * 88 / 80)  # type: ignore[operator]
    assert row.bcr_ratio_high == pytest.approx(row.emulated_high / base.emulated_low * 88 / 80)  # type: ignore[operator]
    assert row.bcr_ratio_low < row.bcr_ratio < row.bcr_ratio_high  # type: ignore[operator]
    assert base.agreement == "agree"
    assert row.agreement == "disagree" and any("DISAGREE" in n for n in v.notes)
    assert "pdd delivers" in v.sentence() and "bound by decode TPOT" in v.sentence()


def test_a_load_bounded_walk_gives_no_bcr_and_says_so() -> None:
    b = system_verdict("b", "d", "sized", 88.0, "", None, walk("b", BASE), ("prefill", ""))
    up = [(4.0, 400, 400), (8.0, 400, 400)]
    lb = system_verdict(
        "l", "d", "sized", 88.0, "", None, walk("l", up, "load-bounded"), ("none", "")
    )
    v = compose([b, lb], budget=88, sla_text="s", emulation="e", quick=False, wall_s=1)
    row = v.row("l")
    assert row is not None and row.emulated_basis == "load-bounded"
    assert row.bcr is None and row.bcr_ratio is None
    assert any(n.startswith("l: no BCR (load-bounded") for n in v.notes)


def test_the_walk_starts_below_the_twins_capacity() -> None:
    placed = placed_ladder(DEFAULT_LADDER, origin_rps=4.0, twin_rps=8.0)
    rungs = [4.0 * placed.start * placed.growth**k for k in range(3)]
    assert rungs[0] < 8.0 < rungs[1]
    assert placed_ladder(DEFAULT_LADDER, None, 8.0) == DEFAULT_LADDER
    assert placed_ladder(DEFAULT_LADDER, 4.0, None) == DEFAULT_LADDER
