"""The router's side of one request in virtual time, and the record the client would write.

Owns the twin's driver of :class:`~pddbench.servers.flow_core.FlowCore` (what
:mod:`pddbench.servers.flows` does with sockets): opening the streams the core asks for
after the router → instance control delay, feeding it the instances' events and tokens,
flushing ready tokens to the client as one chunk per instant, the brief grace for P's late
transfer reports before the story is final, the request timeout, and following instances
still busy after the client was answered. At the end it fills a
:class:`~pddbench.harness.rundir.records.RequestRecord` the way the harness's client does
(:func:`~pddbench.harness.drive.stream_records.finish_record`), with the TTFT parts joined
on the virtual clock. Must not make a routing or flow decision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from pddbench.harness.analysis.ttft_parts import ClockJoin
from pddbench.harness.drive.stream import StreamSummary
from pddbench.harness.drive.stream_records import fail_record, finish_record, record_for
from pddbench.harness.plan.player import DueRequest
from pddbench.harness.rundir.records import ErrorClass, RequestRecord, Status
from pddbench.servers import protocol as proto
from pddbench.servers.flow_core import (
    GENERATE,
    PREFILL,
    Action,
    Counters,
    FlowCore,
    Open,
    story_for,
)
from pddbench.servers.flow_core import RequestSpec as FlowSpec
from pddbench.servers.router_core import RequestFailed, RouterCore

if TYPE_CHECKING:
    from pddbench.twin.run import Twin

VIRTUAL = ClockJoin(origin_monotonic_s=0.0, origin_wall_s=None)  # server times are run times
STORY_GRACE_S = 0.5  # as the router's


class TwinFlow:
    def __init__(
        self,
        twin: Twin,
        core: RouterCore,
        counters: Counters,
        due: DueRequest,
        hashes: list[int],
        on_done: Callable[[TwinFlow], None],
        limit_s: float | None = None,
    ) -> None:
        self.twin = twin
        self.limit_s = limit_s  # the client's request limit (cut: censored)
        self.due = due
        self.on_done = on_done
        req = due.request
        dep = twin.dep
        self.rid = req.request_id
        spec = FlowSpec(
            rid=self.rid,
            prompt_len=req.input_length,
            hashes=hashes,
            max_tokens=req.output_length,
            min_tokens=0,
            ignore_eos=True,
            seed=dep.seed,
        )
        self.story = story_for(core, spec, twin.sim.now)
        self.core = FlowCore(core, spec, self.story, counters, owner=self.rid)
        self.send_s = due.intended_send_s
        self.chunk_t: list[float] = []  # the chunks to the client: when each is read there
        self.chunk_n: list[int] = []  # ... and the tokens it carries
        self.record: RequestRecord | None = None
        self.answered = False
        self.closed = False

    # -- running --------------------------------------------------------------------------
    def start(self) -> None:
        sim = self.twin.sim
        sim.after(self.twin.dep.request_timeout_s, self._timeout)
        if self.limit_s is not None:
            sim.at(self.send_s + self.limit_s, self._cut)  # from the client's send
        route = self.twin.host.route_s  # the router's own work before it routes
        if route > 0:
            sim.after(route, self._guard, lambda: self._act(self.core.start(sim.now)))
        else:
            self._guard(lambda: self._act(self.core.start(sim.now)))

    def _act(self, actions: list[Action]) -> None:
        twin = self.twin
        for a in actions:
            at = twin.net.control(twin.sim.now, twin.router, a.instance)
            worker = twin.worker(a.instance.id)
            if isinstance(a, Open):
                at += twin.host.open_s  # the instance reads the forwarded request
                body = {**a.body, "channel": twin.router.id}
                if a.path == PREFILL:
                    spec: Any = proto.PrefillSpec(**body, targets=list(a.targets))
                elif a.path == GENERATE:
                    spec = proto.GenerateSpec(**body)
                else:
                    spec = proto.DecodeSpec(**body)
                twin.sim.at(at, worker.open, spec)
            else:
                twin.sim.at(at, worker.abort, self.rid)

    def deliver(self, instance_id: str, item: Any) -> None:
        """A message from an instance (this runs for every message: the label's lookup,
        ``_guard`` and the handling are inlined)."""
        core = self.core
        label = core.labels.get(instance_id)  # core.label_of(instance_id)
        if label is None or self.closed:
            return
        if self.answered:
            if isinstance(item, dict):
                core.drain_event(label, item)
            self._maybe_close()
            return
        twin = self.twin
        now = twin.sim.now
        try:
            if type(item) is tuple:  # the tokens of one step: (first position, ids)
                ready = len(core.tokens(label, item[0], item[1], now))
                if ready:
                    t = twin.to_client(now)
                    chunk_t = self.chunk_t
                    if chunk_t and chunk_t[-1] == t:
                        self.chunk_n[-1] += ready
                    else:
                        chunk_t.append(t)
                        self.chunk_n.append(ready)
            else:
                self._act(core.event(label, item, now))
            if core.complete and not self.answered:
                if "P" not in core.opened or "P" in core.done_labels:
                    self._answer()
                else:
                    twin.sim.after(STORY_GRACE_S, self._answer)
        except RequestFailed as exc:
            self._failed(str(exc))

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except RequestFailed as exc:
            self._failed(str(exc))

    def _timeout(self) -> None:
        if not self.answered:
            timeout = self.twin.dep.request_timeout_s
            self._failed(f"request {self.rid} timed out after {timeout:.0f} s")

    # -- endings --------------------------------------------------------------------------
    def _answer(self) -> None:
        if self.answered:
            return
        self.answered = True
        self.record = self._record(None)
        self.on_done(self)
        self._maybe_close()

    def _failed(self, message: str) -> None:
        if self.answered:
            return
        self.story.error = message
        self._drop_all()
        self.record = self._record(message)
        self.on_done(self)
        self._maybe_close()

    def _cut(self) -> None:
        """The client's request limit: it stops reading (the router drops the request's
        streams, as it does on a client that went away); what the stream measured so far
        is recorded censored, without the server timing that ends a stream, as the
        client's ``cut_short`` does."""
        if self.answered:
            return
        self._drop_all()
        self.record = self._record(None, cut=True)
        limit = f"censored: request ran past {self.limit_s:g} s"
        fail_record(self.record, lambda: self.twin.sim.now, ErrorClass.REQUEST_LIMIT, limit,
                    status=Status.CENSORED)  # fmt: skip
        self.on_done(self)
        self._maybe_close()

    def _drop_all(self) -> None:
        self.answered = True
        for label in self.core.pending_labels():
            inst = self.core.opened[label]
            at = self.twin.net.control(self.twin.sim.now, self.twin.router, inst)
            self.twin.sim.at(at, self.twin.worker(inst.id).abort, self.rid)
        self.core.done_labels.update(self.core.opened)

    def _maybe_close(self) -> None:
        if not self.closed and not self.core.pending_labels():
            self.closed = True
            self.core.finish_up()
            self.twin.flows.pop(self.rid, None)

    def _record(self, error: str | None, *, cut: bool = False) -> RequestRecord:
        req = self.due.request
        now = self.twin.sim.now
        rec = record_for(self.due, self.twin.cached_theoretical)
        rec.actual_send_s = self.send_s  # the twin's client sends on time
        # a chunk's interval is split across the tokens it carries (the first chunk's first
        # token has none): the same floats as a loop over the chunks, without one per token
        at = np.asarray(self.chunk_t, dtype=float)
        n = np.asarray(self.chunk_n, dtype=np.int64)
        gaps = np.zeros(len(at))
        gaps[1:] = np.diff(at) / n[1:]
        itl = np.repeat(gaps, n)[1:]
        times: list[float] = np.repeat(at, n).tolist()
        story = self.story.to_json()
        summary = StreamSummary(
            first_token_s=times[0] if times else None,
            last_token_s=times[-1] if times else None,
            output_tokens=len(times),
            token_count_source="token_ids",
            chunks=len(self.chunk_t),
            itl_s=itl,
            cached_tokens_reported=None if cut else int(story["cached_tokens"]),
            prompt_tokens_reported=req.input_length,
            integrity_ok=True,
            integrity_error=None,
            server_timing=None if cut else story,
            token_times_s=times,
        )
        finish_record(rec, summary, lambda: now, VIRTUAL)
        if error is not None:
            fail_record(rec, lambda: now, ErrorClass.STREAM, error)
        return rec
