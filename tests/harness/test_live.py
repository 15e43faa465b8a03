"""The live view's counters: censored requests are counted on their own, never as errors."""

from __future__ import annotations

from pddbench.harness.drive.live import LiveCounters, status_line
from pddbench.harness.rundir.records import RequestRecord, Status


def rec(rid: str, status: Status) -> RequestRecord:
    return RequestRecord(
        request_id=rid, session_id="s", turn_index=0, parent_request_id=None,
        intended_send_s=0.0, status=status,
    )  # fmt: skip


def test_a_censored_request_is_counted_as_censored_not_as_an_error() -> None:
    live = LiveCounters(sent=4, in_flight=1)
    for rid, status in (("a", Status.OK), ("b", Status.CENSORED), ("c", Status.TIMEOUT)):
        live.settle(rec(rid, status))
    assert (live.done, live.errors, live.censored) == (3, 1, 1)
    line = status_line(live, total=4, elapsed_s=12.0, label="x")
    assert "done 3 errors 1 censored 1 |" in line and line.startswith("[x]")
