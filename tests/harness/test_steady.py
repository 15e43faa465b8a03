"""Steady-state ladder points: a point is its trace window's requests (sessions in progress
continue at their turn), its mix is the window's, and primed caches hold the history."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pddbench.harness.config.replay import Selection
from pddbench.harness.drive.replay import ReplayPlan
from pddbench.harness.plan.sessions import plan_requests
from pddbench.harness.plan.steady import WARM_MARK, SteadyIndex, SteadyPoint
from pddbench.harness.rundir.ladder import MIX_BINS, RequestMix
from pddbench.workloads.hitrate import FirstSeen, prefix_hits
from pddbench.workloads.inspect import bin_index
from pddbench.workloads.schema import Col
from pddbench.workloads.synth import SynthOptions, synthesise
from pddbench.workloads.synth_profile import load_profile

from ..traces import chain_table

JAN_FEB = Path("/work/runs/jan-feb.parquet")
WARMUP_S = 10.0


def measured_mix(point: SteadyPoint, warmup_s: float = WARMUP_S) -> RequestMix:
    """The mix of a point's requests planned after its warm-up (what it measures)."""
    return point.planned_mix(warmup_s, float("inf"))


def assert_within(a: RequestMix, b: RequestMix, pp: float) -> None:
    assert abs(a.turn0_share - b.turn0_share) <= pp / 100, (a.text(), b.text())
    for x, y in zip(a.hit_bins, b.hit_bins, strict=True):
        assert abs(x - y) <= pp / 100, (a.text(), b.text())


# -- the mix: one rule ---------------------------------------------------------------------
@settings(deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.one_of(st.floats(0, 1), st.just(float("nan")))),
        min_size=1,
        max_size=60,
    )
)
def test_mix_counts_turn0_and_bins_by_the_inspect_rule(rows: list[tuple[int, float]]) -> None:
    turns = np.array([t for t, _ in rows])
    rate = np.array([h for _, h in rows])
    mix = RequestMix.of(turns, rate)
    assert mix.requests == len(rows)
    assert mix.turn0_share == pytest.approx(np.mean(turns == 0))
    known = rate[np.isfinite(rate)]
    if known.size:
        assert sum(mix.hit_bins) == pytest.approx(1.0)
        idx = bin_index(known, MIX_BINS)
        for b, share in enumerate(mix.hit_bins):
            assert share == pytest.approx(np.mean(idx == b))
    else:
        assert mix.hit_bins == [0.0] * len(MIX_BINS)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8), st.integers(1, 6), st.integers(0, 3), st.integers(0, 1000))
def test_first_seen_is_the_unbounded_cache_hit(sessions: int, turns: int, shared: int, seed: int):
    """FirstSeen.leading(rows, rows) is prefix_hits' rule, blocks shared across sessions too."""
    rng = np.random.default_rng(seed)

    def hashes(s: int, t: int) -> list[int]:
        common = list(range(9000, 9000 + shared))  # a system prompt every session shares
        return common + [1000 * s + b for b in range(int(rng.integers(0, 3)) + t + 1)]

    table = chain_table(sessions=sessions, turns=turns, hashes=hashes, session_gap_s=0.3)
    order = np.argsort(table.column(Col.ARRIVAL).to_numpy(), kind="stable")
    ordered = table.take(pa.array(order))
    rows = np.arange(ordered.num_rows)
    lead = FirstSeen.of(ordered).leading(rows, rows)
    bs = ordered.column(Col.BLOCK_SIZE).to_numpy()
    assert (lead * bs).tolist() == prefix_hits(ordered).cached_tokens.tolist()


# -- the plan ------------------------------------------------------------------------------
def chain() -> pa.Table:
    """40 sessions of 8 turns, a new one every 5 s, a turn every 10 s: long-lived sessions."""
    return chain_table(sessions=40, turns=8, session_gap_s=5.0, turn_gap_s=10.0, think_s=1.0)


def arrivals(table: pa.Table) -> dict[str, float]:
    ids = table.column(Col.REQUEST_ID).to_pylist()
    return dict(zip(ids, table.column(Col.ARRIVAL).to_pylist(), strict=True))


