"""Replays planned requests through a reference deployment in virtual time.

Owns the twin as a whole (:class:`Twin`: the sim, the link model, one
:class:`~pddbench.twin.worker.TwinWorker` per instance, the router's
:class:`~pddbench.servers.router_core.RouterCore`) and :func:`run_twin`: the harness's
:class:`~pddbench.harness.plan.player.SessionPlayer` decides what is due when (turn waits,
think times, open-loop arrivals, exactly as for the emulated run), each due request becomes
a :class:`~pddbench.twin.front.TwinFlow`, and the records come back in completion order.
Deterministic: no wall clock, no sockets, no unseeded randomness; the same inputs give
the same records, byte for byte. Must not decide what the servers' cores decide.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pddbench.harness.config.replay import OnError
from pddbench.harness.plan.player import DueRequest, PlannedRequest, SessionPlayer
from pddbench.harness.rundir.records import RequestRecord
from pddbench.netem.topology_config import NetworkConfig
from pddbench.servers.config import DeploymentConfig, Role
from pddbench.servers.flow_core import Tally
from pddbench.servers.priming import place
from pddbench.servers.router_core import RouterCore
from pddbench.twin.front import TwinFlow
from pddbench.twin.host import NONE, HostCosts
from pddbench.twin.links import Direction, FlowCaps, Network
from pddbench.twin.sim import Sim
from pddbench.twin.worker import TwinWorker

HashesOf = Callable[[PlannedRequest], list[int]]
SETTLE_EVERY = 5000  # answered requests between two full collections (_settle)
_NEVER = 1 << 30  # a generation-2 threshold the collector never reaches by itself
# allocations between young collections (CPython's default 700): each walks the young
# objects still alive (the requests in flight), so fewer walks cost less in all; what a
# young collection frees is bounded by it
YOUNG_EVERY = 10_000


class Twin:
    """One deployment on one virtual clock (the :class:`~pddbench.twin.worker.Fabric`)."""

    def __init__(
        self,
        dep: DeploymentConfig,
        net: NetworkConfig | None,
        *,
        seed: int = 0,
        prewarmed: bool = True,
        host: HostCosts = NONE,
        flow_caps: FlowCaps | None = None,
    ) -> None:
        self.sim = Sim()
        self.dep = dep
        self.host = host  # the emulated deployment's host costs (none: the hardware's twin)
        self.net = Network(dep, net, seed, prewarmed=prewarmed, flow_caps=flow_caps)
        self.net.at = self.sim.at  # the bulk flows' drain events run on the twin's clock
        self.router = dep.router
        self.core = RouterCore(dep)
        self.tally = Tally()
        self.workers = {
            i.id: TwinWorker(self, i) for i in dep.instances if i.role is not Role.ROUTER
        }
        for iid in self.workers:
            self.core.set_healthy(iid, True)
        self.flows: dict[str, TwinFlow] = {}
        self.cached_theoretical: dict[str, int] | None = None  # by request id, when known
        self._front: Direction | None = None  # router -> client (looked up at first use)
        self._to_client_s = host.to_client_s

    def prime(self, prefixes: Sequence[list[int]]) -> int:
        """Put a history's prefixes (earliest needed first) in the caches the router would
        send them to (:func:`~pddbench.servers.priming.place`); the blocks added."""
        return sum(
            self.workers[p.instance_id].pool.prime(p.hashes) for p in place(self.core, prefixes)
        )

    def worker(self, instance_id: str) -> TwinWorker:
        return self.workers[instance_id]

    def to_client(self, now: float) -> float:
        """When a chunk the router sends the client at ``now`` is read there."""
        front = self._front
        if front is None:
            front = self._front = self.net.direction(self.router, self.router)
        return front.control(now) + self._to_client_s

    def deliver(self, instance_id: str, rid: str, item: Any) -> None:
        flow = self.flows.get(rid)
        if flow is not None:
            flow.deliver(instance_id, item)


def run_twin(
    dep: DeploymentConfig,
    net: NetworkConfig | None,
    planned: Iterable[PlannedRequest],
    hashes_of: HashesOf,
    *,
    seed: int = 0,
    on_error: OnError = OnError.CONTINUE,
    until_s: float = float("inf"),
    cached_theoretical: dict[str, int] | None = None,
    send_until_s: float | None = None,
    request_limit_s: float | None = None,
    host: HostCosts = NONE,
    flow_caps: FlowCaps | None = None,
    observe: Callable[[Twin], None] | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    primes: Sequence[list[int]] | None = None,
) -> list[RequestRecord]:
    """Every sent request's record (completion order), replayed in virtual time; with
    ``send_until_s`` (the options' ``max_duration_s``) nothing new is sent from then on
    and what is in flight finishes, as the asyncio client's duration cap does; with
    ``request_limit_s`` (the client's whole-request limit) a request still unanswered that
    long after its send is cut and recorded censored, as the client does. ``host``: the
    emulated deployment's host costs (:mod:`pddbench.twin.host`; none: the hardware's twin);
    ``flow_caps``: one warm KV connection's most per WAN direction (a calibrated
    link model's).
    ``observe``: called with the twin before its clock starts (the outputs' samplers). With
    ``on_record`` each record goes to it as it completes instead (a journal writer: a whole
    trace's records do not fit in memory) and the list returned is empty. ``primes``: the
    prefixes (server block hashes, earliest needed first) the caches hold at the start, a
    history's (:func:`pddbench.servers.priming.place` decides where)."""
    twin = Twin(dep, net, seed=seed, host=host, flow_caps=flow_caps)
    if primes:
        twin.prime(primes)
    if observe is not None:
        observe(twin)
    twin.cached_theoretical = cached_theoretical
    player = SessionPlayer(planned, on_error=on_error)
    records: list[RequestRecord] = []
    keep = records.append if on_record is None else on_record
    sim = twin.sim
    wake: set[float] = set()
    answered = 0

    def done(flow: TwinFlow) -> None:
        nonlocal answered
        rec = flow.record
        assert rec is not None
        flow.record = None  # the flow may outlive its answer (late events): not its record
        keep(rec)
        player.complete(flow.rid, sim.now, ok=rec.status == "ok")
        arm()
        answered += 1
        if answered % SETTLE_EVERY == 0:
            _settle()

    def send() -> None:
        wake.discard(sim.now)
        for due in player.pop_due(sim.now):  # the client sits at the front door's site
            t = twin.net.control(sim.now, twin.router, twin.router) + host.request_in_s
            sim.at(t, arrive, due)
        arm()

    def arrive(due: DueRequest) -> None:
        hashes = hashes_of(due.request)
        flow = TwinFlow(twin, twin.core, twin.tally, due, hashes, done, request_limit_s)
        twin.flows[flow.rid] = flow
        flow.start()

    def arm() -> None:
        t = player.next_due_s()
        if t is not None and send_until_s is not None and t >= send_until_s:
            return  # the duration cap: nothing is sent from then on
        if t is not None and t not in wake:
            wake.add(t)
            sim.at(t, send)

    arm()
    with _start_frozen():
        sim.run(until_s)
    return records


def _settle() -> None:
    """A full collection of what the run made since the last one, then what survives it
    frozen out of the collector's later walks. The run's long-lived heap (the radix trees,
    the affinity sets) grows and turns over all the time, and each automatic full
    collection walked all of it again (a tenth of the run's time); settled every
    :data:`SETTLE_EVERY` answers, each object is walked about once. A frozen object is
    still freed when its last reference goes; only a reference cycle frozen alive (a
    request in flight at a settle, if its objects formed one) outlives its use until the
    run's end."""
    gc.collect()
    gc.freeze()


@contextmanager
def _start_frozen() -> Iterator[None]:
    """The cyclic collector while the clock runs: what exists at the start (the plan, the
    trace's objects, the deployment) is frozen out of its walks, the young generations are
    collected every :data:`YOUNG_EVERY` allocations and full collections run only as
    :func:`_settle` s (the automatic ones are off: they walked the whole long-lived heap,
    again and again). Thresholds restored and everything thawed on the way out; no figure
    depends on it. It ends with a full collection: the run's cycles frozen at a settle are
    freed there, not left to the process's next automatic full collection, before which a
    next run (a ladder's next point, the sizing's next candidate) would freeze them again
    with everything else, run after run (a walk per seed grew to 24 GiB without it)."""
    saved = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(YOUNG_EVERY, saved[1], _NEVER)
    try:
        yield
    finally:
        gc.set_threshold(*saved)
        gc.unfreeze()
        gc.collect()
