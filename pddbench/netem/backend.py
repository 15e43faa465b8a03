"""Which shaping backend a link direction gets, decided by probing the kernel.

``detect_capabilities`` tries to add a netem qdisc to a veth in a scratch namespace: a
``NetlinkError`` with ENOENT means the kernel has no netem. In the same namespace it
installs the userspace backend's NFQUEUE steering rule over netlink (``nftables``), so
a kernel without nf_tables or the xt NFQUEUE target is known before a run starts.
``choose_backend`` is the pure decision and says why, so the choice can be reported
with results.
"""

from __future__ import annotations

import errno
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
    nfqueue: bool = True  # the NFQUEUE steering rule installs (userspace delay backend)
    nfqueue_probe: str = "nf_tables NFQUEUE rule installs"


_cached: Capabilities | None = None


def probe_kernel(run_id: str) -> Capabilities:
    """In a scratch namespace: add a netem qdisc on a scratch veth, install an NFQUEUE rule."""
    from pyroute2.netlink.exceptions import NetlinkError

    from pddbench.netem.nftables import QueueRule, install_queue_rules

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

    def steer() -> tuple[bool, str]:
        try:
            install_queue_rules([QueueRule(ifname, 0)])
        except OSError as exc:
            return False, f"cannot install an NFQUEUE rule over netlink ({exc})"
        return True, "nf_tables NFQUEUE rule installs"

    nsutil.create_netns(name)
    try:
        netem, netem_text = nsutil.with_iproute(name, attempt)
        nfq, nfq_text = nsutil.run_in_netns(name, steer)
    finally:
        nsutil.remove_netns(name)
    return Capabilities(netem, netem_text, nfq, nfq_text)


def describe_netem_error(code: int, text: str) -> str:
    """What a failed netem probe means (ENOENT: the kernel has no netem)."""
    if code == errno.ENOENT:
        return "netem qdisc unknown to this kernel (ENOENT)"
    return f"netem probe failed ({text})"


def detect_capabilities(run_id: str, *, refresh: bool = False) -> Capabilities:
    """Probe once per process (the kernel does not grow netem at runtime)."""
    global _cached
    if _cached is None or refresh:
        _cached = probe_kernel(run_id)
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
    if not caps.nfqueue:
        raise UserError(
            f"no way to delay packets here: {reason}, and {caps.nfqueue_probe}; use a kernel"
            " with netem (Ubuntu: linux-modules-extra-$(uname -r)) or with nf_tables and the"
            " xt NFQUEUE target (CONFIG_NFT_COMPAT, CONFIG_NETFILTER_XT_TARGET_NFQUEUE)"
        )
    return "nfqueue", reason


def emulation_problem() -> str | None:
    """Why no WAN can be emulated on this machine (one line naming the fix), or None."""
    from pddbench.netem.topology import new_run_id

    try:
        nsutil.require_net_admin()
    except UserError as exc:
        return str(exc)
    caps = detect_capabilities(new_run_id())
    if caps.netem or caps.nfqueue:
        return None
    return (
        f"this kernel can delay no packets: {caps.netem_probe}, and {caps.nfqueue_probe};"
        " use a kernel with netem (Ubuntu: linux-modules-extra-$(uname -r)) or with"
        " nf_tables and the xt NFQUEUE target"
    )


def backend_here() -> ShapingBackend:
    """The backend this machine gives a plain link: ``kernel`` with netem, else ``nfqueue``
    (also when the kernel cannot be probed, e.g. without root: the conservative choice)."""
    from pddbench.netem.topology import new_run_id

    try:
        nsutil.require_net_admin()
        return "kernel" if detect_capabilities(new_run_id()).netem else "nfqueue"
    except (UserError, OSError):
        return "nfqueue"
