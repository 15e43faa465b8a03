"""Measure what an emulated link really does: RTT distribution and bulk TCP goodput.

Both ends run in this process, each socket created inside its switch namespace
(``nsutil.run_in_netns``), so traffic crosses exactly one WAN link and its shaping in
both directions. RTT: a UDP ping-pong (one packet in flight, ~200 samples). Goodput: one
TCP connection sending for a few seconds, measured at the receiver over the second half
(past slow start). ``check_probe`` compares a :class:`LinkProbe` against the model with a
configurable tolerance; ``write_link_probes`` writes ``links.parquet``.
"""

from __future__ import annotations

import math
import socket
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from pddbench.errors import UserError
from pddbench.netem import nsutil
from pddbench.netem.delayline import DelaySettings, rtt_quantiles_ms
from pddbench.netem.hostcpu import CpuShare, CpuTimes
from pddbench.netem.schedule import ChangeRecord
from pddbench.netem.tcp import set_congestion

_PING = struct.Struct("!Qd")


@dataclass(frozen=True)
class Endpoint:
    netns: str
    address: str


@dataclass
class RttSummary:
    samples: int
    lost: int
    min_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    std_ms: float

    def probe_fields(self) -> dict[str, float | int]:
        """These values as :class:`LinkProbe`'s ``rtt_*`` fields."""
        return {f"rtt_{k}": v for k, v in asdict(self).items()}


@dataclass
class LinkProbe:
    """One row of links.parquet: a link's measured and expected behaviour."""

    run_id: str
    link: str
    a: str
    b: str
    scale: float
    backend_a_to_b: str
    backend_b_to_a: str
    rtt_samples: int
    rtt_lost: int
    rtt_min_ms: float
    rtt_p50_ms: float
    rtt_p90_ms: float
    rtt_p99_ms: float
    rtt_max_ms: float
    rtt_mean_ms: float
    rtt_std_ms: float
    expected_rtt_p50_ms: float
    expected_rtt_p99_ms: float
    rate_a_to_b_mbit: float | None  # effective (scaled) configured rate
    rate_b_to_a_mbit: float | None
    goodput_a_to_b_mbit: float | None
    goodput_b_to_a_mbit: float | None
    loss_a_to_b_pct: float
    loss_b_to_a_pct: float
    goodput_congestion: str = ""  # congestion control of the goodput flows
    # the most CPU time (%) the hypervisor withheld during a kept goodput flow, and how many
    # flows were measured (a short one is measured again, see best_goodput)
    goodput_steal_pct: float = 0.0
    goodput_attempts: int = 0
    qos: str = "fifo"  # the link's traffic classes (topology_config.Qos)
    t_unix: float = field(default_factory=time.time)


@dataclass
class LinkUsage:
    """One ``kind = "usage"`` row of links.parquet: what one WAN direction carried over one
    interval. Written by the twin's link model (``pddbench.twin.outputs``); the emulated WAN
    does not sample its qdiscs, so an emulated run has none of these rows."""

    run_id: str
    link: str
    direction: str  # a_to_b / b_to_a
    backend: str
    t_mono: float  # the interval's start on the run's clock (as the change rows)
    interval_s: float
    bulk_bytes: float  # KV (the bulk class), modelled bytes
    control_bytes: float  # requests, events, tokens, handoff heads (modelled sizes)
    rate_mbit: float | None  # the bulk class's mean available rate over the interval
    goodput_mbit: float  # bulk bytes carried, per second of the interval
    utilisation: float | None  # goodput / available rate (None: an unshaped line)


@dataclass(frozen=True)
class ProbeTolerance:
    rtt_p50_ms: float = 1.0  # |measured p50 - model p50|
    rtt_p99_ms: float = 5.0  # measured p99 - model p99 (only the excess counts)
    goodput_fraction: float = 0.9  # of the configured rate, links without loss only


def summarize_rtt(rtts_ms: list[float], lost: int) -> RttSummary:
    import numpy as np

    arr = np.asarray(rtts_ms, dtype=float)
    if arr.size == 0:
        nan = math.nan
        return RttSummary(0, lost, nan, nan, nan, nan, nan, nan, nan)
    q = np.quantile(arr, [0.5, 0.9, 0.99])
    return RttSummary(
        samples=int(arr.size),
        lost=lost,
        min_ms=float(arr.min()),
        p50_ms=float(q[0]),
        p90_ms=float(q[1]),
        p99_ms=float(q[2]),
        max_ms=float(arr.max()),
        mean_ms=float(arr.mean()),
        std_ms=float(arr.std()),
    )


