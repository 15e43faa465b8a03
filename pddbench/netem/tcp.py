"""TCP settings inside the emulated namespaces, and per-socket congestion control.

Socket buffers must hold at least 2 × the bandwidth-delay product or a long path is
window-limited (NETWORK.md: ~0.35 Gbit/s on 60 ms RTT with defaults). ``tcp_sysctls``
says what to write in each namespace; ``net.core.rmem_max``/``wmem_max`` are read-only in
child namespaces on some kernels (6.x), which is recorded, not fatal: autotuning is bounded
by ``tcp_rmem``/``tcp_wmem``. The default congestion control cannot be changed from a child
namespace (EPERM), so it is chosen per socket (``set_congestion``; the reference servers
read :data:`CONGESTION_ENV`) and recorded with ``tcp_slow_start_after_idle``.

Defaults (``[network] tcp_congestion``, ``tcp_slow_start_after_idle``), and why:

* ``tcp_slow_start_after_idle = false``: production KV transfer engines (Mooncake, NIXL,
  DeepSeek's 3FS/DeepEP) keep persistent, warm peer connections — over RDMA, which has no
  slow start at all. Linux's default (1) collapses the window of a connection idle for one
  RTO (≥ 200 ms), so every KV transfer after a think time would pay slow start again — a
  TCP artefact, not a property of the systems compared. Set it to true to study exactly that.
* ``tcp_congestion = "auto"``: BBR where the kernel has it, else CUBIC
  (:func:`resolve_congestion`, recorded with what was asked). A KV transfer engine moves
  gigabytes over a long fat pipe between warm peers; production engines do it over RDMA
  (Mooncake, NIXL), which paces at the line and has no slow start — BBR is the TCP that
  behaves most like that. CUBIC on the emulated WAN does not: HyStart leaves slow start
  early on the ±3 ms jitter and CUBIC grows the window only while the window, not the
  application, limits the sender, so each pooled KV connection stays at the window slow
  start left it (~250 packets at 1/100: ~8-10 Gbit/s of the 100 at full scale). That
  rate is the window over the RTT times the emulation scale, so it *moves with the
  scale* — an artefact of the emulator, not a property of the systems compared. Measured
  (pdd, P 27 + RLD 15 H800 + MD 35 H20, busiest hour at x0.871, 1/100; `bench_twin_check`):
  CUBIC: large transfers 7.9 Gbit/s per connection, TTFT P90 22.7 s, 82.8 % SLA
  attainment, 81 % of requests relayed because the router measured a slow WAN; BBR: 24.6
  Gbit/s per connection (two per peer, sharing the line), TTFT P90 0.96 s, 99.7 %, 0.09 %
  relayed — the uncalibrated twin's figures within 1 %. ``"cubic"`` (or any name the kernel
  has) studies a particular TCP; the probes' goodput check uses BBR either way.
* ``cold_start_compensation = true``: byte scaling shrinks the bandwidth-delay product, so
  a cold connection skips ~log2(scale) slow-start rounds (a 100-token KV handoff at 1/20
  over 2 × 15 ms: ~0.1 s short). With it on, a KV sender on a cold connection waits the
  modelled missing time (``pddbench.netem.slowstart``) so a scaled run keeps the real
  link's cold-transfer time; it does nothing on warm connections (the pre-warmed default)
  and at 1/1, and it is recorded with these settings. Off: cold transfers are as fast as
  the scaled link makes them, which flatters every cold handoff by that much.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass, field

from pddbench.errors import UserError
from pddbench.netem.plan import TopologyPlan
from pddbench.netem.shaping import UNSHAPED_RATE_MBIT, bdp_bytes

RECORDED_KEYS = (
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_available_congestion_control",
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.core.rmem_max",
    "net.core.wmem_max",
)


@dataclass
class TcpSettings:
    """What the namespaces' TCP stacks were set to, as recorded with results."""

    buffer_bytes: int
    congestion: str = "cubic"  # set per socket (CONGESTION_ENV); the namespace default stays
    congestion_asked: str = ""  # the scenario's tcp_congestion ("auto": resolved as above)
    cold_start_compensation: bool = False  # in force (on, and the run is scaled)
    values: dict[str, str] = field(default_factory=dict)  # read back from one host namespace
    write_errors: dict[str, str] = field(default_factory=dict)


def buffer_bytes(plan: TopologyPlan) -> int:
    """max(configured buffer, 2 × the largest BDP of any link direction)."""
    largest = 0
    for d in plan.directions():
        rtt = 2 * (d.shape.delay_ms + 3 * d.shape.jitter_ms)
        largest = max(largest, bdp_bytes(d.shape.rate_mbit or UNSHAPED_RATE_MBIT, rtt))
    return max(plan.tcp_buffer_bytes, 2 * largest)


CONGESTION_ENV = "PDDBENCH_TCP_CONGESTION"  # processes in the namespaces set it per socket


def tcp_sysctls(
    buffer: int, *, router: bool, slow_start_after_idle: bool = False
) -> dict[str, str]:
    values = {
        "net.ipv4.tcp_slow_start_after_idle": "1" if slow_start_after_idle else "0",
        "net.ipv6.conf.all.disable_ipv6": "1",
        "net.ipv6.conf.default.disable_ipv6": "1",
        "net.ipv4.tcp_rmem": f"4096 131072 {buffer}",
        "net.ipv4.tcp_wmem": f"4096 16384 {buffer}",
        "net.core.rmem_max": str(buffer),
        "net.core.wmem_max": str(buffer),
    }
    if router:
        values["net.ipv4.ip_forward"] = "1"
    return values


def set_congestion(sock: socket.socket, name: str) -> None:
    """Use congestion control ``name`` (e.g. "cubic", "bbr", or "auto":
    :func:`resolve_congestion`) on one TCP socket."""
    name = resolve_congestion(name)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.EPERM):
            try:
                with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
                    available = f.read().strip()
            except OSError:
                available = "?"
            raise UserError(
                f"congestion control {name!r} is not available here (available: {available})"
            ) from exc
        raise


AUTO = "auto"


def resolve_congestion(name: str) -> str:
    """The congestion control a scenario's ``tcp_congestion`` means here: ``"auto"`` is BBR
    where this kernel has it (setting it on a socket also loads the module, as root), else
    CUBIC; any other name is itself."""
    if name != AUTO:
        return name
    with socket.socket() as probe:
        try:
            set_congestion(probe, "bbr")
        except (UserError, OSError):
            return "cubic"
    return "bbr"


def get_congestion(sock: socket.socket) -> str:
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
    return raw.split(b"\0", 1)[0].decode()


def congestion_from_env(sock: socket.socket) -> None:
    """Apply :data:`CONGESTION_ENV` (if set) to ``sock``; for processes in the namespaces."""
    import os

    name = os.environ.get(CONGESTION_ENV)
    if name:
        set_congestion(sock, name)
