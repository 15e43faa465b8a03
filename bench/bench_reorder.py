"""Does the emulated WAN reorder a flow's packets? Concurrent KV-like flows, with and without
receive packet steering (root).

Brings up ``--scenario``'s network (default pdd, at the scale a replay would use), opens
``--flows`` warm connections with the servers' congestion control (``[network]
tcp_congestion``, CUBIC by default) from P's side of the WAN to the other, and sends the
trace's middle KV size on all of them at once, ``--repeats`` times; then reads the sender
namespace's TCP counters (``nstat``: retransmissions, reordering seen, DSACKs), the qdiscs'
drops and the delay stage's drops. Once as the harness runs it (RPS on every interface,
:mod:`pddbench.netem.steering`) and once with steering left off (``--compare``), so the
cause shows: retransmissions with no drop anywhere are spurious, i.e. reordering. The
topology's own interfaces only; figures, no pass/fail.

    sudo .venv/bin/python bench/bench_reorder.py [--flows 4] [--repeats 4] [--compare]
"""

from __future__ import annotations

import argparse
import subprocess
import threading
import time

from pddbench.harness.cli.netem_network import load_network_config
from pddbench.netem.topology import Topology
from pddbench.netem.transfer import Pair

COUNTERS = (
    "TcpOutSegs",
    "TcpRetransSegs",
    "TcpExtTCPFastRetrans",
    "TcpExtTCPSACKReorder",
    "TcpExtTCPTSReorder",
    "TcpExtTCPDSACKRecv",
    "TcpExtTCPSackRecovery",
)
KV_BYTES = 60970 * 46490  # jan-feb's median prompt's KV on pdd's model (calibrate's middle size)


def nstat(netns: str) -> dict[str, int]:
    out = subprocess.run(
        ["ip", "netns", "exec", netns, "nstat", "-az", *COUNTERS],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {f[0]: int(f[1]) for f in (ln.split() for ln in out.splitlines()[1:]) if len(f) > 1}


def qdisc_drops(netns: str) -> int:
    out = subprocess.run(
        ["ip", "netns", "exec", netns, "tc", "-s", "qdisc", "show"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = [ln for ln in out.splitlines() if "dropped " in ln]
    return sum(int(ln.split("dropped ")[1].split(",")[0]) for ln in lines)


def run(scenario: str, flows: int, repeats: int, steering: bool) -> None:
    net = load_network_config(scenario, probe_scale=True)
    if not steering:  # the comparison only: the harness always steers
        Topology._steer_flows = lambda self: None  # type: ignore[method-assign]
    with Topology.up(net, label="bench-reorder") as topo:
        link = net.links[0]
        a, _b, _a_end, b_end = topo.probe_endpoints(link.link_name)
        nbytes = max(1, int(KV_BYTES / net.scale))
        shape = link.shape("a_to_b")
        bdp = int((shape.rate_mbit or 10_000.0) / net.scale * 1e6 / 8 * 2 * shape.delay_ms / 1000)
        pairs = [Pair(a, b_end, net.tcp_congestion) for _ in range(flows)]
        try:
            for pair in pairs:
                pair.warm(bdp, idle_s=0.0)
            time.sleep(1.0)
            before = nstat(a.netns)
            rates = []
            for _ in range(repeats):
                threads = [threading.Thread(target=p.send, args=(nbytes,)) for p in pairs]
                start = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(timeout=120)
                rates.append(flows * nbytes / (time.perf_counter() - start) / 1e6)
                time.sleep(0.5)
            after = nstat(a.netns)
        finally:
            for pair in pairs:
                pair.close()
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in COUNTERS}
        drops = sum(qdisc_drops(ns) for ns in {sd.plan.netns for sd in topo.directions.values()})
        stage = sum(int(sd.stats().get("dropped", 0)) for sd in topo.directions.values())
        label = "steering on (as the harness runs)" if steering else "steering off"
        line = shape.rate_mbit / net.scale / 8 if shape.rate_mbit else float("nan")
        print(
            f"{label}: {flows} x {nbytes / 1e6:.1f} MB {net.tcp_congestion} at 1/{net.scale:g},"
            f" aggregate {min(rates):.0f}-{max(rates):.0f} MB/s of a {line:.0f} MB/s line;"
            f" retransmitted {delta['TcpRetransSegs']} of {delta['TcpOutSegs']} segments,"
            f" reordering seen {delta['TcpExtTCPSACKReorder'] + delta['TcpExtTCPTSReorder']},"
            f" DSACKs {delta['TcpExtTCPDSACKRecv']}; drops: qdiscs {drops}, delay stage {stage};"
            f" RPS {topo.tcp.values.get('rps_cpus', '-')}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="pdd")
    ap.add_argument("--flows", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--compare", action="store_true", help="also a run with steering off")
    args = ap.parse_args()
    run(args.scenario, args.flows, args.repeats, steering=True)
    if args.compare:
        run(args.scenario, args.flows, args.repeats, steering=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
