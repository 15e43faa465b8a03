"""Measuring a scenario's emulated WAN for the twin's link model (root: namespaces, shaping).

Owns :func:`calibrate`: bring the scenario's network up (:class:`~pddbench.netem.topology.
Topology`, at the scale a replay of it would use), probe every WAN link as ``pddbench netem
probe`` does (RTT quantiles from a UDP ping-pong, a steady bulk TCP goodput each way), time
warm-connection transfers of the trace's KV sizes each way (:class:`~pddbench.netem.
transfer.Pair`, the way ``bench_netem`` times a transfer engine's peer connection, with the
congestion control the reference servers' KV connections use), tear
the network down, and fit (:func:`~pddbench.twin.calibrate.fit_link`). Must not decide the
fit, nor run without the topology's own root check.
"""

from __future__ import annotations

import platform
import socket
from collections.abc import Callable
from datetime import UTC, datetime

from pddbench.netem.topology import Topology
from pddbench.netem.topology_config import Direction, NetworkConfig
from pddbench.netem.transfer import Pair
from pddbench.twin.calibrate import (
    DirectionFit,
    LinkModelFile,
    Measured,
    TransferSample,
    fit_link,
)

Echo = Callable[[str], None]


def calibrate(
    net: NetworkConfig,
    scenario: str,
    kv_bytes_per_token: int,
    sizes_tokens: list[int],
    *,
    repeats: int = 3,
    samples: int = 200,
    bulk_seconds: float = 2.0,
    echo: Echo = print,
) -> LinkModelFile:
    """Measure every WAN link of ``net`` and fit the link model (see the module)."""
    scale = net.scale
    fits: list[DirectionFit] = []
    probes = []
    with Topology.up(net, label=f"calibrate-{scenario}") as topo:
        probe_congestion = topo.probe_congestion()  # the link's own rate: BBR where it can
        congestion = topo.tcp.congestion  # the KV transfers: as the servers' connections run
        for probe in topo.probe(samples=samples, bulk_seconds=bulk_seconds):
            probes.append(probe)
            echo(
                f"{probe.link}: RTT p50 {probe.rtt_p50_ms:.2f} ms, std {probe.rtt_std_ms:.2f} ms;"
                f" goodput {probe.goodput_a_to_b_mbit} / {probe.goodput_b_to_a_mbit} Mbit/s"
                f" (scale 1/{scale:g})"
            )
            a, b, a_end, b_end = topo.probe_endpoints(probe.link)
            link = net.link(probe.link)
            transfers: dict[Direction, list[TransferSample]] = {}
            for d, src, dst in (("a_to_b", a, b_end), ("b_to_a", b, a_end)):
                shape = link.shape(d)
                rate = (shape.rate_mbit or 10_000.0) / scale * 1e6 / 8
                bdp = int(rate * 2 * shape.delay_ms / 1000)
                pair = Pair(src, dst, congestion)
                try:
                    pair.warm(bdp)
                    got = []
                    for tokens in sizes_tokens:
                        nbytes = max(1, int(tokens * kv_bytes_per_token / scale))
                        for _ in range(repeats):
                            t = pair.send(nbytes)
                            got.append(TransferSample(nbytes=nbytes, seconds=t.seconds))
                    transfers[d] = got
                finally:
                    pair.close()
                echo(
                    f"{probe.link} {d}: "
                    + ", ".join(f"{s.nbytes / 1e6:.2f} MB {s.seconds * 1000:.1f} ms" for s in got)
                )
            fits.extend(fit_link(link, probe, transfers, scale))
    measured = Measured(
        at=datetime.now(UTC).isoformat(timespec="seconds"),
        host=socket.gethostname(),
        kernel=platform.release(),
        scenario=scenario,
        scale=scale,
        congestion=congestion,
        probe_congestion=probe_congestion,
        kv_bytes_per_token=kv_bytes_per_token,
        transfer_sizes_tokens=sizes_tokens,
    )
    return LinkModelFile(measured=measured, probes=probes, directions=fits)
