"""The pddbench Locust master: waits for workers, syncs clocks, deals shards, journals records.
(Over 500 lines for one reason: the Coordinator is one state machine over the master's messages.)

Run by the harness as ``python -m pddbench.harness.drive.locust.master JOB_DIR`` — a
gevent process of its own (Locust monkey-patches the standard library), never imported
into the asyncio harness. It reads the job folder written by
:mod:`~pddbench.harness.drive.locust.launcher`, then:

1. waits for the expected workers (local children or remote ``--worker`` processes);
2. estimates every worker's clock offset by ping-pong (min-RTT, :mod:`.clock_sync`) and
   keeps pinging once a second for the whole run (liveness and drift);
3. deals whole task groups to workers (:mod:`.sharding`) and ships each its shard;
4. starts everyone on one run origin (the master's monotonic clock + a short lead);
5. appends every shipped record to the journal, its times moved onto the master's run
   clock; prints the live status line (and serves Locust's web UI when asked);
6. declares a worker lost after ``worker_timeout_s`` of silence (or when it quits early),
   keeps what it shipped, and marks the run incomplete; marks the run suspect when a
   worker's (or the master's) CPU saturated;
7. writes ``result.json`` (status, per-worker clock/CPU/shard facts) for the launcher,
   which finalises ``requests.parquet`` and the manifest.

Must not: send requests to the system under test, or decide timing (workers' players do).
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import logging  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
import locust  # noqa: E402
import pyarrow as pa  # noqa: E402
from locust.env import Environment  # noqa: E402
from locust.event import Events  # noqa: E402
from locust.log import setup_logging  # noqa: E402

from pddbench.harness.drive.live import LiveCounters, status_line  # noqa: E402
from pddbench.harness.drive.locust import protocol as P  # noqa: E402
from pddbench.harness.drive.locust.clock_sync import (  # noqa: E402
    ClockSample,
    estimate,
)
from pddbench.harness.drive.locust.cpu import CpuMeter, cpu_verdict  # noqa: E402
from pddbench.harness.drive.locust.job import (  # noqa: E402
    RECORD_FIELDS,
    RESULT_FILE,
    WORKERS_FILE,
    JobSpec,
    parent_sessions,
    planned_requests,
    read_plan,
    record_from_row,
    shard_chunks,
)
from pddbench.harness.drive.locust.locustfile import ReplayUser  # noqa: E402
from pddbench.harness.drive.locust.run_state import (  # noqa: E402
    WorkerState,
    cap_hit,
    judge_run,
)
from pddbench.harness.drive.locust.sharding import shard_plan  # noqa: E402
from pddbench.harness.rundir.manifest import RunStatus  # noqa: E402
from pddbench.harness.rundir.records import Journal  # noqa: E402
from pddbench.harness.rundir.sections import LocustResult  # noqa: E402

log = logging.getLogger("pddbench.locust.master")

PING_INTERVAL_S = 1.0
CLOCK_WINDOW = 600  # clock estimates use the latest samples (10 min at 1 ping/s)
TICK_S = 0.25


class RunFailed(Exception):
    """The run cannot go on (too few workers, a worker refused its shard...)."""


class Coordinator:
    """Runs one distributed replay from the master's side."""

    def __init__(self, env: Environment, spec: JobSpec, plan_table: Any):
        self.env = env
        self.runner = env.runner
        self.spec = spec
        self.table = plan_table
        self.requests = planned_requests(plan_table)
        self.workers: dict[str, WorkerState] = {}
        self.journal = Journal(spec.journal)
        self.origin: float | None = None
        self.interrupted: str | None = None
        self.failure: str | None = None
        self._seq = 0
        self._finishing = False
        self._live = LiveCounters()
        self._meter: CpuMeter | None = None
        self._master_cpu: list[float] = []
        self._started_wall = time.monotonic()
        for name, handler in (
            (P.PONG, self._on_pong),
            (P.READY, self._on_ready),
            (P.BATCH, self._on_batch),
            (P.DONE, self._on_done),
            (P.ERROR, self._on_error),
        ):
            self.runner.register_message(name, handler)
        env.events.test_stopping.add_listener(self._on_ui_stop)

    # ----------------------------------------------------------------- the run
    def run(self) -> LocustResult:
        try:
            self._await_workers()
            self._sync_clocks()
            self._deal_shards()
            self._await_ready()
            self._go()
            self._supervise()
        except RunFailed as exc:
            self.failure = str(exc)
            print(f"pddbench: locust master: {exc}", file=sys.stderr, flush=True)
            self._stop_workers()
        except Exception as exc:  # a bug: keep what was journalled, say so in one line
            log.exception("the master failed")
            self.failure = f"internal error in the Locust master: {type(exc).__name__}: {exc}"
            print(
                f"pddbench: {self.failure} (traceback in logs/locust-master.log)", file=sys.stderr
            )
            self._stop_workers()
        return self._finish()

    def interrupt(self, why: str = "interrupted") -> None:
        if self.interrupted is None:
            self.interrupted = why

    def _on_ui_stop(self, **_kw: Any) -> None:
        if not self._finishing:
            self.interrupt("stopped from the Locust web UI")

    def _await_workers(self) -> None:
        want = self.spec.workers
        deadline = time.monotonic() + self.spec.connect_timeout_s
        next_note = time.monotonic() + 5.0
        while len(self.runner.clients.ready) < want:
            if self.interrupted:
                raise RunFailed("interrupted while waiting for workers")
            if time.monotonic() > deadline:
                raise RunFailed(
                    f"only {len(self.runner.clients.ready)} of {want} workers connected within "
                    f"{self.spec.connect_timeout_s:.0f} s"
                )
            if time.monotonic() > next_note:
                print(
                    f"pddbench: waiting for workers: {len(self.runner.clients.ready)} of {want} "
                    f"connected on port {self.spec.master_port}",
                    file=sys.stderr,
                    flush=True,
                )
                next_note += 15.0
            gevent.sleep(0.05)
        ids = sorted(c.id for c in self.runner.clients.ready)[:want]
        now = time.monotonic()
        self.workers = {cid: WorkerState(cid, i, last_seen=now) for i, cid in enumerate(ids)}

    def _ping(self, w: WorkerState) -> None:
        self._seq += 1
        self.runner.send_message(
            P.PING,
            {"seq": self._seq, "t1": time.monotonic(), "w1": time.time()},
            client_id=w.client_id,
        )

    def _sync_clocks(self) -> None:
        for _ in range(16):
            for w in self.workers.values():
                self._ping(w)
            gevent.sleep(0.01)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            if all(len(w.samples) >= 8 for w in self.workers.values()):
                break
            gevent.sleep(0.01)
        for w in self.workers.values():
            if w.clock is None:
                w.lost = "no reply to clock pings"
        if not any(w.active for w in self.workers.values()):
            raise RunFailed("no worker answered the clock pings")

    def _deal_shards(self) -> None:
        active = [w for w in self.workers.values() if w.active]
        sharding = shard_plan(self.requests, len(active), parent_sessions(self.table))
        summaries = sharding.summaries(self.requests)
        spec = {
            "base_url": self.spec.base_url,
            "options": self.spec.options.to_json(),
            "batch_interval_s": self.spec.batch_interval_s,
            "itl_events_per_request": self.spec.itl_events_per_request,
        }
        for k, w in enumerate(active):
            w.shard = summaries[k]
            rows = self.table.take(pa.array(sharding.indices(k), pa.int64()))
            chunks = shard_chunks(rows)
            for part, data in enumerate(chunks):
                payload: dict[str, object] = {"part": part, "parts": len(chunks), "data": data}
                if part == 0:
                    payload["spec"] = spec
                self.runner.send_message(P.SHARD, payload, client_id=w.client_id)

    def _await_ready(self) -> None:
        deadline = time.monotonic() + self.spec.connect_timeout_s
        while any(w.active and not w.ready for w in self.workers.values()):
            if self.interrupted:
                raise RunFailed("interrupted while workers prepared their shards")
            if time.monotonic() > deadline:
                raise RunFailed("workers did not prepare their shards in time")
            self._check_liveness(time.monotonic(), silence=False)
            gevent.sleep(0.02)
        if not any(w.ready for w in self.workers.values()):
            raise RunFailed("no worker could prepare its shard")

    def _go(self) -> None:
        ready = [w for w in self.workers.values() if w.ready and w.active]
        # Locust's own view: one (idle) ReplayUser per worker, so its UI shows a running test
        gevent.spawn(self.runner.start, len(ready), float(len(ready)))
        self.origin = time.monotonic() + self.spec.start_lead_s
        for w in ready:
            assert w.clock is not None
            offset = w.clock.offset_at(self.origin)
            w.origin_worker_s = self.origin + offset
            self.runner.send_message(
                P.GO, {"origin_master": self.origin, "offset": offset}, client_id=w.client_id
            )
            w.started = True
        self._meter = CpuMeter()
        self._write_result(RunStatus.RUNNING)
        workers_file = Path(self.spec.job_dir) / WORKERS_FILE
        workers_file.write_text(
            json.dumps([w.report() for w in self.workers.values()], indent=2, default=str) + "\n"
        )

    def _supervise(self) -> None:
        next_ping = time.monotonic() + PING_INTERVAL_S
        next_status = time.monotonic() + self._status_interval()
        next_cpu = time.monotonic() + 1.0
        stop_deadline: float | None = None
        while any(w.active for w in self.workers.values()):
            now = time.monotonic()
            if now >= next_ping:
                for w in self.workers.values():
                    if w.active:
                        self._ping(w)
                next_ping += PING_INTERVAL_S
            if now >= next_cpu and self._meter is not None:
                self._read_master_cpu()
                next_cpu += 1.0
            self._check_liveness(now)
            if self.interrupted and stop_deadline is None:
                print(
                    f"pddbench: {self.interrupted}: stopping workers", file=sys.stderr, flush=True
                )
                self._stop_workers()
                stop_deadline = now + self.spec.stop_grace_s
            if stop_deadline is not None and now > stop_deadline:
                for w in self.workers.values():
                    if w.active:
                        w.lost = "no final report after stop"
                break
            if now >= next_status:
                self._print_status()
                next_status = now + self._status_interval()
            gevent.sleep(TICK_S)
        self._print_status(final=True)

    def _read_master_cpu(self) -> None:
        fraction = None if self._meter is None else self._meter.read()
        if fraction is not None:
            self._master_cpu.append(fraction)

    def _stop_workers(self) -> None:
        for w in self.workers.values():
            if w.active:
                self.runner.send_message(P.STOP, {}, client_id=w.client_id)

    def _check_liveness(self, now: float, *, silence: bool = True) -> None:
        """Declare lost a worker that quit, or (with ``silence``) went quiet for too long."""
        connected = set(self.runner.clients.keys())
        for w in self.workers.values():
            if not w.active:
                continue
            if w.client_id not in connected:
                w.lost = "worker quit before finishing its shard"
            elif silence and now - w.last_seen > self.spec.worker_timeout_s:
                w.lost = f"no message for {now - w.last_seen:.1f} s (worker died or unreachable)"
            if w.lost:
                print(
                    f"pddbench: worker {w.index} ({w.host or w.client_id}) lost: {w.lost}; "
                    f"keeping its {w.records} records",
                    file=sys.stderr,
                    flush=True,
                )

    # ---------------------------------------------------------------- messages
    def _worker(self, msg: Any) -> WorkerState | None:
        w = self.workers.get(msg.node_id)
        if w is not None:
            w.last_seen = time.monotonic()
        return w

    def _on_pong(self, environment: Any, msg: Any, **_kw: Any) -> None:
        t4, w4 = time.monotonic(), time.time()
        w = self._worker(msg)
        if w is None:
            return
        d = msg.data
        w.samples.append(ClockSample(d["t1"], d["t2"], d["t3"], t4, d["w1"], d["w"], w4))
        if len(w.samples) > 2 * CLOCK_WINDOW:
            del w.samples[:CLOCK_WINDOW]
        w.clock = estimate(w.samples[-CLOCK_WINDOW:])

    def _on_ready(self, environment: Any, msg: Any, **_kw: Any) -> None:
        w = self._worker(msg)
        if w is None:
            return
        d = msg.data
        w.host, w.pid = d.get("host"), d.get("pid")
        if tuple(d.get("fields", ())) != RECORD_FIELDS:
            w.lost = (
                "worker runs a pddbench whose records differ from the master's "
                f"(worker {d.get('version')}); install the same version everywhere"
            )
            return
        w.ready = True

    def _on_error(self, environment: Any, msg: Any, **_kw: Any) -> None:
        w = self._worker(msg)
        if w is not None:
            w.lost = str(msg.data.get("message"))

    def _on_batch(self, environment: Any, msg: Any, **_kw: Any) -> None:
        w = self._worker(msg)
        if w is None or w.origin_worker_s is None or self.origin is None:
            return
        d = msg.data
        w.cpu.extend(d.get("cpu", ()))
        w.sent, w.completed = d["sent"], d["done"]
        w.errors, w.in_flight = d["errors"], d["in_flight"]
        clock, shift, origin = w.clock, w.origin_worker_s, self.origin
        assert clock is not None

        def to_run_clock(t: float) -> float:
            return clock.to_master(t + shift) - origin

        live = self._live
        for row in d["rows"]:
            record = record_from_row(row, to_run_clock)
            self.journal.append(record)
            w.records += 1
            live.observe(record)  # the workers count sent / done / errors themselves

    def _on_done(self, environment: Any, msg: Any, **_kw: Any) -> None:
        w = self._worker(msg)
        if w is None:
            return
        w.reported_records = int(msg.data["records"])
        w.cancelled = bool(msg.data.get("cancelled"))
        w.cpu_s, w.wall_s = msg.data.get("cpu_s"), msg.data.get("wall_s")
        w.sent = int(msg.data.get("sent", w.sent))
        stopped = msg.data.get("stopped_at_s")
        if stopped is not None and w.clock is not None and w.origin_worker_s is not None:
            stopped = w.clock.to_master(stopped + w.origin_worker_s) - (self.origin or 0.0)
        w.stopped_at_s = stopped
        w.done = True

    # ------------------------------------------------------------ live + end
    def _status_interval(self) -> float:
        return 0.5 if sys.stderr.isatty() else 10.0

    def _print_status(self, *, final: bool = False) -> None:
        live = self._live
        ws = self.workers.values()
        live.sent = sum(w.sent for w in ws)
        live.done = sum(w.records for w in ws)
        live.errors = sum(w.errors for w in ws)
        live.in_flight = sum(w.in_flight for w in ws if w.active)
        elapsed = time.monotonic() - (self.origin or self._started_wall)
        line = status_line(live, len(self.requests), elapsed, self.spec.label)
        lost = sum(1 for w in ws if w.lost)
        line += f" | workers {sum(1 for w in ws if w.active)} running {lost} lost"
        if sys.stderr.isatty() and not final:
            print("\r\x1b[K" + line, end="", file=sys.stderr, flush=True)
        else:
            print(("\r\x1b[K" if sys.stderr.isatty() else "") + line, file=sys.stderr, flush=True)

    def _verdicts(self) -> tuple[list[str], list[str]]:
        verdicts = judge_run(
            list(self.workers.values()),
            planned=len(self.requests),
            master_cpu=self._master_cpu,
            interrupted=self.interrupted is not None,
            failure=self.failure,
            cpu_threshold=self.spec.cpu_threshold,
        )
        for note in verdicts.notes:
            print(f"pddbench: {note}", file=sys.stderr, flush=True)
        return verdicts.incomplete, verdicts.suspect

    def _finish(self) -> LocustResult:
        self._finishing = True
        self.journal.close()
        self._read_master_cpu()
        incomplete, suspect = self._verdicts()
        if self.interrupted:
            status = RunStatus.INTERRUPTED
        elif self.failure and not any(w.records for w in self.workers.values()):
            status = RunStatus.FAILED
        elif incomplete:
            status = RunStatus.INCOMPLETE
        else:
            status = RunStatus.COMPLETE
        result = self._write_result(status, incomplete=incomplete, suspect=suspect)
        if incomplete:
            print("pddbench: run incomplete: " + "; ".join(incomplete), file=sys.stderr, flush=True)
        if suspect:
            print("pddbench: run suspect: " + "; ".join(suspect), file=sys.stderr, flush=True)
        return result

    def _write_result(
        self,
        status: RunStatus,
        *,
        incomplete: list[str] | None = None,
        suspect: list[str] | None = None,
    ) -> LocustResult:
        origin_wall = None
        if self.origin is not None:
            wall = time.time() - (time.monotonic() - self.origin)
            origin_wall = datetime.fromtimestamp(wall, UTC).isoformat()
        meter = self._meter
        result = LocustResult(
            status=status,
            interrupted=self.interrupted,
            failure=self.failure,
            origin_monotonic_s=self.origin,
            origin_wall=origin_wall,
            planned_requests=len(self.requests),
            sent_requests=sum(w.sent for w in self.workers.values()),
            duration_cap_hit_at_s=cap_hit(self.workers.values()),
            records=sum(w.records for w in self.workers.values()),
            incomplete_reasons=incomplete or [],
            suspect_reasons=suspect or [],
            workers=[w.report() for w in self.workers.values()],
            master={
                "bind": f"{self.spec.master_bind_host}:{self.spec.master_port}",
                "web_ui": (
                    f"http://{self.spec.web_host}:{self.spec.web_port}"
                    if self.spec.web_ui
                    else None
                ),
                "cpu": cpu_verdict(self._master_cpu, threshold=self.spec.cpu_threshold).as_dict(),
                "cpu_s": None if meter is None else meter.total_cpu_s,
                "wall_s": None if meter is None else meter.total_wall_s,
            },
            locust_version=locust.__version__,
        )
        path = Path(self.spec.job_dir) / RESULT_FILE
        tmp = path.with_suffix(".json.partial")
        text = json.dumps(result.model_dump(), indent=2, default=str)
        tmp.write_text(text + "\n")
        tmp.replace(path)
        return result


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pddbench.harness.drive.locust.master JOB_DIR", file=sys.stderr)
        return 2
    spec = JobSpec.read(args[0])
    log_file = Path(spec.job_dir).parent / "logs" / "locust-master.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    setup_logging("INFO", str(log_file))
    table = read_plan(spec.job_dir)
    env = Environment(user_classes=[ReplayUser], events=Events())
    try:
        runner = env.create_master_runner(spec.master_bind_host, spec.master_port)
    except Exception as exc:
        print(
            f"pddbench: cannot listen for workers on {spec.master_bind_host}:{spec.master_port}: "
            f"{exc}",
            file=sys.stderr,
        )
        return 3
    web_ui = None
    if spec.web_ui:
        web_ui = env.create_web_ui(spec.web_host, spec.web_port)
        shown = socket.gethostname() if spec.web_host in ("", "0.0.0.0") else spec.web_host
        print(
            f"pddbench: Locust web UI at http://{shown}:{spec.web_port}",
            file=sys.stderr,
            flush=True,
        )
    coordinator = Coordinator(env, spec, table)
    gevent.signal_handler(signal.SIGTERM, coordinator.interrupt, "terminated")
    gevent.signal_handler(signal.SIGINT, coordinator.interrupt, "interrupted")
    try:
        result = coordinator.run()
    finally:
        coordinator._finishing = True
        runner.quit()
        if web_ui is not None:
            web_ui.stop()
    return 0 if result.status != RunStatus.FAILED else 1


if __name__ == "__main__":
    sys.exit(main())
