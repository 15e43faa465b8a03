"""Running a replay on Locust from the (asyncio, gevent-free) harness process.

Owns the process side of the Locust engine: it writes the job folder (``<run>/locust/``:
job spec and plan bundle), starts the master (``python -m
pddbench.harness.drive.locust.master``) and, for a local run, N worker processes
(``python -m locust -f locustfile.py --worker``), each in its own session so a Ctrl-C
reaches only this process, which turns it into an orderly stop of the master. When the
master exits it finalises ``requests.parquet`` from the journal and completes the
manifest exactly as :func:`pddbench.harness.drive.replay.run_replay` does, plus what only a
distributed run knows (workers, clock offsets, CPU saturation, lost workers), with
status ``complete``, ``incomplete``, ``interrupted`` or ``failed``.

Must not: import gevent or Locust (they monkey-patch the process); they live in the
child processes only.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pyarrow.parquet as pq
from pydantic import ValidationError

from pddbench.errors import UserError
from pddbench.harness.drive import interrupts
from pddbench.harness.drive.backends import Drive
from pddbench.harness.drive.locust.job import (
    PLAN_FILE,
    RESULT_FILE,
    JobSpec,
    write_plan,
)
from pddbench.harness.drive.replay import ReplayOutcome, replay_section
from pddbench.harness.rundir.folder import RunPaths
from pddbench.harness.rundir.manifest import RunClock, RunManifest, RunStatus
from pddbench.harness.rundir.records import finalize_journal
from pddbench.harness.rundir.sections import LocustResult

DEFAULT_MASTER_PORT = 5557
DEFAULT_WEB_PORT = 8089
LOCUSTFILE = Path(__file__).with_name("locustfile.py")
MASTER_MODULE = "pddbench.harness.drive.locust.master"


def locust_worker_command(master_host: str, master_port: int = DEFAULT_MASTER_PORT) -> list[str]:
    """The command line of one worker (the same as plain ``locust -f <locustfile> --worker``)."""
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--worker",
        "--master-host",
        master_host,
        "--master-port",
        str(master_port),
        "--loglevel",
        "WARNING",
    ]


def run_locust_worker(master_host: str, master_port: int = DEFAULT_MASTER_PORT) -> int:
    """``pddbench replay --engine locust --worker``: run one worker in the foreground."""
    print(
        f"pddbench: Locust worker for the master at {master_host}:{master_port} "
        "(it sends the shard, target and options; Ctrl-C to leave)",
        file=sys.stderr,
        flush=True,
    )
    try:
        return subprocess.call(locust_worker_command(master_host, master_port))
    except KeyboardInterrupt:
        return 130


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class LocustSettings:
    """The replay command's Locust choices (``--engine locust`` and its options)."""

    workers: int = 2
    master: bool = False  # wait for remote workers instead of starting them here
    master_port: int = DEFAULT_MASTER_PORT
    web_ui: bool = False
    web_port: int = DEFAULT_WEB_PORT
    worker_timeout_s: float = 10.0

    def drive(self, run: Drive) -> ReplayOutcome:
        """:func:`run_locust_replay` with these settings (the
        :class:`~pddbench.harness.drive.backends.Backend` protocol; the instances'
        ``/metrics`` are not scraped, and a resume is refused before it gets here)."""
        if run.resume is not None:
            raise UserError("--resume continues asyncio-engine runs only (this one used Locust)")
        return run_locust_replay(
            run,
            workers=self.workers,
            web_ui=self.web_ui,
            spawn_workers=not self.master,
            master_port=self.master_port if self.master else None,
            web_port=self.web_port,
            worker_timeout_s=self.worker_timeout_s,
        )


