"""The asyncio engine and client against a real local SSE server."""

from __future__ import annotations

import asyncio
import time

import pandas as pd
import pyarrow.parquet as pq

from pddbench.harness.config.replay import ApiConfig
from pddbench.harness.drive.aio.backend import AsyncioEngine, EngineConfig
from pddbench.harness.plan.player import PlannedRequest, SessionPlayer
from pddbench.harness.rundir.records import Journal, finalize_journal
from pddbench.tokens import TokenStream
from tests.harness.sse_server import LOG, RunningServer


def _plan(n_sessions: int, turns: int, think: float = 0.05, suffixes: dict[str, str] | None = None):
    out = []
    for s in range(n_sessions):
        for t in range(turns):
            rid = f"s{s}t{t}" + (suffixes or {}).get(f"s{s}t{t}", "")
            parent = out[-1].request_id if t else None
            out.append(PlannedRequest(rid, f"s{s}", t, 0, parent, 0.01 * s, think, 8, 12))
    return out


def _run(plan, tmp_path, *, api=None, **server_kwargs):
    async def go():
        async with RunningServer(**server_kwargs) as srv:
            journal = Journal(tmp_path / "journal.jsonl")
            engine = AsyncioEngine(
                SessionPlayer(plan),
                EngineConfig(base_url=srv.url, api=api or ApiConfig(stall_timeout_s=2.0)),
                journal,
                prompt_fn=lambda r: list(range(r.input_length)),
                oracle_fn=lambda r: TokenStream(0, r.request_id, 32000),
            )
            stats = await engine.run()
            journal.close()
            return stats, srv.app[LOG]

    stats, log = asyncio.run(go())
    _n, bad = finalize_journal(tmp_path / "journal.jsonl", tmp_path / "requests.parquet")
    return stats, log, pq.read_table(tmp_path / "requests.parquet").to_pandas(), bad


def test_every_request_once_turns_after_completion_plus_think(tmp_path) -> None:
    plan = _plan(5, 4, think=0.05)
    _stats, _log, df, bad = _run(plan, tmp_path, tokens_per_chunk=3, token_delay_s=0.002)
    assert bad == 0
    assert len(df) == 20 and df.request_id.is_unique
    assert (df.status == "ok").all(), df[df.status != "ok"][["request_id", "error_message"]]
    assert (df.output_tokens == 12).all() and df.integrity_ok.all()
    by_id = df.set_index("request_id")
    for r in plan:
        if r.parent_request_id:
            parent_end = by_id.loc[r.parent_request_id, "end_s"]
            assert by_id.loc[r.request_id, "actual_send_s"] >= parent_end + 0.05 - 1e-6
            assert abs(by_id.loc[r.request_id, "intended_send_s"] - (parent_end + 0.05)) < 0.01
    assert (df.ttft_s > 0).all() and (df.ttft_s < df.e2e_s).all()
    # 12 tokens in chunks of 3: 11 intervals, those inside the first chunk are 0
    assert (df.chunks == 4 + 1).all()


def test_faults_become_records_not_exceptions(tmp_path) -> None:
    suffixes = {
        "s0t0": "-http500",
        "s1t0": "-errevent",
        "s2t0": "-cut",
        "s3t0": "-dup",
        "s4t0": "-stall",
        "s5t0": "-slow",
    }
    plan = _plan(7, 2, think=0.0, suffixes=suffixes)
    t0 = time.monotonic()
    api = ApiConfig(stall_timeout_s=0.5, request_timeout_s=1.5)
    _stats, _log, df, _ = _run(plan, tmp_path, api=api)
    assert time.monotonic() - t0 < 15
    cls = dict(zip(df.request_id, df.error_class, strict=True))
    assert cls["s0t0-http500"] == "http"
    assert cls["s1t0-errevent"] == "stream"
    assert cls["s2t0-cut"] == "stream"
    assert cls["s3t0-dup"] == "integrity"
    assert cls["s4t0-stall"] == "timeout"
    # the harness's own request limit cut a stream still answering: censored, not an error
    slow = df.set_index("request_id").loc["s5t0-slow"]
    assert (slow.status, slow.error_class) == ("censored", "request_limit")
    assert slow.output_tokens > 0 and slow.e2e_s >= 1.5
    assert pd.isna(cls["s6t0"])
    assert len(df) == 14  # next turns still sent (continue-on-error policy)


def test_connection_refused_is_recorded(tmp_path) -> None:
    async def go():
        journal = Journal(tmp_path / "j.jsonl")
        engine = AsyncioEngine(
            SessionPlayer(_plan(2, 2)),
            EngineConfig(base_url="http://127.0.0.1:9", api=ApiConfig()),
            journal,
            prompt_fn=lambda r: [1, 2, 3],
        )
        await engine.run()
        journal.close()

    asyncio.run(go())
    finalize_journal(tmp_path / "j.jsonl", tmp_path / "r.parquet")
    df = pq.read_table(tmp_path / "r.parquet").to_pandas()
    assert len(df) == 4 and (df.error_class == "connect").all()
