"""Traffic classes on the emulated WAN: which packets are bulk, and how a sender marks them.

Real inter-datacenter WANs do not carry bulk KV transfers and latency-critical RPCs in one
FIFO: bulk transfers ride a lower-priority class (DSCP-marked), so that a 1.5 KB handoff
message does not wait behind gigabytes of prompt KV. The emulated WAN does the same when a
link's ``qos`` is ``"priority"`` (the default, see :mod:`~pddbench.netem.shaping`): packets
whose DSCP is :data:`BULK_DSCP` go to the bulk class, everything else (requests, token
streams, handoff messages, TCP acknowledgements) to the control class, which is served first.

The servers mark the sockets that carry KV bytes (:func:`mark_bulk`). Pure constants and
one socket option; no namespaces here.
"""

from __future__ import annotations

import socket

BULK_DSCP = 8  # CS1, the customary "lower effort / bulk" code point (RFC 4594)
BULK_TOS = BULK_DSCP << 2  # the IPv4 TOS byte: DSCP in the upper six bits
DSCP_MASK = 0xFC


def mark_bulk(sock: socket.socket) -> None:
    """Mark ``sock``'s packets as bulk (IPv4 TOS / IPv6 traffic class)."""
    if sock.family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, BULK_TOS)
    else:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, BULK_TOS)
