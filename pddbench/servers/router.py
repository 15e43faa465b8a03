"""The router: the deployment's front door (``POST /v1/completions``, ``/health``, ``/metrics``).

Owns the I/O around the router's sans-IO state (:class:`~pddbench.servers.router_core.RouterCore`:
pools, loads, backlog, affinity, link estimators) and its per-request flows
(:mod:`~pddbench.servers.flows`): the event channels to the instances, the health monitor
that marks an instance down and fails its requests when it stops answering, and the
client-facing HTTP handling (validation → 400, SSE streaming or a
whole JSON response, the ``pdd`` story, ``X-Request-Id``). A client that disconnects
cancels its flow, which aborts the request on every instance involved.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Coroutine
from typing import Any

import aiohttp
from aiohttp import web
from orjson import loads as _loads  # parses a 64K-token prompt ~3x faster than json

from pddbench.servers import api
from pddbench.servers.channel import ChannelReader
from pddbench.servers.config import DeploymentConfig, InstanceConfig, Role
from pddbench.servers.flows import Flow, RequestFailed
from pddbench.servers.instance import ProcessContext
from pddbench.servers.metrics import Registry
from pddbench.servers.priming import place
from pddbench.servers.router_core import RouterCore
from pddbench.servers.sessions import internal_runner, internal_session
from pddbench.servers.tokens import block_hashes

_RID = re.compile(r"^[A-Za-z0-9_.:@/+=-]{1,200}$")
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class _SseSink:
    def __init__(self, resp: web.StreamResponse, writer: api.ChunkWriter) -> None:
        self.resp = resp
        self.writer = writer

    async def tokens(self, ids: list[int], finish: str | None) -> None:
        await self.resp.write(self.writer.tokens(ids, finish))


class _CollectSink:
    def __init__(self) -> None:
        self.ids: list[int] = []
        self.finish: str | None = None

    async def tokens(self, ids: list[int], finish: str | None) -> None:
        self.ids.extend(ids)
        if finish is not None:
            self.finish = finish


class Router:
    def __init__(self, dep: DeploymentConfig, proc: ProcessContext) -> None:
        self.dep = dep
        self.proc = proc
        self.cfg = dep.router
        self.id = self.cfg.id
        self.address = self.cfg.address
        self.core = RouterCore(dep)
        self.model = self.core.model
        self.story_grace_s = 0.5
        self.inflight: dict[str, Flow] = {}  # requests whose client is still being served
        self.flows: dict[str, Flow] = {}  # requests whose instance events are still expected
        self.clocks: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, ChannelReader] = {}
        self._bg: set[asyncio.Task[Any]] = set()
        self._monitor: asyncio.Task[None] | None = None
        self._primes: list[list[int]] = []  # a priming's prefixes until its last batch
        self.http: aiohttp.ClientSession
        self.runner: web.AppRunner | None = None
        self.m = _RouterMetrics(self)

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> str:
        self.http = internal_session()
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/completions", self.h_completions)
        app.router.add_get("/v1/models", self.h_models)
        app.router.add_get("/health", self.h_health)
        app.router.add_get("/metrics", self.h_metrics)
        app.router.add_post("/internal/prime", self.h_prime)
        self.runner = internal_runner(app)
        await self.runner.setup()
        host, _, port = self.cfg.bind.rpartition(":")
        await web.TCPSite(self.runner, host, int(port), backlog=4096, reuse_address=True).start()
        if port == "0":
            self.address = f"{host}:{self.runner.addresses[0][1]}"
        for inst in self.dep.instances:
            if inst.role is not Role.ROUTER:
                reader = ChannelReader(
                    self.http,
                    inst.id,
                    inst.address,
                    self.id,
                    self._deliver,
                    self._lost,
                    self._hello,
                )
                self.channels[inst.id] = reader
                reader.start()
        waits = [asyncio.wait_for(c.connected.wait(), 5.0) for c in self.channels.values()]
        await asyncio.gather(*waits, return_exceptions=True)
        for iid, channel in self.channels.items():  # routable once its channel is up
            self.core.set_healthy(iid, channel.connected.is_set())
        self._monitor = asyncio.create_task(self._health_loop())
        return self.address

    def _deliver(self, instance_id: str, rid: str, item: Any) -> None:
        flow = self.flows.get(rid)
        if flow is not None:
            flow.deliver(instance_id, item)

    def _hello(self, instance_id: str, hello: dict[str, Any]) -> None:
        self.clocks[instance_id] = hello.get("clock", {})

    def _lost(self, instance_id: str, why: str) -> None:
        inst = self.dep.instance(instance_id)
        if self.core.set_healthy(instance_id, False):
            self.m.health_changes.inc(1, instance_id)
        self._fail_flows(instance_id, f"lost instance {instance_id} ({inst.address}): {why}")

    def _fail_flows(self, instance_id: str, message: str) -> None:
        for flow in list(self.core.flows_by_instance[instance_id]):
            assert isinstance(flow, Flow)
            flow.fail(message)

    async def stop(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
        for c in self.channels.values():
            c.stop()
        for t in list(self._bg):
            t.cancel()
        if self.runner is not None:
            await self.runner.cleanup()
        await self.http.close()

    def background(self, coro: Coroutine[Any, Any, None], timeout_s: float) -> None:
        async def guarded() -> None:
            try:
                async with asyncio.timeout(timeout_s):
                    await coro
            except (TimeoutError, asyncio.CancelledError):
                pass

        task = asyncio.create_task(guarded())
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    # -- I/O for flows --------------------------------------------------------------------
    def abort(self, inst: InstanceConfig, rid: str, reason: str) -> None:
        async def post() -> None:
            try:
                async with self.http.post(
                    f"http://{inst.address}/internal/abort",
                    json={"rid": rid, "reason": reason},
                    timeout=aiohttp.ClientTimeout(total=self.dep.health_timeout_s),
                ):
                    pass
            except (aiohttp.ClientError, OSError, TimeoutError):
                pass

        self.background(post(), self.dep.health_timeout_s + 1)

    # -- health ---------------------------------------------------------------------------
    async def _health_loop(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.dep.health_timeout_s)
        workers = [i for i in self.dep.instances if i.role is not Role.ROUTER]
        strikes = {i.id: 0 for i in workers}

        async def probe(inst: InstanceConfig) -> None:
            try:
                async with self.http.get(f"http://{inst.address}/health", timeout=timeout) as r:
                    ok, why = r.status == 200, f"HTTP {r.status}"
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                ok, why = False, f"{type(exc).__name__}: {exc}".rstrip(": ")
            strikes[inst.id] = 0 if ok else strikes[inst.id] + 1
            channel = self.channels[inst.id]
            if ok and not channel.connected.is_set():
                channel.start()  # (re)connect; routable once the channel is up
            up = strikes[inst.id] < self.dep.health_failures and channel.connected.is_set()
            if self.core.set_healthy(inst.id, up):
                self.m.health_changes.inc(1, inst.id)
            if not up:
                why = f"instance {inst.id} ({inst.address}) is unreachable: {why}"
                self._fail_flows(inst.id, why)

        while True:
            await asyncio.gather(*(probe(i) for i in workers))
            await asyncio.sleep(self.dep.health_interval_s)

    # -- HTTP -----------------------------------------------------------------------------
    async def h_health(self, request: web.Request) -> web.Response:
        down = sorted(k for k, ok in self.core.healthy.items() if not ok)
        # 200 only when every instance is routable: deployers wait on this before traffic
        return web.json_response(
            {"status": "ok" if not down else "degraded", "instance": self.id, "down": down},
            status=200 if not down else 503,
        )

    async def h_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.m.render().encode(), content_type="text/plain")

    async def h_prime(self, request: web.Request) -> web.Response:
        """``POST /internal/prime``: a history's prompts (``prompts``, earliest needed first,
        in batches until ``final``) go into the caches this router would send them to
        (:func:`~pddbench.servers.priming.place`); each instance adds them to its cache."""
        body = _loads(await request.read())
        bs = self.dep.block_size
        self._primes.extend(block_hashes(p, bs) for p in body.get("prompts", []))
        if not body.get("final", True):
            return web.json_response({"pending": len(self._primes)})
        prefixes, self._primes = self._primes, []
        placements = place(self.core, prefixes)
        by_instance: dict[str, list[list[int]]] = {}
        for p in placements:
            by_instance.setdefault(p.instance_id, []).append(p.hashes)
        added: dict[str, int] = {}
        for iid, hashes in by_instance.items():
            url = f"http://{self.dep.instance(iid).address}/internal/prime"
            added[iid] = 0
            for k in range(0, len(hashes), 256):  # a few MB a POST, in insertion order
                async with self.http.post(url, json={"hashes": hashes[k : k + 256]}) as resp:
                    resp.raise_for_status()
                    added[iid] += int((await resp.json())["blocks"])
        return web.json_response(
            {"prefixes": len(prefixes), "placements": len(placements), "blocks": added}
        )

    async def h_models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.model.name, "object": "model"}]}
        )

    def _bad(self, message: str, status: int = 400) -> web.Response:
        self.m.bad_requests.inc()
        return web.json_response(api.error_body(message, status), status=status)

    def _parse(self, raw: bytes) -> api.CompletionRequest | web.Response:
        # A function of its own so that the decoded body (a list of up to ~100K Python
        # ints) dies here, not with the request: kept alive for the request's seconds, the
        # lists of hundreds of in-flight requests made every young GC pass walk them.
        try:
            body = _loads(raw)
        except (ValueError, UnicodeDecodeError):
            return self._bad("the request body is not valid JSON")
        try:
            return api.parse_request(
                body, max_context=self.model.max_context, default_model=self.model.name
            )
        except api.BadRequest as exc:
            return self._bad(str(exc))

    async def h_completions(self, request: web.Request) -> web.StreamResponse:
        arrival = time.monotonic()
        req = self._parse(await request.read())
        if isinstance(req, web.Response):
            return req
        rid = request.headers.get("X-Request-Id") or uuid.uuid4().hex
        if not _RID.match(rid):
            return self._bad("X-Request-Id must be 1-200 characters of [A-Za-z0-9_.:@/+=-]")
        if rid in self.inflight:
            return self._bad(f"request id {rid} is already in flight", 409)
        need = len(req.prompt) + req.max_tokens
        smallest = min(self.core.capacity.values())
        if need > smallest:
            return self._bad(
                f"request needs {need} tokens of KV but an instance holds at most {smallest}"
            )
        hashes = block_hashes(req.prompt, self.dep.block_size)
        writer = api.ChunkWriter(rid, req.model)
        headers = {"X-Request-Id": rid}
        if req.stream:
            resp = web.StreamResponse(headers={**_SSE_HEADERS, **headers})
            await resp.prepare(request)
            sink: Any = _SseSink(resp, writer)
        else:
            sink = _CollectSink()
        flow = Flow(self, req, rid, hashes, sink, arrival)
        self.inflight[rid] = flow
        try:
            await flow.run()
        except RequestFailed as exc:
            self.m.failures.inc()
            if req.stream:
                await resp.write(api.ChunkWriter.error(str(exc)))
                return resp
            return web.json_response(api.error_body(str(exc), 502), status=502, headers=headers)
        finally:
            self.inflight.pop(rid, None)
        story = flow.story.to_json()
        self.m.tokens.inc(story["output_tokens"])
        self.m.relayed.inc(story["relay_tokens"])
        usage = api.usage(len(req.prompt), story["output_tokens"], story["cached_tokens"])
        if req.stream:
            await resp.write(writer.final(story, usage if req.include_usage else None))
            return resp
        assert isinstance(sink, _CollectSink)
        headers["X-PDD"] = json.dumps(story, separators=(",", ":"))
        return web.json_response(writer.whole(sink.ids, sink.finish, usage, story), headers=headers)


class _RouterMetrics:
    def __init__(self, router: Router) -> None:
        r = self.registry = Registry({"instance": router.id, "role": "router"})
        self.requests = r.counter(
            "pdd_requests_total", "Requests routed, by pipeline", ("pipeline",)
        )
        self.failures = r.counter("pdd_request_failures_total", "Requests failed after acceptance")
        self.bad_requests = r.counter("pdd_bad_requests_total", "Requests refused as malformed")
        self.tokens = r.counter("pdd_output_tokens_total", "Output tokens delivered")
        self.relayed = r.counter("pdd_relayed_tokens_total", "Output tokens that came from RLD")
        self.handoffs = r.counter("pdd_handoffs_total", "Completed handoffs, by mode", ("mode",))
        self.seam_errors = r.counter("pdd_seam_errors_total", "Duplicate token positions seen")
        self.health_changes = r.counter(
            "pdd_instance_health_changes_total", "Health state flips, per instance", ("peer",)
        )
        r.gauge("pdd_inflight_requests", "Requests in flight", lambda: len(router.inflight))
        r.gauge(
            "pdd_flows_pending",
            "Requests whose instance events are still expected (answered ones included)",
            lambda: len(router.flows),
        )
        self.link_bw = r.gauge(
            "pdd_link_bandwidth_estimate_bytes_per_second",
            "Estimated available bandwidth per datacenter pair (modelled bytes)",
            labelnames=("link",),
        )
        self.link_q = r.gauge(
            "pdd_link_in_flight_bytes", "Modelled KV bytes in flight per link", labelnames=("link",)
        )
        self._router = router
        r.add(router.proc.loop_lag.histogram)

    # the flow cores' counters (flow_core.Counters)
    def routed(self, pipeline: str) -> None:
        self.requests.inc(1, pipeline)

    def seam_error(self) -> None:
        self.seam_errors.inc()

    def handoff(self, mode: str) -> None:
        self.handoffs.inc(1, mode)

    def render(self) -> str:
        for (a, b), est in self._router.core.links.items():
            self.link_bw.set(est.bandwidth, f"{a}->{b}")
            self.link_q.set(est.in_flight_bytes, f"{a}->{b}")
        return self.registry.render()
