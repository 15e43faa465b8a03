"""Pure parts of the Locust engine: sharding, clock offsets, CPU verdicts, job serialisation,
HTTP response framing and the shared SSE/record logic (no sockets, no gevent)."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pddbench.harness.config.replay import (
    ApiConfig,
    ApiKind,
    OnError,
    ReplayOptions,
    Selection,
    ThinkPolicy,
)
from pddbench.harness.drive.framing import FramingError, ResponseFramer
from pddbench.harness.drive.locust.clock_sync import ClockSample, estimate
from pddbench.harness.drive.locust.cpu import cpu_verdict
from pddbench.harness.drive.locust.job import (
    RECORD_FIELDS,
    planned_requests,
    record_from_row,
    record_row,
    shard_chunks,
    table_from_chunks,
)
from pddbench.harness.drive.locust.run_state import WorkerState, cap_hit, judge_run
from pddbench.harness.drive.locust.sharding import ShardSummary, shard_plan, task_groups
from pddbench.harness.drive.stream import StreamAccumulator
from pddbench.harness.drive.stream_records import SseReader, settle_record
from pddbench.harness.plan.player import PlannedRequest
from pddbench.harness.rundir.records import RequestRecord

# ------------------------------------------------------------------ sharding


def _req(rid: str, session: str, parent: str | None = None, arrival: float = 0.0):
    return PlannedRequest(rid, session, 0, 0, parent, arrival, 0.0, 8, 8)


def _agentic_plan(seed: int, sessions: int = 30) -> tuple[list[PlannedRequest], dict[str, str]]:
    """Sessions with chained turns; some spawn sub-agent sessions from one of their turns."""
    rng = random.Random(seed)
    out: list[PlannedRequest] = []
    parent_session: dict[str, str] = {}
    for s in range(sessions):
        sid = f"s{s}"
        prev = None
        for t in range(rng.randint(1, 4)):
            rid = f"{sid}-t{t}"
            out.append(_req(rid, sid, prev, arrival=s * 0.1 + t))
            prev = rid
            if rng.random() < 0.3:  # a sub-agent session spawned by this turn
                sub = f"{sid}-sub{t}"
                parent_session[sub] = sid
                sp = rid
                for u in range(rng.randint(1, 3)):
                    srid = f"{sub}-t{u}"
                    out.append(_req(srid, sub, sp, arrival=s * 0.1 + t + 0.5 + u))
                    sp = srid
    rng.shuffle(out)
    return out, parent_session


@given(st.integers(0, 10_000), st.integers(1, 7))
@settings(max_examples=60, deadline=None)
def test_sharding_never_splits_a_dependency_and_is_deterministic(seed: int, workers: int) -> None:
    plan, parents = _agentic_plan(seed)
    sharding = shard_plan(plan, workers, parents)
    worker_of = {r.request_id: w for r, w in zip(plan, sharding.worker_of, strict=True)}
    for r in plan:
        if r.parent_request_id is not None:
            assert worker_of[r.parent_request_id] == worker_of[r.request_id]
    by_session: dict[str, set[int]] = {}
    for r in plan:
        by_session.setdefault(r.session_id, set()).add(worker_of[r.request_id])
    assert all(len(ws) == 1 for ws in by_session.values())
    for sub, parent in parents.items():
        if sub in by_session:
            assert by_session[sub] == by_session[parent]
    # same plan in another order, same partition
    again = shard_plan(list(reversed(plan)), workers, parents)
    assert {r.request_id: w for r, w in zip(reversed(plan), again.worker_of, strict=True)} == (
        worker_of
    )
    assert sum(s.requests for s in sharding.summaries(plan)) == len(plan)


def test_sharding_balances_request_counts() -> None:
    plan = [_req(f"s{i}-t{t}", f"s{i}", None, arrival=i * 0.01) for i in range(100) for t in [0]]
    sharding = shard_plan(plan, 4)
    counts = [s.requests for s in sharding.summaries(plan)]
    assert counts == [25, 25, 25, 25]
    # dealt in arrival order: every worker starts early (time-balanced, not blocks)
    assert max(s.first_arrival_s for s in sharding.summaries(plan)) <= 0.03 + 1e-9


def test_task_groups_link_sub_agents_through_requests_or_parent_session() -> None:
    plan = [
        _req("a0", "a"),
        _req("a1", "a", "a0"),
        _req("b0", "b", "a1"),  # sub-agent spawned by a1: linked through the request
        _req("c0", "c"),  # linked only through parent_session_id
        _req("d0", "d"),
    ]
    groups = task_groups(plan, {"c": "a"})
    assert groups == ["a", "a", "a", "a", "d"]
    with pytest.raises(ValueError):
        shard_plan(plan, 0)


# -------------------------------------------------------------- clock sync


def _exchange(t1, offset, out_delay, back_delay, drift=0.0, handling=50e-6):
    worker = lambda m: m + offset + drift * m  # noqa: E731  worker clock at master time m
    t2 = worker(t1 + out_delay)
    t3 = t2 + handling
    t4 = t1 + out_delay + handling + back_delay
    return ClockSample(t1, t2, t3, t4, 1e9 + t1, 1e9 + t2 - offset + 0.25, 1e9 + t4)


def test_clock_offset_within_half_the_best_round_trip() -> None:
    rng = random.Random(1)
    true = 123.456
    samples = [
        _exchange(i * 0.5, true, rng.uniform(1e-4, 5e-3), rng.uniform(1e-4, 5e-3))
        for i in range(40)
    ]
    est = estimate(samples)
    assert abs(est.offset_s - true) <= est.uncertainty_s + 1e-12
    assert est.uncertainty_s == pytest.approx(min(s.rtt_s for s in samples) / 2)
    assert est.drift == 0.0  # 20 s of samples: too short to fit drift
    assert abs(est.wall_offset_s - 0.25) < 0.01
    # a worker reading converts back onto the master's clock
    assert abs(est.to_master(50.0 + true) - 50.0) <= est.uncertainty_s + 1e-9


def test_clock_drift_is_fitted_over_a_long_run() -> None:
    rng = random.Random(2)
    drift = 50e-6  # 50 ppm: 180 ms per hour
    samples = [
        _exchange(i * 1.0, 7.0, rng.uniform(1e-4, 3e-3), rng.uniform(1e-4, 3e-3), drift)
        for i in range(600)
    ]
    est = estimate(samples)
    assert est.drift == pytest.approx(drift, abs=5e-6)
    for m in (0.0, 300.0, 599.0):
        assert abs(est.offset_at(m) - (7.0 + drift * m)) < 1e-3
    constant = estimate(samples, min_span_s=1e9)  # without drift: off by up to 30 ms
    assert max(abs(constant.offset_at(m) - (7.0 + drift * m)) for m in (0.0, 599.0)) > 10e-3


def test_clock_estimate_rejects_empty() -> None:
    with pytest.raises(ValueError):
        estimate([])


# ----------------------------------------------------------------------- cpu


def test_cpu_verdict() -> None:
    calm = cpu_verdict([0.1, 0.2, 0.3])
    assert not calm.saturated and calm.max_fraction == pytest.approx(0.3)
    busy = cpu_verdict([0.2, 0.95, 0.99, 0.4], threshold=0.9)
    assert busy.saturated and busy.saturated_intervals == 2
    assert cpu_verdict([]).intervals == 0 and not cpu_verdict([]).saturated


# ----------------------------------------------------------------------- job


def test_options_survive_json() -> None:
    options = ReplayOptions(
        selection=Selection(sample=0.5, speedup=3.0, seed=7),
        think_policy=ThinkPolicy.ZERO,
        on_error=OnError.ABORT_SESSION,
        api=ApiConfig(kind=ApiKind.SGLANG, model="m", stall_timeout_s=3.0),
        integrity_seed=11,
    )
    assert ReplayOptions.from_json(json.loads(json.dumps(options.to_json()))) == options


def test_record_rows_move_time_points_only() -> None:
    r = RequestRecord(
        "r1", "s", 0, None, intended_send_s=1.0, actual_send_s=1.5, first_token_s=2.0,
        last_token_s=3.0, end_s=3.5, ttft_s=0.5, e2e_s=2.0, token_times_s=[2.0, 3.0],
    )  # fmt: skip
    row = record_row(r)
    assert len(row) == len(RECORD_FIELDS)
    moved = record_from_row(row, lambda t: t + 10.0)
    assert (moved.intended_send_s, moved.actual_send_s, moved.end_s) == (11.0, 11.5, 13.5)
    assert moved.token_times_s == [12.0, 13.0]
    assert (moved.ttft_s, moved.e2e_s) == (0.5, 2.0)  # durations unchanged
    skipped = RequestRecord("r2", "s", 1, "r1", intended_send_s=float("nan"))
    assert math.isnan(record_from_row(record_row(skipped), lambda t: t + 1).intended_send_s)


def test_shard_chunks_round_trip() -> None:
    import pyarrow as pa

    n = 1000
    table = pa.table(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "session_id": [f"s{i}" for i in range(n)],
            "turn_index": pa.array(np.zeros(n), pa.int32()),
            "parent_request_id": pa.nulls(n, pa.string()),
            "arrival_s": np.arange(n, dtype=float),
            "think_time_s": np.zeros(n),
            "input_length": np.full(n, 64),
            "output_length": np.full(n, 8),
            "block_hashes": pa.array(
                [list(range(i % 50)) for i in range(n)], pa.list_(pa.uint64())
            ),
        }
    )
    chunks = shard_chunks(table, chunk_bytes=20_000)
    assert len(chunks) > 3
    back = table_from_chunks(chunks)
    assert back.equals(table)
    reqs = planned_requests(back)
    assert [r.row for r in reqs[:3]] == [0, 1, 2] and reqs[5].request_id == "r5"


# --------------------------------------------------------- shared SSE reading


def test_sse_reader_and_settle_match_the_stream_rules() -> None:
    acc = StreamAccumulator()
    reader = SseReader(acc)
    assert not reader.feed(0.1, b": comment\n\n")
    assert not reader.feed(0.2, b'data: {"choices": [{"text": ""}]}\n\n')  # role-only
    assert not reader.feed(0.3, b'data: {"choices": [{"token_ids": [5, 6]}]}\n\n')
    assert not reader.feed(0.5, b'data: {"choices": [{"token_ids": [7]}]}\r\n\r')
    assert reader.feed(0.6, b"\ndata: [DONE]\n\n") and reader.done
    record = RequestRecord("r", "s", 0, None, 0.0, actual_send_s=0.05, expected_output_tokens=3)
    settle_record(record, reader, acc.summary(), lambda: 0.7)
    assert record.status == "ok" and record.output_tokens == 3
    assert record.ttft_s == pytest.approx(0.25) and record.end_s == 0.7

    cut = SseReader(StreamAccumulator())
    cut.feed(0.3, b'data: {"choices": [{"token_ids": [5]}]}\n\n')
    rec = RequestRecord("r", "s", 0, None, 0.0, actual_send_s=0.0, expected_output_tokens=1)
    settle_record(rec, cut, cut.acc.summary(), lambda: 1.0)
    assert rec.error_class == "stream" and "without [DONE]" in (rec.error_message or "")

    bad = SseReader(StreamAccumulator())
    assert bad.feed(0.1, b'data: {"error": {"message": "instance died"}}\n\n')
    assert bad.server_error == "instance died"


# ------------------------------------------------------------------ verdicts


def _worker(index: int, **kw) -> WorkerState:
    w = WorkerState(f"host_{index}", index, host="h")
    w.shard = ShardSummary(index, 2, 10, 0.0)
    w.records, w.reported_records, w.done = 10, 10, True
    for k, v in kw.items():
        setattr(w, k, v)
    return w


def test_judge_run_complete_incomplete_suspect() -> None:
    def judge(workers, planned=20, **kw):
        args = {"master_cpu": [0.05], "interrupted": False, "failure": None} | kw
        return judge_run(workers, planned=planned, **args)

    ok = judge([_worker(0), _worker(1)])
    assert ok.incomplete == [] and ok.suspect == []
    lost = judge([_worker(0), _worker(1, lost="no message for 10 s", records=4, done=False)])
    assert any("lost" in r for r in lost.incomplete)
    assert any("6 planned requests have no record" in r for r in lost.incomplete)
    # lost before it had work: nothing missing, only a note
    spare = _worker(2, lost="no reply to clock pings", shard=None, records=0, done=False)
    spare.reported_records = None
    early = judge([_worker(0), _worker(1), spare])
    assert early.incomplete == [] and early.notes
    short = judge([_worker(0), _worker(1, reported_records=11)])
    assert any("shipped 11 records, master received 10" in r for r in short.incomplete)
    hot = judge([_worker(0, cpu=[0.5, 0.97]), _worker(1)], master_cpu=[0.95])
    assert len(hot.suspect) == 2 and hot.incomplete == []
    capped = [
        _worker(0, records=5, reported_records=5, stopped_at_s=3.0),
        _worker(1, records=5, reported_records=5),
    ]
    assert judge(capped).incomplete == [] and cap_hit(capped) == 3.0
    stopped = [
        _worker(0, cancelled=True, records=3, reported_records=3),
        _worker(1, cancelled=True, records=3, reported_records=3),
    ]
    assert judge(stopped, interrupted=True).incomplete == []
    assert any("stopped before" in r for r in judge(stopped).incomplete)


# ------------------------------------------------------------ HTTP framing


def _chunked(payloads: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"


_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=12))
def test_framer_yields_the_body_whatever_the_read_boundaries(cuts: list[int]) -> None:
    payloads = [b'data: {"i": %d}\n\n' % i for i in range(20)]
    wire = _SSE_HEAD + _chunked(payloads)
    framer = ResponseFramer()
    body, pos, k = b"", 0, 0
    while pos < len(wire):  # the wire cut into reads of the drawn sizes, cycling
        n = cuts[k % len(cuts)]
        body += framer.feed(wire[pos : pos + n])
        pos, k = pos + n, k + 1
        assert framer.complete == (pos >= len(wire))
    assert body == b"".join(payloads)
    assert framer.status == 200 and framer.keep_alive


def test_framer_content_length_close_delimited_and_errors() -> None:
    f = ResponseFramer()
    assert f.feed(b"HTTP/1.1 400 Bad\r\nContent-Length: 5\r\n\r\nab") == b"ab"
    assert (f.status, f.complete) == (400, False)
    assert f.feed(b"cdeXX") == b"cde" and f.complete  # bytes past the message are not ours
    f = ResponseFramer()  # interim 100 Continue, then a close-delimited body
    head = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\n"
    assert f.feed(head + b"xy") == b"xy" and not f.keep_alive
    assert not f.complete and f.eof() and f.complete
    f = ResponseFramer()  # a cut chunked stream is not complete at EOF
    assert f.feed(_SSE_HEAD + b"5\r\nab") == b"ab"
    assert not f.eof()
    f = ResponseFramer()
    assert f.feed(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n") == b""
    assert f.complete and not f.keep_alive
    for bad in (
        b"garbage\r\n\r\n",
        _SSE_HEAD + b"zz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
    ):
        with pytest.raises(FramingError):
            ResponseFramer().feed(bad)
