"""A worker instance (prefill, decode, relay-decode, main-decode, colocated) as an HTTP server.

Owns the I/O around one :class:`~pddbench.servers.engine.Engine`: its aiohttp app on its own
address, the event channel to the router (:mod:`~pddbench.servers.channel`), KV
transfers out (prefill) and in (decoders); the RLD ↔ MD handoff messages live in
:mod:`~pddbench.servers.instance_handoff`. Decisions are delegated to sans-IO code: the
engine (what runs when), :mod:`~pddbench.servers.instance_core` (what each engine event and
peer message leads to, the handoff's state machines included); this module carries out the
core's effects and must not decide.
Timings come from the process's monotonic clock. Many instances share one event loop.

Failure handling: a request whose router stream goes away is aborted and its KV freed; a KV
transfer cut short, a refused handoff or a protocol violation becomes an ``error`` event on
the request's stream, never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import defaultdict
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from pddbench.servers import prewarm
from pddbench.servers import protocol as proto
from pddbench.servers.channel import EventChannel, event_line, token_line
from pddbench.servers.clock import ClockAnchor, LoopLagMonitor
from pddbench.servers.config import DeploymentConfig, InstanceConfig, Role
from pddbench.servers.driver import StepDriver
from pddbench.servers.engine import Engine, Event, Seq
from pddbench.servers.handoff import HandoffTransfer
from pddbench.servers.instance_core import Do, Effect, InstanceCore, JobCore, seq_for
from pddbench.servers.instance_handoff import HandoffEndpoints
from pddbench.servers.instance_metrics import InstanceMetrics
from pddbench.servers.kvlink import KvSender, KvTransferError, receive_kv
from pddbench.servers.radix import KvPool
from pddbench.servers.sessions import internal_runner, internal_session

_ZEROS = bytes(1 << 16)


@dataclass
class ProcessContext:
    """What all instances hosted by one process share."""

    anchor: ClockAnchor
    loop_lag: LoopLagMonitor


@dataclass(eq=False)
class Job(JobCore):
    """A request on this instance: its core state plus the I/O it owns."""

    channel: EventChannel = field(kw_only=True)
    kv_senders: list[KvSender] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    # MD: handoff messages waiting for their acknowledgement. Usually one, but a relay that
    # finishes the whole request sends its `finished` batch while the previous batch is
    # still being applied; each waiting message gets its own future (one shared slot was
    # overwritten, and the first message's handler then waited forever).
    acks: list[asyncio.Future[int]] = field(default_factory=list)

    def acknowledge(self, level: int) -> None:
        """Answer every waiting handoff message with MD's ``level``."""
        for fut in self.acks:
            if not fut.done():
                fut.set_result(level)
        self.acks.clear()


