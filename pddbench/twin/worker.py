"""One worker instance in virtual time: the servers' engine and instance core, driven.

Owns the twin's side of what :mod:`pddbench.servers.instance` does with real I/O: stepping
the :class:`~pddbench.servers.engine.Engine` on its modelled step times (the same
admit → plan → complete loop as :class:`~pddbench.servers.driver.StepDriver`, with no lag),
and carrying out the :class:`~pddbench.servers.instance_core.InstanceCore`'s effects over
the link model: events and tokens to the router, P's pipelined KV senders (bulk class, at
most ``kv_streams_per_peer`` per WAN peer, in order of arrival), the RLD ↔ MD handoff
messages (control class; a KV handoff's bytes bulk, with the staging copies), MD's
acknowledgements. Must not decide anything the cores decide; no clocks but the sim's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pddbench.servers import protocol as proto
from pddbench.servers.compute import kv_copy_seconds
from pddbench.servers.config import DeploymentConfig, InstanceConfig
from pddbench.servers.driver import StepDriver
from pddbench.servers.engine import Engine, Event
from pddbench.servers.handoff import Adopt, Batch, HandoffError
from pddbench.servers.instance_core import Do, Effect, InstanceCore, JobCore, seq_for
from pddbench.servers.metrics import Histogram, Registry
from pddbench.servers.radix import KvPool
from pddbench.servers.tokens import TokenStream
from pddbench.twin.host import HostCosts
from pddbench.twin.links import CONTROL_BYTES, BulkFlow, Direction, Network
from pddbench.twin.sim import Sim, SimTimers

Spec = proto.GenerateSpec | proto.DecodeSpec | proto.PrefillSpec
# the effects as module names: an enum member's attribute access costs ~65 ns in Python 3.11
_TOKEN, _KICK, _EMIT, _ACK, _FINISHED, _ABORTED = (
    Do.TOKEN, Do.KICK, Do.EMIT, Do.ACK, Do.FINISHED, Do.ABORTED
)  # fmt: skip
_START_SENDERS, _FEED_SENDERS, _SEND_HANDOFF, _NOTIFY_MD = (
    Do.START_SENDERS, Do.FEED_SENDERS, Do.SEND_HANDOFF, Do.NOTIFY_MD
)  # fmt: skip


class Fabric(Protocol):
    """What a worker reaches: the clock, the links, its peers and the router."""

    sim: Sim
    net: Network
    dep: DeploymentConfig
    router: InstanceConfig
    host: HostCosts

    def worker(self, instance_id: str) -> TwinWorker: ...
    def deliver(self, instance_id: str, rid: str, item: Any) -> None: ...


@dataclass(frozen=True)
class Handoff:
    """A handoff batch on its way from RLD to MD (bytes: the message's head, the KV)."""

    job: JobCore  # RLD's
    batch: Batch
    t_send: float
    head: int
    kv: int
    copy_s: float


class Sender:
    """One of P's KV transfers: releases the KV of each computed chunk onto the line."""

    def __init__(self, w: TwinWorker, job: JobCore, target: proto.KvTarget) -> None:
        self.w, self.job, self.target = w, job, target
        self.dst = w.fab.dep.instance(target.instance)
        n = job.seq.prompt_len
        self.skip = min(target.skip_tokens, n)
        self.prompt_len = n
        self.tokens = n - self.skip
        self.modelled = self.tokens * w.kvb
        self.sent_to = self.skip
        self.avail = self.skip
        self.granted = False
        self.start = w.fab.sim.now
        self.flow: BulkFlow | None = None  # the KV stream (none for a fully cached prompt)
        self.arrival = self.start
        self.off_wire = self.start  # the last byte's arrival (landing starts after it)
        self.cancelled = False
        self.complete = False  # every byte is on the line

    @property
    def spans(self) -> list[list[float]]:
        """The KV stream's activity spans ([first byte on, last byte off] per stretch)."""
        return self.flow.spans if self.flow is not None else []

    def available(self, computed: int) -> None:
        self.avail = max(self.avail, min(computed, self.prompt_len))
        if self.granted and not self.cancelled:
            self._push()

    def _push(self) -> None:
        if self.complete or (self.avail <= self.sent_to and self.sent_to < self.prompt_len):
            return
        fab = self.w.fab
        now = fab.sim.now
        done = self.avail >= self.prompt_len
        if self.tokens == 0:
            self.arrival = fab.net.control(now, self.w.inst, self.dst)
        else:
            nbytes = (self.avail - self.sent_to) * self.w.kvb
            if self.flow is None:
                self.flow = fab.net.flow(self.w.inst, self.dst, self._drained)
            fab.net.put(self.flow, now, self.w.inst, self.dst, nbytes)
        self.sent_to = self.avail
        if done:
            self.complete = True
            if self.tokens == 0:
                fab.sim.at(self.arrival, self._landed)

    def _drained(self, t: float) -> None:
        """The flow sent all it was given: the transfer's end once the last chunk is in."""
        if self.complete and not self.cancelled:
            assert self.flow is not None
            self.arrival = self.flow.arrival(t)
            self.w.fab.sim.at(self.arrival, self._landed)

    def cancel(self) -> None:
        """The request was dropped here: its connection stops sending."""
        self.cancelled = True
        if self.flow is not None:
            self.flow.direction.drop(self.flow, self.w.fab.sim.now)

    def _landed(self) -> None:
        host = self.w.fab.host  # the sender's last write, then the receiver's pages
        self.off_wire = self.arrival + host.send_s
        landing = host.send_s + host.landing_s
        if landing > 0 and not self.cancelled:
            self.arrival += landing
            self.w.fab.sim.at(self.arrival, self._land)
        else:
            self._land()

    def _land(self) -> None:
        if self.cancelled:
            return
        fab = self.w.fab
        first = self.spans[0][0] if self.spans else self.arrival
        receipt = {
            "source": self.w.inst.id,
            "path": self.target.path,
            "start": first + (self.off_wire - (self.spans[-1][1] if self.spans else first)),
            "end": self.arrival,
            "bytes": self.modelled,
            "modelled_bytes": self.modelled,
        }
        fab.worker(self.dst.id).kv_in(self.job.rid, self.target, receipt)
        end = fab.net.control(self.arrival, self.dst, self.w.inst)  # the receiver's answer
        fab.sim.at(end, self._reported, first, end)

    def _reported(self, first: float, end: float) -> None:
        w = self.w
        w.release_stream(self)
        if self.cancelled:
            return
        active = [list(s) for s in self.spans[:-1]]
        if self.spans:
            active.append([self.spans[-1][0], end])
        fields = {
            "to": self.target.instance,
            "path": self.target.path,
            "start": self.start,
            "end": end,
            "bytes": self.modelled,
            "modelled_bytes": self.modelled,
            "tokens": self.tokens,
            "first_byte": first,
            "active": active,
        }
        w.run(w.core.emit(self.job, "kv_sent", **fields) + w.core.sender_done(self.job, end))


class Unread(TokenStream):
    """A request's output whose token ids nobody reads (the twin's client counts tokens and
    checks no ids): every id is 0; EOS is drawn as the servers draw it."""

    __slots__ = ()

    def token(self, position: int) -> int:
        return 0


class NoLag(Histogram):
    """The driver's scheduler lag in virtual time: always 0, nobody reads it (not counted:
    one observation per step)."""

    def observe(self, v: float) -> None:
        pass


class TwinWorker:
    def __init__(self, fab: Fabric, inst: InstanceConfig) -> None:
        dep = fab.dep
        self.fab = fab
        self.inst = inst
        self.machine = dep.machine(inst)
        self.kvb = self.machine.model.kv_bytes_per_token
        self.pool = KvPool(dep.capacity_tokens(inst), dep.block_size)
        self.engine = Engine(self.machine, self.pool, dep.engine_config(inst))
        self.core = InstanceCore(inst.role, self.engine, dep.handoff.policy())
        metrics = Registry()  # the driver's lag and lost time: always 0 in virtual time
        self.driver = StepDriver(
            self.engine,
            self._events,
            max_catchup_s=0.0,
            lag=NoLag("lag", "scheduler lag"),
            lost=metrics.counter("lost", "lost scheduler time"),
            loop=SimTimers(fab.sim),
        )
        self.targets: dict[str, list[proto.KvTarget]] = {}
        self.senders: dict[str, list[Sender]] = {}
        self.streams: dict[str, list[Sender]] = {}  # WAN peer -> senders holding its streams
        self.waiting: dict[str, list[Sender]] = {}  # ... and those waiting for one
        self.acks: dict[str, list[Callable[[int], None]]] = {}
        # what every message to the router reads, bound once
        self._up: Direction | None = None  # to the router (looked up at its first message)
        self._message_s = fab.host.message_s
        self._sim = fab.sim
        # the messages to the router: one FIFO connection, so they arrive in the order sent
        # (Direction.control); a lane runs those due together without a heap entry each
        self._lane = fab.sim.lane(fab.deliver)

    # -- requests from the router ---------------------------------------------------------
    def open(self, spec: Spec) -> None:
        job = JobCore(spec.rid, seq_for(self.fab.dep, self.inst, spec, Unread))
        if self.core.accept(job) is not None:
            self.fab.deliver(self.inst.id, spec.rid, {"ev": "error", "message": "duplicate"})
            return
        if isinstance(spec, proto.PrefillSpec):
            self.core.expect_senders(job, len(spec.targets))
            self.targets[spec.rid] = list(spec.targets)
        elif isinstance(spec, proto.DecodeSpec):
            job.mode = spec.mode
            if spec.mode == "relay":
                self.core.relay_mode(job, spec.peer_address, spec.peer_instance)
        self.run(self.core.submit(job, self.fab.sim.now))

    def abort(self, rid: str) -> None:
        job = self.core.jobs.get(rid)
        if job is not None:
            self.run(self.core.abort(job))

    def kv_in(self, rid: str, target: proto.KvTarget, receipt: dict[str, Any]) -> None:
        job = self.core.jobs.get(rid)
        if job is None:
            return
        self.core.kv_mode(job, target.mode, target.relay_address, target.relay_instance)
        effects = self.core.kv_arrived(job, receipt, self.fab.sim.now)
        if effects is not None:
            self.run(effects)

    def _events(self, events: list[Event]) -> None:
        self.run(self.core.dispatch(events, self._sim.now))

    # -- effects --------------------------------------------------------------------------
    def run(self, effects: list[Effect]) -> None:
        fab = self.fab
        to_router = self._to_router
        for e in effects:
            job = e.job
            do = e.do
            if do is _TOKEN and job is not None:  # a request's tokens of one step: one message
                to_router(job.rid, (e.n, e.tokens))
            elif do is _KICK or job is None:
                self.driver.kick()
            elif do is _EMIT:
                self._to_router(job.rid, {"ev": e.ev, **(e.fields or {})})
            elif do is _START_SENDERS:
                self._start_senders(job, e.n)
            elif do is _FEED_SENDERS:
                for s in self.senders.get(job.rid, []):
                    s.available(e.n)
            elif do is _SEND_HANDOFF:
                assert e.batch is not None
                self._send_handoff(job, e.batch)
            elif do is _NOTIFY_MD:
                peer = fab.dep.instance(job.peer_instance or "")
                t = fab.net.control(fab.sim.now, self.inst, peer)
                fab.sim.at(t, fab.worker(peer.id).ready_in, self, job)
            elif do is _ACK:
                for reply in self.acks.pop(job.rid, []):
                    reply(e.n)
            elif do is _FINISHED:
                for reply in self.acks.pop(job.rid, []):
                    reply(e.n)
                self.senders.pop(job.rid, None)
                self.targets.pop(job.rid, None)
                if e.linger:
                    fab.sim.after(fab.dep.request_timeout_s, self.core.jobs.pop, job.rid, None)
            elif do is _ABORTED:
                for s in self.senders.pop(job.rid, []):
                    s.cancel()
                self.acks.pop(job.rid, None)

    def _to_router(self, rid: str, item: Any) -> None:
        up = self._up
        if up is None:
            up = self._up = self.fab.net.direction(self.inst, self.fab.router)
        self._lane.at(up.control(self._sim.now) + self._message_s, self.inst.id, rid, item)

    # -- P's senders ----------------------------------------------------------------------
    def _start_senders(self, job: JobCore, computed: int) -> None:
        senders = [Sender(self, job, t) for t in self.targets.get(job.rid, [])]
        self.senders[job.rid] = senders
        for s in senders:
            s.avail = max(s.avail, computed)
            held = self.streams.setdefault(s.target.address, [])
            if s.target.path == "wan" and len(held) >= self.fab.dep.kv_streams_per_peer:
                self.waiting.setdefault(s.target.address, []).append(s)
                continue
            if s.target.path == "wan":
                held.append(s)
            s.granted = True
            s.available(computed)

    def release_stream(self, s: Sender) -> None:
        held = self.streams.get(s.target.address)
        if not held or s not in held:
            return
        held.remove(s)
        queue = self.waiting.get(s.target.address)
        while queue:
            nxt = queue.pop(0)
            if nxt.cancelled:
                continue
            held.append(nxt)
            nxt.granted = True
            nxt.available(nxt.avail)
            break

    # -- RLD -> MD ------------------------------------------------------------------------
    def ready_in(self, md: TwinWorker, md_job: JobCore) -> None:
        """RLD: MD's md_ready (level 0) arrived; MD records it once the answer is back."""
        fab = self.fab
        job = self.core.jobs.get(md_job.rid)
        if job is None or job.relay is None:
            md.run(md.core.fail(md_job, "handoff", f"cannot reach relay {self.inst.id}"))
            return
        try:
            effects = self.core.md_ready(job, 0, fab.sim.now)
        except HandoffError as exc:
            effects = self.core.fail(job, "handoff", str(exc))
        self.run(effects)
        back = fab.net.control(fab.sim.now, self.inst, md.inst)
        fab.sim.at(back, md.ready_answered, md_job)

    def ready_answered(self, job: JobCore) -> None:
        self.run(self.core.emit(job, "md_ready", level=0, t=self.fab.sim.now))

    def _send_handoff(self, job: JobCore, batch: Batch) -> None:
        fab = self.fab
        md_inst = fab.dep.instance(job.peer_instance or "")
        ids = 0 if batch.finished else batch.tokens
        kv = max(0, batch.end - 1 - batch.start) * self.kvb if batch.mode == "kv" else 0
        copy_s = 0.0
        if kv:
            copy_s = kv_copy_seconds(self.machine, kv // self.kvb, fab.dep.block_size)
        t_send = fab.sim.now + copy_s
        head = CONTROL_BYTES + 8 * ids
        arrive = fab.net.control(t_send, self.inst, md_inst)
        msg = Handoff(job, batch, t_send, head, kv, copy_s)
        md = fab.worker(md_inst.id)
        if not kv:
            fab.sim.at(arrive, md.handoff_in, self.inst, msg)
            return

        def drained(t: float) -> None:  # the message goes once its KV is there too
            fab.sim.at(max(arrive, flow.arrival(t)), md.handoff_in, self.inst, msg)

        flow = fab.net.flow(self.inst, md_inst, drained)
        fab.sim.at(t_send, fab.net.put, flow, t_send, self.inst, md_inst, kv)

    def handoff_in(self, rld_inst: InstanceConfig, msg: Handoff) -> None:
        """MD: a handoff batch arrived from RLD."""
        fab = self.fab
        rld_job, batch, kv = msg.job, msg.batch, msg.kv
        job = self.core.jobs.get(rld_job.rid)

        def reply(level: int) -> None:
            back = fab.net.control(fab.sim.now, self.inst, rld_inst)
            fab.sim.at(back, fab.worker(rld_inst.id).handoff_acked, rld_job, msg, level)

        if job is not None:
            self.core.handoff_from(job, rld_inst.address, rld_inst.id)
        if job is None or job.main is None:
            rld = fab.worker(rld_inst.id)
            why = f"handoff of {rld_job.rid} to {self.inst.id} failed: no main decode"
            rld.run(rld.core.fail(rld_job, "handoff", why))
            return
        try:
            action = self.core.handoff_arrived(job, batch)
        except HandoffError as exc:
            self.run(self.core.fail(job, "handoff", str(exc)))
            return
        if action is None:
            reply(batch.end)
            return
        delay = 0.0
        if isinstance(action, Adopt) and kv:
            delay = kv_copy_seconds(self.machine, kv // self.kvb, fab.dep.block_size)
        fab.sim.after(delay, self._apply, job, action, reply)

    def _apply(self, job: JobCore, action: Any, reply: Callable[[int], None]) -> None:
        if self.core.jobs.get(job.rid) is not job or job.finished:
            return
        self.acks.setdefault(job.rid, []).append(reply)
        self.run(self.core.main_act(job, action, self.fab.sim.now))

    def handoff_acked(self, job: JobCore, msg: Handoff, level: int) -> None:
        """RLD: MD acknowledged a batch."""
        batch = msg.batch
        now = self.fab.sim.now
        fields = {
            "start": batch.start,
            "end": batch.end,
            "final": batch.final,
            "mode": batch.mode,
            "finished": batch.finished,
            "t_send": msg.t_send,
            "t_ack": now,
            "payload_bytes": msg.head + msg.kv,
            "modelled_payload_bytes": msg.head + msg.kv,
            "copy_s": msg.copy_s,
        }
        emit = self.core.emit(job, "handoff", **fields)
        self.run(emit + self.core.handoff_acked(job, batch, level, now))
