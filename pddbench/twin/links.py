"""The twin's link model: how long a message or a KV transfer takes between two instances.
(Over 500 lines for one reason: a direction's messages, shared bulk flows, schedule states
and usage are one state machine, advanced together at every event.)

Owns, per direction of each path (an in-DC segment pair, or segment + WAN link + segment):

* **rate** — the TCP payload a line carries: the configured (shaped) rate times
  :data:`~pddbench.netem.slowstart.PAYLOAD_SHARE` (each 1448-byte segment costs the shaper
  1514 bytes of headers and payload: 0.956 of the line, as measured on the emulated WAN),
  less what a cross flow takes, capped by TCP's loss-limited throughput where the shape
  has loss (Mathis et al. 1997: ``MSS / RTT * sqrt(3/2) / sqrt(p)``);
* **propagation delay** and seeded **jitter** (uniform within ``±jitter``, netem's default
  distribution, one draw per message, from a generator per direction seeded by the run's
  seed, so runs repeat);
* **two traffic classes** — control (requests, events, tokens, handoff messages) never
  queues behind bulk KV (the emulated WAN's priority qdisc); bulk KV travels in
  :class:`BulkFlow` s (one per transfer: a TCP connection's stream) that **share the
  direction's line fairly** while they have bytes to send, as TCP flows through one
  bottleneck do (processor sharing: each of ``n`` active flows drains at ``rate / n``; a
  flow whose sender has nothing more yet leaves the share), so a transfer that starts while
  others run slows them all rather than waiting behind them; with a calibrated **flow
  cap** (one warm connection's most, where its congestion window rather than the line
  bounds it: :data:`FlowCaps`) each flow drains at ``min(rate / n, cap)``;
* **slow start** on a cold connection (:func:`pddbench.netem.slowstart.cold_transfer`: the
  extra rounds a cold window costs over a warm one), unless the senders' connections are
  pre-warmed (the harness's default: a transfer engine keeps its peers warm);
* **the ``[network.schedule]``** — the same expanded :class:`~pddbench.netem.schedule.Schedule`
  the emulated WAN applies (:meth:`NetworkConfig.schedule_plan`), stepped by the same rule
  (:meth:`LinkChange.applied`) into a timeline of states per WAN direction
  (:func:`wan_timelines`): a message takes the delay and jitter of its sending instant and
  waits for a downed link to come back; bulk bytes are carried at each state's rate in turn,
  so a rate drop in the middle of a transfer lengthens exactly its remaining part. A
  **cross-traffic** flow takes TCP's fair share from the bulk class while it runs — at most
  half the line (one competing flow against the KV connection), less when it is paced
  below that (:func:`cross_take`); control still goes first;
* **usage** (when asked, :meth:`Network.track_usage`): the bytes each WAN direction carried
  per interval, for ``links.parquet`` (:mod:`pddbench.twin.outputs`).

Not modelled: how a connection's window changes over a run (the cap is a freshly warmed
connection's; CUBIC grows it only while the window, not the application, limits the sender,
and cuts it on loss), a window's first burst at line rate, TCP flows of different sizes
sharing unequally, per-packet reordering, the socket buffers' drain
during a stall, TCP's retransmission backoff after a downed link comes back (bytes resume at
once), a cross flow's own slow start, two cross flows at once on one direction (the later
one's start and stop win). Parameters come from the scenario's ``[network]`` at scale 1 (the
twin moves modelled bytes), or a calibrated link model (:mod:`pddbench.twin.calibrate`)
folded into that configuration. Sans-IO: no clock, no sockets; callers pass ``now``.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from pddbench.netem.slowstart import MSS, PAYLOAD_SHARE, cold_transfer
from pddbench.netem.topology_config import Direction as LinkDirection
from pddbench.netem.topology_config import (
    LinkChange,
    LinkConfig,
    NetworkConfig,
    SegmentConfig,
    Shape,
    change_directions,
)
from pddbench.servers.config import DeploymentConfig, InstanceConfig

MATHIS_C = math.sqrt(1.5)
CONTROL_BYTES = 512  # a request, an event line, a handoff message's head
CROSS_FAIR_SHARE = 0.5  # of the line: one greedy cross flow against the KV connection


@dataclass(frozen=True)
class PathParams:
    """One direction between two instances."""

    rate_bytes_per_s: float  # the line (inf: unshaped)
    delay_s: float  # one way
    jitter_s: float = 0.0
    loss: float = 0.0  # fraction of packets
    cross_bytes_per_s: float = 0.0  # the TCP payload a cross-traffic flow takes from bulk

    @property
    def rtt_s(self) -> float:
        return 2 * self.delay_s

    @property
    def bulk_rate(self) -> float:
        """The TCP payload rate of the line less any cross traffic (its headers' share
        left out), or TCP's loss-limited throughput when lower."""
        line = self.rate_bytes_per_s * PAYLOAD_SHARE - self.cross_bytes_per_s
        if self.loss <= 0 or self.rtt_s <= 0:
            return line
        return min(line, MSS / self.rtt_s * MATHIS_C / math.sqrt(self.loss))


