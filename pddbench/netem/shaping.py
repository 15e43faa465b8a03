"""Traffic-control requests for one shaped link direction, built without touching the kernel.

This module owns the numbers: HTB rate and burst, queue limits from the bandwidth-delay
product, and the netem options (delay and jitter in µs, loss in %, limit in packets) in
the exact keyword form pyroute2's ``IPRoute.tc`` takes. ``links`` sends them. Pure.

Layout on the egress interface of the sending switch (``qos = "fifo"``): ``htb 1:`` →
class ``1:10`` (rate, burst) → leaf ``10:``. With ``qos = "priority"`` (the WAN default) the
link class is ``1:1`` and has two children, each with its own leaf: ``1:10`` for control
traffic (the default class; guaranteed :data:`CONTROL_SHARE` of the rate, may use all of
it, served first) and ``1:20`` for bulk traffic (the rest, lower priority), chosen by a
``u32`` filter on the DSCP bits (:mod:`~pddbench.netem.qos`). Without it, a 1.5 KB handoff
message waits behind every byte of prompt KV queued on the link.

The leaf is:

* ``kernel`` backend: ``netem``. netem's tfifo holds both the delay line and the bottleneck
  queue, so its limit is at least 2 × BDP. Jitter without a netem ``rate`` reorders packets
  (netem sorts by send time); when jitter is asked for we also give netem the link rate,
  which makes it compute each packet's send time from the previous packet's (never
  earlier), i.e. no reordering — the same rule as the userspace delay line (due =
  max(previous due, now + delay + jitter)). pyroute2 cannot encode netem distribution
  tables, so normal jitter uses the userspace delay line even when netem exists
  (``choose_backend``).
* ``nfqueue`` backend: ``bfifo`` (the bottleneck queue, in bytes); delay, jitter and loss
  are applied before it by the NFQUEUE delay daemon.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pddbench.netem.qos import BULK_TOS, DSCP_MASK
from pddbench.netem.topology_config import Shape

MTU_BYTES = 1500
MIN_BURST_BYTES = 64 * 1024  # one GSO super-packet
BUFFER_BDPS = 2  # bottleneck buffer of a WAN direction, in bandwidth-delay products
GSO_MAX_BYTES = 65536  # largest GSO super-packet on veth


def _register_bfifo() -> None:
    """Teach pyroute2 the ``bfifo`` qdisc: the same options struct as ``pfifo``
    (``struct tc_fifo_qopt { u32 limit; }``, bytes instead of packets). Without this,
    pyroute2 drops the options and the parent of an unknown kind."""
    from pyroute2.netlink.rtnl import tcmsg

    tcmsg.plugins.setdefault("bfifo", tcmsg.sched_pfifo)


_register_bfifo()
HTB_ROOT = 0x10000  # 1:
HTB_LINK = 0x10001  # 1:1, the link (priority layout)
HTB_CLASS = 0x10010  # 1:10, all traffic (fifo) or control traffic (priority)
HTB_BULK = 0x10020  # 1:20, bulk traffic (priority)
LEAF = 0x100000  # 10:
LEAF_BULK = 0x200000  # 20:
LEAF_OF = {HTB_CLASS: LEAF, HTB_BULK: LEAF_BULK}
CONTROL_SHARE = 0.1  # of the link rate, guaranteed to control traffic
ETH_P_IP = 0x0800
DEFAULT_LIMIT_PKTS = 1000
UNSHAPED_RATE_MBIT = 100_000.0  # HTB rate standing in for "no limit" (100 Gbit/s)
NETEM_RATE_MAX_BYTES = (1 << 32) - 1  # pyroute2 has no TCA_NETEM_RATE64

ShapingBackend = Literal["kernel", "nfqueue"]


@dataclass(frozen=True)
class TcRequest:
    """One ``IPRoute.tc(command, kind, index, handle, **kwargs)`` call."""

    command: str
    kind: str
    handle: int
    kwargs: dict[str, Any] = field(default_factory=dict)


def rate_bytes_per_s(rate_mbit: float) -> int:
    return int(rate_mbit * 1_000_000 / 8)


def bdp_bytes(rate_mbit: float, rtt_ms: float) -> int:
    """Bandwidth-delay product in bytes."""
    return int(rate_mbit * 1_000_000 / 8 * rtt_ms / 1000)


def bdp_packets(rate_mbit: float, rtt_ms: float) -> int:
    return max(1, -(-bdp_bytes(rate_mbit, rtt_ms) // MTU_BYTES))


def htb_burst_bytes(rate_mbit: float) -> int:
    """About 1 ms worth of bytes at ``rate_mbit``, at least one 64 KiB GSO super-packet.

    ~1 ms keeps HTB's timer latency from costing throughput (NETWORK.md: ~600 B at 5 Gbit/s
    lost 17 %) and is the same *time* at every scale: a fixed floor (it was 256 KiB) let a
    scaled-down link pass a short transfer at veth speed (256 KiB = 4 ms at 500 Mbit/s,
    more than a whole 100-token KV transfer there)."""
    return max(MIN_BURST_BYTES, rate_bytes_per_s(rate_mbit) // 1000)


def bottleneck_limit_pkts(shape: Shape) -> int:
    """The bottleneck queue in packets: configured, else max(1000, 1 × BDP at 2·delay).

    Sizes the delay stage (which holds every packet in flight); the bottleneck queue
    itself is bounded in bytes (:func:`bottleneck_limit_bytes`)."""
    if shape.limit_pkts is not None:
        return shape.limit_pkts
    rate = shape.rate_mbit or UNSHAPED_RATE_MBIT
    rtt = 2 * shape.delay_ms + 2 * shape.jitter_ms
    return max(DEFAULT_LIMIT_PKTS, BUFFER_BDPS * bdp_packets(rate, rtt))


def bottleneck_limit_bytes(shape: Shape) -> int:
    """The bottleneck queue in bytes: configured packets × MTU, else
    :data:`BUFFER_BDPS` × BDP (at least two 64 KiB GSO super-packets).

    Bounded in bytes, not packets: on veth a "packet" can be a 64 KiB GSO super-packet,
    so a 1000-packet FIFO at a scaled-down rate queues for seconds — far deeper than a
    real line's buffer — and small messages (routing RPCs) would wait behind KV bursts.
    Two BDPs, because inter-datacenter routers are deep-buffered and a non-pacing sender
    (CUBIC, no fq) that resumes after idle sends its whole window — up to BDP + buffer —
    at once: with one BDP of buffer that burst overflows at any scale where the hosts'
    links are much faster than the WAN (as the RDMA-class segments are), and loss
    recovery, not the line rate, would decide a warm KV transfer's time.
    """
    if shape.limit_pkts is not None:
        return shape.limit_pkts * MTU_BYTES
    rate = shape.rate_mbit or UNSHAPED_RATE_MBIT
    rtt = 2 * shape.delay_ms + 2 * shape.jitter_ms
    return max(2 * GSO_MAX_BYTES, BUFFER_BDPS * bdp_bytes(rate, rtt))


def delay_line_limit_pkts(shape: Shape) -> int:
    """Packets the delay stage must be able to hold: ≥ 2 × BDP plus the bottleneck queue."""
    rate = shape.rate_mbit or UNSHAPED_RATE_MBIT
    one_way = shape.delay_ms + 3 * shape.jitter_ms
    return max(2 * bdp_packets(rate, one_way), DEFAULT_LIMIT_PKTS) + bottleneck_limit_pkts(shape)


def leaf_classes(shape: Shape) -> list[int]:
    """The HTB classes that carry a leaf qdisc (one per traffic class)."""
    return [HTB_CLASS, HTB_BULK] if shape.qos == "priority" else [HTB_CLASS]


def htb_requests(shape: Shape, command: str = "add") -> list[TcRequest]:
    """The HTB root qdisc and its classes (one, or the link and its two traffic classes)."""
    rate = shape.rate_mbit or UNSHAPED_RATE_MBIT
    burst = htb_burst_bytes(rate)

    def klass(handle: int, parent: int, share: float, prio: int) -> TcRequest:
        return TcRequest(
            command=f"{command}-class",
            kind="htb",
            handle=handle,
            kwargs={
                "parent": parent,
                "rate": max(1, int(rate_bytes_per_s(rate) * share)),  # a bare int is bytes/s
                "ceil": rate_bytes_per_s(rate),
                "burst": burst,
                "cburst": burst,
                "prio": prio,
            },
        )

    if shape.qos == "priority":
        classes = [
            klass(HTB_LINK, HTB_ROOT, 1.0, 0),
            klass(HTB_CLASS, HTB_LINK, CONTROL_SHARE, 0),
            klass(HTB_BULK, HTB_LINK, 1.0 - CONTROL_SHARE, 1),
        ]
    else:
        classes = [klass(HTB_CLASS, HTB_ROOT, 1.0, 0)]
    if command != "add":
        return classes
    root = TcRequest(command="add", kind="htb", handle=HTB_ROOT, kwargs={"default": 0x10})
    return [root, *classes]


def bulk_filter_request() -> TcRequest:
    """Send DSCP-marked bulk packets (``pddbench.netem.qos``) to the bulk class."""
    return TcRequest(
        command="add-filter",
        kind="u32",
        handle=0,
        kwargs={
            "parent": HTB_ROOT,
            "prio": 1,
            "protocol": ETH_P_IP,
            "target": HTB_BULK,
            # pyroute2's u32 key syntax: value/mask at a byte offset; byte 1 is the TOS
            "keys": [f"{BULK_TOS:#04x}/{DSCP_MASK:#04x}+1"],
        },
    )


def netem_kwargs(shape: Shape, *, down: bool = False, parent: int = HTB_CLASS) -> dict[str, Any]:
    """pyroute2 netem keywords for ``shape``: delay/jitter in µs, loss in %, limit in packets."""
    if shape.jitter_dist != "uniform" and shape.jitter_ms > 0:
        raise ValueError("pyroute2 cannot encode netem distribution tables; use nfqueue")
    kwargs: dict[str, Any] = {
        "parent": parent,
        "delay": round(shape.delay_ms * 1000),
        "jitter": round(shape.jitter_ms * 1000),
        "loss": 100.0 if down else shape.loss_pct,
        "limit": delay_line_limit_pkts(shape),
    }
    if shape.jitter_ms > 0:
        # A netem rate makes send times monotonic: jitter without reordering.
        rate = rate_bytes_per_s(shape.rate_mbit or UNSHAPED_RATE_MBIT)
        kwargs["rate"] = min(rate, NETEM_RATE_MAX_BYTES)
    return kwargs


def leaf_request(
    backend: ShapingBackend,
    shape: Shape,
    command: str = "add",
    *,
    parent: int = HTB_CLASS,
    down: bool = False,
) -> TcRequest:
    """The leaf under HTB class ``parent``: netem (kernel backend) or a bfifo bottleneck queue."""
    handle = LEAF_OF[parent]
    if backend == "kernel":
        kwargs = netem_kwargs(shape, down=down, parent=parent)
        return TcRequest(command=command, kind="netem", handle=handle, kwargs=kwargs)
    return TcRequest(
        command=command,
        kind="bfifo",
        handle=handle,
        kwargs={"parent": parent, "limit": bottleneck_limit_bytes(shape)},
    )


def shaping_requests(backend: ShapingBackend, shape: Shape) -> list[TcRequest]:
    """Everything to install on a fresh egress interface, in order."""
    leaves = [leaf_request(backend, shape, parent=c) for c in leaf_classes(shape)]
    qos = [bulk_filter_request()] if shape.qos == "priority" else []
    return [*htb_requests(shape), *leaves, *qos]


def change_requests(
    backend: ShapingBackend, old: Shape, new: Shape, *, down: bool
) -> list[TcRequest]:
    """Requests that turn an installed ``old`` into ``new`` (same traffic classes)."""
    if new.qos != old.qos:
        raise ValueError("a link's qos cannot change while it runs")
    requests = []
    if new.rate_mbit != old.rate_mbit:
        requests += htb_requests(new, command="change")
    if backend == "kernel":
        requests += [
            leaf_request(backend, new, "change", parent=c, down=down) for c in leaf_classes(new)
        ]
    return requests


def representable_in_netem(shape: Shape) -> bool:
    """Whether the kernel backend can express ``shape`` through pyroute2."""
    return not (shape.jitter_ms > 0 and shape.jitter_dist != "uniform")
