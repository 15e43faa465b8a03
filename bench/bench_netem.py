"""Accuracy of the WAN emulation: prints RTT, goodput and cold-transfer figures (needs root).

Checks, on whichever backend the kernel gets (the userspace NFQUEUE delay line where netem
is missing):
* RTT: one-way delay 5, 15, 30 ms with no jitter and ±3 ms uniform (and σ=3 ms normal)
  jitter; p50 should be within 1 ms of 2·delay, p99 within 5 ms of the model's p99;
* goodput: bulk TCP at 200 Mbit/s and 1 Gbit/s with 30 ms one-way delay, ≥ 90% of rate;
* a cold 64 MiB transfer over 2×30 ms at 1 Gbit/s (connect included): real TCP needs
  ~1.2 s (handshake + slow start); a TCP relay would show ~0.55-0.65 s.

Usage: sudo .venv/bin/python bench/bench_netem.py [--samples 200] [--bulk-seconds 4]
Timing figures depend on machine load; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import socket
import threading
import time

import numpy as np

from pddbench.netem import nsutil
from pddbench.netem.delayline import DelaySettings, rtt_quantiles_ms
from pddbench.netem.probe import Endpoint, measure_goodput, measure_rtt
from pddbench.netem.topology import Topology
from pddbench.netem.topology_config import NetworkConfig

LINK = "dca-dcb"


def cpu_seconds(pids: list[int]) -> np.ndarray:
    """(user, system) CPU seconds of ``pids``; system time includes the kernel forwarding
    work that runs in the daemon's verdict syscall (HTB, veth, the peer's IP stack)."""
    total = np.zeros(2)
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += np.array([int(fields[11]), int(fields[12])]) / tick
        except OSError:
            pass
    return total


def endpoints(topo: Topology) -> tuple[Endpoint, Endpoint, Endpoint, Endpoint]:
    wan = topo.plan.wan(LINK)
    ha, hb = topo.plan.probe_host(wan.a), topo.plan.probe_host(wan.b)
    a, b = Endpoint(ha.netns, ha.address), Endpoint(hb.netns, hb.address)
    b_end = Endpoint(topo.plan.switch(wan.b).netns, wan.b_address)
    a_end = Endpoint(topo.plan.switch(wan.a).netns, wan.a_address)
    return a, b, a_end, b_end


def bench_rtt(topo: Topology, samples: int) -> list[bool]:
    a, _b, _a_end, b_end = endpoints(topo)
    print(f"\nRTT (UDP ping-pong across the link, {samples} samples each)")
    print(
        f"{'delay':>6} {'jitter':>12} {'p50':>8} {'err':>7} {'p99':>8} {'model99':>8}"
        f" {'err99':>7} {'std':>6}  verdict"
    )
    verdicts = []
    for delay in (5.0, 15.0, 30.0):
        for jitter, dist in ((0.0, "uniform"), (3.0, "uniform"), (3.0, "normal")):
            topo.apply_change(LINK, {"delay_ms": delay, "jitter_ms": jitter, "jitter_dist": dist})
            rtts, lost = measure_rtt(a, b_end, samples=samples, interval_s=0.005, timeout_s=1.0)
            r = np.asarray(rtts)
            settings = DelaySettings(delay_ms=delay, jitter_ms=jitter, jitter_dist=dist)
            model = rtt_quantiles_ms(settings, settings, (0.5, 0.99))
            p50, p99 = float(np.median(r)), float(np.quantile(r, 0.99))
            ok = abs(p50 - 2 * delay) <= 1.0 and p99 - model[0.99] <= 5.0 and lost == 0
            verdicts.append(ok)
            label = "none" if jitter == 0 else f"±{jitter:g} {dist}"
            print(
                f"{delay:6.0f} {label:>12} {p50:8.2f} {p50 - 2 * delay:+7.2f} {p99:8.2f}"
                f" {model[0.99]:8.2f} {p99 - model[0.99]:+7.2f} {r.std():6.2f}  "
                f"{'ok' if ok else 'MISS'}{'' if lost == 0 else f' (lost {lost})'}"
            )
    topo.apply_change(LINK, {"delay_ms": 30.0, "jitter_ms": 0.0, "jitter_dist": "uniform"})
    return verdicts


def bench_goodput(topo: Topology, seconds: float) -> list[bool]:
    a, b, a_end, b_end = endpoints(topo)
    daemons = [sd.daemon.pid for sd in topo.directions.values() if sd.daemon]
    print(f"\nGoodput (one TCP flow, {seconds:g} s, 30 ms one-way delay, steady second half)")
    print(
        f"{'rate':>9} {'dir':>5} {'goodput':>9} {'of rate':>8} {'daemons usr+sys CPU':>20}  verdict"
    )
    verdicts = []
    for rate in (200.0, 1000.0):
        topo.apply_change(LINK, {"rate_mbit": rate, "delay_ms": 30.0})
        for label, src, dst in (("a->b", a, b_end), ("b->a", b, a_end)):
            cpu0, t0 = cpu_seconds(daemons), time.monotonic()
            result = measure_goodput(src, dst, seconds=seconds)
            usr, sys_ = (cpu_seconds(daemons) - cpu0) / (time.monotonic() - t0)
            share = result.mbit_steady / rate
            ok = share >= 0.9
            verdicts.append(ok)
            print(
                f"{rate:6.0f} Mb {label:>5} {result.mbit_steady:9.1f} {share:8.1%}"
                f" {usr:9.0%} + {sys_:4.0%} of a core  {'ok' if ok else 'MISS'}"
            )
    return verdicts


def cold_transfer(topo: Topology, src: str, dst: str, nbytes: int) -> tuple[float, float]:
    """Seconds from connect() to the last byte received, and the connect time alone."""
    src_ns, dst_ns = topo.netns(src), topo.netns(dst)
    dst_addr = topo.address(dst)

    def listener() -> socket.socket:
        s = socket.socket()
        s.bind((dst_addr, 0))
        s.listen(1)
        return s

    lsock = nsutil.run_in_netns(dst_ns, listener)
    csock = nsutil.run_in_netns(src_ns, socket.socket)
    done: dict[str, float] = {}

    def receive() -> None:
        conn, _ = lsock.accept()
        buf = bytearray(4 << 20)
        got = 0
        with conn:
            while got < nbytes:
                n = conn.recv_into(buf)
                if n == 0:
                    break
                got += n
        done["t"] = time.perf_counter()

    thread = threading.Thread(target=receive)
    thread.start()
    payload = bytes(nbytes)
    start = time.perf_counter()
    csock.connect(lsock.getsockname())
    connected = time.perf_counter()
    csock.sendall(payload)
    thread.join()
    csock.close()
    lsock.close()
    return done["t"] - start, connected - start


def bench_cold(topo: Topology, repeats: int) -> None:
    topo.apply_change(LINK, {"rate_mbit": 1000.0, "delay_ms": 30.0, "jitter_ms": 0.0})
    print("\nCold 64 MiB transfer, 1 Gbit/s, 2×30 ms (real TCP ~1.2 s; a TCP relay ~0.55-0.65 s)")
    for i in range(repeats):
        total, connect = cold_transfer(topo, "p0", "d0", 64 << 20)
        print(f"  run {i + 1}: {total:.3f} s (connect {connect * 1000:.1f} ms)")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--bulk-seconds", type=float, default=4.0)
    parser.add_argument("--cold-repeats", type=int, default=3)
    args = parser.parse_args()
    config = NetworkConfig.model_validate(
        {
            "sites": [{"name": "dca", "instances": ["p0"]}, {"name": "dcb", "instances": ["d0"]}],
            "links": [{"a": "dca", "b": "dcb", "rate_mbit": 1000, "delay_ms": 30}],
        }
    )
    with Topology.up(config) as topo:
        report = topo.report()
        print(f"run {topo.run_id}; backends: {report.backends}")
        print(f"delay daemons: {report.daemons}")
        print(f"nfqueue lead: {config.nfqueue_lead_us} µs; load average {os.getloadavg()}")
        print(f"TCP: {report.tcp.values}")
        rtt_ok = bench_rtt(topo, args.samples)
        good_ok = bench_goodput(topo, args.bulk_seconds)
        bench_cold(topo, args.cold_repeats)
        for key, sd in topo.directions.items():
            print(f"daemon {key}: {sd.stats()}")
    print(
        f"\nRTT cases within bounds: {sum(rtt_ok)}/{len(rtt_ok)}; goodput cases ≥ 90%:"
        f" {sum(good_ok)}/{len(good_ok)}; load average now {os.getloadavg()}"
    )


if __name__ == "__main__":
    main()
