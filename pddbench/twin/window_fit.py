"""What one of the deployment's warm KV connections carries per WAN direction, fitted from an
emulated run's own transfers.

Owns :func:`flow_samples` and :func:`fit_flow_rates`: every WAN KV transfer in a run's
records (the sender's server timing: modelled bytes and its *active* intervals, the time it
had bytes to put on the wire) of at least :data:`MIN_MODELLED_BYTES` is one sample of what
one connection carried (modelled bytes ÷ active seconds, the router's link estimator's own
measure); the median per WAN direction is that direction's flow rate, which the twin takes as
each flow's cap (:meth:`~pddbench.twin.calibrate.LinkModelFile.flow_caps`).

Why from a run and not only from ``pddbench twin calibrate``'s timed transfers: the reference
servers warm their pooled KV connections through their own HTTP client, several at once
(``kv_streams_per_peer`` per peer), and a CUBIC connection keeps the window HyStart left it
with when it leaves slow start: CUBIC grows a window only while the window, not the
application, limits the sender, by a few segments a second at these RTTs. Measured with
``ss`` during a pdd point (1/100, RPS on, no retransmission): ssthresh 160-220 packets,
windows 235-291 packets (median) while sending, ~9 Gbit/s per connection at scale 1; a
connection the calibration warms alone reaches ~40 Gbit/s. Pure: records in, rates out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pddbench.netem.topology_config import Direction, NetworkConfig
from pddbench.servers.config import DeploymentConfig

MIN_MODELLED_BYTES = 100e6  # smaller transfers are bound by the delay, not the window


@dataclass(frozen=True)
class FlowSample:
    """One WAN transfer: its direction, modelled bytes and active seconds."""

    link: str
    direction: Direction
    modelled_bytes: float
    active_s: float
    start: float = 0.0  # its first active instant (the sender's clock)
    end: float = 0.0  # its last

    @property
    def mbit(self) -> float:
        return self.modelled_bytes * 8 / self.active_s / 1e6


def flow_samples(
    server_timings: Iterable[object], dep: DeploymentConfig, net: NetworkConfig
) -> list[FlowSample]:
    """The WAN transfers of at least :data:`MIN_MODELLED_BYTES` in the records' server
    timing (JSON per record), each with the direction it crossed."""
    dcs = {i.id: i.datacenter for i in dep.instances}
    out: list[FlowSample] = []
    for text in server_timings:
        if not isinstance(text, str) or not text:  # no timing (a failed request): NaN/None
            continue
        timing = json.loads(text)
        landed = timing.get("kv_landed") or {}
        roles = timing.get("instances") or {}
        for kv in timing.get("kv_transfers") or []:
            if kv.get("path") != "wan" or (kv.get("modelled_bytes") or 0) < MIN_MODELLED_BYTES:
                continue
            receiver = kv.get("to")
            role = next((r for r, i in roles.items() if i == receiver), None)
            source = (landed.get(role) or {}).get("source") if role else None
            source = source or roles.get("P")
            if receiver not in dcs or source not in dcs:
                continue
            found = net.between(dcs[source], dcs[receiver])
            spans = kv.get("active") or []
            active = sum(b - a for a, b in spans)
            if found is None or active <= 0:
                continue
            modelled = float(kv["modelled_bytes"])
            link, direction = found
            out.append(
                FlowSample(link.link_name, direction, modelled, active, spans[0][0], spans[-1][1])
            )
    return out


def fit_flow_rates(samples: Sequence[FlowSample]) -> dict[tuple[str, Direction], tuple[float, int]]:
    """Per WAN direction: (median Mbit/s at scale 1, samples)."""
    by: dict[tuple[str, Direction], list[float]] = {}
    for s in samples:
        by.setdefault((s.link, s.direction), []).append(s.mbit)
    out = {}
    for key, rates in by.items():
        rates.sort()
        n = len(rates)
        median = rates[n // 2] if n % 2 else (rates[n // 2 - 1] + rates[n // 2]) / 2
        out[key] = (median, n)
    return out
