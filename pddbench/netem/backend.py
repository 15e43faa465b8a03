"""Which shaping backend a link direction gets, decided by probing the kernel.

``detect_capabilities`` tries to add a netem qdisc to a veth in a scratch namespace: a
``NetlinkError`` with ENOENT means the kernel has no netem. It also looks for an
``iptables`` binary (the NFQUEUE rule of the userspace backend). ``choose_backend`` is
the pure decision and says why, so the choice can be reported with results.
"""

from __future__ import annotations

import errno
import shutil
from dataclasses import dataclass
from typing import Any

from pddbench.errors import UserError
from pddbench.netem import nsutil
from pddbench.netem.plan import netns_prefix
from pddbench.netem.shaping import ShapingBackend, representable_in_netem
from pddbench.netem.topology_config import Backend, Shape


@dataclass(frozen=True)
class Capabilities:
    netem: bool
    netem_probe: str  # what the probe saw, for the report
    iptables: str | None  # path of the iptables binary, if any


_cached: Capabilities | None = None


def probe_netem(run_id: str) -> tuple[bool, str]:
    """Add a netem qdisc on a scratch veth in a scratch namespace; report whether it worked."""
    from pyroute2.netlink.exceptions import NetlinkError

    name = f"{netns_prefix(run_id)}probe"
    ifname = f"pddb{run_id}t0"

    def attempt(ipr: Any) -> tuple[bool, str]:
        ipr.link("add", ifname=ifname, kind="veth", peer={"ifname": f"pddb{run_id}t1"})
        index = ipr.link_lookup(ifname=ifname)[0]
        try:
            ipr.tc("add", "netem", index, 0x10000, delay=1000)
        except NetlinkError as exc:
            return False, describe_netem_error(exc.code, str(exc))
        return True, "netem qdisc available"

    nsutil.create_netns(name)
    try:
        return nsutil.with_iproute(name, attempt)
    finally:
        nsutil.remove_netns(name)


def describe_netem_error(code: int, text: str) -> str:
    """What a failed netem probe means (ENOENT: the kernel has no netem)."""
    if code == errno.ENOENT:
        return "netem qdisc unknown to this kernel (ENOENT)"
    return f"netem probe failed ({text})"


def detect_capabilities(run_id: str, *, refresh: bool = False) -> Capabilities:
    """Probe once per process (the kernel does not grow netem at runtime)."""
    global _cached
    if _cached is None or refresh:
        netem, text = probe_netem(run_id)
        _cached = Capabilities(netem=netem, netem_probe=text, iptables=shutil.which("iptables"))
    return _cached


def choose_backend(
    requested: Backend, caps: Capabilities, shape: Shape
) -> tuple[ShapingBackend, str]:
    """The backend for one link direction and the reason, or a UserError naming the remedy."""
    if requested == "kernel" or (requested == "auto" and caps.netem):
        if not caps.netem:
            raise UserError(
                f"backend 'kernel' asked for but {caps.netem_probe}; install your distribution's"
                " kernel modules with netem (Ubuntu: linux-modules-extra-$(uname -r)) or use"
                " backend = 'auto'"
            )
        if representable_in_netem(shape):
            return "kernel", caps.netem_probe
        if requested == "kernel":
            raise UserError(
                "normal jitter needs a netem distribution table that pyroute2 cannot encode;"
                " use backend = 'auto' (userspace delay line) or uniform jitter"
            )
        reason = "normal jitter: netem distribution tables are not encodable via pyroute2"
    else:
        reason = caps.netem_probe if requested == "auto" else "backend 'nfqueue' asked for"
    if caps.iptables is None:
        raise UserError(
            f"the userspace delay backend needs iptables ({reason}): install it"
            " (Debian/Ubuntu: apt-get install -y iptables)"
        )
    return "nfqueue", reason