def test_a_point_is_every_request_of_its_window_in_slices() -> None:
    table = chain()
    index = SteadyIndex(table, Selection(), warmup_s=5.0)
    start, send, slices = 60.0, 25.0, 3  # three stretches of 20 s, each after 5 s of warm-up
    point = index.point(start, slices, send)
    arrival = arrivals(table)
    window = {k for k, a in arrival.items() if start <= a < start + 20.0 * slices}
    measured = {r.request_id for r in point.requests if WARM_MARK not in r.request_id}
    assert measured == window
    by_id = {r.request_id: r for r in point.requests}
    for r in point.requests:
        rid, _, warm = r.request_id.partition(WARM_MARK)
        k = int(warm) if warm else int((arrival[rid] - start) // 20.0)
        t_k = start + 20.0 * k
        assert r.namespace == k + 1  # one prompt namespace per slice (point 0)
        assert r.arrival_s == pytest.approx(arrival[rid] - (t_k - 5.0))
        assert 0 <= r.arrival_s < send
        assert (r.arrival_s < 5.0) == bool(warm)  # the warm-up: the 5 s before the stretch
        parent = f"{r.session_id}-t{r.turn_index - 1}"
        if r.parent_request_id is not None:  # a previous turn in the same slice: it waits
            assert r.parent_request_id.partition(WARM_MARK)[0] == parent
            assert by_id[r.parent_request_id].namespace == r.namespace
            assert r.think_time_s == pytest.approx(1.0)
        elif r.turn_index > 0:  # in progress at its slice's start: continues at its turn
            same = [q for q in point.requests if q.namespace == r.namespace]
            assert all(q.request_id.partition(WARM_MARK)[0] != parent for q in same)
    assert any(r.parent_request_id is None and r.turn_index > 0 for r in point.requests)
    assert point.planned_mix(5.0, send) == point.trace_mix  # measured: exactly the window


def test_primes_are_the_history_before_each_slice() -> None:
    table = chain()
    index = SteadyIndex(table, Selection(), warmup_s=5.0)
    point = index.point(60.0, 2, 25.0, point_index=3)
    firsts = {
        (r.namespace, r.session_id): r
        for r in sorted(point.requests, key=lambda r: -r.arrival_s)
        if r.turn_index > 0
    }
    entries = {(e.namespace, e.row): e for e in point.priming.entries}
    for (ns, _sid), r in firsts.items():
        assert ns >= 3 * (1 << 24) + 1  # the point's own namespaces: never an earlier point's
        if r.parent_request_id is None:  # in progress: its earlier turns' blocks are primed
            assert entries[(ns, r.row)].blocks == r.turn_index  # turn t: t + 1 blocks
    assert all(e.blocks > 0 for e in point.priming.entries)  # chain sessions share no block
    needs = [e.need_s for e in point.priming.entries]
    assert needs == sorted(needs)


def test_theoretical_hits_are_the_traces() -> None:
    table = chain()
    point = SteadyIndex(table, Selection(), warmup_s=5.0).point(60.0, 3, 25.0)
    ids = table.column(Col.REQUEST_ID).to_pylist()
    cached = dict(zip(ids, prefix_hits(table).cached_tokens.tolist(), strict=True))
    for r in point.requests:
        trace_id = r.request_id.partition(WARM_MARK)[0]
        assert point.theoretical_cached[r.request_id] == cached[trace_id]


@settings(max_examples=30, deadline=None)
@given(
    st.integers(2, 30),
    st.integers(1, 8),
    st.integers(1, 20),
    st.integers(0, 60),
    st.floats(0.3, 6.0),
    st.integers(6, 40),
    st.integers(0, 5),
)
def test_any_window_measures_exactly_its_requests(
    sessions: int, turns: int, gap: int, start: int, slices: float, send: int, warm: int
) -> None:
    """Whole seconds (a request exactly at a slice's start is measured, not warm-up)."""
    table = chain_table(sessions=sessions, turns=turns, session_gap_s=gap, turn_gap_s=7.0)
    point = SteadyIndex(table, Selection(), warmup_s=warm).point(start, slices, send)
    m = send - warm
    window = {k for k, a in arrivals(table).items() if start <= a < start + slices * m}
    assert {r.request_id for r in point.requests if WARM_MARK not in r.request_id} == window
    assert all(0 <= r.arrival_s < send for r in point.requests)
    assert len({r.request_id for r in point.requests}) == len(point.requests)
    assert point.trace_mix.requests == len(window)
    if window:
        assert point.planned_mix(warm, send) == point.trace_mix


def test_the_schedule_is_the_points_offsets() -> None:
    table = chain()
    index = SteadyIndex(table, Selection(), warmup_s=5.0)
    point = index.point(50.0, 3, 25.0)
    assert index.offsets(50.0, 3, 0.0, 25.0) == sorted(r.arrival_s for r in point.requests)


# -- jan-feb windows: the point's mix is the window's ---------------------------------------
def synthetic_jan_feb() -> pa.Table:
    return synthesise(load_profile("jan-feb"), SynthOptions(sessions=600, days=0.5)).table


@pytest.mark.parametrize(
    ("frac", "slices", "send"), [(0.3, 8, 60.0), (0.5, 20, 40.0), (0.7, 3.5, 90.0)]
)
def test_jan_feb_profile_point_mix_within_2pp_of_its_window(
    frac: float, slices: float, send: float
):
    table = synthetic_jan_feb()
    arrival = table.column(Col.ARRIVAL).to_numpy()
    start = float(arrival.min() + frac * (arrival.max() - arrival.min()))
    point = SteadyIndex(table, Selection(), warmup_s=WARMUP_S).point(start, slices, send)
    assert point.trace_mix.requests > 100
    assert_within(measured_mix(point), point.trace_mix, 2.0)
    # the cold point of the same window (the sessions that start in it, from turn 0) is not
    cold = [
        r
        for r in plan_requests(table, Selection(start, slices * send, speedup=slices))
        if WARMUP_S <= r.arrival_s < send
    ]
    cold_turn0 = np.mean([r.turn_index == 0 for r in cold])
    assert cold_turn0 - point.trace_mix.turn0_share > 0.05


@pytest.mark.skipif(not JAN_FEB.exists(), reason="the jan-feb trace is not on this machine")
@pytest.mark.parametrize(
    ("hour", "slices", "send"), [(509.0, 7.5, 130.0), (510.4, 30.0, 75.0), (749.0, 80.0, 50.0)]
)
def test_jan_feb_point_mix_within_2pp_of_its_window(hour: float, slices: float, send: float):
    """Three windows of the real trace (its history from three days before: a slice)."""
    start = hour * 3600
    table = pq.read_table(
        JAN_FEB,
        filters=(pc.field(Col.ARRIVAL) >= start - 3 * 86400)
        & (pc.field(Col.ARRIVAL) < start + 86400),
    )
    point = SteadyIndex(table, Selection(), warmup_s=WARMUP_S).point(start, slices, send)
    assert point.trace_mix.requests > 300
    assert_within(measured_mix(point), point.trace_mix, 2.0)


# -- priming: in-progress sessions' first turns hit the cache --------------------------------
def test_primed_point_hits_where_a_cold_one_does_not() -> None:
    from pddbench.harness.config.scenario import load_scenario
    from pddbench.twin.backend import replay_records

    sc = load_scenario("same-dc-pd").model_copy(update={"emulation_scale": 1.0})
    dep, net = sc.deployment_config, sc.network_config()
    table = chain_table(
        sessions=12, turns=6, session_gap_s=4.0, turn_gap_s=8.0, think_s=1.0, block=512
    )
    point = SteadyIndex(table, Selection()).point(30.0, 2, 20.0)
    assert point.priming.entries
    primed = ReplayPlan(point.requests, table, point.theoretical_cached, "t", point.priming)
    cold = ReplayPlan(point.requests, table, point.theoretical_cached, "t")
    from pddbench.harness.config.replay import ReplayOptions

    opts = ReplayOptions()
    continuing = {
        r.request_id for r in point.requests if r.parent_request_id is None and r.turn_index > 0
    }
    assert continuing

    def hit(plan: ReplayPlan) -> float:
        recs = [r for r in replay_records(plan, opts, dep, net) if r.request_id in continuing]
        assert len(recs) == len(continuing) and all(r.status == "ok" for r in recs)
        return sum(r.cached_tokens_reported or 0 for r in recs) / sum(r.input_tokens for r in recs)

    expected = sum(point.theoretical_cached[r] for r in continuing) / sum(
        r.input_length for r in point.requests if r.request_id in continuing
    )
    assert expected > 0.5
    assert hit(primed) == pytest.approx(expected, abs=0.02)
    assert hit(cold) == 0.0


# -- the ladder: its points' mix in capacity.json -------------------------------------------
def test_ladder_points_record_their_mix_beside_their_windows(tmp_path: Path) -> None:
    """``pddbench capacity --backend virtual`` on a jan-feb-profile trace: each point's
    planned turn-0 share and hit bins are its window's; measured, within 2 pp where the
    system kept up; the servers were primed (served hits recorded)."""
    import json
    import subprocess
    import sys

    from pddbench.workloads.traceio import write_trace

    trace = write_trace(synthetic_jan_feb(), tmp_path / "jan-feb-profile.parquet")
    out = tmp_path / "o"
    ladder = ["--points", "2", "--bisect", "0", "--descend", "0", "--min-requests", "150"]
    point = ["--point-duration", "20s", "--max-point-duration", "60s", "--warmup", "5s"]
    args = ["capacity", "--trace", str(trace), "--scenario", "same-dc-pd", "--backend"]
    proc = subprocess.run(
        [sys.executable, "-m", "pddbench", *args, "virtual", *ladder, *point, "--out", str(out)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    points = json.loads((out / "capacity.json").read_text())["points"]
    assert points and "planned / measured / window" in proc.stdout
    for p in points:
        planned, measured, window = (
            RequestMix(**p[k]) for k in ("planned_mix", "mix", "trace_mix")
        )
        assert_within(planned, window, 1e-6)
        if p["attainment"] >= 0.99:
            assert_within(measured, window, 2.0)
        assert p["primed_blocks"] > 0 and p["served_hit_bins"] is not None
