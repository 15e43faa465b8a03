"""A worker instance (prefill, decode, relay-decode, main-decode, colocated) as an HTTP server.
(Over 500 lines for one reason: one WorkerInstance serves every role's endpoints and engine loop.)

Owns the I/O around one :class:`~pddbench.servers.engine.Engine`: its aiohttp app on its own
address, the event channel to the router (:mod:`~pddbench.servers.channel`), KV
transfers out (prefill) and in (decoders); the RLD ↔ MD handoff messages live in
:mod:`~pddbench.servers.instance_handoff`. Decisions are delegated to sans-IO code: the
engine (what runs when), :mod:`~pddbench.servers.handoff` (what is handed over when).
Timings come from the process's monotonic clock. Many instances share one event loop.

Failure handling: a request whose router stream goes away is aborted and its KV freed; a KV
transfer cut short, a refused handoff or a protocol violation becomes an ``error`` event on
the request's stream, never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from pddbench.servers.engine import (
    Admitted,
    Engine,
    Event,
    ExtendDone,
    PrefillDone,
    PrefillProgress,
    Refused,
    Seq,
    TokenOut,
)
from pddbench.servers.handoff import (
    HandoffTransfer,
    MainHandoff,
    RelayHandoff,
)
from pddbench.servers.instance_handoff import HandoffEndpoints
from pddbench.servers.instance_metrics import InstanceMetrics
from pddbench.servers.kvlink import KvSender, KvTransferError, receive_kv
from pddbench.servers.radix import KvPool
from pddbench.servers.sessions import internal_runner, internal_session
from pddbench.servers.tokens import TokenStream

_ZEROS = bytes(1 << 16)


@dataclass
class ProcessContext:
    """What all instances hosted by one process share."""

    anchor: ClockAnchor
    loop_lag: LoopLagMonitor


@dataclass(eq=False)
class Job:
    rid: str
    seq: Seq
    channel: EventChannel
    finished: bool = False
    released: bool = False
    mode: str = "direct"
    senders: list[KvSender] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    relay: RelayHandoff | None = None
    peer_address: str | None = None
    peer_instance: str | None = None
    main: MainHandoff | None = None
    # MD: handoff messages waiting for their acknowledgement. Usually one, but a relay that
    # finishes the whole request sends its `finished` batch while the previous batch is
    # still being applied; each waiting message gets its own future (one shared slot was
    # overwritten, and the first message's handler then waited forever).
    acks: list[asyncio.Future[int]] = field(default_factory=list)
    kv_landed: bool = False

    def acknowledge(self, level: int) -> None:
        """Answer every waiting handoff message with MD's ``level``."""
        for fut in self.acks:
            if not fut.done():
                fut.set_result(level)
        self.acks.clear()

    def event(self, ev: str, **fields: object) -> None:
        if not self.finished:
            self.channel.push(event_line(self.rid, ev, **fields))

    def token(self, position: int, token: int) -> None:
        if not self.finished:
            self.channel.push(token_line(self.rid, position, token))

    def close(self) -> None:
        self.finished = True


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
        self.jobs: dict[str, Job] = {}
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
        if spec.rid in self.jobs:
            return web.json_response(
                {"error": f"request {spec.rid} already on {self.id}"}, status=409
            )
        job = Job(spec.rid, seq, channel)
        self.jobs[spec.rid] = job
        self.m.requests.inc(1, kind)
        return job

    def _submit(self, job: Job) -> web.Response:
        self._dispatch(self.engine.submit(job.seq, time.monotonic()))
        self.driver.kick()
        return web.json_response({"accepted": job.rid})

    def _stream_for(self, spec: proto.RequestCore) -> TokenStream:
        return TokenStream(
            spec.seed, spec.rid, self.machine.model.vocab_size, self.dep.eos_probability
        )

    def _output_seq(
        self,
        spec: proto.GenerateSpec | proto.DecodeSpec,
        *,
        compute_prompt: bool,
        decode_after_kv: bool,
    ) -> Seq:
        """The sequence of a request this instance decodes (colocated, D, RLD or MD)."""
        return Seq(
            rid=spec.rid,
            prompt_len=spec.prompt_len,
            hashes=spec.hashes,
            stream=self._stream_for(spec),
            max_tokens=spec.max_tokens,
            min_tokens=spec.min_tokens,
            ignore_eos=spec.ignore_eos,
            compute_prompt=compute_prompt,
            decode_after_kv=decode_after_kv,
            reserve_output=spec.max_tokens,
            use_cache=self.cfg.prefix_cache,
            seed=spec.seed,
        )

    # -- colocated ------------------------------------------------------------------------
    async def h_generate(self, request: web.Request) -> web.Response:
        spec = proto.GenerateSpec.model_validate(await request.json())
        seq = self._output_seq(spec, compute_prompt=True, decode_after_kv=True)
        job = self._accept(spec, seq, "generate")
        return job if isinstance(job, web.Response) else self._submit(job)

    # -- prefill --------------------------------------------------------------------------
    async def h_prefill(self, request: web.Request) -> web.Response:
        spec = proto.PrefillSpec.model_validate(await request.json())
        seq = Seq(
            rid=spec.rid,
            prompt_len=spec.prompt_len,
            hashes=spec.hashes,
            stream=TokenStream(spec.seed, spec.rid, self.machine.model.vocab_size),
            max_tokens=1,
            compute_prompt=True,
            decode_after_kv=False,
            reserve_output=0,
            use_cache=self.cfg.prefix_cache,
        )
        job = self._accept(spec, seq, "prefill")
        if isinstance(job, web.Response):
            return job
        for target in spec.targets:
            job.senders.append(
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

    def _start_senders(self, job: Job) -> None:
        remaining = len(job.senders)

        async def send(sender: KvSender) -> None:
            nonlocal remaining
            try:
                t = sender.target  # WAN: the peer's streams, in order of arrival
                wan = self._streams[t.address] if t.path == "wan" else contextlib.nullcontext()
                async with wan:
                    r = await sender.run()
                self.m.kv_sent.inc(r.bytes, r.to, r.path)
                job.event(
                    "kv_sent",
                    to=r.to,
                    path=r.path,
                    start=r.start,
                    first_byte=r.first_byte,
                    active=r.active,
                    end=r.end,
                    bytes=r.bytes,
                    modelled_bytes=r.modelled_bytes,
                    tokens=r.tokens,
                )
            except KvTransferError as exc:
                self.m.errors.inc(1, "kv-transfer")
                job.event("error", kind="kv-transfer", message=str(exc))
            finally:
                remaining -= 1
                if remaining == 0 and not job.finished:
                    self._finish(job, "prefilled")

        for s in job.senders:
            s.available(job.seq.computed)
            job.tasks.append(asyncio.create_task(send(s)))

    # -- decoders -------------------------------------------------------------------------
    async def h_decode(self, request: web.Request) -> web.Response:
        spec = proto.DecodeSpec.model_validate(await request.json())
        if spec.mode == "relay" and self.role is not Role.RELAY_DECODE:
            return web.json_response({"error": f"{self.id} is not a relay-decode"}, status=400)
        seq = self._output_seq(spec, compute_prompt=False, decode_after_kv=spec.mode != "main-auto")
        job = self._accept(spec, seq, "decode")
        if isinstance(job, web.Response):
            return job
        job.mode = spec.mode
        if spec.mode == "relay":
            job.relay = RelayHandoff(self.policy)
            job.peer_address, job.peer_instance = spec.peer_address, spec.peer_instance
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
        job = self.jobs.get(rid)
        if job is None:
            return web.json_response(
                {"error": f"no reservation for {rid} on {self.id}"}, status=404
            )
        if job.mode == "main-auto":
            if request.headers.get(proto.KV_MODE) == "main":
                job.mode = "main"
                job.main = MainHandoff()
                job.peer_address = request.headers.get(proto.KV_RELAY)
                job.peer_instance = request.headers.get(proto.KV_RELAY_ID)
            else:
                job.mode = "direct"
                job.seq.decode_after_kv = True
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
        job.kv_landed = True
        if job.released or job.finished:
            self.jobs.pop(rid, None)
            return web.json_response({"received": receipt.bytes, "discarded": True})
        job.event(
            "kv_landed",
            source=receipt.source,
            path=receipt.path,
            start=receipt.start,
            end=receipt.end,
            bytes=receipt.bytes,
            modelled_bytes=receipt.modelled_bytes,
        )
        self._dispatch(self.engine.kv_landed(rid, receipt.end))
        if job.main is not None:
            self._main_act(job, job.main.kv_landed())
        elif job.relay is not None:
            self._relay_try(job)
        self.driver.kick()
        return web.json_response({"received": receipt.bytes, "start": receipt.start})

    # -- engine events --------------------------------------------------------------------
    def _on_events(self, events: list[Event]) -> None:
        self._dispatch(events)

    def _dispatch(self, events: list[Event]) -> None:
        # A relay decides its handoff once per step boundary, after all of the step's tokens
        # (speculative decoding emits several per request): deciding at the first of them
        # would count tokens whose last one may end the request.
        relays: dict[str, Job] = {}
        for ev in events:
            job = self.jobs.get(ev.rid)
            if job is None:
                continue
            if isinstance(ev, TokenOut):
                job.token(ev.position, ev.token)
                self.m.tokens.inc()
                if job.relay is not None:
                    self.m.relayed.inc()
                if ev.finish is not None:
                    if job.relay is not None and job.peer_address:
                        batch = job.relay.finish(ev.position + 1)
                        if batch is not None:
                            job.tasks.append(asyncio.create_task(self._send_handoff(job, batch)))
                    self._finish(job, ev.finish, emitted=ev.position + 1)
                elif job.relay is not None:
                    relays[job.rid] = job
            elif isinstance(ev, Admitted):
                job.event("admitted", t=ev.t, cached=ev.cached)
                if job.senders:
                    self._start_senders(job)
            elif isinstance(ev, PrefillProgress):
                for s in job.senders:
                    s.available(ev.computed)
            elif isinstance(ev, PrefillDone):
                job.event(
                    "prefill",
                    start=ev.start,
                    end=ev.end,
                    chunks=ev.chunks,
                    cached=job.seq.cached,
                    uncached=job.seq.prompt_len - job.seq.cached,
                )
            elif isinstance(ev, ExtendDone):
                final = job.main is not None and job.main.pending_final
                job.event("extend", k=ev.k, start=ev.start, end=ev.end, final=final)
                self._main_applied(job, ev.processed)
            elif isinstance(ev, Refused):
                self._fail(job, "refused", ev.message)
        for job in relays.values():
            self._relay_try(job)

    # -- endings --------------------------------------------------------------------------
    def _finish(self, job: Job, reason: str, *, emitted: int | None = None) -> None:
        job.event("done", reason=reason, t=time.monotonic(), emitted=emitted)
        job.close()
        if job.acks:  # MD finished while handoff messages wait: answer them, do not strand
            job.acknowledge(job.main.level if job.main is not None else 0)
        if self.role is Role.PREFILL:
            self.engine.release(job.rid)
            self.driver.kick()
        if not (job.released and not job.kv_landed and self.role is Role.RELAY_DECODE):
            self.jobs.pop(job.rid, None)
        else:
            # RLD handed off before its own KV landed: keep the job so the late transfer
            # is accepted and discarded instead of refused.
            asyncio.get_running_loop().call_later(
                self.dep.request_timeout_s, self.jobs.pop, job.rid, None
            )

    def _fail(self, job: Job, kind: str, message: str) -> None:
        if job.finished:
            return
        job.event("error", kind=kind, message=message)
        self._abort(job, message)

    def _abort(self, job: Job, reason: str) -> None:
        job.close()
        job.released = True
        self.jobs.pop(job.rid, None)
        self.engine.release(job.rid)
        for t in job.tasks:
            if not t.done() and t is not asyncio.current_task():
                t.cancel()
        for fut in job.acks:
            if not fut.done():
                fut.cancel()
        job.acks.clear()
        self.driver.kick()
