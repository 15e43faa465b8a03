"""One replay of a trace against one HTTP endpoint, from plan to finalised run folder.

Owns the sequence: select and plan the sessions, compute each request's theoretical
cached tokens for the replayed subset, materialise prompts lazily, run the asyncio
engine with a live view, finalise the journal into ``requests.parquet`` and complete the
manifest — on success, on error and on Ctrl-C/SIGTERM alike (then ``interrupted`` is
set and the caller exits 130). Deployment of the systems under test is the caller's job.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import os
import signal
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import numpy as np
import pyarrow as pa

from pddbench.aioloop import loop_runner
from pddbench.errors import UserError
from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.drive import interrupts
from pddbench.harness.drive.aio.backend import AsyncioEngine, EngineConfig
from pddbench.harness.drive.live import LiveView
from pddbench.harness.drive.scrape import MetricsScraper, write_server_metrics
from pddbench.harness.drive.stream_records import skipped_record
from pddbench.harness.plan.player import PlannedRequest, SessionPlayer
from pddbench.harness.plan.resume import ResumePoint, remaining_plan
from pddbench.harness.plan.sessions import plan_requests
from pddbench.harness.plan.steady import PrimingPlan, SteadyPoint
from pddbench.harness.rundir.folder import RunPaths
from pddbench.harness.rundir.manifest import (
    ResumeEntry,
    RunManifest,
    RunStatus,
    ServerMetricsInfo,
)
from pddbench.harness.rundir.records import Journal, finalize_journal
from pddbench.harness.rundir.sections import ReplaySection
from pddbench.harness.rundir.sends import SendLog, count_sends
from pddbench.tokens import TokenStream
from pddbench.workloads.hitrate import prefix_hits
from pddbench.workloads.materialize import Materializer, namespaced
from pddbench.workloads.schema import Col
from pddbench.workloads.traceio import Trace

T = TypeVar("T")

METRICS_INTERVAL_S = 1.0  # how often the instances' /metrics are scraped during a replay


@dataclass
class ReplayPlan:
    """Everything the engine needs, prepared once and reusable across systems."""

    requests: list[PlannedRequest]
    table: pa.Table  # the trace rows, indexed by PlannedRequest.row
    theoretical_cached: dict[str, int]
    selection_note: str
    # a steady-state point's: what the trace's history leaves in the caches (None: cold)
    priming: PrimingPlan | None = None


@dataclass
class ReplayOutcome:
    paths: RunPaths
    records: int
    interrupted: bool
    errors: int


def _theoretical_cached(
    table: pa.Table, planned: list[PlannedRequest], block_size: int | None
) -> dict[str, int]:
    """Cached tokens each replayed request would get from an unbounded cache that sees
    exactly the replayed subset (at the engine's block size when given)."""
    rows = np.array(sorted({r.row for r in planned}), dtype=np.int64)
    if not rows.size:
        return {}
    subset = table.take(pa.array(rows))
    hits = prefix_hits(reblock(subset, block_size) if block_size else subset)
    ids = subset.column(Col.REQUEST_ID).to_pylist()
    return dict(zip(ids, hits.cached_tokens.tolist(), strict=True))


def prepare_theoretical(plan: ReplayPlan, options: ReplayOptions) -> ReplayPlan:
    """The same plan with theoretical cached tokens at ``options.cache_block_size`` (a
    steady-state point's, the trace's hits with its history, are whole blocks of that size:
    chained hashes, so a block of ``k`` trace blocks is cached when its last one is)."""
    cbs = options.cache_block_size
    if plan.priming is not None:
        sizes = set(plan.table.column(Col.BLOCK_SIZE).unique().to_pylist())
        if cbs is None or len(sizes) != 1 or cbs % next(iter(sizes)):
            return plan
        cached = {k: v // cbs * cbs for k, v in plan.theoretical_cached.items()}
        return dataclasses.replace(plan, theoretical_cached=cached)
    cached = _theoretical_cached(plan.table, plan.requests, cbs)
    return dataclasses.replace(plan, theoretical_cached=cached)


def prepare_steady(trace: Trace, point: SteadyPoint, options: ReplayOptions) -> ReplayPlan:
    """A steady-state point's plan (:mod:`pddbench.harness.plan.steady`): its requests,
    their hits in the trace with its history, and the primes that history leaves."""
    plan = ReplayPlan(
        point.requests,
        trace.table,
        point.theoretical_cached,
        f"{len(point.requests)} requests of a trace window in {point.slices:.3g} concurrent "
        f"slices (steady state: sessions in progress continue; caches primed with "
        f"{point.priming.blocks} trace blocks of history)",
        priming=point.priming,
    )
    return prepare_theoretical(plan, options) if options.cache_block_size else plan


def prepare(trace: Trace, options: ReplayOptions) -> ReplayPlan:
    """Select sessions and compute theoretical cache hits for exactly the replayed subset."""
    planned = plan_requests(trace.table, options.selection, think_policy=options.think_policy)
    theoretical = _theoretical_cached(trace.table, planned, options.cache_block_size)
    sessions = len({r.session_id for r in planned})
    span = max((r.arrival_s for r in planned if r.parent_request_id is None), default=0.0)
    note = (
        f"{len(planned)} requests in {sessions} sessions; session starts span {span:.0f} s"
        f" (speed-up {options.selection.speedup:g})"
    )
    return ReplayPlan(planned, trace.table, theoretical, note)


def reblock(table: pa.Table, block_size: int) -> pa.Table:
    """A copy of ``table`` whose block hashes describe blocks of ``block_size`` tokens.

    Only exact multiples of the trace's block size can be derived (position-chained
    hashes: keep every k-th); smaller engine blocks keep the trace's granularity.
    """
    sizes = set(table.column(Col.BLOCK_SIZE).to_pylist())
    if len(sizes) != 1:
        return table
    (trace_bs,) = sizes
    if block_size % trace_bs or block_size == trace_bs:
        return table
    k = block_size // trace_bs
    lists = table.column(Col.BLOCK_HASHES).to_pylist()
    coarse = [h[k - 1 :: k] for h in lists]
    idx = table.schema.get_field_index(Col.BLOCK_HASHES)
    table = table.set_column(idx, Col.BLOCK_HASHES, pa.array(coarse, type=pa.list_(pa.uint64())))
    bs_idx = table.schema.get_field_index(Col.BLOCK_SIZE)
    return table.set_column(
        bs_idx, Col.BLOCK_SIZE, pa.array(np.full(table.num_rows, block_size, dtype=np.int32))
    )


def check_prompts(plan: ReplayPlan, options: ReplayOptions) -> None:
    """Refuse (one line) a plan whose prompts cannot be built at the client's vocabulary,
    before anything is deployed or sent."""
    sizes = {int(x) for x in plan.table.column(Col.BLOCK_SIZE).unique().to_pylist()}
    for bs in sorted(sizes):
        try:
            Materializer(bs, vocab_size=options.vocab_size, first_id=options.first_token_id)
        except ValueError as exc:
            raise UserError(f"the trace cannot be replayed: {exc}") from None


def prompt_function(
    plan: ReplayPlan, options: ReplayOptions
) -> Callable[[PlannedRequest], list[int]]:
    """Lazy prompt materialisation for a request (by its trace row)."""
    # flat numpy views once: pyarrow's per-row scalar access costs ~10 us a call
    lists = plan.table.column(Col.BLOCK_HASHES).combine_chunks()
    offsets = lists.offsets.to_numpy()  # absolute into .values, also for a sliced array
    flat_hashes = lists.values.to_numpy(zero_copy_only=False)
    sizes = plan.table.column(Col.BLOCK_SIZE).to_numpy()
    materializers: dict[int, Materializer] = {}

    def prompt(req: PlannedRequest) -> list[int]:
        bs = int(sizes[req.row])
        m = materializers.get(bs)
        if m is None:
            m = Materializer(bs, vocab_size=options.vocab_size, first_id=options.first_token_id)
            materializers[bs] = m
        row_hashes = namespaced(flat_hashes[offsets[req.row] : offsets[req.row + 1]], req.namespace)
        return m.prompt(row_hashes, req.input_length, request_id=req.request_id)

    return prompt


async def _execute(
    plan: ReplayPlan,
    options: ReplayOptions,
    base_url: str,
    paths: RunPaths,
    manifest: RunManifest,
    live: LiveView | None,
    metrics_urls: Mapping[str, str] | None = None,
    resume: ResumePoint | None = None,
) -> tuple[int, bool]:
    skipped: list[PlannedRequest] = []
    planned_total = len(plan.requests)
    if resume is not None:
        remaining, skipped = remaining_plan(plan.requests, resume, on_error=options.on_error)
        entry = ResumeEntry(
            started_at=datetime.now(UTC).isoformat(),
            from_s=resume.elapsed_s,
            settled_before=len(resume.settled),
            superseded_records=resume.cancelled,
            remaining=len(remaining),
            previous_clock=manifest.clock,
        )
        manifest.resumes = [*manifest.resumes, entry]
        plan = dataclasses.replace(plan, requests=remaining)
    oracle = None
    if options.integrity_seed is not None:
        seed = options.integrity_seed

        def oracle(req: PlannedRequest) -> Callable[[int], int]:
            return TokenStream(seed, req.request_id, options.vocab_size)

    journal = Journal(paths.journal, append=resume is not None)
    logged_before = count_sends(paths.sends) if resume is not None else None
    send_log = SendLog(paths.sends)
    for req in skipped:
        journal.append(skipped_record(req))
    player = SessionPlayer(plan.requests, on_error=options.on_error)
    prompt_fn = prompt_function(plan, options)
    # the plan, the trace and the imports are long-lived: keep the collector off them, so a
    # full collection mid-run does not stall the loop for milliseconds. Done before the
    # clock starts: a collection of a big heap takes ~0.1 s, which would be schedule lag.
    gc.collect()
    gc.freeze()
    origin = time.monotonic()
    if resume is not None:  # continue the run's own timeline where its journal ends
        origin -= resume.elapsed_s
    manifest.anchor_clock(origin)
    manifest.save(paths.root)
    scraper = None
    if metrics_urls:
        scraper = MetricsScraper(metrics_urls, interval_s=METRICS_INTERVAL_S, origin=origin)
        scraper.start()
    engine = AsyncioEngine(
        player,
        EngineConfig(
            base_url=base_url.rstrip("/"),
            api=options.api,
            max_concurrency=options.max_concurrency,
            cached_tokens_theoretical=plan.theoretical_cached,
            max_duration_s=options.max_duration_s,
        ),
        journal,
        prompt_fn,
        oracle_fn=oracle,
        clock_origin=origin,
        send_log=send_log,
    )
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    interrupted = False

    def on_signal() -> None:
        nonlocal interrupted
        interrupted = True
        if task is not None:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal)
    # off the main thread (in the client namespace's thread) the main thread relays signals
    unregister = interrupts.register(lambda: loop.call_soon_threadsafe(on_signal))
    view_task = None
    if live is not None:
        view_task = loop.create_task(live.run(engine.stats, total=len(plan.requests)))
    try:
        await engine.run()
    except asyncio.CancelledError:
        if not interrupted:
            raise
    finally:
        gc.unfreeze()
        if view_task is not None:
            view_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await view_task
        journal.close()
        send_log.close()
        if scraper is not None:
            await scraper.stop()  # one last scrape: counters cover the whole run
            write_server_metrics(scraper.rows, paths.server_metrics)
            manifest.server_metrics = ServerMetricsInfo(
                interval_s=scraper.interval_s,
                scrapes=scraper.scrapes,
                rows=len(scraper.rows),
                failures=scraper.failures,
                last_error=scraper.last_error,
            )
        unregister()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
    manifest.planned_requests = planned_total
    if resume is None:
        manifest.sent_requests = engine.stats.sent
    elif logged_before is not None:  # every earlier send, those in flight at a kill too
        manifest.sent_requests = logged_before + engine.stats.sent
    else:  # no send log (an older run folder): a killed run never wrote its own count,
        # its journal has the sends that ended (those in flight at the kill are not known)
        before = manifest.sent_requests if manifest.sent_requests is not None else resume.sent
        manifest.sent_requests = before + engine.stats.sent
    manifest.duration_cap_hit_at_s = engine.stats.stopped_at_s
    return engine.stats.errors, interrupted


def replay_section(plan: ReplayPlan, options: ReplayOptions, base_url: str) -> ReplaySection:
    """The manifest's ``replay`` entry: the target, the options (what ``--resume`` reads
    back) and the plan (every backend writes these; Locust adds its own)."""
    return ReplaySection(target=base_url, options=options, plan=plan.selection_note)


def run_event_loop(coro: Coroutine[object, object, T], manifest: RunManifest) -> T:
    """Run ``coro`` on uvloop when it is installed (several times less loop overhead per
    socket read), else on asyncio's own loop; ``PDDBENCH_EVENT_LOOP=asyncio`` forces the
    latter. The manifest records which loop ran."""
    runner, manifest.event_loop = loop_runner(
        os.environ.get("PDDBENCH_EVENT_LOOP", "uvloop") != "asyncio"
    )
    return runner(coro)


def run_replay(
    plan: ReplayPlan,
    options: ReplayOptions,
    base_url: str,
    paths: RunPaths,
    manifest: RunManifest,
    *,
    live: LiveView | None = None,
    metrics_urls: Mapping[str, str] | None = None,
    resume: ResumePoint | None = None,
) -> ReplayOutcome:
    """Replay ``plan`` against ``base_url``; always finalises the run folder.

    With ``metrics_urls`` (instance → metrics URL) the instances' ``/metrics`` are
    scraped every second into ``server_metrics.parquet``. With ``resume`` the run folder
    is an interrupted run's: only what its journal has not settled is sent, appended to
    the same journal on the same timeline (:mod:`pddbench.harness.plan.resume`)."""
    manifest.replay = replay_section(plan, options, base_url)
    errors, interrupted = 0, False
    try:
        errors, interrupted = run_event_loop(
            _execute(plan, options, base_url, paths, manifest, live, metrics_urls, resume),
            manifest,
        )
    except KeyboardInterrupt:
        interrupted = True
    finally:
        records, skipped_lines = finalize_journal(paths.journal, paths.requests)
        status = RunStatus.INTERRUPTED if interrupted else RunStatus.COMPLETE
        manifest.finish(status, records=records, unreadable_lines=skipped_lines)
        manifest.save(paths.root)
    return ReplayOutcome(paths, records, interrupted, errors)