def _udp_socket(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((address, 0))
    return sock


def measure_rtt(
    src: Endpoint,
    dst: Endpoint,
    *,
    samples: int = 200,
    interval_s: float = 0.005,
    timeout_s: float = 1.0,
) -> tuple[list[float], int]:
    """UDP ping-pong from ``src`` to an echo at ``dst``; returns (RTTs in ms, lost count)."""
    (result,) = measure_rtts(
        src, [dst], samples=samples, interval_s=interval_s, timeout_s=timeout_s
    )
    return result


def measure_rtts(
    src: Endpoint,
    dsts: Sequence[Endpoint],
    *,
    samples: int = 200,
    interval_s: float = 0.005,
    timeout_s: float = 1.0,
) -> list[tuple[list[float], int]]:
    """UDP ping-pong from ``src`` to an echo at each of ``dsts``, alternating sample by sample.

    Returns (RTTs in ms, lost count) per destination. Alternating means a burst of load on
    the host (hypervisor steal, a busy neighbour) falls on every destination alike, so a
    difference between destinations is the path's, not the moment's.
    """
    echoes = [nsutil.run_in_netns(d.netns, _udp_socket, d.address) for d in dsts]
    client = nsutil.run_in_netns(src.netns, _udp_socket, src.address)
    stop = threading.Event()

    def serve(echo: socket.socket) -> None:
        while not stop.is_set():
            try:
                data, peer = echo.recvfrom(2048)
            except TimeoutError:
                continue
            except OSError:
                return
            echo.sendto(data, peer)

    threads = []
    for echo in echoes:
        echo.settimeout(0.2)
        thread = threading.Thread(target=serve, args=(echo,), name="netem-echo", daemon=True)
        thread.start()
        threads.append(thread)
    results: list[tuple[list[float], int]] = [([], 0) for _ in dsts]
    try:
        targets = [echo.getsockname() for echo in echoes]
        client.settimeout(timeout_s)
        for seq in range(samples * len(dsts)):
            i = seq % len(dsts)
            rtts, lost = results[i]
            sent = time.perf_counter()
            client.sendto(_PING.pack(seq, sent), targets[i])
            while True:
                try:
                    data, _ = client.recvfrom(2048)
                except TimeoutError:
                    results[i] = (rtts, lost + 1)
                    break
                got_seq, _t = _PING.unpack_from(data)
                if got_seq == seq:
                    rtts.append((time.perf_counter() - sent) * 1000.0)
                    break
            time.sleep(interval_s)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        for echo in echoes:
            echo.close()
        client.close()
    return results


@dataclass
class GoodputResult:
    mbit_total: float
    mbit_steady: float
    bytes_received: int
    seconds: float
    steal_pct: float = 0.0  # CPU time the hypervisor withheld during the flow (hostcpu)


def measure_goodput(
    src: Endpoint, dst: Endpoint, *, seconds: float = 3.0, congestion: str | None = None
) -> GoodputResult:
    """Bulk TCP from ``src`` to ``dst`` for ``seconds``; goodput over all and the second half."""

    def listener() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((dst.address, 0))
        s.listen(1)
        return s

    def sender() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if congestion:
            set_congestion(s, congestion)
        return s

    lsock = nsutil.run_in_netns(dst.netns, listener)
    ssock = nsutil.run_in_netns(src.netns, sender)
    marks: list[tuple[float, int]] = []
    box: dict[str, BaseException] = {}

    def receive() -> None:
        try:
            conn, _ = lsock.accept()
        except OSError as exc:
            box["error"] = exc
            return
        buf = bytearray(4 << 20)
        total = 0
        with conn:
            while True:
                n = conn.recv_into(buf)
                if n == 0:
                    break
                total += n
                marks.append((time.perf_counter(), total))

    thread = threading.Thread(target=receive, name="netem-bulk-rx", daemon=True)
    thread.start()
    payload = memoryview(bytes(1 << 20))
    try:
        lsock.settimeout(seconds + 30)
        ssock.settimeout(seconds + 30)
        ssock.connect(lsock.getsockname())
        cpu_start = CpuTimes.now()
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            ssock.sendall(payload)
        ssock.shutdown(socket.SHUT_WR)
        thread.join(timeout=seconds + 30)
        steal = CpuShare.between(cpu_start, CpuTimes.now()).steal_pct
    finally:
        ssock.close()
        lsock.close()
    if "error" in box:
        raise box["error"]
    if not marks:
        return GoodputResult(0.0, 0.0, 0, seconds, steal)
    end_t, total = marks[-1]
    elapsed = end_t - start
    half = start + elapsed / 2
    before = 0
    t_half = start
    for t, cum in marks:
        if t >= half:
            break
        before, t_half = cum, t
    steady = (total - before) * 8 / max(end_t - t_half, 1e-9) / 1e6
    return GoodputResult(total * 8 / elapsed / 1e6, steady, total, elapsed, steal)


# a goodput this far below the line is measured again, up to GOODPUT_ATTEMPTS flows
GOODPUT_RETRY_BELOW = 0.9
GOODPUT_ATTEMPTS = 3


def best_goodput(
    src: Endpoint,
    dst: Endpoint,
    rate_mbit: float | None,
    loss_pct: float,
    seconds: float,
    congestion: str | None,
) -> tuple[GoodputResult, int]:
    """Bulk goodput and the number of flows measured. A flow that falls short of the line
    is measured again (at most ``GOODPUT_ATTEMPTS`` in all) and the best is kept: one short
    flow on a 2-vCPU virtual machine is easily cut short by the hypervisor withholding CPU
    from the userspace delay stage (steal, recorded with the flow), which says nothing about
    the link; a link that cannot carry its rate misses every time. Lossy links (where the
    rate is not checked) are measured once."""
    rate = rate_mbit
    best = measure_goodput(src, dst, seconds=seconds, congestion=congestion)
    attempts = 1
    if rate is None or loss_pct > 0:
        return best, attempts
    while best.mbit_steady < GOODPUT_RETRY_BELOW * rate and attempts < GOODPUT_ATTEMPTS:
        again = measure_goodput(src, dst, seconds=seconds, congestion=congestion)
        attempts += 1
        best = max(best, again, key=lambda g: g.mbit_steady)
    return best, attempts


def check_probe(probe: LinkProbe, tolerance: ProbeTolerance = ProbeTolerance()) -> list[str]:
    """Every way ``probe`` misses the configured link; empty means within tolerance."""
    problems = []
    if probe.rtt_samples == 0:
        return [f"{probe.link}: no RTT sample came back"]
    if abs(probe.rtt_p50_ms - probe.expected_rtt_p50_ms) > tolerance.rtt_p50_ms:
        problems.append(
            f"{probe.link}: RTT p50 {probe.rtt_p50_ms:.2f} ms vs expected"
            f" {probe.expected_rtt_p50_ms:.2f} ms (tolerance {tolerance.rtt_p50_ms} ms)"
        )
    if probe.rtt_p99_ms - probe.expected_rtt_p99_ms > tolerance.rtt_p99_ms:
        problems.append(
            f"{probe.link}: RTT p99 {probe.rtt_p99_ms:.2f} ms vs expected"
            f" {probe.expected_rtt_p99_ms:.2f} ms (tolerance +{tolerance.rtt_p99_ms} ms)"
        )
    for direction, rate, goodput, loss in (
        ("a->b", probe.rate_a_to_b_mbit, probe.goodput_a_to_b_mbit, probe.loss_a_to_b_pct),
        ("b->a", probe.rate_b_to_a_mbit, probe.goodput_b_to_a_mbit, probe.loss_b_to_a_pct),
    ):
        if rate is None or goodput is None or loss > 0:
            continue
        if goodput < tolerance.goodput_fraction * rate:
            problems.append(
                f"{probe.link} {direction}: goodput {goodput:.1f} Mbit/s below"
                f" {tolerance.goodput_fraction:.0%} of {rate:.1f} Mbit/s{_starved(probe)}"
            )
    return problems


def _starved(probe: LinkProbe) -> str:
    """Why a goodput fell short when the host, not the link, is the likely cause."""
    if probe.goodput_steal_pct < STARVED_STEAL_PCT:
        return ""
    return (
        f" (best of {probe.goodput_attempts} flows both ways; the hypervisor withheld up to"
        f" {probe.goodput_steal_pct:.0f} % of CPU time from the delay stage: a busy host —"
        " run again, or raise emulation_scale)"
    )


# steal above this during a goodput flow: the host, not the link, starved the delay stage
STARVED_STEAL_PCT = 10.0


def expected_rtt(forward: DelaySettings, backward: DelaySettings) -> tuple[float, float]:
    q = rtt_quantiles_ms(forward, backward, (0.5, 0.99))
    return q[0.5], q[0.99]


def write_link_probes(
    probes: list[LinkProbe],
    path: str,
    changes: Sequence[ChangeRecord] = (),
    usage: Sequence[LinkUsage] = (),
) -> None:
    """``links.parquet``: one ``kind = "probe"`` row per link probe and one
    ``kind = "change"`` row per link state change of the run's WAN schedule (``t_mono``:
    monotonic seconds, comparable with the manifest's clock origin; ``rate_mbit``,
    ``delay_ms``, ``loss_pct``, ``up``: the direction's state from then on;
    ``cross_traffic_mbit``: a competing flow's goodput, 0 when it stops); the twin adds
    ``kind = "usage"`` rows (:class:`LinkUsage`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not probes and not changes and not usage:
        raise UserError("no link probes to write")
    rows = [{"kind": "probe", **asdict(p)} for p in probes]
    rows += [{"kind": "change", **c.to_row()} for c in changes]
    rows += [{"kind": "usage", **asdict(u)} for u in usage]
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(row))
    table = pa.Table.from_pylist([{k: row.get(k) for k in keys} for row in rows])
    pq.write_table(table, path)