@dataclass(frozen=True)
class LinkState:
    """One WAN direction from ``t_s`` on: its shape (configured units, scale 1), whether it
    is up, and the pacing of a cross-traffic flow on it (None: no flow; inf: unpaced)."""

    t_s: float
    shape: Shape
    up: bool = True
    cross_mbit: float | None = None
    # what changed here, as a ChangeRecord's ``changes`` ({}: the configured state at 0)
    changes: dict[str, object] = field(default_factory=dict)


def cross_take(shape: Shape, paced_mbit: float | None) -> float:
    """Mbit/s of TCP payload a cross flow takes from the bulk class: its pacing, at most
    TCP's fair share against one KV connection (half the line's payload)."""
    if paced_mbit is None or shape.rate_mbit is None:
        return 0.0
    return min(paced_mbit, CROSS_FAIR_SHARE * shape.rate_mbit * PAYLOAD_SHARE)


def wan_timelines(net: NetworkConfig) -> dict[tuple[str, LinkDirection], list[LinkState]]:
    """Every WAN direction's states over the run: the configured one at 0, then one per
    instant where the expanded ``[network.schedule]`` (events, swings) or a cross-traffic
    flow changes it, stepped in the order the emulated schedule runner applies them."""
    current: dict[tuple[str, LinkDirection], LinkState] = {}
    for link, d in net.iter_directions():
        current[(link.link_name, d)] = LinkState(0.0, link.shape(d))
    out = {key: [state] for key, state in current.items()}
    # (at, order, key, what happens: a change, a cross flow's pacing (inf: unpaced) from
    # then on, or None: the flow stops); the schedule's events first at equal times
    steps: list[tuple[float, int, tuple[str, LinkDirection], LinkChange | float | None]] = []
    for n, event in enumerate(net.schedule_plan().ordered()):
        for d in change_directions(event.direction):
            steps.append((event.at_s, n, (event.link, d), event.changes))
    base = len(steps)
    for n, ct in enumerate(net.schedule.cross_traffic):
        pace = math.inf if ct.rate_mbit is None else ct.rate_mbit
        key = (ct.link, ct.direction)
        steps.append((ct.start_s, base + 2 * n, key, pace))
        steps.append((ct.start_s + ct.duration_s, base + 2 * n + 1, key, None))
    steps.sort(key=lambda s: (s[0], s[1]))
    for at, _, key, change in steps:
        was = current[key]
        if isinstance(change, LinkChange):
            shape, down = change.applied(was.shape, not was.up)
            what = change.model_dump(exclude_none=True)
            state = LinkState(at, shape, not down, was.cross_mbit, what)
        else:
            what = {"cross_traffic": "stop" if change is None else "start"}
            state = LinkState(at, was.shape, was.up, change, what)
        line = out[key]
        if line[-1].t_s == at and line[-1].changes:  # several changes at one instant: one state
            what = {**line[-1].changes, **state.changes}
            state = line[-1] = LinkState(at, state.shape, state.up, state.cross_mbit, what)
        else:
            line.append(state)
        current[key] = state
    return out


