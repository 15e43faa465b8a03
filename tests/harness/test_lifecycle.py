"""One request lifecycle for both drive backends: a client-side exception is a recorded
failure of class ``client`` in each (the asyncio copy used to journal it as ``ok``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq

from pddbench.harness.config.replay import ApiConfig
from pddbench.harness.drive.aio.backend import AsyncioEngine, EngineConfig
from pddbench.harness.drive.lifecycle import RequestLifecycle, Settled
from pddbench.harness.plan.player import PlannedRequest, SessionPlayer
from pddbench.harness.rundir.records import Journal, RequestRecord, finalize_journal
from tests.harness.conftest import ROOT
from tests.harness.sse_server import RunningServer
from tests.traces import chain_trace

FAILING = "s1-t0"  # the request whose prompt cannot be built


def _req(rid: str) -> PlannedRequest:
    return PlannedRequest(rid, "s", 0, 0, None, 0.0, 0.0, 8, 4)


def _record(rid: str) -> RequestRecord:
    return RequestRecord(request_id=rid, session_id="s", turn_index=0, parent_request_id=None,
                         intended_send_s=0.0)


def test_settle_classifies_then_fires_listeners_in_order() -> None:
    seen: list[tuple[str, str, str | None]] = []
    life = RequestLifecycle(lambda: 1.5)
    life.add_listener(lambda e: seen.append(("a", e.record.status, e.record.error_class)))
    life.add_listener(lambda e: seen.append(("b", e.record.status, e.record.error_class)))
    ok = life.settle(_req("r0"), _record("r0"))
    bad = life.settle(_req("r1"), _record("r1"), error=ValueError("boom"))
    gone = life.settle(_req("r2"), _record("r2"), cancelled=True, unsent=True)
    assert isinstance(ok, Settled) and ok.ok and ok.record.end_s == 1.5
    assert not bad.ok and "boom" in (bad.record.error_message or "")
    assert gone.record.error_message == "cancelled before it was sent"
    assert seen == [
        ("a", "ok", None), ("b", "ok", None),
        ("a", "error", "client"), ("b", "error", "client"),
        ("a", "cancelled", "cancelled"), ("b", "cancelled", "cancelled"),
    ]  # fmt: skip


def _prompt_or_fail(req: PlannedRequest) -> list[int]:
    if req.request_id == FAILING:
        raise RuntimeError("prompt materialisation failed (injected)")
    return list(range(req.input_length))


def test_asyncio_backend_records_a_client_exception_as_a_failure(tmp_path: Path) -> None:
    table = chain_trace(sessions=3, turns=2, session_gap_s=0.01, turn_gap_s=0.0, think_s=0.0)
    from pddbench.harness.config.replay import Selection
    from pddbench.harness.plan.sessions import plan_requests

    plan = plan_requests(table, Selection())

    async def go() -> None:
        async with RunningServer() as srv:
            journal = Journal(tmp_path / "journal.jsonl")
            engine = AsyncioEngine(
                SessionPlayer(plan),
                EngineConfig(base_url=srv.url, api=ApiConfig(stall_timeout_s=2.0)),
                journal,
                prompt_fn=_prompt_or_fail,
            )
            await engine.run()
            journal.close()

    asyncio.run(go())
    finalize_journal(tmp_path / "journal.jsonl", tmp_path / "requests.parquet")
    df = pq.read_table(tmp_path / "requests.parquet").to_pandas().set_index("request_id")
    assert len(df) == len(plan)
    failed = df.loc[FAILING]
    assert (failed.status, failed.error_class) == ("error", "client")
    assert "injected" in failed.error_message
    assert (df.drop(index=FAILING).status == "ok").all()


WORKER = textwrap.dedent(
    """
    from gevent import monkey; monkey.patch_all()
    import json, sys, time
    from pddbench.harness.drive.locust import protocol as P
    from pddbench.harness.drive.locust.job import RECORD_FIELDS
    from pddbench.harness.drive.locust.worker_agent import ShardDriver
    from pddbench.harness.drive.replay import prepare
    from pddbench.harness.config.replay import ReplayOptions
    from pddbench.workloads.traceio import read_trace
    from tests.harness.test_lifecycle import FAILING, _prompt_or_fail

    trace_path, url = sys.argv[1:]
    rows = []
    def send(kind, data):
        if kind == P.BATCH:
            rows.extend(data["rows"])
    plan = prepare(read_trace(trace_path), ReplayOptions())
    driver = ShardDriver(plan, ReplayOptions(), url, send)
    driver.prompt_fn = _prompt_or_fail
    driver.run(time.monotonic())
    out = [dict(zip(RECORD_FIELDS, r)) for r in rows]
    print(json.dumps([[r["request_id"], r["status"], r["error_class"], r["error_message"]]
                      for r in out]))
    """
)


def test_locust_worker_records_a_client_exception_as_a_failure(tmp_path: Path, server) -> None:
    trace = chain_trace(tmp_path / "t.parquet", sessions=3, turns=2, session_gap_s=0.01,
                        turn_gap_s=0.0, think_s=0.0)
    url = server()
    res = subprocess.run([sys.executable, "-c", WORKER, str(trace), url], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    records = {rid: (status, cls, msg) for rid, status, cls, msg in json.loads(res.stdout)}
    assert len(records) == 6
    status, cls, msg = records.pop(FAILING)
    assert (status, cls) == ("error", "client") and "injected" in msg
    assert all(status == "ok" for status, _, _ in records.values()), records
