"""The asyncio replay engine: executes what the SessionPlayer decides, stamps time, journals.

One event loop, one keep-alive connection pool (:mod:`pddbench.harness.drive.aio.http1`) with no
limit on connections (open loop: a
request is never held back by the client unless a concurrency cap is configured, and
then the wait is recorded as ``client_queue_s``). The loop sleeps until the player's next
due time or until a completion makes new turns ready; each request runs as its own task
and settles the moment it ends (:mod:`~pddbench.harness.drive.lifecycle`: journal, live
counters, player — a client-side exception is a recorded failure of class ``client``).
Cancellation (Ctrl-C, SIGTERM) cancels in-flight requests, records them as cancelled and
leaves the journal complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from pddbench.harness.config.replay import ApiConfig
from pddbench.harness.drive.aio.http1 import Http1Pool
from pddbench.harness.drive.client import stream_completion
from pddbench.harness.drive.lifecycle import RequestLifecycle, Settled
from pddbench.harness.drive.live import LiveCounters
from pddbench.harness.drive.stream_records import record_for, skipped_record
from pddbench.harness.plan.player import DueRequest, PlannedRequest, SessionPlayer
from pddbench.harness.rundir.records import Journal
from pddbench.harness.rundir.sends import SendLog

PromptFn = Callable[[PlannedRequest], list[int]]
OracleFn = Callable[[PlannedRequest], Callable[[int], int] | None]


@dataclass
class EngineStats(LiveCounters):
    """Live counters for the progress view, and when the duration cap stopped sending."""

    stopped_at_s: float | None = None


@dataclass
class EngineConfig:
    base_url: str
    api: ApiConfig
    max_concurrency: int | None = None
    cached_tokens_theoretical: dict[str, int] | None = None
    max_duration_s: float | None = None  # stop sending new requests after this


class AsyncioEngine:
    """Drives a :class:`SessionPlayer` against one HTTP endpoint."""

    def __init__(
        self,
        player: SessionPlayer,
        config: EngineConfig,
        journal: Journal,
        prompt_fn: PromptFn,
        *,
        oracle_fn: OracleFn | None = None,
        clock_origin: float | None = None,
        send_log: SendLog | None = None,
    ):
        self.player = player
        self.send_log = send_log
        self.config = config
        self.journal = journal
        self.prompt_fn = prompt_fn
        self.oracle_fn = oracle_fn
        self.stats = EngineStats()
        self._origin = time.monotonic() if clock_origin is None else clock_origin
        self.lifecycle = RequestLifecycle(self.clock)  # request_settled, in this order:
        self.lifecycle.add_listener(lambda e: self.journal.append(e.record))
        self.lifecycle.add_listener(lambda e: self.stats.settle(e.record))
        self.lifecycle.add_listener(self._completed)
        self._wake: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._sem: asyncio.Semaphore | None = None

    def clock(self) -> float:
        """Seconds since the run's start on the monotonic clock."""
        return time.monotonic() - self._origin

    async def run(self) -> EngineStats:
        self._wake = asyncio.Event()
        if self.config.max_concurrency:
            self._sem = asyncio.Semaphore(self.config.max_concurrency)
        loop = asyncio.get_running_loop()
        http = Http1Pool(self.config.base_url, connect_timeout_s=self.config.api.connect_timeout_s)
        try:
            deadline = self.config.max_duration_s
            while not self.player.done:
                now = self.clock()
                if deadline is not None and now >= deadline:
                    # duration cap: send nothing new, let in-flight requests finish
                    self.stats.stopped_at_s = now
                    if all(t.done() for t in self._tasks):
                        break
                    self._wake.clear()
                    # a finishing task sets the wake before its done-callback runs
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), 0.25)
                    continue
                for due in self.player.pop_due(now):
                    self._spawn(http, due)
                nxt = self.player.next_due_s()
                if deadline is not None:
                    if (nxt is None or nxt >= deadline) and all(t.done() for t in self._tasks):
                        # nothing in flight could free a turn, nothing is due before the
                        # cap: the requests the cap lets through are settled, stop now
                        self.stats.stopped_at_s = now
                        break
                    nxt = deadline if nxt is None else min(nxt, deadline)
                self._wake.clear()
                handle = None
                if nxt is not None:
                    delay = nxt - self.clock()
                    if delay <= 0:
                        continue
                    handle = loop.call_later(delay, self._wake.set)
                if self.player.done:
                    break
                await self._wake.wait()
                if handle is not None:
                    handle.cancel()
        finally:
            if self._tasks:
                for task in list(self._tasks):
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)
            for skipped in self.player.skipped:
                self._journal_skipped(skipped)
            self.journal.flush()
            await http.close()
        return self.stats

    def _spawn(self, http: Http1Pool, due: DueRequest) -> None:
        task = asyncio.get_running_loop().create_task(self._one(http, due))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _one(self, http: Http1Pool, due: DueRequest) -> None:
        req = due.request
        record = record_for(due, self.config.cached_tokens_theoretical)
        error: Exception | None = None
        cancelled = False
        try:
            prompt = self.prompt_fn(req)
            oracle = self.oracle_fn(req) if self.oracle_fn else None
            if self._sem is not None:
                queued = self.clock()
                async with self._sem:
                    record.client_queue_s = self.clock() - queued
                    await self._send(http, record, prompt, oracle)
            else:
                await self._send(http, record, prompt, oracle)
        except asyncio.CancelledError:
            cancelled = True
            raise
        except Exception as exc:  # a client-side failure still leaves a (failed) record
            error = exc
        finally:
            self.lifecycle.settle(req, record, error=error, cancelled=cancelled)

    def _completed(self, settled: Settled) -> None:
        """The player learns the request ended; the loop wakes to send what that freed."""
        with contextlib.suppress(KeyError):
            self.player.complete(settled.request.request_id, settled.record.end_s, ok=settled.ok)
        if self._wake is not None:
            self._wake.set()

    async def _send(self, http, record, prompt, oracle) -> None:
        self.stats.sent += 1
        if self.send_log is not None:
            self.send_log.sent(record.request_id)
        self.stats.in_flight += 1
        try:
            await stream_completion(
                http,
                self.config.api,
                record,
                prompt,
                self.clock,
                expected_token_fn=oracle,
            )
        finally:
            self.stats.in_flight -= 1

    def _journal_skipped(self, req: PlannedRequest) -> None:
        self.journal.append(skipped_record(req))
