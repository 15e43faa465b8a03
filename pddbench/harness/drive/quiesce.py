"""Waiting until a deployment has finished earlier work: the seam between two ladder points.

Owns the polling of the front door's ``/metrics`` for work still in progress: requests
being served, requests whose instance events are still expected (a relayed request's
P→MD transfer runs on after its client has its answer), KV bytes in flight on a link, and
the engines' running / waiting queues. A point that starts while an overloaded
predecessor's transfers still fill the WAN (and the router's link queue) measures that
predecessor, not its own load. Returns how long it waited and what was still busy when it
stopped; decides nothing about the point (the ladder does). Runs in whatever network
namespace its thread is in.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pddbench.harness.engines.metrics import ExpositionError, parse_prometheus

# Series whose sum is the work in progress (the reference router's and real engines').
BUSY_SERIES: tuple[str, ...] = (
    "pdd_inflight_requests",
    "pdd_flows_pending",
    "pdd_link_in_flight_bytes",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
)
POLL_S = 0.25


@dataclass(frozen=True)
class Quiet:
    """The outcome of a wait: ``quiet`` when nothing was busy; ``known`` when the front door
    exposes any busy series at all; ``busy``: what was left (series → value) otherwise;
    ``note``: why nothing was waited on, when that is known without a wait (a model)."""

    quiet: bool
    known: bool
    waited_s: float
    busy: Mapping[str, float] = field(default_factory=dict)
    note: str = ""

    def describe(self) -> str:
        left = ", ".join(f"{k} {v:.3g}" for k, v in sorted(self.busy.items()))
        return f"still busy after {self.waited_s:.0f} s ({left})"


def busy_series(text: str) -> dict[str, float]:
    """The busy series in a metrics exposition, summed over their labels."""
    out: dict[str, float] = {}
    for s in parse_prometheus(text):
        if s.name in BUSY_SERIES:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def _read(url: str) -> dict[str, float] | None:
    try:
        with urllib.request.urlopen(url, timeout=5.0) as resp:
            return busy_series(resp.read().decode("utf-8", errors="replace"))
    except (urllib.error.URLError, OSError, ExpositionError, ValueError):
        return None


def wait_quiet(
    metrics_url: str,
    timeout_s: float,
    *,
    read: Callable[[str], dict[str, float] | None] = _read,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Quiet:
    """Poll ``metrics_url`` until every busy series is 0, for at most ``timeout_s``.

    A front door that cannot be read (no ``/metrics``, an error) or that has none of the
    busy series cannot be watched: the outcome is quiet and not ``known``, at once."""
    began = clock()
    while True:
        got = read(metrics_url)
        if not got:  # unreadable, or nothing to wait on
            return Quiet(True, False, clock() - began)
        busy = {k: v for k, v in got.items() if v > 0}
        if not busy:
            return Quiet(True, True, clock() - began)
        if clock() - began >= timeout_s:
            return Quiet(False, True, clock() - began, busy)
        sleep(POLL_S)
