"""Runtime change models and the schedule runner; probe summaries, checks and links.parquet."""

from __future__ import annotations

import math
import time

import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from pddbench.netem.probe import (
    LinkProbe,
    ProbeTolerance,
    check_probe,
    summarize_rtt,
    write_link_probes,
)
from pddbench.netem.schedule import (
    ChangeRecord,
    LinkChange,
    Schedule,
    ScheduleRunner,
    changes_table,
)
from tests.waiting import wait_until


def test_link_change_must_change_something() -> None:
    with pytest.raises(ValidationError, match="at least one field"):
        LinkChange()
    with pytest.raises(ValidationError):
        LinkChange(loss_pct=150)
    assert LinkChange(up=False).model_dump(exclude_none=True) == {"up": False}


def test_schedule_runner_applies_in_time_order_and_records_lag() -> None:
    calls: list[tuple[float, str, dict]] = []

    def apply(link: str, change: LinkChange, direction: str) -> list[ChangeRecord]:
        now = time.monotonic()
        calls.append((now, link, change.model_dump(exclude_none=True)))
        return [ChangeRecord(link, direction, {}, "nfqueue", time.time(), now)]

    schedule = Schedule.model_validate(
        {
            "events": [
                {"at_s": 0.10, "link": "l", "changes": {"delay_ms": 40}},
                {"at_s": 0.05, "link": "l", "direction": "a_to_b", "changes": {"up": False}},
            ]
        }
    )
    t0 = time.monotonic()
    runner = ScheduleRunner(schedule, apply, t0).start()
    runner.join(timeout=5)
    assert [c[2] for c in calls] == [{"up": False}, {"delay_ms": 40}]
    assert calls[0][0] - t0 >= 0.05 and calls[1][0] - t0 >= 0.10
    assert [r.at_s for r in runner.records] == [0.05, 0.10]
    assert all(0 <= r.lag_ms < 200 for r in runner.records)
    assert changes_table(runner.records).num_rows == 2


def test_schedule_runner_records_errors_and_stops() -> None:
    def fail(link: str, change: LinkChange, direction: str) -> list[ChangeRecord]:
        raise RuntimeError("boom")

    sched = Schedule.model_validate(
        {
            "events": [
                {"at_s": 0, "link": "x", "changes": {"delay_ms": 1}},
                {"at_s": 60, "link": "x", "changes": {"delay_ms": 2}},
            ]
        }
    )
    runner = ScheduleRunner(sched, fail).start()
    wait_until(lambda: runner.errors, what="the first event's failure")
    runner.stop()
    assert runner.errors == ["at 0.0s on x: boom"]


def make_probe(**over: object) -> LinkProbe:
    base = dict(
        run_id="r",
        link="a-b",
        a="a",
        b="b",
        scale=1.0,
        backend_a_to_b="nfqueue",
        backend_b_to_a="nfqueue",
        rtt_samples=200,
        rtt_lost=0,
        rtt_min_ms=30.1,
        rtt_p50_ms=30.4,
        rtt_p90_ms=30.8,
        rtt_p99_ms=32.0,
        rtt_max_ms=33.0,
        rtt_mean_ms=30.5,
        rtt_std_ms=0.3,
        expected_rtt_p50_ms=30.0,
        expected_rtt_p99_ms=30.0,
        rate_a_to_b_mbit=1000.0,
        rate_b_to_a_mbit=1000.0,
        goodput_a_to_b_mbit=950.0,
        goodput_b_to_a_mbit=940.0,
        loss_a_to_b_pct=0.0,
        loss_b_to_a_pct=0.0,
    )
    base.update(over)
    return LinkProbe(**base)  # type: ignore[arg-type]


def test_check_probe_within_tolerance_and_each_failure_named() -> None:
    assert check_probe(make_probe()) == []
    problems = check_probe(make_probe(rtt_p50_ms=32.0, rtt_p99_ms=40.0, goodput_b_to_a_mbit=500.0))
    assert len(problems) == 3
    assert "p50" in problems[0] and "p99" in problems[1] and "b->a" in problems[2]
    assert check_probe(make_probe(rtt_p50_ms=31.5), ProbeTolerance(rtt_p50_ms=2.0)) == []
    lossy = make_probe(goodput_a_to_b_mbit=10.0, loss_a_to_b_pct=1.0)
    assert check_probe(lossy) == []  # TCP cannot fill a lossy link; goodput not judged
    assert "no RTT sample" in check_probe(make_probe(rtt_samples=0))[0]


def test_a_short_goodput_under_steal_names_the_host() -> None:
    short = {"goodput_a_to_b_mbit": 300.0, "goodput_attempts": 6}
    (quiet,) = check_probe(make_probe(**short, goodput_steal_pct=2.0))
    assert "hypervisor" not in quiet
    (starved,) = check_probe(make_probe(**short, goodput_steal_pct=38.0))
    assert "best of 6 flows both ways" in starved and "withheld up to 38 %" in starved


def test_summarize_rtt() -> None:
    s = summarize_rtt([float(x) for x in range(1, 101)], lost=3)
    assert (s.samples, s.lost, s.min_ms, s.max_ms) == (100, 3, 1.0, 100.0)
    assert s.p50_ms == pytest.approx(50.5)
    assert math.isnan(summarize_rtt([], lost=5).p50_ms)


def test_links_parquet_roundtrip(tmp_path) -> None:
    path = tmp_path / "links.parquet"
    write_link_probes([make_probe(), make_probe(link="b-c")], str(path))
    table = pq.read_table(path)
    assert table.num_rows == 2 and "rtt_p99_ms" in table.column_names
    assert table.column("link").to_pylist() == ["a-b", "b-c"]
