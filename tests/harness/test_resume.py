"""Resume planning (sans-IO): what is settled and when the rest becomes due."""

from __future__ import annotations

from pddbench.harness.config.replay import OnError
from pddbench.harness.plan.player import PlannedRequest, SessionPlayer
from pddbench.harness.plan.resume import ResumePoint, remaining_plan


def req(rid: str, parent: str | None, arrival: float, think: float = 0.5) -> PlannedRequest:
    return PlannedRequest(
        request_id=rid,
        session_id=rid.split("-")[0],
        turn_index=int(rid.split("t")[-1]),
        row=0,
        parent_request_id=parent,
        arrival_s=arrival,
        think_time_s=think,
        input_length=10,
        output_length=5,
    )


PLAN = [
    req("a-t0", None, 0.0),
    req("a-t1", "a-t0", 1.0),
    req("a-t2", "a-t1", 2.0),
    req("b-t0", None, 3.0),
    req("b-t1", "b-t0", 4.0),
    req("c-t0", None, 50.0),
]


def test_settled_kept_cancelled_resent_and_due_times_on_the_run_timeline() -> None:
    rows = [
        {"request_id": "a-t0", "status": "ok", "end_s": 1.0},
        {"request_id": "a-t1", "status": "ok", "end_s": 9.0},
        {"request_id": "b-t0", "status": "cancelled", "end_s": 10.0},
    ]
    point = ResumePoint.from_rows(rows)
    assert point.elapsed_s == 10.0 and set(point.settled) == {"a-t0", "a-t1"}
    assert point.cancelled == 1
    remaining, skipped = remaining_plan(PLAN, point)
    due = {r.request_id: r.arrival_s for r in remaining}
    assert not skipped
    assert set(due) == {"a-t2", "b-t0", "b-t1", "c-t0"}
    assert due["a-t2"] == 10.0  # parent ended at 9.0 + 0.5 think, but not before the resume
    assert due["b-t0"] == 10.0  # was in flight: sent again at the resume point
    assert due["c-t0"] == 50.0  # not yet due: keeps its own arrival
    # b-t1 still waits for b-t0 in the player
    player = SessionPlayer(remaining)
    sent = [d.request.request_id for d in player.pop_due(10.0)]
    assert sorted(sent) == ["a-t2", "b-t0"]


def test_a_later_record_supersedes_a_cancelled_one_and_think_time_can_exceed_resume() -> None:
    rows = [
        {"request_id": "a-t0", "status": "cancelled", "end_s": 2.0},
        {"request_id": "a-t0", "status": "ok", "end_s": 5.0},
        {"request_id": "b-t0", "status": "ok", "end_s": 5.5},
    ]
    point = ResumePoint.from_rows(rows)
    assert "a-t0" in point.settled and point.elapsed_s == 5.5
    remaining, _ = remaining_plan(PLAN, point)
    due = {r.request_id: r.arrival_s for r in remaining}
    assert due["a-t1"] == 5.5  # 5.0 + 0.5 think = 5.5
    assert due["b-t1"] == 6.0  # 5.5 + 0.5 think, after the resume point


def test_abort_session_skips_descendants_of_a_failed_settled_request() -> None:
    rows = [{"request_id": "a-t0", "status": "error", "end_s": 1.0}]
    point = ResumePoint.from_rows(rows)
    remaining, skipped = remaining_plan(PLAN, point, on_error=OnError.ABORT_SESSION)
    assert {r.request_id for r in skipped} == {"a-t1", "a-t2"}
    assert "a-t1" not in {r.request_id for r in remaining}
    remaining, skipped = remaining_plan(PLAN, point, on_error=OnError.CONTINUE)
    assert not skipped and "a-t1" in {r.request_id for r in remaining}
