"""Rate rungs (sans-IO): each point's load scale offers its rung's rate along a declining trace."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pyarrow as pa
import pytest

from pddbench.harness.config.replay import Selection
from pddbench.harness.plan.ladder import LadderSearch, PointMeasure
from pddbench.harness.plan.ladder_points import DEFAULT_LADDER, PointWindow, Schedule
from pddbench.harness.plan.ladder_rate import plan_point, scale_for_rate
from pddbench.harness.plan.schedule_index import ScheduleIndex
from pddbench.harness.plan.sessions import plan_requests

BASE = 10.0
# x4 ... x32, powered, over cold schedules (the sessions that start in a window)
LADDER = dataclasses.replace(DEFAULT_LADDER, start=4.0, steady=False, time_budget_s=None)


def _declining(decay_s: float, per_s: float = 0.12, span_s: float = 400_000.0) -> pa.Table:
    """One-request sessions starting with density ``per_s × exp(-t / decay_s)`` (trace s):
    the walk from the busiest hour into the night."""
    total = 1 - math.exp(-span_s / decay_s)
    n = int(per_s * decay_s * total)
    starts = -decay_s * np.log(1 - (np.arange(n) + 0.5) / n * total)
    ids = [f"s{i}" for i in range(n)]
    return pa.table(
        {
            "request_id": ids,
            "session_id": ids,
            "parent_session_id": pa.array([None] * n, pa.string()),
            "arrival_s": starts,
            "turn_index": np.zeros(n, dtype=np.int64),
        }
    )


def _schedule(table: pa.Table) -> Schedule:
    index = ScheduleIndex(table, Selection(speedup=BASE))

    def offsets(start_s: float, load: float, send_s: float) -> list[float]:
        return index.offsets(start_s, BASE * load, send_s * BASE * load, send_s)

    return offsets


def _all_met(search: LadderSearch) -> list[PointWindow]:
    seen = []
    while (w := search.next_window()) is not None:
        seen.append(w)
        search.record(PointMeasure(w, 400, 400, {}, 0, w.measure_s, 400 / w.measure_s))
    return seen


def test_rate_rungs_double_the_offered_rate_where_doubling_the_load_scale_does_not() -> None:
    sched = _schedule(_declining(20_000.0))
    # the load-scale ladder (as it walked before): x16 -> x32 buys under 1.2x the rate
    cursor, raw = 0.0, []
    for x in LADDER.loads():
        p = plan_point(LADDER, sched, cursor, x)
        raw.append(p.planned_rps)
        cursor += (LADDER.warmup_s + p.measure_s) * BASE * x
    assert raw[3] / raw[2] < 1.2
    # rate rungs: each point's load scale is found so that it offers twice the last rate
    search = LadderSearch(LADDER, target_pct=99.0, origin_s=0.0, base_speedup=BASE, schedule=sched)
    seen = _all_met(search)
    assert search.origin_rps == pytest.approx(raw[0]) and seen[0].load == LADDER.start
    rates = [w.planned_rps or 0.0 for w in seen]
    for k, w in enumerate(seen[:3]):
        assert w.target_rps == pytest.approx(raw[0] * 2**k)
        assert rates[k] == pytest.approx(raw[0] * 2**k, rel=LADDER.rate_tolerance)
    assert 1.8 < rates[1] / rates[0] < 2.2 and 1.8 < rates[2] / rates[1] < 2.2
    assert seen[2].load > 2 * seen[1].load > 4 * seen[0].load  # the decline asks for more
    assert all(w.load <= LADDER.load_cap for w in seen)
    for a, b in itertools.pairwise(seen):  # still consecutive, disjoint stretches
        assert b.trace_start_s == pytest.approx(a.trace_end_s)
    v = search.verdict("same-dc-pd")
    assert v.basis == "load-bounded" and v.rungs_rps == pytest.approx(
        [raw[0] * 2**k for k in range(4)]
    )
    # the capacity point is the highest planned rate, and the banner states rates
    assert v.capacity_planned_rps == pytest.approx(max(rates))
    assert "req/s offered (x" in v.describe()
    assert [p.planned_rps for p in v.points] == rates
    assert all(p.planned_requests and p.target_rps for p in v.points)


def test_bisection_and_step_down_aim_at_rates() -> None:
    sched = _schedule(_declining(30_000.0))
    settings = dataclasses.replace(LADDER, bisect_points=1)
    search = LadderSearch(
        settings, target_pct=99.0, origin_s=0.0, base_speedup=BASE, schedule=sched
    )
    r0 = search.origin_rps
    assert r0 is not None
    seen = []
    for ok in (False, False, True, True):  # r0 and r0/2 miss, r0/4 meets, bisect r0/2.83
        w = search.next_window()
        assert w is not None
        seen.append(w)
        search.record(PointMeasure(w, 400, 400 if ok else 300, {}, 0, w.measure_s, 5.0))
    assert search.done
    targets = [w.target_rps for w in seen]
    assert targets[:3] == pytest.approx([r0, r0 / 2, r0 / 4], rel=0.06)
    assert [w.descend for w in seen] == [False, True, True, False] and seen[3].bisect
    lo, hi = seen[2].planned_rps, seen[1].planned_rps
    assert lo is not None and hi is not None
    assert targets[3] == pytest.approx(math.sqrt(lo * hi))
    v = search.verdict("pdd")
    assert v.basis == "capacity" and "req/s (x" in v.reason


def test_a_low_rate_point_says_how_many_requests_it_will_get() -> None:
    sched = _schedule(_declining(30_000.0, per_s=0.02))  # x4 plans ~0.7 req/s
    search = LadderSearch(LADDER, target_pct=99.0, origin_s=0.0, base_speedup=BASE, schedule=sched)
    w = search.next_window()
    assert w is not None and w.measure_s == LADDER.longest_point_s
    assert w.planned_requests is not None and w.planned_requests < LADDER.min_requests
    assert f"only {w.planned_requests} of 400 requests planned" in search.progress(0.0)


def test_the_load_scale_search_stops_at_the_cap_with_the_closest_rate() -> None:
    sched = _schedule(_declining(20_000.0))
    p = scale_for_rate(LADDER, sched, 0.0, 1e4, guess=4.0)  # unattainable
    assert p.load <= LADDER.load_cap and p.planned_rps < 1e4 and p.target_rps == 1e4
    near = scale_for_rate(LADDER, sched, 0.0, 5.0, guess=4.0)
    assert near.planned_rps == pytest.approx(5.0, rel=LADDER.rate_tolerance)


def test_the_plan_names_the_rate_rungs() -> None:
    from pddbench.harness.jobs.main_job import main_ladder, plan_text

    text = plan_text(main_ladder(3), 3, origin_rps=3.84)
    assert "ladder of offered rates 3.84, 7.68, 15.4, 30.7 req/s" in text
    assert "down to 0.96 if the first misses" in text and "x1" in text


def test_the_schedule_index_plans_what_plan_requests_plans() -> None:
    from pddbench.workloads.synth import SynthOptions, synthesise
    from pddbench.workloads.synth_profile import load_profile

    table = synthesise(load_profile("jan-feb"), SynthOptions(sessions=300, days=0.5)).table
    start = float(np.min(table.column("arrival_s").to_numpy()))
    for base in (Selection(), Selection(sample=0.5, seed=3), Selection(max_requests=200)):
        index = ScheduleIndex(table, base)
        for offset, speed, send in ((0.0, 40.0, 130.0), (3000.0, 160.0, 60.0)):
            sel = dataclasses.replace(
                base,
                window_start_s=start + offset,
                window_duration_s=send * speed,
                speedup=speed,
            )
            want = sorted(r.arrival_s for r in plan_requests(table, sel) if r.arrival_s < send)
            assert want, "the window plans nothing: the test would prove nothing"
            assert index.offsets(start + offset, speed, send * speed, send) == want
