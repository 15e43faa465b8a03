"""A pddbench Locust worker: answers clock pings, takes its shard, drives it, ships records.

Owns the worker side of :mod:`~pddbench.harness.drive.locust.protocol`. The shard arrives
as messages (the worker needs no trace file, only the master's address); the
:class:`ShardDriver` drives it through the same
:class:`~pddbench.harness.plan.player.SessionPlayer` as the asyncio engine, one greenlet per
request, and ships full records to the master in batches (at least every
``batch_interval_s``), with the process's CPU use per second. Locust's own request events
(``POST <endpoint>``, ``LLM TTFT``, ``LLM TPOT``, ``LLM ITL``) feed only the live view.

Times in shipped records are on the worker's run clock, which starts at the master's run
origin as estimated through the clock offset; the master corrects them with its latest
offset estimate.

Must not: be imported outside a gevent (Locust) process; decide what is due (the player
does) or how a stream is read (gclient and stream_records do).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import gevent.pool
import numpy as np
from greenlet import GreenletExit

from pddbench import __version__
from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.drive.lifecycle import RequestLifecycle, Settled
from pddbench.harness.drive.live import LiveCounters
from pddbench.harness.drive.locust import protocol as P
from pddbench.harness.drive.locust.cpu import CpuMeter
from pddbench.harness.drive.locust.gclient import http_client, stream_completion
from pddbench.harness.drive.locust.job import (
    RECORD_FIELDS,
    record_row,
    table_from_chunks,
    worker_plan,
)
from pddbench.harness.drive.locust.waker import PreciseWaker
from pddbench.harness.drive.replay import ReplayPlan, prompt_function
from pddbench.harness.drive.stream_records import record_for, skipped_record
from pddbench.harness.plan.player import PlannedRequest, SessionPlayer
from pddbench.harness.rundir.records import RequestRecord, Status
from pddbench.tokens import TokenStream

log = logging.getLogger("pddbench.locust.worker")

Send = Callable[[str, dict[str, Any]], None]
CPU_INTERVAL_S = 1.0


class ShardDriver:
    """Drives one shard: the player decides, a greenlet per request executes, rows go out."""

    def __init__(
        self,
        plan: ReplayPlan,
        options: ReplayOptions,
        base_url: str,
        send: Send,
        fire_request: Callable[..., None] | None = None,
        *,
        batch_interval_s: float = 0.2,
        itl_events_per_request: int = 8,
    ):
        self.plan = plan
        self.options = options
        self.player = SessionPlayer(plan.requests, on_error=options.on_error)
        self.http = http_client(base_url, options.api)
        self.path = self.http.target.base_path + options.api.endpoint  # as the live view shows it
        self.prompt_fn = prompt_function(plan, options)
        self.send = send
        self.fire = fire_request
        self.batch_interval_s = batch_interval_s
        self.itl_events = itl_events_per_request
        self._itl_picks: dict[int, np.ndarray] = {}  # stream length -> sampled positions
        self.origin = time.monotonic()
        self.outbox: list[list[object]] = []
        self.cpu_fractions: list[float] = []
        self.shipped = 0
        self.counters = LiveCounters()  # sent / done / errors / in flight, shipped in batches
        self.cancelled = False
        self.stopped_at_s: float | None = None  # when the duration cap stopped new sends
        self.finished = gevent.event.Event()
        self._wake = gevent.event.Event()
        self._stop_shipping = gevent.event.Event()
        self._requests = gevent.pool.Group()
        # popped from the player, not yet settled
        self._open: dict[str, tuple[PlannedRequest, RequestRecord]] = {}
        self.lifecycle = RequestLifecycle(self.clock)  # request_settled, in this order:
        self.lifecycle.add_listener(self._ship_later)
        self.lifecycle.add_listener(lambda e: self.counters.count(e.record))
        if fire_request is not None:
            self.lifecycle.add_listener(self._fire_events)
        self.lifecycle.add_listener(self._completed)

    def clock(self) -> float:
        """Seconds on the worker's run clock."""
        return time.monotonic() - self.origin

    def run(self, origin_monotonic: float) -> None:
        """Wait for the run's start, drive the shard to its end (or a stop), report done."""
        self.origin = origin_monotonic
        gevent.sleep(max(0.0, origin_monotonic - time.monotonic()))
        meter = CpuMeter()
        shipper = gevent.spawn(self._ship_loop, meter)
        try:
            self._drive()
        finally:
            self._requests.kill(block=True)  # in-flight requests record themselves as cancelled
            for req, record in list(self._open.values()):  # killed before they started
                self.lifecycle.settle(req, record, cancelled=True, unsent=True)
            for req in self.player.skipped:
                self.outbox.append(record_row(skipped_record(req)))
            self.http.close()
            self._stop_shipping.set()  # never kill it: a batch cut mid-send would be lost
            shipper.join()
            self._read_cpu(meter)
            self._ship()
            self.send(
                P.DONE,
                {
                    "records": self.shipped,
                    "cancelled": self.cancelled,
                    "sent": self.counters.sent,
                    "stopped_at_s": self.stopped_at_s,
                    "cpu_s": meter.total_cpu_s,
                    "wall_s": meter.total_wall_s,
                },
            )
            self.finished.set()

    def cancel(self) -> None:
        self.cancelled = True
        self._wake.set()

    def _drive(self) -> None:
        player, wake = self.player, self._wake
        deadline = self.options.max_duration_s
        waker = PreciseWaker(wake.set)  # libev's own timers wake up to 1.5 ms late
        try:
            while not player.done and not self.cancelled:
                now = self.clock()
                if deadline is not None and now >= deadline:
                    self.stopped_at_s = now  # duration cap: nothing new, in-flight ones finish
                    break
                for due in player.pop_due(now):
                    record = record_for(due, self.plan.theoretical_cached)
                    self._open[record.request_id] = (due.request, record)
                    self._requests.spawn(self._one, due.request, record)
                nxt = player.next_due_s()
                if deadline is not None:
                    if (nxt is None or nxt >= deadline) and not self._open:
                        self.stopped_at_s = now  # nothing due before the cap: all settled
                        break
                    nxt = deadline if nxt is None else min(nxt, deadline)
                wake.clear()
                if nxt is None:
                    wake.wait()
                    continue
                delay = nxt - self.clock()
                if delay > 0:
                    waker.wake_at(self.origin + nxt)
                    wake.wait(delay + 0.05)  # the gevent timer only as a backstop
        finally:
            waker.close()
        while self._open and not self.cancelled:  # in flight; every completion wakes us
            wake.clear()
            wake.wait()

    def _one(self, req: PlannedRequest, record: RequestRecord) -> None:
        itl: list[np.ndarray] = []
        error: Exception | None = None
        cancelled = False
        try:
            prompt = self.prompt_fn(req)
            oracle = self._oracle(req)
            self.counters.sent += 1
            self.counters.in_flight += 1
            try:
                stream_completion(
                    self.http,
                    self.options.api,
                    record,
                    prompt,
                    self.clock,
                    expected_token_fn=oracle,
                    on_itl=itl.append if self.fire else None,
                )
            finally:
                self.counters.in_flight -= 1
        except GreenletExit:
            cancelled = True
        except Exception as exc:  # a client-side failure still leaves a (failed) record
            error = exc
        finally:
            self.lifecycle.settle(
                req, record, error=error, cancelled=cancelled, itl=itl[0] if itl else None
            )

    def _ship_later(self, settled: Settled) -> None:
        self._open.pop(settled.record.request_id, None)
        self.outbox.append(record_row(settled.record))

    def _completed(self, settled: Settled) -> None:
        with contextlib.suppress(KeyError):
            self.player.complete(settled.request.request_id, settled.record.end_s, ok=settled.ok)
        self._wake.set()

    def _oracle(self, req: PlannedRequest) -> Callable[[int], int] | None:
        seed = self.options.integrity_seed
        return None if seed is None else TokenStream(seed, req.request_id, self.options.vocab_size)

    def _ship_loop(self, meter: CpuMeter) -> None:
        next_cpu = time.monotonic() + CPU_INTERVAL_S
        while not self._stop_shipping.wait(self.batch_interval_s):
            if time.monotonic() >= next_cpu:
                self._read_cpu(meter)
                next_cpu += CPU_INTERVAL_S
            self._ship()

    def _read_cpu(self, meter: CpuMeter) -> None:
        fraction = meter.read()
        if fraction is not None:
            self.cpu_fractions.append(fraction)

    def _ship(self) -> None:
        rows, self.outbox = self.outbox, []
        cpu, self.cpu_fractions = self.cpu_fractions, []
        self.send(
            P.BATCH,
            {
                "rows": rows,
                "cpu": cpu,
                "sent": self.counters.sent,
                "done": self.counters.done,
                "errors": self.counters.errors,
                "in_flight": self.counters.in_flight,
            },
        )
        self.shipped += len(rows)

    def _fire_events(self, settled: Settled) -> None:
        """Locust's own ``events.request`` (its web UI and stats) for a settled request."""
        fire, record, itl = self.fire, settled.record, settled.itl
        assert fire is not None
        if record.status != Status.OK:
            fire(
                request_type="POST",
                name=self.path,
                response_time=(record.e2e_s or 0.0) * 1000,
                response_length=record.output_tokens,
                exception=RuntimeError(
                    f"{record.error_class}: {(record.error_message or '')[:80]}"
                ),
                context={},
            )
            return
        fire(
            request_type="POST",
            name=self.path,
            response_time=(record.e2e_s or 0.0) * 1000,
            response_length=record.output_tokens,
            exception=None,
            context={},
        )
        for name, value in (("TTFT", record.ttft_s), ("TPOT", record.tpot_s)):
            if value is not None:
                fire(
                    request_type="LLM",
                    name=name,
                    response_time=value * 1000,
                    response_length=0,
                    exception=None,
                    context={},
                )
        if itl is not None and itl.size:
            if itl.size > self.itl_events:  # live view only: evenly spaced samples
                picks = self._itl_picks.get(itl.size)
                if picks is None:
                    picks = np.linspace(0, itl.size - 1, self.itl_events).astype(np.int64)
                    self._itl_picks[itl.size] = picks
                itl = itl[picks]
            for v in (itl * 1000).tolist():
                fire(
                    request_type="LLM",
                    name="ITL",
                    response_time=v,
                    response_length=0,
                    exception=None,
                    context={},
                )