class WorkerInstance(HandoffEndpoints):
    """One worker instance: engine + driver + HTTP endpoints (handoff ones in the mixin)."""

    def __init__(self, cfg: InstanceConfig, dep: DeploymentConfig, proc: ProcessContext) -> None:
        self.cfg = cfg
        self.dep = dep
        self.proc = proc
        self.id = cfg.id
        self.role = cfg.role
        self.machine = dep.machine(cfg)
        sched = dep.scheduler_for(cfg)
        self.pool = KvPool(dep.capacity_tokens(cfg), dep.block_size)
        self.engine = Engine(self.machine, self.pool, dep.engine_config(cfg))
        self.kvb = self.machine.model.kv_bytes_per_token
        self.m = InstanceMetrics(self, proc.loop_lag)
        self.driver = StepDriver(
            self.engine,
            self._on_events,
            max_catchup_s=sched.max_catchup_s,
            lag=self.m.sched_lag,
            lost=self.m.lost,
        )
        self.policy = dep.handoff.policy()
        self.core = InstanceCore(self.role, self.engine, self.policy)
        self.jobs: dict[str, JobCore] = self.core.jobs
        self.channels: dict[str, EventChannel] = {}
        self.http: aiohttp.ClientSession | None = None  # control traffic
        self.kv_http: aiohttp.ClientSession | None = None  # KV bytes (the WAN's bulk class)
        self._streams: defaultdict[str, asyncio.Semaphore] = defaultdict(  # WAN peer's KV streams
            lambda: asyncio.Semaphore(dep.kv_streams_per_peer)
        )
        self.runner: web.AppRunner | None = None
        self.address = cfg.address

    # -- lifecycle ------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        r = app.router
        r.add_get("/health", self.h_health)
        r.add_get("/metrics", self.h_metrics)
        r.add_post("/internal/abort", self.h_abort)
        r.add_post("/internal/prime", self.h_prime)
        r.add_get("/internal/events", self.h_events)
        prewarm.add_routes(r, lambda: self._http_for(kv=True))  # pre-warmed KV peers
        if self.role is Role.COLOCATED:
            r.add_post("/internal/generate", self.h_generate)
        elif self.role is Role.PREFILL:
            r.add_post("/internal/prefill", self.h_prefill)
        else:
            r.add_post("/internal/decode", self.h_decode)
            r.add_post("/internal/kv/{rid}", self.h_kv)
            r.add_post("/internal/md_ready", self.h_md_ready)
            r.add_post("/internal/handoff", self.h_handoff)
        return app

    async def start(self) -> str:
        self.http = internal_session()
        self.kv_http = internal_session(bulk=True)
        self.runner = internal_runner(self.app())
        await self.runner.setup()
        host, _, port = self.cfg.bind.rpartition(":")
        site = web.TCPSite(self.runner, host, int(port), backlog=1024, reuse_address=True)
        await site.start()
        bound = self.runner.addresses[0]
        if port == "0":
            self.address = f"{host}:{bound[1]}"
        return self.address

    async def stop(self) -> None:
        self.driver.stop()
        for job in list(self.jobs.values()):
            self._abort(job, "instance shutting down")
        if self.runner is not None:
            await self.runner.cleanup()
        if self.http is not None:
            await self.http.close()
        if self.kv_http is not None:
            await self.kv_http.close()

    def _http_for(self, *, kv: bool) -> aiohttp.ClientSession:
        """The session for a message: KV bytes ride the bulk (DSCP-marked) one."""
        http = self.kv_http if kv else self.http
        assert http is not None, "instance not started"
        return http

    # -- common endpoints -----------------------------------------------------------------
    async def h_health(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "status": "ok",
                "instance": self.id,
                "role": self.role.value,
                "queue": self.engine.queue_depth,
                "running": self.engine.running,
            }
        )

    async def h_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.m.render().encode(), content_type="text/plain")

    async def h_abort(self, request: web.Request) -> web.Response:
        msg = proto.Abort.model_validate(await request.json())
        job = self.jobs.get(msg.rid)
        if job is not None:
            self._abort(job, msg.reason)
        return web.json_response({"aborted": job is not None})

    async def h_prime(self, request: web.Request) -> web.Response:
        """``POST /internal/prime``: prefixes (``hashes``, in insertion order) a history
        left in this instance's cache (:meth:`~pddbench.servers.radix.KvPool.prime`)."""
        body = await request.json()
        return web.json_response({"blocks": sum(self.pool.prime(h) for h in body["hashes"])})

    # -- event channel ------------------------------------------------------------------
    async def h_events(self, request: web.Request) -> web.StreamResponse:
        router = request.query.get("router", "")
        old = self.channels.get(router)
        if old is not None:
            self._drop_channel(old, "router reconnected")
        hello = {"instance": self.id, "role": self.role.value, "clock": self.proc.anchor.to_json()}
        channel = EventChannel(router, hello)
        self.channels[router] = channel
        try:
            return await channel.serve(request)
        finally:
            self._drop_channel(channel, f"event channel to router {router} closed")

    def _drop_channel(self, channel: EventChannel, reason: str) -> None:
        channel.close()
        if self.channels.get(channel.router_id) is channel:
            del self.channels[channel.router_id]
        for job in [j for j in self.jobs.values() if j.channel is channel]:
            self._abort(job, reason)

    # -- requests -------------------------------------------------------------------------
    def _accept(
        self,
        spec: proto.RequestCore | proto.PrefillSpec,
        seq: Seq,
        kind: str,
    ) -> Job | web.Response:
        channel = self.channels.get(spec.channel)
        if channel is None:
            return web.json_response(
                {"error": f"no event channel from router {spec.channel!r} on {self.id}"},
                status=409,
            )
        job = Job(spec.rid, seq, channel=channel)
        refused = self.core.accept(job)
        if refused is not None:
            return web.json_response({"error": f"{refused} ({self.id})"}, status=409)
        self.m.requests.inc(1, kind)
        return job

    def _submit(self, job: Job) -> web.Response:
        self._run(self.core.submit(job, time.monotonic()))
        return web.json_response({"accepted": job.rid})

    def _job(self, rid: str) -> Job | None:
        job = self.jobs.get(rid)
        assert job is None or isinstance(job, Job)
        return job

    def _seq(self, spec: proto.GenerateSpec | proto.DecodeSpec | proto.PrefillSpec) -> Seq:
        return seq_for(self.dep, self.cfg, spec)

    # -- colocated ------------------------------------------------------------------------
    async def h_generate(self, request: web.Request) -> web.Response:
        spec = proto.GenerateSpec.model_validate(await request.json())
        job = self._accept(spec, self._seq(spec), "generate")
        return job if isinstance(job, web.Response) else self._submit(job)

    # -- prefill --------------------------------------------------------------------------
    async def h_prefill(self, request: web.Request) -> web.Response:
        spec = proto.PrefillSpec.model_validate(await request.json())
        job = self._accept(spec, self._seq(spec), "prefill")
        if isinstance(job, web.Response):
            return job
        self.core.expect_senders(job, len(spec.targets))
        for target in spec.targets:
            job.kv_senders.append(
                KvSender(
                    self._http_for(kv=True),
                    target,
                    rid=spec.rid,
                    source=self.id,
                    prompt_len=spec.prompt_len,
                    kv_bytes_per_token=self.kvb,
                    byte_scale=self.dep.byte_scale,
                )
            )
        return self._submit(job)

    def _start_senders(self, job: Job, computed: int) -> None:
        async def send(sender: KvSender) -> None:
            try:
                t = sender.target  # WAN: the peer's streams, in order of arrival
                wan = self._streams[t.address] if t.path == "wan" else contextlib.nullcontext()
                async with wan:
                    r = await sender.run()
                self.m.kv_sent.inc(r.bytes, r.to, r.path)
                self._run(self.core.emit(job, "kv_sent", **dataclasses.asdict(r)))
            except KvTransferError as exc:
                self.m.errors.inc(1, "kv-transfer")
                self._run(self.core.emit(job, "error", kind="kv-transfer", message=str(exc)))
            finally:
                self._run(self.core.sender_done(job, time.monotonic()))

        for s in job.kv_senders:
            s.available(computed)
            job.tasks.append(asyncio.create_task(send(s)))

    # -- decoders -------------------------------------------------------------------------
    async def h_decode(self, request: web.Request) -> web.Response:
        spec = proto.DecodeSpec.model_validate(await request.json())
        if spec.mode == "relay" and self.role is not Role.RELAY_DECODE:
            return web.json_response({"error": f"{self.id} is not a relay-decode"}, status=400)
        job = self._accept(spec, self._seq(spec), "decode")
        if isinstance(job, web.Response):
            return job
        job.mode = spec.mode
        if spec.mode == "relay":
            self.core.relay_mode(job, spec.peer_address, spec.peer_instance)
            if spec.peer_address:
                job.tasks.append(asyncio.create_task(self._connect_to(spec.peer_address)))
        return self._submit(job)

    async def _connect_to(self, address: str) -> None:
        """Have a connection to MD open before the handoff needs it (a transfer engine
        connects to a peer when it learns of it, not when the first byte is due): reuses an
        idle one, else pays the handshake now instead of inside the handoff's latency."""
        http = self._http_for(kv=self.policy.transfer is HandoffTransfer.KV)
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with http.get(f"http://{address}/health") as resp:
                await resp.read()

    async def h_kv(self, request: web.Request) -> web.Response:
        rid = request.match_info["rid"]
        job = self._job(rid)
        if job is None:
            return web.json_response(
                {"error": f"no reservation for {rid} on {self.id}"}, status=404
            )
        h = request.headers
        mode = h.get(proto.KV_MODE, "")
        self.core.kv_mode(job, mode, h.get(proto.KV_RELAY), h.get(proto.KV_RELAY_ID))
        try:
            receipt = await receive_kv(request)
        except KvTransferError as exc:
            self.m.errors.inc(1, "kv-transfer")
            self._fail(job, "kv-transfer", str(exc))
            return web.json_response({"error": str(exc)}, status=400)
        except asyncio.CancelledError:
            self._fail(job, "kv-transfer", f"KV connection to {self.id} for {rid} was cut")
            raise
        self.m.kv_received.inc(receipt.bytes, receipt.source, receipt.path)
        fields = {
            "source": receipt.source,
            "path": receipt.path,
            "start": receipt.start,
            "end": receipt.end,
            "bytes": receipt.bytes,
            "modelled_bytes": receipt.modelled_bytes,
        }
        effects = self.core.kv_arrived(job, fields, time.monotonic())
        if effects is None:
            return web.json_response({"received": receipt.bytes, "discarded": True})
        self._run(effects)
        return web.json_response({"received": receipt.bytes, "start": receipt.start})

    # -- effects (what the core decided) ------------------------------------------------
    def _on_events(self, events: list[Event]) -> None:
        self._run(self.core.dispatch(events, time.monotonic()))

    def _run(self, effects: list[Effect]) -> None:
        for e in effects:
            if e.do is Do.KICK:
                self.driver.kick()
                continue
            job = e.job
            assert isinstance(job, Job)
            if e.do is Do.TOKEN:
                assert e.tokens is not None
                for i, token in enumerate(e.tokens):
                    job.channel.push(token_line(job.rid, e.n + i, token))
                self.m.tokens.inc(len(e.tokens))
                if job.relay is not None:
                    self.m.relayed.inc(len(e.tokens))
            elif e.do is Do.EMIT:
                job.channel.push(event_line(job.rid, e.ev, **(e.fields or {})))
            elif e.do is Do.START_SENDERS:
                self._start_senders(job, e.n)
            elif e.do is Do.FEED_SENDERS:
                for s in job.kv_senders:
                    s.available(e.n)
            elif e.do is Do.SEND_HANDOFF:
                assert e.batch is not None
                job.tasks.append(asyncio.create_task(self._send_handoff(job, e.batch)))
            elif e.do is Do.NOTIFY_MD:
                job.tasks.append(asyncio.create_task(self._notify_ready(job)))
            elif e.do is Do.ACK:
                job.acknowledge(e.n)
            elif e.do is Do.FINISHED:
                if job.acks:  # finished while handoff messages wait: answer, do not strand
                    job.acknowledge(e.n)
                if e.linger:
                    asyncio.get_running_loop().call_later(
                        self.dep.request_timeout_s, self.jobs.pop, job.rid, None
                    )
            elif e.do is Do.ABORTED:
                for t in job.tasks:
                    if not t.done() and t is not asyncio.current_task():
                        t.cancel()
                for fut in job.acks:
                    if not fut.done():
                        fut.cancel()
                job.acks.clear()

    # -- endings --------------------------------------------------------------------------
    def _fail(self, job: Job, kind: str, message: str) -> None:
        self._run(self.core.fail(job, kind, message))

    def _abort(self, job: JobCore, reason: str) -> None:
        del reason  # the router has the reason; the instance only frees the request
        self._run(self.core.abort(job))
