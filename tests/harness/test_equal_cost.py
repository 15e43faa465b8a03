"""The main job's equal-cost verdict: agreement, BCR ratio and its interval, placed walks."""

from __future__ import annotations

import math

import pytest

from pddbench.harness.jobs.equal_cost import compose, placed_ladder, system_verdict
from pddbench.harness.plan.ladder_points import DEFAULT_LADDER
from pddbench.harness.rundir.ladder import LadderPoint, LadderVerdict
from pddbench.harness.rundir.main_verdict import SystemVerdict
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
        "same-dc-pd", "d", "sized", 88.0, "", twin(10.19), walk("b", BASE), ("prefill", ""),
        bcr_source="emulated",
    )  # fmt: skip
    p = system_verdict(
        "pdd", "d", "sized", 80.0, "", twin(3.0), walk("p", PDD), ("decode TPOT", ""),
        bcr_source="emulated",
    )  # fmt: skip
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
    assert row.bcr_source == "emulated" and row.check_text() == ""
    assert (row.emulated_ratio, row.emulated_ratio_low, row.emulated_ratio_high) == (
        row.bcr_ratio, row.bcr_ratio_low, row.bcr_ratio_high,
    )  # fmt: skip
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


def test_over_several_seeds_the_twin_agrees_when_its_range_overlaps_the_emulated_interval() -> None:
    from pddbench.harness.jobs.equal_cost import agree

    one = twin(6.0)
    assert agree(one, "capacity", 7.0, 9.0)[0] == "disagree"  # one seed: its value alone
    seeded = one.model_copy(update={"seed_capacities": [5.1, 6.0, 7.3]})
    state, text = agree(seeded, "capacity", 7.0, 9.0)
    assert state == "agree" and "over 3 seeds 5.1-7.3" in text and "overlaps" in text
    state, text = agree(seeded, "capacity", 7.5, None)
    assert state == "disagree" and "does NOT overlap" in text and "[7.5, open]" in text
    assert agree(seeded, "load-bounded", 7.0, 9.0)[0] == "unknown"
    # an emulated interval of [0, open] checks nothing: no agreement by default
    state, text = agree(seeded, "capacity", 0.0, None)
    assert state == "unknown" and "bounds nothing" in text
    assert agree(seeded, "capacity", None, None)[0] == "unknown"
    assert agree(seeded, "capacity", 0.0, 6.0)[0] == "agree"  # a bound above checks
    row = SystemVerdict(
        system="l", deployment="d", source="sized", cost=88.0, bcr_source="twin",
        emulated_basis="capacity", agreement="unknown",
    )  # fmt: skip
    assert row.check_text() == "emulated check: none (its interval bounds nothing)"
    # a seed without a capacity does not widen the range, and the row carries every seed
    gaps = one.model_copy(update={"seed_capacities": [None, 6.0, 6.5]})
    assert agree(gaps, "capacity", 7.0, 9.0)[0] == "disagree"
    row = system_verdict("s", "d", "sized", 88.0, "", seeded, walk("s", BASE), ("prefill", ""))
    assert row.twin_seeds == [5.1, 6.0, 7.3]
    assert row.twin_text().endswith("; 3 seeds 5.1-7.3")
    assert twin_row_text(one) == "6 [0, 7.2]"


def twin_row_text(t: SizedRow) -> str:
    return system_verdict("s", "d", "sized", 88.0, "", t, walk("s", BASE), ("p", "")).twin_text()


