"""The /metrics scraper against a live HTTP server whose counters move, and its parquet."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
from pathlib import Path

import pyarrow.parquet as pq
from aiohttp import web

from pddbench.harness.drive.scrape import (
    SERVER_METRICS_SCHEMA,
    MetricsScraper,
    metrics_targets,
    write_server_metrics,
)
from tests.waiting import await_until

DATA = Path(__file__).parent / "data"


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _serve(counter: list[int]) -> tuple[web.AppRunner, str]:
    async def metrics(_: web.Request) -> web.Response:
        counter[0] += 128
        body = (
            "# TYPE vllm:prefix_cache_hits_total counter\n"
            f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {counter[0]}.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 2.0\n'
            "process_open_fds 34.0\n"
        )
        return web.Response(text=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


def test_scraper_polls_maps_counts_failures_and_writes_parquet(tmp_path) -> None:
    counter = [0]

    async def scenario() -> MetricsScraper:
        runner, url = await _serve(counter)
        targets = metrics_targets({"vllm0": url + "/", "gone": f"http://127.0.0.1:{_dead_port()}"})
        scraper = MetricsScraper(targets, interval_s=0.1, timeout_s=1.0)
        scraper.start()
        await await_until(lambda: scraper.scrapes >= 4, what="four scrapes")
        await scraper.stop()  # takes one more scrape
        await runner.cleanup()
        return scraper

    scraper = asyncio.run(scenario())
    assert scraper.scrapes >= 4
    assert scraper.failures["gone"] == scraper.scrapes
    assert "gone" in scraper.last_error and "vllm0" not in scraper.failures
    hits = [r for r in scraper.rows if r.metric == "prefix_cache_hit_tokens_total"]
    assert [r.value for r in hits] == [128.0 * (i + 1) for i in range(len(hits))]
    assert all(b.t_s > a.t_s for a, b in itertools.pairwise(hits))
    assert {r.metric for r in scraper.rows} == {
        "prefix_cache_hit_tokens_total",
        "requests_waiting",
    }
    assert json.loads(hits[0].labels) == {"engine": "0", "model_name": "m"}
    out = tmp_path / "server_metrics.parquet"
    assert write_server_metrics(scraper.rows, out) == len(scraper.rows)
    table = pq.read_table(out)
    assert table.schema.equals(SERVER_METRICS_SCHEMA)
    assert set(table.column("instance").to_pylist()) == {"vllm0"}


def test_empty_run_writes_an_empty_table(tmp_path) -> None:
    out = tmp_path / "server_metrics.parquet"
    assert write_server_metrics([], out) == 0
    assert pq.read_table(out).schema.equals(SERVER_METRICS_SCHEMA)