def run_locust_replay(
    run: Drive,
    *,
    workers: int,
    web_ui: bool = False,
    spawn_workers: bool = True,
    master_bind_host: str | None = None,
    master_port: int | None = None,
    web_host: str | None = None,
    web_port: int = DEFAULT_WEB_PORT,
    worker_timeout_s: float = 10.0,
    connect_timeout_s: float | None = None,
) -> ReplayOutcome:
    """Replay ``run``'s plan on Locust (a master plus ``workers`` workers); finalises its
    run folder.

    ``spawn_workers``: start the workers here (local run); otherwise wait for ``workers``
    remote workers (``pddbench replay --engine locust --worker --master-host THIS_HOST``);
    the master then listens on every interface (``master_bind_host="*"``, port 5557) and
    so does the web UI. ``worker_timeout_s``: silence after which a worker is lost.
    """
    plan, options, base_url, paths, manifest = (
        run.plan, run.options, run.base_url, run.paths, run.manifest
    )  # fmt: skip
    if workers < 1:
        raise UserError("--workers must be >= 1")
    if options.max_concurrency is not None:
        raise UserError("--max-concurrency is not supported by the locust engine")
    if master_bind_host is None:  # a local run listens on loopback only
        master_bind_host = "127.0.0.1" if spawn_workers else "*"
    if web_host is None:
        web_host = "127.0.0.1" if spawn_workers else "0.0.0.0"
    if master_port is None:
        master_port = free_port() if spawn_workers else DEFAULT_MASTER_PORT
    job_dir = paths.root / "locust"
    job_dir.mkdir(parents=True, exist_ok=True)
    paths.logs.mkdir(parents=True, exist_ok=True)
    write_plan(plan, job_dir)
    spec = JobSpec(
        base_url=base_url.rstrip("/"),
        workers=workers,
        options=options,
        journal=str(paths.journal),
        job_dir=str(job_dir),
        master_bind_host=master_bind_host,
        master_port=master_port,
        web_ui=web_ui,
        web_host=web_host,
        web_port=web_port,
        worker_timeout_s=worker_timeout_s,
        connect_timeout_s=connect_timeout_s or (60.0 if spawn_workers else 600.0),
        label=run.label,
    )
    spec.write()
    manifest.replay = replay_section(plan, options, base_url).model_copy(
        update={
            "engine": "locust",
            "workers": workers,
            "worker_mode": "local" if spawn_workers else "remote",
        }
    )
    manifest.save(paths.root)
    if not spawn_workers:
        host = socket.gethostname()
        print(
            f"pddbench: master waiting for {workers} worker(s) on port {master_port}; on each "
            f"worker machine run: pddbench replay --engine locust --worker --master-host {host}"
            f" --master-port {master_port}",
            file=sys.stderr,
            flush=True,
        )
    with open(paths.logs / "locust-master.out", "ab") as master_out:
        master = subprocess.Popen(
            [sys.executable, "-m", MASTER_MODULE, str(job_dir)],
            stdout=master_out,
            start_new_session=True,
        )
    children: list[subprocess.Popen[bytes]] = []
    logs: list[IO[bytes]] = []
    try:
        if spawn_workers:
            for i in range(workers):
                out = open(paths.logs / f"locust-worker-{i}.log", "ab")  # noqa: SIM115
                logs.append(out)
                children.append(
                    subprocess.Popen(
                        locust_worker_command("127.0.0.1", master_port),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        interrupted = _wait_for_master(master, job_dir, paths, manifest)
    finally:
        _reap(master, children)
        for out in logs:
            out.close()
    return _finalize(paths, manifest, job_dir, master.returncode, interrupted)


class _Terminated(Exception):
    pass


def _wait_for_master(
    master: subprocess.Popen[bytes], job_dir: Path, paths: RunPaths, manifest: RunManifest
) -> bool:
    """Wait for the master; Ctrl-C/SIGTERM here become an orderly stop. True if interrupted."""
    interrupted = False
    anchored = False
    previous = None
    in_main = threading.current_thread() is threading.main_thread()

    def on_term(_signum: int, _frame: object) -> None:
        raise _Terminated

    if in_main:
        previous = signal.signal(signal.SIGTERM, on_term)
    stop_requested = threading.Event()
    unregister = interrupts.register(stop_requested.set)  # main thread relays signals
    try:
        while True:
            try:
                if master.poll() is not None:
                    break
                if not anchored:
                    anchored = _anchor_from_result(job_dir, paths, manifest)
                if stop_requested.wait(0.2):
                    stop_requested.clear()
                    raise _Terminated
            except (KeyboardInterrupt, _Terminated):
                if interrupted:  # a second Ctrl-C: stop waiting for a graceful end
                    master.kill()
                    break
                interrupted = True
                print("pddbench: stopping the Locust run...", file=sys.stderr, flush=True)
                with contextlib.suppress(ProcessLookupError):
                    master.send_signal(signal.SIGTERM)
    finally:
        unregister()
        if in_main and previous is not None:
            signal.signal(signal.SIGTERM, previous)
    master.wait()
    return interrupted


def _anchor_from_result(job_dir: Path, paths: RunPaths, manifest: RunManifest) -> bool:
    result = _read_result(job_dir)
    if result is None or result.origin_monotonic_s is None:
        return False
    manifest.clock = RunClock(
        kind="monotonic",
        origin_monotonic_s=result.origin_monotonic_s,
        origin_wall=result.origin_wall,
        authority="locust master",
    )
    manifest.save(paths.root)
    return True


def _read_result(job_dir: Path) -> LocustResult | None:
    """The master's ``result.json`` (None when it wrote none, or half of one)."""
    path = job_dir / RESULT_FILE
    if not path.exists():
        return None
    try:
        return LocustResult.model_validate_json(path.read_bytes())
    except (ValidationError, OSError):
        return None


def _reap(master: subprocess.Popen[bytes], children: list[subprocess.Popen[bytes]]) -> None:
    """Wait briefly for every child to exit (the master tells workers to quit), then end it."""
    procs = [master, *children]
    deadline = time.monotonic() + 10.0
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _finalize(
    paths: RunPaths,
    manifest: RunManifest,
    job_dir: Path,
    master_rc: int | None,
    interrupted: bool,
) -> ReplayOutcome:
    if not paths.journal.exists():
        paths.journal.touch()
    records, skipped_lines = finalize_journal(paths.journal, paths.requests)
    result = _read_result(job_dir)
    if result is None or result.status == RunStatus.RUNNING:
        status = RunStatus.INTERRUPTED if interrupted else RunStatus.FAILED
        reasons = [f"the Locust master exited with code {master_rc} before finishing"]
        suspect_reasons: list[str] = []
        if result is not None:
            result.status = status
    else:
        status = RunStatus(result.status)
        reasons = list(result.incomplete_reasons)
        suspect_reasons = list(result.suspect_reasons)
    if interrupted and status != RunStatus.FAILED:
        status = RunStatus.INTERRUPTED
    _anchor_from_result(job_dir, paths, manifest)
    manifest.finish(status, records=records, unreadable_lines=skipped_lines)
    if result is not None:  # the same counts the asyncio engine records
        manifest.sent_requests = result.sent_requests
        manifest.planned_requests = result.planned_requests
        manifest.duration_cap_hit_at_s = result.duration_cap_hit_at_s
    manifest.incomplete_reasons = reasons if status != RunStatus.COMPLETE else []
    manifest.suspect = bool(suspect_reasons)
    manifest.suspect_reasons = suspect_reasons
    manifest.locust = result
    manifest.save(paths.root)
    (job_dir / PLAN_FILE).unlink(missing_ok=True)  # a copy of trace rows: not a result
    errors = 0
    if records:
        status_col = pq.read_table(paths.requests, columns=["status"]).column("status")
        errors = sum(1 for s in status_col.to_pylist() if s != "ok")
    if status == RunStatus.FAILED and records == 0:
        raise UserError(
            f"the Locust run failed: {'; '.join(reasons) or 'see the logs'} (logs in {paths.logs})"
        )
    return ReplayOutcome(paths, records, status == RunStatus.INTERRUPTED, errors)
