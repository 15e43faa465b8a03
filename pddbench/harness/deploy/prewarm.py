"""Pre-warm the reference servers' KV peer connections across the WAN before traffic.

Which pairs: every KV sender (``prefill``, ``relay-decode``) to every instance in another
site that receives KV (not a router, not a prefill) — P↔MD and RLD↔MD in ``pdd``, P↔D in
cross-DC PD. How much: :data:`pddbench.netem.transfer.WARM_BDPS` bandwidth-delay products
of the fastest (scaled) WAN link through each of the servers' ``kv_streams_per_peer``
pooled connections per pair (the streams WAN KV transfers take), so their windows are
open as a transfer engine's long-lived connections are (``pddbench.servers.prewarm``).
Runs in the client's thread (it reaches every instance). Must not start or stop anything.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from pddbench.errors import UserError
from pddbench.harness.config.scenario import Scenario

SENDERS = {"prefill", "relay-decode"}
NOT_RECEIVERS = {"router", "prefill"}


def warm_pairs(scenario: Scenario) -> dict[str, list[str]]:
    """Sender instance → the receivers in other sites it pre-warms."""
    if scenario.deployment is None:
        return {}
    insts = scenario.deployment.instances
    out: dict[str, list[str]] = {}
    for s in insts:
        if s.role not in SENDERS:
            continue
        peers = [
            r.id for r in insts if r.role not in NOT_RECEIVERS and r.datacenter != s.datacenter
        ]
        if peers:
            out[s.id] = peers
    return out


def warm_bytes(scenario: Scenario) -> int:
    from pddbench.netem.shaping import bdp_bytes
    from pddbench.netem.transfer import WARM_BDPS

    cfg = scenario.network_config()
    largest = 0
    for link, d in cfg.iter_directions():
        shape = link.shape(d)
        if shape.rate_mbit:
            rtt = 2 * (shape.delay_ms + shape.jitter_ms)
            largest = max(largest, bdp_bytes(shape.rate_mbit / cfg.scale, rtt))
    return WARM_BDPS * largest


def prewarm(scenario: Scenario, urls: dict[str, str], timeout_s: float = 120.0) -> list[Any]:
    """POST ``/internal/prewarm`` to every sender; returns their answers (for the manifest)."""
    pairs = warm_pairs(scenario)
    if not pairs:
        return []
    nbytes = warm_bytes(scenario)
    streams = scenario.deployment_config.kv_streams_per_peer  # as many as KV transfers take
    done = []
    for sender, peers in pairs.items():
        body = {
            "peers": [urls[p].removeprefix("http://") for p in peers],
            "bytes": nbytes,
            "connections": streams,
        }
        req = urllib.request.Request(
            f"{urls[sender]}/internal/prewarm",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                done.append({"from": sender, **json.loads(resp.read())})
        except OSError as exc:
            raise UserError(f"pre-warming {sender}'s KV connections failed: {exc}") from None
    return done
