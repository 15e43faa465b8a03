"""The router: the deployment's front door (``POST /v1/completions``, ``/health``, ``/metrics``).

Owns the shared state behind per-request flows (:mod:`~pddbench.servers.flows`): the
instance pools and their in-flight loads, the affinity index (approximate prefix caches),
the WAN link estimators, the health monitor that fails the requests of an instance that
stops answering, and the client-facing HTTP handling (validation → 400, SSE streaming or a
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
from pddbench.servers.compute import prefill_seconds
from pddbench.servers.config import DeploymentConfig, InstanceConfig, Role
from pddbench.servers.flows import Flow, RequestFailed
from pddbench.servers.instance import ProcessContext
from pddbench.servers.metrics import Registry
from pddbench.servers.routing import AffinityIndex, LinkEstimator, choose_instance
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
        self.model = dep.machine(next(i for i in dep.instances if i.role is not Role.ROUTER)).model
        self.routing_policy = dep.routing.policy()
        self.selection = dep.routing.selection()
        self.story_grace_s = 0.5
        workers = [i for i in dep.instances if i.role is not Role.ROUTER]
        self.loads: dict[str, float] = {i.id: 0.0 for i in workers}
        self.held_tokens: dict[str, int] = {i.id: 0 for i in workers}  # KV promised, per instance
        self.prefill_backlog_s: dict[str, float] = {i.id: 0.0 for i in workers}  # P's queue
        # nothing is routable before its first successful probe (and connected channel)
        self.healthy: dict[str, bool] = {i.id: False for i in workers}
        self.flows_by_instance: dict[str, set[Flow]] = {i.id: set() for i in workers}
        bs = dep.block_size
        self.capacity = {i.id: dep.capacity_tokens(i) for i in workers}
        self.affinity = AffinityIndex({k: v // bs for k, v in self.capacity.items()})
        self.links: dict[tuple[str, str], LinkEstimator] = {}
        self.inflight: dict[str, Flow] = {}  # requests whose client is still being served
        self.flows: dict[str, Flow] = {}  # requests whose instance events are still expected
        self.clocks: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, ChannelReader] = {}
        self._bg: set[asyncio.Task[Any]] = set()
        self._monitor: asyncio.Task[None] | None = None
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
            self.healthy[iid] = channel.connected.is_set()
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
        if self.healthy.get(instance_id):
            self.healthy[instance_id] = False
            self.m.health_changes.inc(1, instance_id)
        self.affinity.forget(instance_id)
        for flow in list(self.flows_by_instance[instance_id]):
            flow.fail(f"lost instance {instance_id} ({inst.address}): {why}")

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

    # -- shared state for flows -----------------------------------------------------------
    def choose(
        self, role: Role, hashes: list[int], need_tokens: int = 0
    ) -> tuple[InstanceConfig, int]:
        """A healthy instance of ``role`` for this prompt (with ``need_tokens`` of KV room, when
        one has it), and its believed cached blocks."""
        pool = [i for i in self.dep.by_role(role) if self.healthy[i.id]]
        if not pool:
            raise RequestFailed(f"no healthy {role.value} instance")
        roomy = [i for i in pool if self.room(i.id) >= need_tokens]
        pool = roomy or pool
        loads = {i.id: self.loads[i.id] for i in pool}
        matched = {i.id: self.affinity.match(i.id, hashes) for i in pool}
        chosen = choose_instance(loads, matched, len(hashes), self.selection)
        return self.dep.instance(chosen), matched[chosen]

    def affinity_insert(self, instance_id: str, hashes: list[int]) -> None:
        self.affinity.insert(instance_id, hashes)

    def has_healthy(self, role: Role) -> bool:
        return any(self.healthy[i.id] for i in self.dep.by_role(role))

    def link(self, src: InstanceConfig, dst: InstanceConfig) -> LinkEstimator:
        key = (src.datacenter, dst.datacenter)
        est = self.links.get(key)
        if est is None:
            r = self.dep.routing
            line = r.wan_bandwidth_gbps * 1e9 / 8  # the configured line: prior and ceiling
            est = LinkEstimator(
                line, measured=r.bandwidth_source == "measured", ceiling_bytes_per_s=line
            )
            self.links[key] = est
        return est

    def predict_prefill_s(self, p: InstanceConfig, cached_blocks: int, prompt_len: int) -> float:
        cached = min(cached_blocks * self.dep.block_size, prompt_len - 1)
        sched = self.dep.scheduler_for(p)
        return prefill_seconds(self.dep.machine(p), prompt_len - cached, cached, sched.chunk_tokens)

    def hold(self, instance_id: str, flow: Flow, tokens: int = 0) -> None:
        self.loads[instance_id] += 1
        self.held_tokens[instance_id] += tokens
        self.flows_by_instance[instance_id].add(flow)

    def unhold(self, instance_id: str, flow: Flow, tokens: int = 0) -> None:
        self.loads[instance_id] -= 1
        self.held_tokens[instance_id] -= tokens
        self.flows_by_instance[instance_id].discard(flow)

    def room(self, instance_id: str) -> int:
        """KV tokens not yet promised to requests routed to this instance."""
        return self.capacity[instance_id] - self.held_tokens[instance_id]

    def relay_room(self) -> int | None:
        """KV room on the roomiest healthy relay (None when there is none)."""
        rooms = [self.room(i.id) for i in self.dep.by_role(Role.RELAY_DECODE) if self.healthy[i.id]]
        return max(rooms) if rooms else None

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
            if up != self.healthy[inst.id]:
                self.healthy[inst.id] = up
                self.m.health_changes.inc(1, inst.id)
            if not up:
                self.affinity.forget(inst.id)
                for flow in list(self.flows_by_instance[inst.id]):
                    flow.fail(f"instance {inst.id} ({inst.address}) is unreachable: {why}")

        while True:
            await asyncio.gather(*(probe(i) for i in workers))
            await asyncio.sleep(self.dep.health_interval_s)

    # -- HTTP -----------------------------------------------------------------------------
    async def h_health(self, request: web.Request) -> web.Response:
        down = sorted(k for k, ok in self.healthy.items() if not ok)
        # 200 only when every instance is routable: deployers wait on this before traffic
        return web.json_response(
            {"status": "ok" if not down else "degraded", "instance": self.id, "down": down},
            status=200 if not down else 503,
        )

    async def h_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.m.render().encode(), content_type="text/plain")

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
        smallest = min(self.capacity.values())
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

    def render(self) -> str:
        for (a, b), est in self._router.links.items():
            self.link_bw.set(est.bandwidth, f"{a}->{b}")
            self.link_q.set(est.in_flight_bytes, f"{a}->{b}")
        return self.registry.render()
