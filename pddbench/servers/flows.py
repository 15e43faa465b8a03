"""One request's journey through a deployment, as orchestrated by the router.

Owns the per-request choreography: which instance streams to open in which order
(colocated: C; PD: reserve on D, then prefill on P; PDD: reserve on MD, decide the
pipeline from MD's matched prefix, reserve on RLD if relayed, then prefill on P with one or
two KV targets), merging the token streams of RLD and MD in position order, filling the
request's story, and failing the request with one clear message when any involved stream
reports an error, breaks, or ends early — never waiting forever.

Decisions (which instance, which pipeline) come from :mod:`~pddbench.servers.routing`;
the router (:mod:`~pddbench.servers.router`) owns the HTTP front door and shared state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
import orjson

from pddbench.servers import protocol as proto
from pddbench.servers.api import CompletionRequest
from pddbench.servers.config import Architecture, InstanceConfig, Role
from pddbench.servers.routing import (
    Pipeline,
    PipelineInputs,
    SeamError,
    TokenSequencer,
    decide_pipeline,
)
from pddbench.servers.story import RequestStory

if TYPE_CHECKING:
    from pddbench.servers.router import Router

_JSON = {"Content-Type": "application/json"}


class RequestFailed(Exception):
    """The request cannot complete; the message is for the client."""


class Sink(Protocol):
    async def tokens(self, ids: list[int], finish: str | None) -> None: ...


@dataclass(frozen=True)
class _Failure:
    message: str


_ORIGIN = {"C": "C", "D": "D", "MD": "MD", "RLD": "RLD"}


class Flow:
    def __init__(
        self,
        router: Router,
        req: CompletionRequest,
        rid: str,
        hashes: list[int],
        sink: Sink,
        arrival: float,
    ) -> None:
        self.r = router
        self.req = req
        self.rid = rid
        self.hashes = hashes
        self.sink = sink
        dep = router.dep
        self.seed = req.seed if req.seed is not None else dep.seed
        self.q: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.upstreams: dict[str, tuple[InstanceConfig, asyncio.Task[None]]] = {}
        self.labels: dict[str, str] = {}  # instance id -> label
        self.ignored: set[str] = set()
        self.done_labels: set[str] = set()
        self.held: dict[str, str] = {}  # label -> instance id whose load we hold
        self.held_tokens: dict[str, int] = {}  # label -> KV tokens counted on that instance
        self.prefill_pending: tuple[str, float] | None = None  # (P, predicted s) on its backlog
        self.story = RequestStory(
            request_id=rid,
            seed=self.seed,
            vocab_size=router.model.vocab_size,
            byte_scale=dep.byte_scale,
            prompt_tokens=len(req.prompt),
            router=dep.router.id,
            arrival=arrival,
        )
        self.seqr = TokenSequencer()
        self.expected_total: int | None = None
        self.complete = False
        self.finish_sent = False
        self.pending: list[int] = []
        self.wan: list[tuple[Any, float]] = []  # (link estimator, modelled bytes) in flight
        router.flows[rid] = self

    # -- public ---------------------------------------------------------------------------
    async def run(self) -> None:
        try:
            async with asyncio.timeout(self.r.dep.request_timeout_s):
                arch = self.r.dep.architecture
                if arch is Architecture.COLOCATED:
                    await self._colocated()
                elif arch is Architecture.PD:
                    await self._pd()
                else:
                    await self._pdd()
                await self._pump(lambda: self.complete)
                await self._grace()
        except TimeoutError:
            raise RequestFailed(
                f"request {self.rid} timed out after {self.r.dep.request_timeout_s:.0f} s"
            ) from None
        except RequestFailed as exc:
            self.story.error = str(exc)
            raise
        finally:
            self._cleanup()

    def fail(self, message: str) -> None:
        """Called by the router's health monitor: an involved instance is gone."""
        self.q.put_nowait(("router", _Failure(message)))

    def deliver(self, instance_id: str, item: Any) -> None:
        """An event of this request arrived on an instance's event channel."""
        label = self.labels.get(instance_id)
        if label is not None:
            self.q.put_nowait((label, item))

    # -- pipelines ------------------------------------------------------------------------
    def _core(self) -> dict[str, Any]:
        return {
            "rid": self.rid,
            "seed": self.seed,
            "prompt_len": len(self.req.prompt),
            "hashes": self.hashes,
            "max_tokens": self.req.max_tokens,
            "min_tokens": self.req.min_tokens,
            "ignore_eos": self.req.ignore_eos,
        }

    async def _colocated(self) -> None:
        c, _ = self._pick("C", Role.COLOCATED)
        self.r.affinity_insert(c.id, self.hashes)
        self._routed(Pipeline.COLOCATED, {})
        self._open("C", c, "/internal/generate", self._core())

    async def _pd(self) -> None:
        d, _ = self._pick("D", Role.DECODE)
        self._open("D", d, "/internal/decode", {**self._core(), "mode": "direct"})
        await self._pump(lambda: "D" in self.story.reserved)
        p, _ = self._pick("P", Role.PREFILL)
        self._routed(Pipeline.PD, {})
        target = self._target(p, d, int(self.story.reserved["D"]["cached"] or 0), "direct")
        self._open_prefill(p, [target])

    async def _pdd(self) -> None:
        r = self.r
        md, _ = self._pick("MD", Role.MAIN_DECODE)
        self._open("MD", md, "/internal/decode", {**self._core(), "mode": "main-auto"})
        await self._pump(lambda: "MD" in self.story.reserved)
        md_cached = int(self.story.reserved["MD"]["cached"] or 0)
        p, p_blocks = self._pick("P", Role.PREFILL)
        link = r.link(p, md)
        need = len(self.req.prompt) + self.req.max_tokens
        prefill_s = r.predict_prefill_s(p, p_blocks, len(self.req.prompt))
        decision = decide_pipeline(
            PipelineInputs(
                prompt_len=len(self.req.prompt),
                md_cached_tokens=md_cached,
                kv_bytes_per_token=r.model.kv_bytes_per_token,
                predicted_prefill_s=prefill_s,
                link=link,
                relay_available=r.has_healthy(Role.RELAY_DECODE),
                prefill_queue_s=r.prefill_backlog_s[p.id],
                relay_free_tokens=r.relay_room(),
                relay_need_tokens=need,
            ),
            r.routing_policy,
        )
        self._prefill_on(p.id, prefill_s)
        info = {
            "reason": decision.reason,
            "prefill_queue_s": r.prefill_backlog_s[p.id] - prefill_s,
            "predicted_wan_s": decision.predicted_wan_s,
            "predicted_ttft_s": decision.predicted_ttft_s,
            "md_cached_tokens": md_cached,
            "wan_bandwidth_estimate_bytes_per_s": link.bandwidth,
        }
        if decision.pipeline is Pipeline.DIRECT:
            self._routed(Pipeline.DIRECT, info)
            self._open_prefill(p, [self._target(p, md, md_cached, "direct")])
            return
        rld, _ = self._pick("RLD", Role.RELAY_DECODE, need_tokens=need)
        only = decision.pipeline is Pipeline.RLD_ONLY
        body = {**self._core(), "mode": "direct" if only else "relay"}
        if not only:
            body.update(peer_address=md.address, peer_instance=md.id)
        self._open("RLD", rld, "/internal/decode", body)
        await self._pump(lambda: "RLD" in self.story.reserved)
        rld_cached = int(self.story.reserved["RLD"]["cached"] or 0)
        info["rld_cached_tokens"] = rld_cached
        self._routed(decision.pipeline, info)
        to_rld = self._target(p, rld, rld_cached, "direct")
        if only:
            self._drop("MD")
            self._open_prefill(p, [to_rld])
        else:
            to_md = self._target(p, md, md_cached, "main")
            to_md.relay_address, to_md.relay_instance = rld.address, rld.id
            self._open_prefill(p, [to_rld, to_md])

    def _target(
        self, p: InstanceConfig, dst: InstanceConfig, skip: int, mode: str
    ) -> proto.KvTarget:
        path = "wan" if p.datacenter != dst.datacenter else "intra"
        return proto.KvTarget(
            instance=dst.id, address=dst.address, skip_tokens=skip, path=path, mode=mode
        )

    def _open_prefill(self, p: InstanceConfig, targets: list[proto.KvTarget]) -> None:
        kvb = self.r.model.kv_bytes_per_token
        n = len(self.req.prompt)
        self.r.affinity_insert(p.id, self.hashes)
        for t in targets:
            self.r.affinity_insert(t.instance, self.hashes)
            if t.path == "wan":
                link = self.r.link(p, self.r.dep.instance(t.instance))
                modelled = float((n - min(t.skip_tokens, n)) * kvb)
                link.started(modelled)
                self.wan.append((link, modelled))
        body = {
            "rid": self.rid,
            "seed": self.seed,
            "prompt_len": n,
            "hashes": self.hashes,
            "targets": [t.model_dump() for t in targets],
        }
        self._open("P", p, "/internal/prefill", body)

    def _routed(self, pipeline: Pipeline, info: dict[str, Any]) -> None:
        self.story.pipeline = pipeline.value
        self.story.routed = time.monotonic()
        self.story.routing = info
        self.r.m.requests.inc(1, pipeline.value)

    # -- upstream streams -----------------------------------------------------------------
    def _pick(self, label: str, role: Role, need_tokens: int = 0) -> tuple[InstanceConfig, int]:
        """Choose an instance and count this request on it at once (so that concurrent
        requests deciding meanwhile see the load, and a relay's KV room)."""
        inst, blocks = self.r.choose(role, self.hashes, need_tokens)
        self.held[label] = inst.id
        self.r.hold(inst.id, self, need_tokens)
        self.held_tokens[label] = need_tokens
        return inst, blocks

    def _prefill_on(self, p_id: str, seconds: float) -> None:
        """Count this request's predicted prefill on P's backlog until P reports it done."""
        self.prefill_pending = (p_id, seconds)
        self.r.prefill_backlog_s[p_id] += seconds

    def _prefill_settled(self) -> None:
        if self.prefill_pending is not None:
            p_id, seconds = self.prefill_pending
            self.prefill_pending = None
            self.r.prefill_backlog_s[p_id] = max(0.0, self.r.prefill_backlog_s[p_id] - seconds)

    def _open(self, label: str, inst: InstanceConfig, path: str, body: dict[str, Any]) -> None:
        self.story.instances[label] = inst.id
        self.labels[inst.id] = label
        if label not in self.held:
            self.held[label] = inst.id
            self.r.hold(inst.id, self)
        body["channel"] = self.r.id
        task = asyncio.create_task(self._post(label, inst, path, body))
        self.upstreams[label] = (inst, task)

    async def _post(
        self, label: str, inst: InstanceConfig, path: str, body: dict[str, Any]
    ) -> None:
        try:
            async with self.r.http.post(
                f"http://{inst.address}{path}", data=orjson.dumps(body), headers=_JSON
            ) as resp:
                if resp.status != 200:
                    text = (await resp.text())[:300]
                    failure = _Failure(f"{inst.id} refused the request: HTTP {resp.status} {text}")
                    self.q.put_nowait((label, failure))
        except (aiohttp.ClientError, OSError) as exc:
            failure = _Failure(f"cannot reach {inst.id} ({inst.address}): {type(exc).__name__}")
            self.q.put_nowait((label, failure))

    def _pending_labels(self) -> list[str]:
        return [lbl for lbl in self.upstreams if lbl not in self.done_labels]

    def _drop(self, label: str) -> None:
        inst, _ = self.upstreams.pop(label)
        self.ignored.add(label)
        self.labels.pop(inst.id, None)
        self.r.abort(inst, self.rid, "not needed on this pipeline")
        self._release(label)

    def _release(self, label: str) -> None:
        inst_id = self.held.pop(label, None)
        if inst_id is not None:
            self.r.unhold(inst_id, self, self.held_tokens.pop(label, 0))

    # -- event handling -------------------------------------------------------------------
    async def _pump(self, cond: Callable[[], bool]) -> None:
        q = self.q
        while not cond():
            label, item = await q.get()
            self._handle(label, item)
            while not q.empty():
                label, item = q.get_nowait()
                self._handle(label, item)
            await self._flush()

    async def _flush(self) -> None:
        if self.pending or (self.complete and not self.finish_sent):
            ids, self.pending = self.pending, []
            finish = None
            if self.complete and not self.finish_sent:
                finish = self.story.finish_reason
                self.finish_sent = True
            await self.sink.tokens(ids, finish)

    def _handle(self, label: str, item: Any) -> None:
        if label in self.ignored:
            return
        if type(item) is tuple:
            self._token(label, item[0], item[1])
        elif isinstance(item, dict):
            self._event(label, item)
        elif isinstance(item, _Failure):
            if not self.complete:
                raise RequestFailed(item.message)
            self.done_labels.update(self.upstreams)  # nothing more will come
        self._check_complete()

    def _token(self, label: str, position: int, token: int) -> None:
        origin = _ORIGIN.get(label, label)
        try:
            ready = self.seqr.offer(position, token, origin)
        except SeamError as exc:
            self.r.m.seam_errors.inc()
            raise RequestFailed(f"{exc} in request {self.rid}") from None
        if not ready:
            return
        now = time.monotonic()
        st = self.story
        if st.first_token is None:
            st.first_token = now
            st.first_token_origin = ready[0][2]
        st.last_token = now
        by = st.tokens_by_origin
        for _, tok, o in ready:
            self.pending.append(tok)
            by[o] = by.get(o, 0) + 1

    def _event(self, label: str, ev: dict[str, Any]) -> None:
        kind = ev["ev"]
        if kind == "error":
            inst = self.upstreams[label][0].id if label in self.upstreams else label
            if not self.complete:
                raise RequestFailed(f"{inst}: {ev.get('message')}")
            self.done_labels.add(label)
            return
        self.story.on_event(label, ev)
        if kind == "done":
            self.done_labels.add(label)
            reason = ev.get("reason")
            if reason in ("length", "stop"):
                self.expected_total = int(ev.get("emitted") or 0)
                self.story.finish_reason = reason
                self.story.finish_origin = _ORIGIN.get(label, label)
            self._release(label)
        elif kind == "prefill" and label == "P":
            self._prefill_settled()
        elif kind == "kv_sent" and ev.get("path") == "wan":
            self._wan_done(ev)
        elif kind == "handoff":
            batches = self.story.handoff_batches
            real = [b for b in batches if not b.get("finished")]
            if real:
                self.story.handoff_mode = (
                    "catch-up" if any(not b["final"] for b in real) else real[-1]["mode"]
                )
            if ev.get("final") and not ev.get("finished"):
                self.r.m.handoffs.inc(1, self.story.handoff_mode or "?")

    def _wan_done(self, ev: dict[str, Any]) -> None:
        if not self.wan:
            return
        link, modelled = self.wan.pop(0)
        start = float(ev["start"])
        link.finished(
            float(ev.get("modelled_bytes", modelled)),
            start=start,
            first_byte=float(ev.get("first_byte", start)),
            last_byte=float(ev["end"]),
            active=ev.get("active"),
        )

    def _check_complete(self) -> None:
        if (
            not self.complete
            and self.expected_total is not None
            and self.seqr.next_position >= self.expected_total
        ):
            self.complete = True
            self.story.done = time.monotonic()

    async def _grace(self) -> None:
        """Let late story events (P's transfer reports) arrive, briefly."""
        p = self.upstreams.get("P")
        if p is None or "P" in self.done_labels:
            return
        deadline = time.monotonic() + self.r.story_grace_s
        while "P" not in self.done_labels:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                label, item = await asyncio.wait_for(self.q.get(), left)
            except TimeoutError:
                return
            try:
                self._handle(label, item)
            except RequestFailed:
                return

    # -- cleanup --------------------------------------------------------------------------
    def _cleanup(self) -> None:
        self.story.clocks = {iid: self.r.clocks[iid] for iid in self.labels if iid in self.r.clocks}
        pending = self._pending_labels()
        if self.complete and pending:
            # Instances still busy with this request (e.g. P finishing a transfer to MD
            # after the request ended on RLD): follow them in the background for the link
            # estimate and the load accounting.
            self.r.background(self._drain(), self.r.dep.request_timeout_s)
            return
        if not self.complete:
            for label in pending:
                self.r.abort(self.upstreams[label][0], self.rid, "request failed or cancelled")
        self._finish_up()

    def _finish_up(self) -> None:
        for link, modelled in self.wan:
            link.abandoned(modelled)
        self.wan.clear()
        self._prefill_settled()
        for label in list(self.held):
            self._release(label)
        if self.r.flows.get(self.rid) is self:
            del self.r.flows[self.rid]

    async def _drain(self) -> None:
        try:
            while self._pending_labels():
                label, item = await self.q.get()
                if label in self.ignored:
                    continue
                if isinstance(item, dict):
                    if item["ev"] == "kv_sent" and item.get("path") == "wan":
                        self._wan_done(item)
                    elif item["ev"] in ("done", "error"):
                        self.done_labels.add(label)
                        self._release(label)
                elif isinstance(item, _Failure):
                    self.done_labels.update(self.upstreams)
        finally:
            self._finish_up()
