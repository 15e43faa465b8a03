"""The twin's link model: how long a message or a KV transfer takes between two instances.

Owns, per direction of each path (an in-DC segment pair, or segment + WAN link + segment):

* **rate** — the line's, capped by TCP's loss-limited throughput where the shape has loss
  (Mathis et al. 1997: ``MSS / RTT * sqrt(3/2) / sqrt(p)``);
* **propagation delay** and seeded **jitter** (uniform within ``±jitter``, netem's default
  distribution, one draw per message, from a generator per direction seeded by the run's
  seed, so runs repeat);
* **two traffic classes** — control (requests, events, tokens, handoff messages) never
  queues behind bulk KV (the emulated WAN's priority qdisc); bulk KV is served first come,
  first served on the direction's line (``busy_until``);
* **slow start** on a cold connection (:func:`pddbench.netem.slowstart.cold_transfer`: the
  extra rounds a cold window costs over a warm one), unless the senders' connections are
  pre-warmed (the harness's default: a transfer engine keeps its peers warm).

Not modelled yet (see the issue's note): ``[network.schedule]`` swings, events and cross
traffic, per-packet reordering, the socket buffers' drain during a stall. Parameters come
from the scenario's ``[network]`` at scale 1 (the twin moves modelled bytes). Sans-IO: no
clock, no sockets; callers pass ``now``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from pddbench.netem.slowstart import MSS, cold_transfer
from pddbench.netem.topology_config import NetworkConfig
from pddbench.servers.config import DeploymentConfig, InstanceConfig

MATHIS_C = math.sqrt(1.5)
CONTROL_BYTES = 512  # a request, an event line, a handoff message's head


@dataclass(frozen=True)
class PathParams:
    """One direction between two instances."""

    rate_bytes_per_s: float  # the line (inf: unshaped)
    delay_s: float  # one way
    jitter_s: float = 0.0
    loss: float = 0.0  # fraction of packets

    @property
    def rtt_s(self) -> float:
        return 2 * self.delay_s

    @property
    def bulk_rate(self) -> float:
        """The line's rate, or TCP's loss-limited throughput when lower."""
        if self.loss <= 0 or self.rtt_s <= 0:
            return self.rate_bytes_per_s
        return min(self.rate_bytes_per_s, MSS / self.rtt_s * MATHIS_C / math.sqrt(self.loss))


class Direction:
    """One direction of one path: its queue of bulk bytes and its jitter draws."""

    def __init__(self, params: PathParams, seed: str) -> None:
        self.p = params
        self.rate = params.bulk_rate
        self.busy_until = 0.0
        self.last_control = 0.0  # control rides TCP connections: delivered in order
        self._rng = random.Random(seed)

    def delay(self) -> float:
        j = self.p.jitter_s
        d = self.p.delay_s + (self._rng.uniform(-j, j) if j > 0 else 0.0)
        return max(0.0, d)

    def control(self, now: float, nbytes: int = CONTROL_BYTES) -> float:
        """Arrival of a control message sent at ``now`` (ahead of any bulk bytes; jitter
        delays a message but never lets it overtake an earlier one)."""
        t = max(now + self.delay() + nbytes / self.p.rate_bytes_per_s, self.last_control)
        self.last_control = t
        return t

    def bulk(self, now: float, nbytes: float, extra_s: float = 0.0) -> tuple[float, float]:
        """Put ``nbytes`` of KV on the line at ``now``: (first byte on the wire, last byte
        off it); ``extra_s``: slow start's extra rounds."""
        start = max(now, self.busy_until)
        end = start + extra_s + nbytes / self.rate
        self.busy_until = end
        return start, end


def slow_start_extra_s(nbytes: float, p: PathParams) -> float:
    """What a cold connection adds to a transfer of ``nbytes`` over a warm one."""
    if p.rtt_s <= 0 or math.isinf(p.rate_bytes_per_s):
        return 0.0
    cold = cold_transfer(int(nbytes), p.bulk_rate, p.rtt_s).seconds
    return max(0.0, cold - (nbytes / p.bulk_rate + p.rtt_s / 2))


class Network:
    """Every direction between the deployment's instances (the router included)."""

    def __init__(
        self, dep: DeploymentConfig, net: NetworkConfig | None, seed: int, *, prewarmed: bool
    ) -> None:
        self.dep = dep
        self.net = net
        self.seed = seed
        self.prewarmed = prewarmed
        self._dirs: dict[tuple[str, str], Direction] = {}
        self._used: set[tuple[str, str]] = set()  # connections that carried KV (warm)

    def params(self, src: InstanceConfig, dst: InstanceConfig) -> PathParams:
        net = self.net
        if net is None:
            return PathParams(math.inf, 0.0)
        seg = net.segment
        seg_rate = seg.rate_mbit * 1e6 / 8 if seg.rate_mbit else math.inf
        seg_delay = 2 * seg.delay_us * 1e-6  # the sender's segment and the receiver's
        if src.datacenter == dst.datacenter:
            return PathParams(seg_rate, seg_delay)
        for link in net.links:
            ends = (link.a, link.b)
            if (src.datacenter, dst.datacenter) in (ends, ends[::-1]):
                shape = link.shape("a_to_b" if src.datacenter == link.a else "b_to_a")
                rate = shape.rate_mbit * 1e6 / 8 if shape.rate_mbit else math.inf
                return PathParams(
                    min(rate, seg_rate),
                    shape.delay_ms * 1e-3 + seg_delay,
                    shape.jitter_ms * 1e-3,
                    shape.loss_pct / 100,
                )
        return PathParams(seg_rate, seg_delay)

    def direction(self, src: InstanceConfig, dst: InstanceConfig) -> Direction:
        """The direction's queue: one per WAN direction (shared by every transfer on it),
        one per instance pair inside a datacenter."""
        if src.datacenter != dst.datacenter:
            key = (src.datacenter, dst.datacenter)
        else:
            key = (src.id, dst.id)
        d = self._dirs.get(key)
        if d is None:
            d = self._dirs[key] = Direction(self.params(src, dst), f"{self.seed}:{key}")
        return d

    def control(self, now: float, src: InstanceConfig, dst: InstanceConfig) -> float:
        return self.direction(src, dst).control(now)

    def bulk(
        self, now: float, src: InstanceConfig, dst: InstanceConfig, nbytes: float
    ) -> tuple[float, float, float]:
        """KV bytes from ``src`` to ``dst``: (first byte on the wire, last byte off it, its
        arrival at ``dst``)."""
        d = self.direction(src, dst)
        extra = 0.0
        conn = (src.id, dst.id)
        if not self.prewarmed and conn not in self._used:
            extra = slow_start_extra_s(nbytes, d.p)
        self._used.add(conn)
        start, end = d.bulk(now, nbytes, extra)
        return start, end, end + d.delay()
