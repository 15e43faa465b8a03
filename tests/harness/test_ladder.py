"""The shared load ladder (sans-IO): windows, Wilson intervals, exclusion, refusal, verdict."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from pddbench.harness.plan.ladder import LadderSearch, PointHealth, PointMeasure, wilson
from pddbench.harness.plan.ladder_points import (
    DEFAULT_LADDER,
    QUICK_LADDER,
    LadderSettings,
    PointWindow,
    Schedule,
    point_windows,
    powered_measure_s,
)

SETTINGS = LadderSettings(start=1.0, growth=2.0, max_points=5, point_s=50.0, warmup_s=10.0)


def test_windows_are_consecutive_disjoint_and_scale_with_load() -> None:
    ws = point_windows(SETTINGS, origin_s=1000.0, base_speedup=10.0)
    assert [w.load for w in ws] == [1, 2, 4, 8, 16]
    # a steady point measures 10 x load stretches of its measured time (each slice's
    # warm-up replays the trace just before its stretch); a cold one spans its sending
    assert ws[0].trace_start_s == 1000.0 and ws[0].trace_duration_s == 50 * 10
    cold = point_windows(dataclasses.replace(SETTINGS, steady=False), 1000.0, 10.0)
    assert cold[0].trace_duration_s == 60 * 10
    for a, b in itertools.pairwise(ws):
        assert b.trace_start_s == pytest.approx(a.trace_end_s)  # walks on, no overlap
        assert b.trace_duration_s == pytest.approx(2 * a.trace_duration_s)
    # the budget bound: every point sending, draining to the request limit, being read
    assert SETTINGS.budget_s == 5 * (10 + 50 + 60 + 5)


def test_wilson_interval() -> None:
    lo, hi = wilson(95, 100)
    assert lo == pytest.approx(0.8883, abs=1e-3) and hi == pytest.approx(0.9785, abs=1e-3)
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(385, 385)  # the smallest all-met sample that surely meets 99 %
    assert lo >= 0.99 and hi == 1.0
    assert wilson(299, 299)[0] < 0.99


def _measure(
    w: PointWindow,
    n: int,
    met: int,
    *,
    by: dict[str, int] | None = None,
    health: PointHealth | None = None,
    wall_s: float | None = None,
) -> PointMeasure:
    return PointMeasure(
        window=w,
        requests=n,
        met=met,
        met_by=by or {c: met for c in ("ttft", "tpot", "e2e")},
        warmup_excluded=7,
        measured_s=50.0,
        offered_rps=n / 50.0,
        health=health or PointHealth(schedule_lag_p99_s=0.01),
        wall_s=wall_s,
    )


def _walk(search: LadderSearch, outcomes: list[tuple[int, int]]) -> None:
    for n, met in outcomes:
        w = search.next_window()
        assert w is not None
        search.record(_measure(w, n, met))


def test_capacity_is_the_highest_point_meeting_with_an_interval() -> None:
    search = LadderSearch(SETTINGS, target_pct=99.0, origin_s=0.0, base_speedup=10.0)
    _walk(search, [(400, 400), (800, 796), (1600, 1500)])
    assert search.done  # stops at the first miss
    v = search.verdict("pdd")
    assert v.basis == "capacity" and v.capacity_load_scale == 2.0
    assert v.capacity_goodput == pytest.approx(796 / 50)
    assert v.capacity_low == pytest.approx(400 / 50)  # x1 surely met (400/400), x2 did not
    assert v.capacity_high == pytest.approx(1600 / 50)  # x4 surely missed
    assert v.measured_requests == 2800 and [p.warmup_excluded for p in v.points] == [7, 7, 7]
    assert v.points[2].attainment_high < 0.99


def test_meeting_every_point_is_load_bounded_never_a_capacity() -> None:
    search = LadderSearch(SETTINGS, target_pct=99.0, origin_s=0.0, base_speedup=1.0)
    _walk(search, [(100, 100)] * 5)
    v = search.verdict("same-dc-pd")
    assert search.done and v.basis == "load-bounded"
    assert "load-bounded" in v.describe() and "not a capacity" in v.describe()


def test_missing_at_the_lowest_load_refuses_naming_the_criterion() -> None:
    search = LadderSearch(SETTINGS, target_pct=99.0, origin_s=0.0, base_speedup=1.0)
    w = search.next_window()
    assert w is not None
    search.record(_measure(w, 1000, 973, by={"ttft": 1000, "tpot": 1000, "e2e": 973}))
    v = search.verdict("same-dc-pd")
    assert search.done and v.basis == "refused" and v.capacity_goodput is None
    assert "E2E 97.3%" in v.reason and "TTFT" not in v.reason


@pytest.mark.parametrize(
    ("health", "fragment"),
    [
        (PointHealth(schedule_lag_p99_s=2.0), "schedule lag"),
        (PointHealth(scheduler_lost_s=0.4), "emulator fell behind"),
        (PointHealth(emulated=True, probes_on=False), "link probes were off"),
    ],
)
def test_a_point_the_harness_cannot_stand_behind_is_recorded_and_excluded(
    health: PointHealth, fragment: str
) -> None:
    search = LadderSearch(SETTINGS, target_pct=99.0, origin_s=0.0, base_speedup=1.0)
    _walk(search, [(400, 400)])
    w = search.next_window()
    assert w is not None
    search.record(_measure(w, 800, 800, health=health))
    v = search.verdict("pdd")
    assert search.done and v.basis == "load-bounded" and fragment in v.reason
    assert v.points[1].excluded and fragment in v.points[1].excluded
    assert v.capacity_load_scale == 1.0 and v.measured_requests == 400  # x2 not counted


def test_unemulated_points_count_without_probes() -> None:
    assert PointHealth(emulated=False, probes_on=False).exclusion(SETTINGS) is None


def test_progress_has_an_eta() -> None:
    search = LadderSearch(SETTINGS, target_pct=99.0, origin_s=0.0, base_speedup=1.0)
    assert search.progress(0.0) == "point 1/<=5 (x1, 60 s): 0 done in 0m00s, ETA <= 10m25s"
    _walk(search, [(100, 100)])
    assert search.progress(70.0) == "point 2/<=5 (x2, 60 s): 1 done in 1m10s, ETA <= 4m40s"


# -- independence: consecutive points share no session and no prompt prefix ----------------
def test_consecutive_points_share_no_session_and_no_prefix_beyond_other_sessions() -> None:
    import numpy as np

    from pddbench.harness.config.replay import Selection
    from pddbench.harness.plan.ladder import window_selection
    from pddbench.harness.plan.sessions import plan_requests, task_groups
    from pddbench.workloads.schema import Col
    from pddbench.workloads.synth import SynthOptions, synthesise
    from pddbench.workloads.synth_profile import load_profile

    table = synthesise(load_profile("jan-feb"), SynthOptions(sessions=400, days=0.5)).table
    groups = task_groups(table)
    hashes = table.column(Col.BLOCK_HASHES).to_pylist()
    # hashes that different task groups of the trace share anyway (agent system prompts)
    owners: dict[int, set[str]] = {}
    for g, hs in zip(groups.tolist(), hashes, strict=True):
        for h in hs:
            owners.setdefault(h, set()).add(g)
    shared_anyway = {h for h, gs in owners.items() if len(gs) > 1}

    settings = LadderSettings(start=1.0, growth=2.0, max_points=3, point_s=300.0, warmup_s=0.0)
    arrival = table.column(Col.ARRIVAL).to_numpy()
    windows = point_windows(settings, origin_s=float(arrival.min()), base_speedup=10.0)
    base = Selection(speedup=10.0)

    def point(w: PointWindow) -> tuple[set[str], set[int]]:
        planned = plan_requests(table, window_selection(base, w, 10.0))
        assert planned, "a point replays nothing: the test would prove nothing"
        rows = [r.row for r in planned]
        return {r.session_id for r in planned}, {h for i in rows for h in hashes[i]}

    for a, b in itertools.pairwise(windows):
        (sa, ha), (sb, hb) = point(a), point(b)
        assert not sa & sb  # no session sent twice
        common = ha & hb
        assert common <= shared_anyway  # only what different sessions share anyway
        assert len(common) < 0.2 * len(hb)
    # the old search (one selection replayed at every load) shares every session
    same = [
        plan_requests(
            table,
            Selection(
                window_start_s=windows[0].trace_start_s, window_duration_s=600.0, speedup=10.0 * x
            ),
        )
        for x in (1.0, 2.0)
    ]
    assert {r.session_id for r in same[0]} == {r.session_id for r in same[1]}
    assert np.isfinite(arrival).all()


def test_measure_point_excludes_warmup_and_censors_cut_requests_that_could_still_meet() -> None:
    from pddbench.harness.analysis.recordset import RecordSet
    from pddbench.harness.config.sla import SLA
    from pddbench.harness.jobs.ladder import measure_point
    from tests.analysis.runs import rows_table

    settings = LadderSettings(point_s=50.0, warmup_s=10.0, request_limit_s=60.0)
    base = dict(
        session_id="s",
        turn_index=0,
        ttft_s=0.5,
        tpot_s=0.01,
        e2e_s=2.0,
        output_tokens=100,
        expected_output_tokens=100,
        actual_send_s=None,
    )
    rows = [
        dict(base, request_id="warm", intended_send_s=3.0),
        dict(base, request_id="ok", intended_send_s=12.0),
        dict(
            base,
            request_id="long-cut",
            intended_send_s=20.0,
            status="timeout",
            expected_output_tokens=5000,
            e2e_s=60.0,
        ),  # bound 5 + 150 s > 60 s: censored
        dict(
            base, request_id="short-cut", intended_send_s=30.0, status="timeout", e2e_s=60.0
        ),  # bound 30 s < 60 s: a miss
        dict(base, request_id="late", intended_send_s=65.0),  # after the measured window
    ]
    for r in rows:
        r["actual_send_s"] = r["intended_send_s"]
    w = point_windows(settings, 0.0, 1.0)[0]
    m = measure_point(
        RecordSet.from_arrow(rows_table(rows)),
        SLA(ttft_s=5.0, tpot_s=0.03, e2e_s=30.0),
        w,
        settings,
        emulated=False,
        probes_on=False,
    )
    assert (m.requests, m.met, m.censored, m.warmup_excluded) == (2, 1, 1, 1)
    assert m.offered_rps == pytest.approx(2 / 50) and m.health.exclusion(settings) is None


def test_goodput_at_capacity_is_the_most_any_meeting_point_achieved() -> None:
    """Walking on through the trace, a higher load scale may meet a quieter stretch."""
    search = LadderSearch(SETTINGS, target_pct=99.0, origin_s=0.0, base_speedup=10.0)
    _walk(search, [(800, 800), (500, 500), (1600, 1000)])
    v = search.verdict("pdd")
    assert v.basis == "capacity" and v.capacity_load_scale == 2.0
    assert v.capacity_goodput == pytest.approx(800 / 50)


# -- power, bisection and the time budget ---------------------------------------------------
POWERED = LadderSettings(4.0, 2.0, 4, 30.0, 10.0, request_limit_s=45.0)  # x4 ... x32
POWERED = dataclasses.replace(POWERED, min_requests=400, max_point_s=120.0, bisect_points=2)


def _uniform(rate_per_load: float) -> Schedule:
    """A trace whose schedule offers ``rate_per_load × load`` requests per wall second."""

    def offsets(start_s: float, load: float, send_s: float) -> list[float]:
        step = 1.0 / (rate_per_load * load)
        return [i * step for i in range(int(send_s / step))]

    return offsets


def test_the_default_ladders_state_their_power() -> None:
    lo, _ = wilson(DEFAULT_LADDER.min_requests, DEFAULT_LADDER.min_requests)
    assert lo >= 0.99  # a default point with no miss surely meets a 99 % target
    assert wilson(QUICK_LADDER.min_requests, QUICK_LADDER.min_requests)[0] < 0.99  # quick: not


def test_a_point_measures_until_the_trace_offers_enough_requests() -> None:
    sched = _uniform(1.0)  # 1 req/s per unit of load
    at = powered_measure_s(POWERED, sched(0.0, 4.0, POWERED.send_s))
    assert at == 101.0  # 400 requests at 4 req/s after the warm-up
    assert powered_measure_s(POWERED, sched(0.0, 32.0, POWERED.send_s)) == 30.0  # the minimum
    assert powered_measure_s(POWERED, sched(0.0, 1.0, POWERED.send_s)) == 120.0  # the cap
    search = LadderSearch(POWERED, target_pct=99.0, origin_s=0.0, base_speedup=10.0, schedule=sched)
    w = search.next_window()
    assert w is not None and w.measure_s == 101.0 and w.send_s == 111.0
    assert w.trace_duration_s == pytest.approx(101.0 * 10 * 4)  # measured stretches


def test_after_the_first_miss_it_bisects_on_fresh_stretches_of_the_trace() -> None:
    search = LadderSearch(
        POWERED, target_pct=99.0, origin_s=0.0, base_speedup=10.0, schedule=_uniform(1.0)
    )
    seen: list[PointWindow] = []
    # x4 and x8 meet, x16 misses; the bisection x11.3 meets, x13.5 misses
    for ok in (True, True, False, True, False):
        w = search.next_window()
        assert w is not None
        seen.append(w)
        search.record(_measure(w, 450, 450 if ok else 400))
    assert search.next_window() is None
    # a uniform trace: the rate rungs' load scales are the load ladder's (to the tolerance)
    assert [w.load for w in seen] == pytest.approx([4, 8, 16, 11.31, 13.45], rel=0.01)
    assert [w.bisect for w in seen] == [False, False, False, True, True]
    for a, b in itertools.pairwise(seen):  # bisection points walk on through the trace too
        assert b.trace_start_s == pytest.approx(a.trace_end_s)
    v = search.verdict("pdd")
    assert v.basis == "capacity" and v.capacity_load_scale == pytest.approx(11.31, abs=0.01)
    assert "2 bisection points" in v.reason
    assert v.measured_requests == 5 * 450 and v.points[3].bisect and not v.points[2].bisect
    assert v.capacity_low == pytest.approx(450 / 50)  # 450 of 450: surely met
    assert v.capacity_high is not None  # 400 of 450: surely missed


def test_the_time_budget_bounds_the_walk_and_says_so() -> None:
    settings = LadderSettings(
        start=1.0, growth=2.0, max_points=5, point_s=50.0, warmup_s=10.0, time_budget_s=300.0
    )
    search = LadderSearch(settings, target_pct=99.0, origin_s=0.0, base_speedup=1.0)
    assert settings.budget_s == 300.0
    _walk(search, [(100, 100), (100, 100)])  # each reserved 10 + 50 + 60 + 5 = 125 s
    assert search.next_window() is None and search.spent_s == 250.0
    v = search.verdict("pdd")
    assert v.basis == "load-bounded" and "time budget" in v.reason and v.spent_s == 250.0


def test_the_budget_shortens_a_point_it_can_still_hold_and_counts_real_wall_time() -> None:
    settings = dataclasses.replace(POWERED, time_budget_s=400.0)
    search = LadderSearch(
        settings, target_pct=99.0, origin_s=0.0, base_speedup=10.0, schedule=_uniform(1.0)
    )
    w = search.next_window()
    assert w is not None
    search.record(_measure(w, 400, 400, wall_s=300.5))  # ran long: 300.5 s of the 400
    w = search.next_window()
    # 99.5 s left, 60 s of it reserved for warm-up, draining and reading: 39 s measured
    assert w is not None and w.measure_s == 39.0
    search.record(_measure(w, 200, 100, wall_s=90.0))
    assert search.next_window() is None
    v = search.verdict("pdd")
    assert v.basis == "capacity" and "time budget" in v.reason  # no room to bisect


def test_an_excluded_bisection_point_keeps_the_capacity() -> None:
    search = LadderSearch(POWERED, target_pct=99.0, origin_s=0.0, base_speedup=10.0)
    _walk(search, [(400, 400), (400, 300)])
    w = search.next_window()
    assert w is not None and w.bisect
    search.record(_measure(w, 400, 400, health=PointHealth(schedule_lag_p99_s=3.0)))
    v = search.verdict("pdd")
    assert search.done and v.basis == "capacity" and v.capacity_load_scale == 4.0
    assert "excluded" in v.reason and v.points[2].excluded


def test_the_main_job_plan_fits_its_time_and_is_the_same_for_every_system() -> None:
    from pddbench.harness.jobs.main_job import (
        CHECK_SEEDS,
        DEPLOY_ALLOWANCE_S,
        JOB_BUDGET_S,
        REPORT_RESERVE_S,
        TWIN_SEEDS,
        TWIN_WALK_ALLOWANCE_S,
        main_ladder,
        plan_text,
    )

    s = main_ladder(3)
    assert dataclasses.replace(s, time_budget_s=None) == DEFAULT_LADDER  # one ladder for all
    planned = 3 * (DEPLOY_ALLOWANCE_S + s.budget_s) + REPORT_RESERVE_S
    assert planned <= JOB_BUDGET_S
    text = plan_text(s, 3)
    assert "3 systems" in text and "x1, x2, x4, x8" in text and "planned <= 30.0 min" in text
    # the twin's seeded walks come out of each system's share, not on top of the job's time
    seeded = main_ladder(3, twin_walks=TWIN_SEEDS + CHECK_SEEDS)
    twin_s = TWIN_WALK_ALLOWANCE_S * (TWIN_SEEDS + CHECK_SEEDS)
    assert seeded.budget_s == pytest.approx(s.budget_s - twin_s)
    text = plan_text(seeded, 3, twin_walks=TWIN_SEEDS, check_walks=CHECK_SEEDS)
    assert f"twin's walk at {TWIN_SEEDS} seed(s) + the check's at {CHECK_SEEDS}" in text
    assert "planned <= 30.0 min" in text
    # the budget holds the ladder's climb with each point's worst-case draining
    sched = _uniform(2.0 / s.start)  # the first rung offers 2 req/s
    climb = sum(
        s.point_cost_s(powered_measure_s(s, sched(0.0, x, s.send_s))) for x in s.loads()[:3]
    )
    assert climb < s.budget_s


def test_the_points_table_shows_every_point_with_its_interval_and_exclusion() -> None:
    from pddbench.harness.jobs.main_job import points_table

    search = LadderSearch(POWERED, target_pct=99.0, origin_s=0.0, base_speedup=10.0)
    _walk(search, [(400, 400), (400, 300)])
    w = search.next_window()
    assert w is not None
    search.record(_measure(w, 400, 400, health=PointHealth(schedule_lag_p99_s=3.0)))
    t = points_table([search.verdict("pdd")])
    assert [r[1].text for r in t.rows] == ["x4", "x8", "x5.66 (bisect)"]
    assert t.rows[0][7].text == "100.0% [99.0%, 100.0%]"
    assert t.rows[2][8].text.startswith("schedule lag") and t.rows[0][8].text == "no"


STEPPING = dataclasses.replace(SETTINGS, start=4.0, descend_points=2, bisect_points=1)


def test_a_first_rung_miss_steps_down_to_a_capacity_on_fresh_stretches() -> None:
    search = LadderSearch(STEPPING, target_pct=99.0, origin_s=0.0, base_speedup=1.0)
    loads = []
    for n, met in [(400, 300), (400, 392), (400, 400), (400, 400)]:
        w = search.next_window()
        assert w is not None and w.bisect == (len(loads) == 3)
        loads.append(w.load)
        search.record(_measure(w, n, met))
    # x4 missed, x2 missed, x1 met, then one bisection between x1 and x2
    assert loads == [4.0, 2.0, 1.0, pytest.approx(2**0.5)]
    assert search.done
    v = search.verdict("pdd")
    assert v.basis == "capacity" and v.capacity_load_scale == pytest.approx(2**0.5)
    starts = [p.trace_start_s for p in v.points]
    assert starts == sorted(starts) and len(set(starts)) == 4  # every point walks on
    assert v.descend_points == 2


def test_refused_only_when_the_lowest_step_down_misses_too() -> None:
    search = LadderSearch(STEPPING, target_pct=99.0, origin_s=0.0, base_speedup=1.0)
    assert search.points_left() == STEPPING.max_points + STEPPING.bisect_points
    by = {"ttft": 400, "tpot": 300, "e2e": 400}
    for expected in (4.0, 2.0, 1.0):
        w = search.next_window()
        assert w is not None and w.load == expected
        search.record(_measure(w, 400, 300, by=by))
    assert search.done
    v = search.verdict("cross-dc-pd")
    assert v.basis == "refused" and "lowest load x1" in v.reason and "TPOT 75.0%" in v.reason
    assert v.capacity_goodput is None


def test_an_excluded_step_down_is_refused_not_a_capacity() -> None:
    search = LadderSearch(STEPPING, target_pct=99.0, origin_s=0.0, base_speedup=1.0)
    w = search.next_window()
    assert w is not None
    search.record(_measure(w, 400, 300))
    w = search.next_window()
    assert w is not None and w.load == 2.0
    search.record(_measure(w, 400, 400, health=PointHealth(schedule_lag_p99_s=2.0)))
    v = search.verdict("pdd")
    assert search.done and v.basis == "refused" and "step down to x2 was excluded" in v.reason


def test_a_point_that_leaves_a_backlog_misses_whatever_its_attainment() -> None:
    """PDD's relay answers a request while its P→MD transfer still crosses the WAN: a load
    the WAN cannot carry meets the SLA while the transfers pile up (256 flows, 544 GB of
    modelled KV still in flight 30 s after a 3.84 req/s point). Such a point did not
    sustain its load: a miss, stated as such, never the capacity."""
    search = LadderSearch(STEPPING, target_pct=99.0, origin_s=0.0, base_speedup=1.0)
    backlog = "still busy after 30 s (pdd_flows_pending 256)"
    w = search.next_window()
    assert w is not None
    search.record(dataclasses.replace(_measure(w, 400, 400), settle_s=30.0, backlog=backlog))
    w2 = search.next_window()
    assert w2 is not None and w2.load == 2.0 and w2.descend  # stepped down: x4 missed
    search.record(dataclasses.replace(_measure(w2, 400, 400), settle_s=1.5))
    w3 = search.next_window()
    assert w3 is not None and w3.bisect
    search.record(dataclasses.replace(_measure(w3, 400, 400), settle_s=2.0))
    v = search.verdict("pdd")
    assert v.basis == "capacity" and v.capacity_load_scale == pytest.approx(8**0.5)
    assert "missed at x4 (not sustained: a backlog)" in v.reason
    assert v.points[0].backlog == backlog and v.points[1].backlog is None
    assert v.points[1].settle_s == 1.5
    lowest = LadderSearch(
        dataclasses.replace(STEPPING, descend_points=0),
        target_pct=99.0,
        origin_s=0.0,
        base_speedup=1.0,
    )
    w = lowest.next_window()
    assert w is not None
    lowest.record(dataclasses.replace(_measure(w, 400, 400), backlog=backlog))
    r = lowest.verdict("pdd")
    assert r.basis == "refused" and "was not sustained: the servers were still busy" in r.reason
