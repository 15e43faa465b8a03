"""TCP slow start, modelled: how long a cold transfer takes at 1/1 and at an emulation
scale, and the time a scaled cold transfer is missing (slow-start compensation). Pure.

Byte scaling divides the link rate and the bytes by ``scale`` but keeps the RTT, so the
bandwidth-delay product in packets shrinks by ``scale`` and a cold connection reaches it
about log2(scale) RTT rounds sooner than the real link would: a 64 MiB transfer on a
10 Gbit/s, 30 ms RTT line spends 12 full slow-start rounds at 1/1 and 7 at 1/20. The model:

* the window starts at the kernel's initial congestion window, :data:`INITCWND` = 10 MSS
  (Linux ``TCP_INIT_CWND``, RFC 6928), MSS :data:`MSS` = 1448 B (1500 B MTU, IPv4 + TCP
  timestamps);
* while the window is below the BDP and the transfer not done, one round sends one window
  and takes one RTT; the window doubles each round (slow start without delayed-ACK or
  HyStart effects);
* what is left then goes at the line rate, and the last byte arrives half an RTT after it
  left. The handshake is the same at every scale, so it is left out.

:func:`missing_s` is the modelled 1/1 time minus the modelled scaled time of the same
(unscaled) transfer: what a sender on a cold connection of a scaled run waits before it
sends, when ``[network] cold_start_compensation`` is on. A connection is cold when it was
never used, or (with ``tcp_slow_start_after_idle``) has been idle longer than the RTO
(:func:`is_cold`; Linux restarts the window after one RTO of idleness, RFC 2861; on a
steady path the RTO is about the RTT plus :data:`MIN_RTO_S`, ``TCP_RTO_MIN`` = 200 ms).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pddbench.netem.shaping import MTU_BYTES

if TYPE_CHECKING:
    from pddbench.netem.topology_config import NetworkConfig, Shape

MSS = 1448  # MTU_BYTES less 20 B IPv4 and 32 B TCP with timestamps
ETHERNET_HEADER_BYTES = 14
# One full segment as the shaper counts it: HTB and TBF charge a packet's length with its
# Ethernet header (1448 B payload + 32 B TCP with timestamps + 20 B IPv4 + 14 B Ethernet),
# so a TCP connection's payload gets this share of a shaped line's rate: 0.956, the
# "95-96 % of the configured rate as TCP goodput" measured here (shared/NETWORK.md). On a
# real Ethernet line the preamble and inter-frame gap (20 B more) leave 0.941.
WIRE_BYTES_PER_SEGMENT = MTU_BYTES + ETHERNET_HEADER_BYTES
PAYLOAD_SHARE = MSS / WIRE_BYTES_PER_SEGMENT
INITCWND = 10
MIN_RTO_S = 0.2


@dataclass(frozen=True)
class SlowStart:
    """A modelled cold transfer: ``rounds`` full slow-start rounds, then the rest."""

    rounds: int
    slow_start_bytes: int  # sent during the full rounds
    seconds: float  # first byte sent -> last byte received


def cold_transfer(
    nbytes: int, rate_bytes_per_s: float, rtt_s: float, *, initcwnd: int = INITCWND, mss: int = MSS
) -> SlowStart:
    """Modelled time of ``nbytes`` on a cold connection at ``rate_bytes_per_s``, ``rtt_s``."""
    if nbytes <= 0:
        return SlowStart(0, 0, 0.0)
    bdp = rate_bytes_per_s * rtt_s
    window = initcwnd * mss
    sent = rounds = 0
    while window < bdp and nbytes - sent > window:
        sent += window
        rounds += 1
        window *= 2
    return SlowStart(rounds, sent, rounds * rtt_s + (nbytes - sent) / rate_bytes_per_s + rtt_s / 2)


def missing_s(nbytes: int, rate_bytes_per_s: float, rtt_s: float, scale: float, **kw: int) -> float:
    """Modelled 1/1 time of ``nbytes`` (unscaled) minus that of ``nbytes / scale`` at
    ``rate / scale``: what a cold transfer of a scaled run lacks (≥ 0; 0 at scale 1)."""
    if scale <= 1:
        return 0.0
    real = cold_transfer(nbytes, rate_bytes_per_s, rtt_s, **kw).seconds
    small = cold_transfer(round(nbytes / scale), rate_bytes_per_s / scale, rtt_s, **kw).seconds
    return max(0.0, real - small)


def is_cold(
    last_used: float | None, now: float, rtt_s: float, *, slow_start_after_idle: bool
) -> bool:
    """Whether a connection last used at ``last_used`` (None: never) starts in slow start."""
    if last_used is None:
        return True
    return slow_start_after_idle and now - last_used > rtt_s + MIN_RTO_S


COMPENSATION_ENV = "PDDBENCH_COLD_START"  # set by Topology.spawn; read by the KV senders


@dataclass(frozen=True)
class PathModel:
    """The real (unscaled) path to one peer: round trip and bottleneck rate."""

    rtt_s: float
    rate_bytes_per_s: float


@dataclass
class Compensation:
    """Slow-start compensation of one sending process: the paths to its WAN peers (by IP)
    and when each was last used. :meth:`wait_s` says how long a transfer waits."""

    scale: float
    slow_start_after_idle: bool
    paths: dict[str, PathModel]
    last_used: dict[str, float]

    def wait_s(self, peer: str, modelled_bytes: int, now: float) -> float:
        """The missing slow-start time of ``modelled_bytes`` to ``peer`` if its connection
        is cold at ``now``, else 0; a peer with no modelled path (same site) waits 0."""
        path = self.paths.get(peer)
        if path is None or self.scale <= 1:
            return 0.0
        if not is_cold(
            self.last_used.get(peer),
            now,
            path.rtt_s,
            slow_start_after_idle=self.slow_start_after_idle,
        ):
            return 0.0
        return missing_s(modelled_bytes, path.rate_bytes_per_s, path.rtt_s, self.scale)

    def used(self, peer: str, now: float) -> None:
        self.last_used[peer] = now

    def to_env(self) -> str:
        return json.dumps(
            {
                "scale": self.scale,
                "slow_start_after_idle": self.slow_start_after_idle,
                "paths": {k: [p.rtt_s, p.rate_bytes_per_s] for k, p in self.paths.items()},
            }
        )

    @classmethod
    def from_env(cls, value: str | None) -> Compensation | None:
        if not value:
            return None
        raw = json.loads(value)
        paths = {k: PathModel(float(r), float(b)) for k, (r, b) in raw["paths"].items()}
        return cls(float(raw["scale"]), bool(raw["slow_start_after_idle"]), paths, {})


def wan_paths(config: NetworkConfig, site: str) -> dict[str, PathModel]:
    """Real paths from ``site`` to every other site it reaches over WAN links (fewest
    hops): RTT = the one-way delays there and back, rate = the slowest direction there."""
    hops: dict[str, list[tuple[str, Shape, Shape]]] = {s.name: [] for s in config.sites}
    for link in config.links:
        there, back = link.shape("a_to_b"), link.shape("b_to_a")
        hops[link.a].append((link.b, there, back))
        hops[link.b].append((link.a, back, there))
    out: dict[str, PathModel] = {}
    frontier: list[tuple[str, float, float]] = [(site, 0.0, float("inf"))]
    seen = {site}
    while frontier:
        nxt: list[tuple[str, float, float]] = []
        for here, rtt_ms, rate_mbit in frontier:
            for peer, there, back in hops[here]:
                if peer in seen:
                    continue
                seen.add(peer)
                r = min(rate_mbit, there.rate_mbit or float("inf"))
                d = rtt_ms + there.delay_ms + back.delay_ms
                nxt.append((peer, d, r))
                if r != float("inf"):
                    out[peer] = PathModel(d / 1000, r * 1e6 / 8)
        frontier = nxt
    return out
