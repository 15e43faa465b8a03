"""Scraping the instances' ``/metrics`` during a replay into ``server_metrics.parquet``.

Owns the polling: an asyncio task that fetches every instance's metrics URL every
``interval_s`` seconds (all instances concurrently), maps the series to common names
(:mod:`pddbench.harness.engines.metrics`) and keeps rows ``{t_s, instance, metric,
raw_name, labels, value}``, where ``t_s`` is on the run's monotonic clock (seconds since
the replay's origin, like the request records). A failed scrape is counted per instance,
never raised; stopping takes one last scrape so counters cover the whole run. Also the
parquet writer and a one-shot synchronous fetch for checks outside an event loop.

Runs in whatever network namespace its thread is in (the client's, during a replay).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pyarrow as pa
import pyarrow.parquet as pq

from pddbench.harness.engines.metrics import (
    ExpositionError,
    MappedSample,
    Sample,
    map_samples,
    parse_prometheus,
)

SERVER_METRICS_SCHEMA = pa.schema(
    [
        ("t_s", pa.float64()),
        ("instance", pa.string()),
        ("metric", pa.string()),
        ("raw_name", pa.string()),
        ("labels", pa.string()),  # JSON object, keys sorted
        ("value", pa.float64()),
    ]
)


@dataclass(frozen=True)
class MetricRow:
    t_s: float
    instance: str
    metric: str
    raw_name: str
    labels: str
    value: float


def labels_json(labels: Iterable[tuple[str, str]]) -> str:
    return json.dumps(dict(labels), sort_keys=True, separators=(",", ":"))


def metrics_targets(instances: Mapping[str, str], path: str = "/metrics") -> dict[str, str]:
    """Instance name → metrics URL, from instance name → base URL (a deployment's)."""
    return {name: url.rstrip("/") + path for name, url in instances.items() if url}


def rows_from_text(
    text: str, instance: str, t_s: float, *, keep_unmapped: bool = False
) -> list[MetricRow]:
    return rows_from_samples(parse_prometheus(text), instance, t_s, keep_unmapped=keep_unmapped)


def rows_from_samples(
    samples: Iterable[Sample], instance: str, t_s: float, *, keep_unmapped: bool = False
) -> list[MetricRow]:
    """One instance's samples at ``t_s`` under their common names (what a scrape keeps;
    the twin passes its registries' samples here without the text round trip)."""
    mapped = map_samples(samples, keep_unmapped=keep_unmapped)
    return [
        MetricRow(t_s, instance, s.metric, s.raw_name, labels_json(s.labels), s.value)
        for s in mapped
    ]


@dataclass
class MetricsScraper:
    """Polls ``targets`` (instance → metrics URL) until stopped; rows accumulate."""

    targets: Mapping[str, str]
    interval_s: float = 1.0
    origin: float = field(default_factory=time.monotonic)
    clock: Callable[[], float] = time.monotonic
    timeout_s: float = 5.0
    keep_unmapped: bool = False
    rows: list[MetricRow] = field(default_factory=list)
    scrapes: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    last_error: dict[str, str] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    async def _one(self, http: aiohttp.ClientSession, name: str, url: str) -> None:
        t = self.clock() - self.origin
        try:
            async with http.get(url) as resp:
                if resp.status != 200:
                    raise ExpositionError(f"HTTP {resp.status}")
                text = await resp.text()
            self.rows.extend(rows_from_text(text, name, t, keep_unmapped=self.keep_unmapped))
        except (aiohttp.ClientError, OSError, TimeoutError, ExpositionError) as exc:
            self.failures[name] = self.failures.get(name, 0) + 1
            self.last_error[name] = f"{type(exc).__name__}: {exc}"[:200]

    async def scrape_once(self, http: aiohttp.ClientSession | None = None) -> None:
        """Scrape every target once (concurrently)."""
        own = http is None
        session = http or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        try:
            await asyncio.gather(*(self._one(session, n, u) for n, u in self.targets.items()))
            self.scrapes += 1
        finally:
            if own:
                await session.close()

    async def run(self) -> None:
        """Scrape now and then every ``interval_s`` until cancelled."""
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            next_at = self.clock()
            while True:
                await self.scrape_once(http)
                next_at += self.interval_s
                await asyncio.sleep(max(0.0, next_at - self.clock()))

    def start(self) -> asyncio.Task[None]:
        """Run in the background of the current event loop."""
        self._task = asyncio.get_running_loop().create_task(self.run())
        return self._task

    async def stop(self, *, final_scrape: bool = True) -> None:
        """Stop polling and (by default) take one last scrape."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if final_scrape:
            await self.scrape_once()

    def table(self) -> pa.Table:
        return rows_table(self.rows)


def rows_table(rows: Iterable[MetricRow]) -> pa.Table:
    rows = list(rows)
    return pa.table(
        {
            "t_s": pa.array([r.t_s for r in rows], pa.float64()),
            "instance": pa.array([r.instance for r in rows], pa.string()),
            "metric": pa.array([r.metric for r in rows], pa.string()),
            "raw_name": pa.array([r.raw_name for r in rows], pa.string()),
            "labels": pa.array([r.labels for r in rows], pa.string()),
            "value": pa.array([r.value for r in rows], pa.float64()),
        },
        schema=SERVER_METRICS_SCHEMA,
    )


def write_server_metrics(rows: Iterable[MetricRow], path: str | Path) -> int:
    """Write the rows as ``server_metrics.parquet`` (atomically); returns the row count."""
    table = rows_table(rows)
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return table.num_rows


def fetch_metrics(url: str, *, timeout_s: float = 5.0) -> list[MappedSample]:
    """One synchronous scrape of a metrics URL, mapped to common names."""
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        text = resp.read().decode("utf-8", errors="replace")
    return map_samples(parse_prometheus(text))
