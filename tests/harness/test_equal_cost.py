"""The main job's equal-cost verdict: agreement, BCR ratio and its interval, placed walks."""

from __future__ import annotations

import pytest

from pddbench.harness.jobs.equal_cost import compose, placed_ladder, system_verdict
from pddbench.harness.plan.ladder_points import DEFAULT_LADDER
from pddbench.harness.rundir.ladder import LadderVerdict
from pddbench.harness.sizing.result import SizedRow


def walk(name: str, cap: float | None, lo: float, hi: float | None, basis: str = "capacity"):
    return LadderVerdict(
        system=name,
        target_pct=99.0,
        confidence=0.95,
        warmup_s=10,
        point_s=30,
        max_lag_p99_s=0.5,
        loads=[1.0],
        points=[],
        basis=basis,  # type: ignore[arg-type]
        reason="r",
        capacity_goodput=cap,
        capacity_low=lo,
        capacity_high=hi,
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


def test_ratio_interval_takes_every_corner_and_agreement_reads_the_emulated_interval() -> None:
    base = system_verdict(
        "same-dc-pd",
        "d",
        "sized",
        88.0,
        "",
        twin(10.0),
        walk("b", 10.0, 9.0, 11.0),
        ("prefill", ""),
    )
    pdd = system_verdict(
        "pdd", "d", "sized", 80.0, "", twin(7.0), walk("p", 6.0, 5.0, 6.5), ("decode TPOT", "")
    )
    v = compose([base, pdd], budget=88, sla_text="s", emulation="e", quick=False, wall_s=1)
    row = v.row("pdd")
    assert row is not None and row.bcr_ratio == pytest.approx((6 / 80) / (10 / 88))
    assert row.bcr_ratio_low == pytest.approx(5 / 11 * 88 / 80)
    assert row.bcr_ratio_high == pytest.approx(6.5 / 9 * 88 / 80)
    assert v.row("same-dc-pd").agreement == "agree"  # type: ignore[union-attr]
    assert row.agreement == "disagree" and any("DISAGREE" in n for n in v.notes)
    assert "pdd delivers -34 % [-50 %, -21 %]" in v.sentence()


def test_an_open_interval_or_a_load_bounded_walk_gives_no_closed_ratio() -> None:
    base = system_verdict(
        "b", "d", "sized", 88.0, "", None, walk("b", 10.0, 0.0, 11.0), ("prefill", "")
    )
    open_ = system_verdict(
        "o", "d", "sized", 88.0, "", None, walk("o", 6.0, 5.0, None), ("WAN", "")
    )
    bounded = system_verdict(
        "l", "d", "sized", 88.0, "", None, walk("l", 6.0, 0, None, "load-bounded"), ("none", "")
    )
    v = compose(
        [base, open_, bounded], budget=88, sla_text="s", emulation="e", quick=False, wall_s=1
    )
    o = v.row("o")
    assert o is not None and o.bcr_ratio_high is None and o.bcr_ratio_low == pytest.approx(5 / 11)
    lb = v.row("l")
    assert lb is not None and lb.bcr is None and lb.bcr_ratio is None
    assert any(n.startswith("l: no BCR (load-bounded") for n in v.notes)


def test_the_walk_starts_below_the_twins_capacity() -> None:
    placed = placed_ladder(DEFAULT_LADDER, origin_rps=4.0, twin_rps=8.0)
    rungs = [4.0 * placed.start * placed.growth**k for k in range(3)]
    assert rungs[0] < 8.0 < rungs[1]
    assert placed_ladder(DEFAULT_LADDER, None, 8.0) == DEFAULT_LADDER
    assert placed_ladder(DEFAULT_LADDER, 4.0, None) == DEFAULT_LADDER