class WorkerAgent:
    """The message handlers of a pddbench worker (registered on a Locust WorkerRunner)."""

    def __init__(self, environment: Any):
        self.env = environment
        self.runner = environment.runner
        self.driver: ShardDriver | None = None
        self._driver_greenlet: gevent.Greenlet | None = None
        self._parts: dict[int, bytes] = {}
        self._spec: dict[str, Any] | None = None
        for name, handler in (
            (P.PING, self._on_ping),
            (P.SHARD, self._on_shard),
            (P.GO, self._on_go),
            (P.STOP, self._on_stop),
        ):
            self.runner.register_message(name, handler)
        environment.events.quitting.add_listener(self._on_quitting)

    def _send(self, kind: str, data: dict[str, Any]) -> None:
        self.runner.send_message(kind, data)

    def _on_ping(self, environment: Any, msg: Any, **_kw: Any) -> None:
        t2 = time.monotonic()
        data = msg.data
        self._send(
            P.PONG,
            {
                "seq": data["seq"],
                "t1": data["t1"],
                "w1": data["w1"],
                "t2": t2,
                "t3": time.monotonic(),
                "w": time.time(),
            },
        )

    def _on_shard(self, environment: Any, msg: Any, **_kw: Any) -> None:
        data = msg.data
        if data["part"] == 0:
            self._parts = {}
            self._spec = data["spec"]
        self._parts[data["part"]] = data["data"]
        if len(self._parts) == data["parts"]:
            gevent.spawn(self._prepare)

    def _prepare(self) -> None:
        spec = self._spec
        assert spec is not None
        try:
            table = table_from_chunks([self._parts[i] for i in range(len(self._parts))])
            self._parts = {}
            plan = worker_plan(table)
            options = ReplayOptions.from_json(spec["options"])
            fire = self.env.events.request.fire if spec.get("live_events", True) else None
            self.driver = ShardDriver(
                plan,
                options,
                spec["base_url"],
                self._send,
                fire,
                batch_interval_s=float(spec["batch_interval_s"]),
                itl_events_per_request=int(spec["itl_events_per_request"]),
            )
        except Exception as exc:
            log.exception("cannot prepare the shard")
            self._send(P.ERROR, {"message": f"cannot prepare the shard: {exc!r}"})
            return
        # Everything allocated so far (modules, Locust, the shard) lives for the whole run:
        # moved out of the collector's generations, a full collection mid-run no longer
        # walks it (that walk was a schedule-lag spike of several ms).
        gc.collect()
        gc.freeze()
        self._send(
            P.READY,
            {
                "requests": len(plan.requests),
                "fields": list(RECORD_FIELDS),
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "version": __version__,
            },
        )

    def _on_go(self, environment: Any, msg: Any, **_kw: Any) -> None:
        if self.driver is None or self._driver_greenlet is not None:
            return
        origin = float(msg.data["origin_master"]) + float(msg.data["offset"])
        self._driver_greenlet = gevent.spawn(self.driver.run, origin)

    def _on_stop(self, environment: Any, msg: Any, **_kw: Any) -> None:
        if self.driver is not None and self._driver_greenlet is not None:
            self.driver.cancel()
        elif self.driver is None or self._driver_greenlet is None:
            self._send(P.DONE, {"records": 0, "cancelled": True})

    def _on_quitting(self, environment: Any, **_kw: Any) -> None:
        """The worker is shutting down (SIGTERM, Ctrl-C, quit): ship what it has first."""
        driver = self.driver
        if (
            driver is not None
            and self._driver_greenlet is not None
            and not driver.finished.is_set()
        ):
            driver.cancel()
            driver.finished.wait(5.0)
