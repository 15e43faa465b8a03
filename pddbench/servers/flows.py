"""One request's journey through a deployment: the asyncio driver of its flow core.

Owns the I/O of one request on the router: the POSTs that open each instance stream the
sans-IO :class:`~pddbench.servers.flow_core.FlowCore` asks for, the queue its instance
events arrive on, flushing ready tokens to the client's sink, aborting streams it drops or
that outlive a failure, the brief grace for P's late transfer reports, and following
instances still busy after the client was answered. Every decision (which instance, which
pipeline, what is counted where) is the core's; this module must not make one.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
import orjson

from pddbench.servers.api import CompletionRequest
from pddbench.servers.flow_core import Action, FlowCore, Open, RequestSpec, story_for
from pddbench.servers.router_core import RequestFailed

if TYPE_CHECKING:
    from pddbench.servers.router import Router

__all__ = ["Flow", "RequestFailed", "Sink"]

_JSON = {"Content-Type": "application/json"}


class Sink(Protocol):
    async def tokens(self, ids: list[int], finish: str | None) -> None: ...


@dataclass(frozen=True)
class _Failure:
    message: str


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
        self.sink = sink
        dep = router.dep
        seed = req.seed if req.seed is not None else dep.seed
        self.q: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.tasks: dict[str, asyncio.Task[None]] = {}
        spec = RequestSpec(
            rid=rid,
            prompt_len=len(req.prompt),
            hashes=hashes,
            max_tokens=req.max_tokens,
            min_tokens=req.min_tokens,
            ignore_eos=req.ignore_eos,
            seed=seed,
        )
        self.story = story_for(router.core, spec, arrival)
        self.core = FlowCore(router.core, spec, self.story, router.m, owner=self)
        self.finish_sent = False
        self.pending: list[int] = []
        router.flows[rid] = self

    # -- public ---------------------------------------------------------------------------
    async def run(self) -> None:
        try:
            async with asyncio.timeout(self.r.dep.request_timeout_s):
                self._act(self.core.start(time.monotonic()))
                await self._pump()
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
        label = self.core.label_of(instance_id)
        if label is not None:
            self.q.put_nowait((label, item))

    # -- actions --------------------------------------------------------------------------
    def _act(self, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, Open):
                body = dict(a.body)
                if a.targets:
                    body["targets"] = [t.model_dump() for t in a.targets]
                body["channel"] = self.r.id
                task = asyncio.create_task(self._post(a, body))
                self.tasks[a.label] = task
            else:
                self.r.abort(a.instance, self.rid, "not needed on this pipeline")

    async def _post(self, a: Open, body: dict[str, Any]) -> None:
        label, inst = a.label, a.instance
        try:
            async with self.r.http.post(
                f"http://{inst.address}{a.path}", data=orjson.dumps(body), headers=_JSON
            ) as resp:
                if resp.status != 200:
                    text = (await resp.text())[:300]
                    failure = _Failure(f"{inst.id} refused the request: HTTP {resp.status} {text}")
                    self.q.put_nowait((label, failure))
        except (aiohttp.ClientError, OSError) as exc:
            failure = _Failure(f"cannot reach {inst.id} ({inst.address}): {type(exc).__name__}")
            self.q.put_nowait((label, failure))

    # -- event handling -------------------------------------------------------------------
    async def _pump(self) -> None:
        q = self.q
        while not self.core.complete:
            label, item = await q.get()
            self._handle(label, item)
            while not q.empty():
                label, item = q.get_nowait()
                self._handle(label, item)
            await self._flush()

    async def _flush(self) -> None:
        complete = self.core.complete
        if self.pending or (complete and not self.finish_sent):
            ids, self.pending = self.pending, []
            finish = None
            if complete and not self.finish_sent:
                finish = self.story.finish_reason
                self.finish_sent = True
            await self.sink.tokens(ids, finish)

    def _handle(self, label: str, item: Any) -> None:
        now = time.monotonic()
        if type(item) is tuple:
            self.pending.extend(self.core.token(label, item[0], item[1], now))
        elif isinstance(item, dict):
            self._act(self.core.event(label, item, now))
        elif isinstance(item, _Failure):
            self.core.failed(label, item.message)

    async def _grace(self) -> None:
        """Let late story events (P's transfer reports) arrive, briefly."""
        core = self.core
        if "P" not in core.opened or "P" in core.done_labels:
            return
        deadline = time.monotonic() + self.r.story_grace_s
        while "P" not in core.done_labels:
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
        core = self.core
        self.story.clocks = {iid: self.r.clocks[iid] for iid in core.labels if iid in self.r.clocks}
        pending = core.pending_labels()
        if core.complete and pending:
            # Instances still busy with this request (e.g. P finishing a transfer to MD
            # after the request ended on RLD): follow them in the background for the link
            # estimate and the load accounting.
            self.r.background(self._drain(), self.r.dep.request_timeout_s)
            return
        if not core.complete:
            for label in pending:
                self.r.abort(core.opened[label], self.rid, "request failed or cancelled")
        self._finish_up()

    def _finish_up(self) -> None:
        self.core.finish_up()
        if self.r.flows.get(self.rid) is self:
            del self.r.flows[self.rid]

    async def _drain(self) -> None:
        core = self.core
        try:
            while core.pending_labels():
                label, item = await self.q.get()
                if isinstance(item, dict):
                    core.drain_event(label, item)
                elif isinstance(item, _Failure) and label not in core.ignored:
                    core.done_labels.update(core.opened)
        finally:
            self._finish_up()
