"""SessionPlayer and session planning: dependency timing, intended send times, selection."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pddbench.harness.config.replay import OnError, Selection, ThinkPolicy
from pddbench.harness.plan.player import PlannedRequest, SessionPlayer
from pddbench.harness.plan.sessions import plan_requests
from pddbench.workloads.traceio import build_table


def _req(rid: str, parent: str | None, arrival: float, think: float = 0.0) -> PlannedRequest:
    return PlannedRequest(rid, "s", 0, 0, parent, arrival, think, 10, 5)


def test_next_turn_waits_for_completion_plus_think() -> None:
    p = SessionPlayer([_req("a", None, 1.0), _req("b", "a", 1.5, think=2.0)])
    assert p.pop_due(0.5) == []
    (a,) = p.pop_due(1.0)
    assert a.intended_send_s == 1.0
    assert p.pop_due(100.0) == []  # b is not ready before a completes, whatever the clock
    p.complete("a", 4.0)
    assert p.next_due_s() == 6.0
    assert p.pop_due(5.9) == []
    (b,) = p.pop_due(7.0)
    assert b.intended_send_s == 6.0  # intended time is fixed, lateness is the engine's lag
    p.complete("b", 8.0)
    assert p.done


def test_abort_session_skips_dependants_transitively() -> None:
    reqs = [_req("a", None, 0), _req("b", "a", 0), _req("c", "b", 0), _req("x", None, 0)]
    p = SessionPlayer(reqs, on_error=OnError.ABORT_SESSION)
    due = {d.request.request_id for d in p.pop_due(0)}
    assert due == {"a", "x"}
    p.complete("a", 1.0, ok=False)
    p.complete("x", 1.0)
    assert p.done
    assert {r.request_id for r in p.skipped} == {"b", "c"}


def test_continue_on_error_sends_next_turn() -> None:
    p = SessionPlayer([_req("a", None, 0), _req("b", "a", 0, think=1.0)])
    p.pop_due(0)
    p.complete("a", 2.0, ok=False)
    assert [d.intended_send_s for d in p.pop_due(10)] == [3.0]


def test_rejects_unknown_completion_and_duplicates() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        SessionPlayer([_req("a", None, 0), _req("a", None, 1)])
    p = SessionPlayer([_req("a", None, 0)])
    with pytest.raises(KeyError):
        p.complete("a", 1.0)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 6), st.floats(0, 50), st.floats(0, 5)), min_size=1, max_size=12
    ),
    st.floats(0.0, 3.0),
)
def test_simulated_run_respects_dependencies(sessions, service) -> None:
    reqs = []
    for s, (turns, start, think) in enumerate(sessions):
        for t in range(turns):
            parent = f"s{s}t{t - 1}" if t else None
            reqs.append(_req(f"s{s}t{t}", parent, start, think))
    p = SessionPlayer(reqs)
    finished: dict[str, float] = {}
    sent: dict[str, float] = {}
    clock, in_flight = 0.0, []
    while not p.done:
        for d in p.pop_due(clock):
            sent[d.request.request_id] = clock
            in_flight.append((clock + service, d.request))
        in_flight.sort(key=lambda x: x[0])
        nxt = [t for t in (p.next_due_s(), in_flight[0][0] if in_flight else None) if t is not None]
        clock = max(clock, min(nxt))
        while in_flight and in_flight[0][0] <= clock:
            end, r = in_flight.pop(0)
            finished[r.request_id] = end
            p.complete(r.request_id, end)
    assert set(sent) == {r.request_id for r in reqs}
    for r in reqs:
        if r.parent_request_id:
            assert sent[r.request_id] >= finished[r.parent_request_id] + r.think_time_s - 1e-9


def _trace():
    # two tasks; task A has a sub-agent session spawned by its turn 0
    return build_table(
        request_id=["a0", "a1", "sub0", "b0", "b1"],
        session_id=["A", "A", "A/sub", "B", "B"],
        turn_index=[0, 1, 0, 0, 1],
        arrival_s=[100.0, 110.0, 105.0, 200.0, 230.0],
        input_length=[10] * 5,
        output_length=[5] * 5,
        block_size=4,
        block_hashes=[[1, 2]] * 5,
        parent_request_id=[None, "a0", "a0", None, "b0"],
        think_time_s=[None, 3.0, None, None, None],
        parent_session_id=[None, None, "A", None, None],
    )


def test_plan_keeps_whole_groups_and_applies_speedup_and_think_policy() -> None:
    plan = plan_requests(_trace(), Selection(speedup=2.0), think_policy=ThinkPolicy.TRACE)
    by_id = {r.request_id: r for r in plan}
    assert by_id["a0"].arrival_s == 0.0 and by_id["b0"].arrival_s == 50.0
    assert by_id["a1"].think_time_s == 3.0  # from the trace
    assert by_id["b1"].think_time_s == 30.0  # missing: falls back to the arrival gap
    assert by_id["sub0"].think_time_s == 5.0
    window = plan_requests(_trace(), Selection(window_start_s=150.0, window_duration_s=100.0))
    assert {r.request_id for r in window} == {"b0", "b1"}
    capped = plan_requests(_trace(), Selection(max_requests=3))
    assert {r.request_id for r in capped} == {"a0", "a1", "sub0"}  # the sub-agent stays with A
    zero = plan_requests(_trace(), Selection(), think_policy=ThinkPolicy.ZERO)
    assert all(r.think_time_s == 0.0 for r in zero)


def test_sample_is_deterministic_whole_groups() -> None:
    a = plan_requests(_trace(), Selection(sample=0.5, seed=3))
    b = plan_requests(_trace(), Selection(sample=0.5, seed=3))
    assert a == b
    groups = {r.session_id.split("/")[0] for r in a}
    for g in groups:
        assert {r.request_id for r in a if r.session_id.startswith(g)} == {
            r.request_id for r in plan_requests(_trace(), Selection()) if r.session_id.startswith(g)
        }