def test_the_verdicts_bcr_is_the_twins_with_the_range_over_seed_pairs_the_walk_its_check() -> None:
    seeded = twin(10.0).model_copy(update={"seed_capacities": [9.0, 10.0, 11.0]})
    b = system_verdict("same-dc-pd", "d", "sized", 88.0, "", seeded, walk("b", BASE), ("p", ""))
    pdd_twin = twin(4.0).model_copy(update={"seed_capacities": [3.6, 4.0, 4.4]})
    p = system_verdict("pdd", "d", "sized", 80.0, "", pdd_twin, walk("p", PDD), ("decode", ""))
    v = compose([b, p], budget=88, sla_text="s", emulation="emulated WAN", quick=False, wall_s=1)
    row = v.row("pdd")
    assert row is not None and row.bcr_source == "twin"
    assert row.bcr == pytest.approx(4.0 / 80) and row.emulated_bcr is not None
    assert row.bcr_ratio == pytest.approx((4.0 / 80) / (10.0 / 88))
    assert row.bcr_ratio_low == pytest.approx(3.6 / 11.0 * 88 / 80)  # every pair of seeds
    assert row.bcr_ratio_high == pytest.approx(4.4 / 9.0 * 88 / 80)
    assert row.emulated_ratio is not None and row.emulated_ratio != row.bcr_ratio
    # the baseline against itself: 1 exactly, not its seeds' spread (9/11 .. 11/9)
    own = v.row("same-dc-pd")
    assert own is not None
    assert (own.bcr_ratio, own.bcr_ratio_low, own.bcr_ratio_high) == (1.0, 1.0, 1.0)
    assert (own.emulated_ratio, own.emulated_ratio_low, own.emulated_ratio_high) == (1, 1, 1)
    # the emulated walk (capacity ~6.9, interval above 4.4) disagrees: said with the figure
    assert row.agreement == "disagree" and "DISAGREES" in row.check_text()
    text = v.sentence()
    assert "on the virtual-time twin (the median of 3 deployment seeds" in text
    assert "checked by the real-time run (emulated WAN)" in text
    assert "emulated check: DISAGREES" in text
    assert any(n.startswith("BCR: the twin's capacity (the median of 3") for n in v.notes)
    # one seed: the corners of the twin intervals; a twin without a capacity: the walk's
    one = system_verdict("x", "d", "sized", 80.0, "", twin(4.0), walk("x", PDD), ("d", ""))
    lone = compose([b, one], budget=88, sla_text="s", emulation="e", quick=False, wall_s=1)
    got = lone.row("x")
    assert got is not None and got.bcr_ratio_low == pytest.approx(0.0)  # x's twin low is 0
    assert got.bcr_ratio_high is None  # the baseline's twin interval starts at 0: open
    bare = twin(4.0).model_copy(update={"basis": "load-bounded"})
    w = system_verdict("w", "d", "sized", 80.0, "", bare, walk("w", PDD), ("d", ""))
    assert w.bcr_source == "emulated" and w.bcr == w.emulated_bcr
    mixed = compose([b, w], budget=88, sla_text="s", emulation="e", quick=False, wall_s=1)
    m = mixed.row("w")
    assert m is not None and m.bcr_ratio is None and "no ratio" in m.reason


def test_the_agreement_is_read_against_the_check_twin_with_this_hosts_costs() -> None:
    hardware = twin(7.5).model_copy(update={"seed_capacities": [7.2, 7.5, 7.6]})
    hosted = twin(5.9).model_copy(update={"seed_capacities": [5.5, 5.9, 6.3]})
    # the emulated walk (PDD: ~5.97, its interval within [5.9, 6]) against each
    bare = system_verdict("s", "d", "sized", 88.0, "", hardware, walk("s", PDD), ("p", ""))
    row = system_verdict(
        "s", "d", "sized", 88.0, "", hardware, walk("s", PDD), ("p", ""),
        check=hosted, host_s=0.12,
    )  # fmt: skip
    assert bare.agreement == "disagree" and row.agreement == "agree"
    assert row.agreement_text.startswith("with this host's costs (120 ms a request): twin 5.9")
    assert (row.check_capacity, row.check_seeds, row.host_s) == (5.9, [5.5, 5.9, 6.3], 0.12)
    assert row.bcr == pytest.approx(7.5 / 88.0)  # the verdict's BCR stays the hardware twin's