def _segment(seg: SegmentConfig) -> tuple[float, float]:
    """(rate, one-way delay) of the two segments a path crosses (sender's and receiver's)."""
    return (seg.rate_mbit * 1e6 / 8 if seg.rate_mbit else math.inf), 2 * seg.delay_us * 1e-6


def wan_params(state: LinkState, seg: SegmentConfig) -> PathParams:
    """A WAN direction's path (segments included) in ``state``."""
    seg_rate, seg_delay = _segment(seg)
    shape = state.shape
    rate = shape.rate_mbit * 1e6 / 8 if shape.rate_mbit else math.inf
    take = cross_take(shape, state.cross_mbit) * 1e6 / 8
    return PathParams(
        min(rate, seg_rate),
        shape.delay_ms * 1e-3 + seg_delay,
        shape.jitter_ms * 1e-3,
        shape.loss_pct / 100,
        take,
    )


class Usage:
    """Bytes a direction carried per interval of ``width_s`` (bin ``k``: [k·w, (k+1)·w))."""

    def __init__(self, width_s: float) -> None:
        self.width_s = width_s
        self.bulk: dict[int, float] = {}
        self.control: dict[int, float] = {}

    def spread(self, t0: float, t1: float, nbytes: float) -> None:
        """``nbytes`` carried evenly over [t0, t1]."""
        w = self.width_s
        b0, b1 = int(t0 // w), int(t1 // w)
        bulk = self.bulk
        if b0 == b1 or t1 <= t0:
            bulk[b0] = bulk.get(b0, 0.0) + nbytes
            return
        rate = nbytes / (t1 - t0)
        for b in range(b0, b1 + 1):
            lo, hi = max(t0, b * w), min(t1, (b + 1) * w)
            if hi > lo:
                bulk[b] = bulk.get(b, 0.0) + rate * (hi - lo)

    def message(self, t: float, nbytes: float) -> None:
        b = int(t // self.width_s)
        self.control[b] = self.control.get(b, 0.0) + nbytes


DRAINED_BYTES = 1e-3  # a flow this close to empty has drained (float rounding)
# one warm KV connection's most on a WAN direction, bytes/s at scale 1, where its congestion
# window rather than the line bounds it (a calibrated link model's,
# :meth:`pddbench.twin.calibrate.LinkModelFile.flow_caps`)
FlowCaps = Mapping[tuple[str, LinkDirection], float]
Schedule = Callable[..., None]


class BulkFlow:
    """One KV transfer's stream on one direction: bytes left to send, its activity spans
    ([first byte on the wire, last byte off it] per stretch it had bytes), and what to call
    when it has sent everything it was given (``drained(t)``)."""

    __slots__ = ("direction", "drained", "left", "spans")

    def __init__(self, direction: Direction, drained: Callable[[float], None]) -> None:
        self.direction = direction
        self.drained = drained
        self.left = 0.0
        self.spans: list[list[float]] = []

    def arrival(self, t: float) -> float:
        """When bytes off the line at ``t`` reach the receiver (one delay, jitter drawn)."""
        return t + self.direction.delay_at(t)


class Direction:
    """One direction of one path: the bulk flows sharing its line, its jitter draws and,
    on a WAN direction with a schedule, its states over time."""

    def __init__(
        self,
        params: PathParams,
        seed: str,
        timeline: list[tuple[float, PathParams, bool]],
        flow_cap: float = math.inf,
    ) -> None:
        self.p = params
        self.rate = params.bulk_rate
        self.cap = flow_cap  # one connection's most, bytes/s (inf: the line is the bound)
        self.last_control = 0.0  # control rides TCP connections: delivered in order
        self.active: list[BulkFlow] = []  # flows with bytes on the line, in joining order
        self._t = 0.0  # the instant the flows' bytes left were counted at
        self._gen = 0  # the armed drain event's generation
        self.at: Schedule | None = None  # the twin's clock: at(t, fn, *args)
        self._rng = random.Random(seed)
        self._random = self._rng.random
        self.usage: Usage | None = None
        self.timed = len(timeline) > 1
        self._times = [t for t, _, _ in timeline]
        self._params = [p for _, p, _ in timeline]
        self._up = [up for _, _, up in timeline]

    def delay(self, p: PathParams | None = None) -> float:
        """One propagation delay, jitter drawn as ``random.uniform(-j, j)`` computes it
        (``a + (b - a) * random()``: the same floats, without its call per message)."""
        p = p or self.p
        j = p.jitter_s
        if j <= 0:
            return max(0.0, p.delay_s)
        d = p.delay_s + (-j + (j - -j) * self._random())
        return d if d > 0.0 else 0.0

    def delay_at(self, t: float) -> float:
        """One propagation delay (jitter drawn) for bytes leaving the line at ``t``."""
        return self.delay(self._params[self._state(t)] if self.timed else self.p)

    def _state(self, t: float) -> int:
        return bisect_right(self._times, t) - 1

    def _next_up(self, i: int) -> int | None:
        for k in range(i + 1, len(self._up)):
            if self._up[k]:
                return k
        return None

    def control(self, now: float, nbytes: int = CONTROL_BYTES) -> float:
        """Arrival of a control message sent at ``now`` (ahead of any bulk bytes; jitter
        delays a message but never lets it overtake an earlier one; on a downed link it
        leaves when the link is back)."""
        p = self.p
        if self.timed:
            i = self._state(now)
            if not self._up[i]:
                k = self._next_up(i)
                if k is None:
                    return math.inf
                i, now = k, self._times[k]
            p = self._params[i]
        if self.usage is not None:
            self.usage.message(now, nbytes)
        t = now + self.delay(p) + nbytes / p.rate_bytes_per_s
        last = self.last_control
        t = self.last_control = last if last > t else t  # max(t, last)
        return t

    # -- bulk: flows sharing the line ----------------------------------------------------
    def put(self, flow: BulkFlow, now: float, nbytes: float) -> None:
        """``nbytes`` more for ``flow`` to send from ``now`` on (it joins the share)."""
        self._advance(now)
        if flow.left <= 0:
            self.active.append(flow)
            flow.spans.append([now, now])
        flow.left += nbytes
        self._reschedule(now)

    def drop(self, flow: BulkFlow, now: float) -> None:
        """``flow``'s connection closed: its unsent bytes leave the line."""
        self._advance(now)
        if flow in self.active:
            self.active.remove(flow)
            flow.left = 0.0
            flow.spans[-1][1] = now
        self._reschedule(now)

    def _advance(self, now: float) -> None:
        """Drain the active flows, in equal shares, from the last instant to ``now``."""
        t = self._t
        if now <= t:
            return
        self._t = now
        if not self.active:
            return
        n = len(self.active)
        share = self._carried(t, now, n)
        if self.usage is not None and math.isfinite(share):
            self._count(t, now, n)
        for f in self.active:
            f.left -= share

    def _reschedule(self, now: float) -> None:
        """Arm the next instant a flow drains (one event per direction; older ones lapse)."""
        self._gen += 1
        if not self.active:
            return
        least = min(f.left for f in self.active)
        when = self._time_for(now, max(0.0, least), len(self.active))
        if math.isfinite(when):
            assert self.at is not None, "bulk flows need the twin's clock (Network.at)"
            self.at(when, self._tick, self._gen, when)

    def _tick(self, gen: int, when: float) -> None:
        if gen != self._gen:
            return
        self._advance(when)
        n = len(self.active)
        # drained, or so nearly that no clock tick is left to carry it (an unshaped line)
        done = [
            f
            for f in self.active
            if f.left <= DRAINED_BYTES or self._time_for(when, f.left, n) <= when
        ]
        for f in done:
            self.active.remove(f)
            f.left = 0.0
            f.spans[-1][1] = when
        self._reschedule(when)
        for f in done:
            f.drained(when)

    def _segments(self, t0: float, t1: float) -> Iterator[tuple[float, float, float]]:
        """(start, end, bulk rate) of each state the line is in over [t0, t1] (``t1`` may be
        inf; the rate is 0 while the link is down)."""
        i, t = self._state(t0), t0
        n = len(self._times)
        while t < t1:
            until = min(t1, self._times[i + 1] if i + 1 < n else math.inf)
            yield t, until, (self._params[i].bulk_rate if self._up[i] else 0.0)
            i, t = i + 1, until

    def _flow_rate(self, line: float, n: int) -> float:
        """One of ``n`` active flows' rate on a line of ``line`` bytes/s: an equal share
        of the line, at most a connection's own (:attr:`cap`)."""
        share = line / n
        return share if share < self.cap else self.cap

    def _count(self, t0: float, t1: float, n: int) -> None:
        """Usage: what ``n`` flows carried over [t0, t1], state by state."""
        assert self.usage is not None
        if not self.timed:
            self.usage.spread(t0, t1, n * self._flow_rate(self.rate, n) * (t1 - t0))
            return
        for t, until, rate in self._segments(t0, t1):
            if rate > 0:
                self.usage.spread(t, until, n * self._flow_rate(rate, n) * (until - t))

    def _carried(self, t0: float, t1: float, n: int) -> float:
        """Bytes one of ``n`` flows carries over [t0, t1] (each state at its rate; 0 while
        down)."""
        if not self.timed:
            return self._flow_rate(self.rate, n) * (t1 - t0)
        return sum(
            self._flow_rate(rate, n) * (until - t) for t, until, rate in self._segments(t0, t1)
        )

    def _time_for(self, t: float, nbytes: float, n: int = 1) -> float:
        """When one of ``n`` flows, carrying from ``t``, has carried ``nbytes`` (inf:
        never)."""
        if nbytes <= 0:
            return t
        if not self.timed:
            return t + nbytes / self._flow_rate(self.rate, n)
        left = nbytes
        for start, until, rate in self._segments(t, math.inf):
            if rate > 0:
                r = self._flow_rate(rate, n)
                can = r * (until - start)
                if left <= can:
                    return start + left / r
                left -= can
        return math.inf  # down for good: never delivered

    def mean_line_bytes_per_s(self, t0: float, t1: float) -> float:
        """The bulk class's mean rate over [t0, t1] (0 while down)."""
        if not self.timed:
            return self.rate
        line = sum(rate * (until - t) for t, until, rate in self._segments(t0, t1))
        return line / (t1 - t0)


def slow_start_extra_s(nbytes: float, p: PathParams) -> float:
    """What a cold connection adds to a transfer of ``nbytes`` over a warm one."""
    if p.rtt_s <= 0 or math.isinf(p.rate_bytes_per_s):
        return 0.0
    cold = cold_transfer(int(nbytes), p.bulk_rate, p.rtt_s).seconds
    return max(0.0, cold - (nbytes / p.bulk_rate + p.rtt_s / 2))


class Network:
    """Every direction between the deployment's instances (the router included)."""

    def __init__(
        self,
        dep: DeploymentConfig,
        net: NetworkConfig | None,
        seed: int,
        *,
        prewarmed: bool,
        flow_caps: FlowCaps | None = None,
    ) -> None:
        self.dep = dep
        self.net = net
        self.flow_caps = flow_caps or {}
        self.seed = seed
        self.prewarmed = prewarmed
        self._dirs: dict[tuple[str, str], Direction] = {}
        self._pairs: dict[tuple[str, str], Direction] = {}  # (src id, dst id) -> its direction
        self._used: set[tuple[str, str]] = set()  # connections that carried KV (warm)
        self.timelines = wan_timelines(net) if net is not None else {}
        self.usage_s: float | None = None
        self.at: Schedule | None = None  # the twin's clock, for the bulk flows' drain events

    def track_usage(self, width_s: float) -> None:
        """Count the bytes each WAN direction carries per ``width_s`` from now on."""
        self.usage_s = width_s
        for (a, b), d in self._dirs.items():
            if self._wan_link(a, b) is not None and d.usage is None:
                d.usage = Usage(width_s)

    def _wan_link(self, src_dc: str, dst_dc: str) -> tuple[LinkConfig, LinkDirection] | None:
        if self.net is None or src_dc == dst_dc:
            return None
        return self.net.between(src_dc, dst_dc)

    def _timeline(self, src: InstanceConfig, dst: InstanceConfig) -> list[LinkState] | None:
        found = self._wan_link(src.datacenter, dst.datacenter)
        if found is None:
            return None
        link, d = found
        return self.timelines[(link.link_name, d)]

    def _flow_cap(self, src: InstanceConfig, dst: InstanceConfig) -> float:
        found = self._wan_link(src.datacenter, dst.datacenter)
        if found is None:
            return math.inf
        link, d = found
        return self.flow_caps.get((link.link_name, d), math.inf)

    def params(self, src: InstanceConfig, dst: InstanceConfig) -> PathParams:
        """The path's configured parameters (at the run's start)."""
        net = self.net
        if net is None:
            return PathParams(math.inf, 0.0)
        line = self._timeline(src, dst)
        if line is not None:
            return wan_params(line[0], net.segment)
        return PathParams(*_segment(net.segment))

    def direction(self, src: InstanceConfig, dst: InstanceConfig) -> Direction:
        """The direction's queue: one per WAN direction (shared by every transfer on it),
        one per instance pair inside a datacenter."""
        pair = (src.id, dst.id)
        d = self._pairs.get(pair)
        if d is not None:
            return d
        if src.datacenter != dst.datacenter:
            key = (src.datacenter, dst.datacenter)
        else:
            key = (src.id, dst.id)
        d = self._dirs.get(key)
        if d is None:
            line = self._timeline(src, dst)
            timeline: list[tuple[float, PathParams, bool]] = []
            if line is not None and self.net is not None:
                timeline = [(s.t_s, wan_params(s, self.net.segment), s.up) for s in line]
            d = Direction(
                self.params(src, dst), f"{self.seed}:{key}", timeline, self._flow_cap(src, dst)
            )
            d.at = self.at
            if line is not None and self.usage_s is not None:
                d.usage = Usage(self.usage_s)
            self._dirs[key] = d
        self._pairs[pair] = d
        return d

    def wan_direction(self, link: str, direction: LinkDirection) -> Direction | None:
        """The queue of one WAN direction, if traffic has used it."""
        if self.net is None:
            return None
        cfg = self.net.link(link)
        a, b = (cfg.a, cfg.b) if direction == "a_to_b" else (cfg.b, cfg.a)
        return self._dirs.get((a, b))

    def control(self, now: float, src: InstanceConfig, dst: InstanceConfig) -> float:
        return self.direction(src, dst).control(now)

    def flow(
        self, src: InstanceConfig, dst: InstanceConfig, drained: Callable[[float], None]
    ) -> BulkFlow:
        """A new KV stream from ``src`` to ``dst`` (``drained(t)``: it has sent all it was
        given, its last byte off the line at ``t``)."""
        return BulkFlow(self.direction(src, dst), drained)

    def put(
        self, flow: BulkFlow, now: float, src: InstanceConfig, dst: InstanceConfig, nbytes: float
    ) -> None:
        """``nbytes`` of KV for ``flow`` from ``now`` (a cold connection's first bytes wait
        out the extra rounds slow start costs, unless the connections are pre-warmed)."""
        conn = (src.id, dst.id)
        cold = not self.prewarmed and conn not in self._used
        self._used.add(conn)
        extra = slow_start_extra_s(nbytes, flow.direction.p) if cold else 0.0
        if extra > 0:
            assert self.at is not None
            self.at(now + extra, flow.direction.put, flow, now + extra, nbytes)
        else:
            flow.direction.put(flow, now, nbytes)
