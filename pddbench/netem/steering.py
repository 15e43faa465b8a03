"""Receive packet steering in the emulated namespaces: each flow on one CPU, never reordered.

A veth hands a packet to its peer on the CPU that sent it (``netif_rx`` queues it on that
CPU's backlog). When the sending thread, or the delay daemon that re-injects the WAN's
queued packets, moves between CPUs, two packets of one flow wait in two CPUs' backlogs and
can leave in the wrong order. Measured here (2 vCPUs, four CUBIC KV flows over the nfqueue
WAN at 1/100): 56 fast retransmissions in ~314K segments with no drop in any qdisc or in
the delay stage (the receiver's DSACKs: all spurious), a reordering degree up to 200 and
ssthresh cut to 258-599 packets; the same run pinned to one CPU, or with RPS on every
interface, has none. The reference servers' KV connections showed the same (reordering
15-48, 5-10 retransmissions each, windows of ~170 packets after a 2-minute point). A
real WAN does not reorder like that, and CUBIC reads reordering as loss, so without this a
KV connection's window, and every WAN transfer's time, would depend on the host's
scheduler.

RPS (``/sys/class/net/IF/queues/rx-N/rps_cpus``) hashes each flow to one CPU of the mask
before the backlog, so one flow's packets are queued in the order they were handed over.
sysfs shows the network namespace of whoever mounted it, so the writes run in a child that
enters the namespace and mounts its own sysfs in a private mount namespace (``unshare
--mount``, as ``ip netns exec`` does). Must not touch the root namespace's interfaces.
"""

from __future__ import annotations

import os
import subprocess

from pddbench.netem import nsutil

_WRITE = (
    "mount -t sysfs sysfs /sys || exit 3; "
    'for f in /sys/class/net/*/queues/rx-*/rps_cpus; do echo "$0" > "$f" || exit 4; done'
)
_READ = "mount -t sysfs sysfs /sys || exit 3; cat /sys/class/net/*/queues/rx-*/rps_cpus | sort -u"


def rps_mask(cpus: int) -> str:
    """The sysfs CPU mask of CPUs 0..cpus-1: hex, comma-separated 32-bit groups."""
    value = (1 << max(1, cpus)) - 1
    groups = []
    while True:
        groups.append(f"{value & 0xFFFFFFFF:08x}")
        value >>= 32
        if not value:
            break
    return ",".join(reversed(groups)).lstrip("0") or "1"


def all_cpus_mask() -> str:
    return rps_mask(os.cpu_count() or 1)


def steer_flows(netns: str, mask: str) -> str | None:
    """Set RPS to ``mask`` on every interface in ``netns``; None, or why it failed."""
    try:
        nsutil.run(netns, ["unshare", "--mount", "sh", "-c", _WRITE, mask])
    except FileNotFoundError as exc:
        return f"{exc.filename or 'unshare'} not found"
    except subprocess.CalledProcessError as exc:
        lines = (exc.stderr or "").strip().splitlines()
        return lines[-1] if lines else f"exit {exc.returncode}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None


def read_rps(netns: str) -> str:
    """The RPS masks of ``netns``'s receive queues, distinct, space-separated ("?" when
    unreadable)."""
    try:
        return " ".join(nsutil.run(netns, ["unshare", "--mount", "sh", "-c", _READ]).split())
    except (OSError, subprocess.SubprocessError):
        return "?"
